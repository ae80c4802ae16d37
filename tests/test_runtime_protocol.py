"""One runtime protocol (issue 55): ``LlamaRuntime`` and its child-process proxy ``RemoteRuntime`` offer the
abilities ``inspector.engine.runtime_protocol.Runtime`` declares, the proxy forwarding exactly those."""

import inspect

import pytest

from inspector.engine.runtime_protocol import RUNTIME_FACTS, RUNTIME_METHODS, Runtime
from inspector.llama.remote import RemoteRuntime
from inspector.llama.runtime import LlamaRuntime


def public_methods_of_the_class(cls) -> set[str]:
    return {n for n, v in vars(cls).items() if not n.startswith("_") and (inspect.isfunction(v) or
                                                                          isinstance(v, property))}


def test_every_public_method_of_llama_runtime_is_declared_in_the_protocol():
    undeclared = public_methods_of_the_class(LlamaRuntime) - set(RUNTIME_METHODS) - {"rollback"}
    assert not undeclared, f"declare these in inspector/engine/runtime_protocol.py: {sorted(undeclared)}"


def test_the_protocol_lists_facts_and_methods_apart():
    assert "n_ctx" in RUNTIME_FACTS and "decode_rows" in RUNTIME_METHODS
    assert not set(RUNTIME_FACTS) & set(RUNTIME_METHODS)
    assert "decode_ns" not in RUNTIME_FACTS  # a counter the proxy keeps itself, not a fact copied once


def test_the_loaded_runtime_has_every_member_of_the_protocol(runtime):
    missing = [n for n in (*RUNTIME_FACTS, *RUNTIME_METHODS) if not hasattr(runtime, n)]
    assert missing == []
    assert isinstance(runtime, Runtime)
    assert all(callable(getattr(runtime, n)) for n in RUNTIME_METHODS)


def test_the_remote_runtime_forwards_the_protocol_and_answers_as_the_local_one(runtime, model_path):
    rt = RemoteRuntime(model_path, n_ctx=512, n_batch=64, n_seq_max=2)
    try:
        assert isinstance(rt, Runtime)
        for name in RUNTIME_METHODS:
            assert callable(getattr(rt, name)), name
        assert {n: getattr(rt, n) for n in ("n_ctx", "n_batch", "n_vocab")} == {"n_ctx": 512, "n_batch": 64,
                                                                                  "n_vocab": runtime.n_vocab}
        text = "Speculative decoding"
        assert rt.tokenize(text) == runtime.tokenize(text)  # a vocabulary method, forwarded by the protocol
        assert rt.chat_template() == runtime.chat_template()
        with pytest.raises(AttributeError):
            rt.ctx  # a pointer in the child's memory, not a fact
    finally:
        rt.close()
