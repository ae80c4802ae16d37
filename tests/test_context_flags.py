"""llama.cpp's context settings (-b, -ub, -fa, -ctk, -ctv): they reach the context, the receipts record
them, llama-server gets the same ones, a combination llama.cpp refuses is one line, and with them our
plain greedy output equals llama-server's. Nothing here names the model's words."""

from __future__ import annotations

import llama_cpp
import pytest

from inspector.bench.server_process import LlamaServerProcess
from inspector.engine import Generation, GenerationSettings, RuntimeScheduler
from inspector.llama.context_settings import ContextRefused, ContextSettings
from inspector.llama.runtime import LlamaRuntime
from inspector.llama.server_parity import server_context
from inspector.receipts import load_document

from test_cli import cli, one_clear_line

QUANTIZED = dict(n_ubatch=64, flash_attn="on", type_k="q8_0", type_v="q8_0")


def test_the_settings_reach_the_context_and_the_receipts_block(model_path):
    rt = LlamaRuntime(model_path, n_ctx=256, n_batch=128, n_seq_max=1, n_threads=1, **QUANTIZED)
    try:
        assert llama_cpp.llama_n_ubatch(rt.ctx) == 64
        block = rt.describe()["llama_cpp"]
        assert (block["flash_attn"], block["type_k"], block["type_v"], block["n_ubatch"], block["n_batch"]) == \
               ("on", "q8_0", "q8_0", 64, 128)
        assert block["server_args"] == ["-ub", "64", "-fa", "on", "-ctk", "q8_0", "-ctv", "q8_0"]
        notes = " | ".join(block["differs_from_llama_server"])
        for flag in ("-ub 512", "-fa on", "-ctk q8_0", "-ctv q8_0"):
            assert flag in notes, notes
        assert "-b " not in notes  # the logical batch changes how many rows a decode takes, not the arithmetic
    finally:
        rt.close()


def test_defaults_are_llama_servers_and_auto_flash_attention_is_read_back_as_llama_cpp_settled_it(model_path):
    rt = LlamaRuntime(model_path, n_ctx=2048, n_batch=512, n_seq_max=1, n_threads=1)  # our -b: no line
    try:
        block = rt.describe()["llama_cpp"]
        assert block["flash_attn_asked"] == "auto" and block["flash_attn"] in ("on", "off")
        assert (block["type_k"], block["type_v"], block["n_ubatch"]) == ("f16", "f16", 512)
        assert block["server_args"] == [] and block["differs_from_llama_server"] == []
    finally:
        rt.close()


def test_a_quantized_v_cache_without_flash_attention_is_refused_before_the_weights_load(tmp_path):
    with pytest.raises(ContextRefused, match=r"-ctv q8_0.*observed -fa off"):
        LlamaRuntime(tmp_path / "not-even-read.gguf", flash_attn="off", type_v="q8_0")
    p = cli("run", "--prompt", "hi", "--max-tokens", "2", "-fa", "off", "-ctv", "q4_0")
    assert p.returncode != 0
    line = one_clear_line(p.stderr)
    assert "-ctv q4_0" in line and "-fa off" in line, line


def test_an_unknown_cache_type_is_a_usage_error_naming_llama_cpps_types():
    p = cli("run", "--prompt", "hi", "-ctk", "q3_k")
    assert p.returncode == 2 and "q8_0" in p.stderr and "iq4_nl" in p.stderr, p.stderr
    with pytest.raises(ValueError, match="observed 'sometimes'"):
        ContextSettings(flash_attn="sometimes")


def test_the_server_argv_carries_the_settings_that_are_not_its_defaults():
    assert ContextSettings().server_args() == []
    assert ContextSettings(**QUANTIZED).server_args() == ["-ub", "64", "-fa", "on", "-ctk", "q8_0", "-ctv", "q8_0"]


def test_run_receipts_record_the_settings(tmp_path):
    out = tmp_path / "r.json"
    p = cli("run", "--prompt", "Count to five.", "--max-tokens", "6", "--threads", "1", "-ub", "32", "-fa", "on",
            "-ctk", "q8_0", "-ctv", "q5_0", "--receipts", out)
    assert p.returncode == 0, p.stderr
    block = load_document(out)["model"]["llama_cpp"]  # validates against the schema
    assert (block["n_ubatch"], block["flash_attn"], block["type_k"], block["type_v"]) == (32, "on", "q8_0", "q5_0")


@pytest.mark.slow
def test_plain_greedy_output_with_a_q8_cache_and_flash_attention_equals_llama_servers(
        model_path, llama_server_binary):
    rt = LlamaRuntime(model_path, n_ctx=512, n_batch=512, n_seq_max=1, n_threads=1, flash_attn="on",
                      type_k="q8_0", type_v="q8_0")
    try:
        tokens = rt.prompt_tokens("Write two sentences about a lighthouse keeper.")
        g = Generation(RuntimeScheduler(rt), None, tokens, GenerationSettings(max_new_tokens=24))
        try:
            g.run()
        finally:
            g.close()
        with LlamaServerProcess(llama_server_binary, model_path, threads=1, n_ctx=512,
                                context=server_context(rt)) as server:
            assert server.argv[-6:] == ["-fa", "on", "-ctk", "q8_0", "-ctv", "q8_0"], server.argv
            theirs = list(server.client.complete(tokens, 24).tokens)
        assert g.generated and g.generated == theirs
    finally:
        rt.close()
