"""llama.cpp's flags mean in our commands what they mean in llama.cpp (issue 36).

A llama.cpp user types ``-m -n -t -c -p -ngl -fa -b -ub -ctk -ctv --temp --seed ...`` out of habit. Each
flag of llama.cpp's table that names a setting a command of ours has lands in that setting, under every
one of llama.cpp's names for it; every other llama.cpp flag is refused (exit 2), never guessed from a
prefix as argparse does by default (``-n 8`` once became ``-ngl 8``, ``-t 1`` ``--tensor-split 1``).

``LLAMA_CPP_FLAGS`` is llama.cpp's flag table at the commit llama-cpp-python 0.3.36 vendors (0c1e570):
each line one option's names, as ``common_arg({...})`` in ``common/arg.cpp`` declares them (the
negative forms, ``--no-...``, left out). Written from that file, not from our parser. No model.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from inspector.cli.main import build_parser
from inspector.engine.llama_settings import N_THREADS, THREADS_MAX
from inspector.exact_options import ExactOptionParser

LLAMA_CPP_FLAGS = """
-h --help --usage
--version
-cl --cache-list
--completion-bash
--server-base
--verbose-prompt
--display-prompt
-co --color
-t --threads
-tb --threads-batch
-C --cpu-mask
-Cr --cpu-range
--cpu-strict
--prio
--poll
-Cb --cpu-mask-batch
-Crb --cpu-range-batch
--cpu-strict-batch
--prio-batch
--poll-batch
-lcs --lookup-cache-static
-lcd --lookup-cache-dynamic
-c --ctx-size
--kv-unified-per-slot
-n --predict --n-predict
-b --batch-size
-ub --ubatch-size
--keep
--swa-full
-ctxcp --ctx-checkpoints --swa-checkpoints
-cms --checkpoint-min-step
-cram --cache-ram
-kvu --kv-unified
--cache-idle-slots
--context-shift
--chunks
-fa --flash-attn
-p --prompt
-sys --system-prompt
--perf
--show-timings
-f --file
-sysf --system-prompt-file
--in-file
-bf --binary-file
-e --escape
-ptc --print-token-count
--prompt-cache
--prompt-cache-all
--prompt-cache-ro
-r --reverse-prompt
-sp --special
-cnv --conversation
-st --single-turn
-i --interactive
-if --interactive-first
-mli --multiline-input
--in-prefix-bos
--in-prefix
--in-suffix
--warmup
--spm-infill
--samplers
-s --seed
--sampler-seq --sampling-seq
--ignore-eos
--temp --temperature
--top-k
--top-p
--min-p
--top-nsigma --top-n-sigma
--xtc-probability
--xtc-threshold
--typical --typical-p
--repeat-last-n
--repeat-penalty
--presence-penalty
--frequency-penalty
--dry-multiplier
--dry-base
--dry-allowed-length
--dry-penalty-last-n
--dry-sequence-breaker
--adaptive-target
--adaptive-decay
--dynatemp-range
--dynatemp-exp
--mirostat
--mirostat-lr
--mirostat-ent
-l --logit-bias
--grammar
--grammar-file
-j --json-schema
-jf --json-schema-file
-bs --backend-sampling
--pooling
--attention
--rope-scaling
--rope-scale
--rope-freq-base
--rope-freq-scale
--yarn-orig-ctx
--yarn-ext-factor
--yarn-attn-factor
--yarn-beta-slow
--yarn-beta-fast
-gan --grp-attn-n
-gaw --grp-attn-w
-kvo --kv-offload
--repack
--no-host
-ctk --cache-type-k
-ctv --cache-type-v
--hellaswag
--hellaswag-tasks
--winogrande
--winogrande-tasks
--multiple-choice
--multiple-choice-tasks
--kl-divergence
--save-all-logits --kl-divergence-base
--ppl-stride
--ppl-output-type
-dt --defrag-thold
-np --parallel
-ns --sequences
-cb --cont-batching
-mm --mmproj
-mmu --mmproj-url
--mmproj-auto
--mmproj-offload
--image --audio --video
--image-min-tokens
--image-max-tokens
--mtmd-batch-max-tokens
--video-fps
--video-timestamp-interval
--video-ffmpeg-dir
--rpc
-lm --load-mode
-lzm --lazy-mode
--numa
-dev --device
--list-devices
-ot --override-tensor
-cmoe --cpu-moe
-ncmoe --n-cpu-moe
-ncffn --n-cpu-ffn
-ngl --gpu-layers --n-gpu-layers
-sm --split-mode
-ts --tensor-split
-mg --main-gpu
-fit --fit
-fitp --fit-print
-fitt --fit-target
-fitc --fit-ctx
--check-tensors
--override-kv
--op-offload
--lora
--lora-scaled
--control-vector
--control-vector-scaled
--control-vector-layer-range
-a --alias
--tags
-m --model
-mu --model-url
-dr --docker-repo
-hf -hfr --hf-repo
-hff --hf-file
-hft --hf-token
--mtp
--dflash
--eagle3
--context-file
--chunk-size
--chunk-separator
--junk
--pos
-o --output --output-file
-ofreq --output-frequency
--output-format
--save-frequency
--process-output
--ppl
--chunk --from-chunk
--show-statistics
--parse-special
--ids
--stdin
--no-bos
--no-parse-special
--show-count
-pps
-tgs
-npp
-ntg
-npl
--embd-normalize
--embd-output-format
--embd-separator
--cls-separator
--host
--port
--reuse-port
--path
--cors-origins
--cors-methods
--cors-headers
--cors-credentials
--api-prefix
--ui-config --webui-config
--ui-config-file --webui-config-file
--ui-mcp-proxy --webui-mcp-proxy
--tools
--tools-runtime
--mcp-servers-config
--mcp-servers-json
-ag --agent
--ui --webui
--embedding --embeddings
--rerank --reranking
--api-key
--api-key-file
--ssl-key-file
--ssl-cert-file
--chat-template-kwargs
-to --timeout
--sse-ping-interval
--threads-http
--cache-prompt
--cache-reuse
--metrics
--props
--slots
--slot-save-path
--media-path
--models-dir
--models-preset
--models-max
--models-autoload
--jinja
--reasoning-format
-rea --reasoning
--reasoning-effort
--reasoning-budget
--reasoning-budget-message
--reasoning-preserve
--chat-template
--chat-template-file
--skip-chat-parsing
--prefill-assistant
-sps --slot-prompt-similarity
--lora-init-without-apply
--sleep-idle-seconds
--simple-io
--positive-file
--negative-file
--pca-batch
--pca-iter
--method
--log-disable
--log-file
--log-jsonl
--log-prompts-dir
--log-colors
-v --verbose --log-verbose
--offline
-lv --verbosity --log-verbosity
--log-prefix
--log-timestamps
--spec-draft-hf -hfd -hfrd --hf-repo-draft
--spec-draft-threads -td --threads-draft
--spec-draft-threads-batch -tbd --threads-batch-draft
--spec-draft-cpu-mask -Cd --cpu-mask-draft
--spec-draft-cpu-range -Crd --cpu-range-draft
--spec-draft-cpu-strict --cpu-strict-draft
--spec-draft-prio --prio-draft
--spec-draft-poll --poll-draft
--spec-draft-cpu-mask-batch -Cbd --cpu-mask-batch-draft
--spec-draft-cpu-range-batch -Crbd --cpu-range-batch-draft
--spec-draft-cpu-strict-batch --cpu-strict-batch-draft
--spec-draft-prio-batch --prio-batch-draft
--spec-draft-poll-batch --poll-batch-draft
--spec-draft-type-k -ctkd --cache-type-k-draft
--spec-draft-type-v -ctvd --cache-type-v-draft
--spec-draft-override-tensor -otd --override-tensor-draft
--spec-draft-cpu-moe -cmoed --cpu-moe-draft
--spec-draft-n-cpu-moe --spec-draft-ncmoe -ncmoed --n-cpu-moe-draft
--spec-draft-n-max
--spec-draft-n-min
--spec-synth-len
--spec-synth-rates
--spec-draft-p-split --draft-p-split
--spec-draft-p-min --draft-p-min
--spec-draft-backend-sampling
--spec-draft-device -devd --device-draft
--spec-draft-ngl -ngld --gpu-layers-draft --n-gpu-layers-draft
--spec-draft-model -md --model-draft
--spec-type
--spec-ngram-mod-n-min
--spec-ngram-mod-n-max
--spec-ngram-mod-n-match
--spec-ngram-simple-size-n
--spec-ngram-simple-size-m
--spec-ngram-simple-min-hits
--spec-ngram-map-k-size-n
--spec-ngram-map-k-size-m
--spec-ngram-map-k-min-hits
--spec-ngram-map-k4v-size-n
--spec-ngram-map-k4v-size-m
--spec-ngram-map-k4v-min-hits
--draft --draft-n --draft-max
--draft-min --draft-n-min
--spec-ngram-size-n
--spec-ngram-size-m
--spec-ngram-min-hits
--tts-lang
--tts-speaker-file
--diffusion-steps
--diffusion-visual
--diffusion-eps
--diffusion-algorithm
--diffusion-alg-temp
--diffusion-block-length
--diffusion-cfg-scale
--diffusion-add-gumbel-noise
-lr --learning-rate
-lr-min --learning-rate-min
-decay-epochs --learning-rate-decay-epochs
-wd --weight-decay
-val-split --val-split
-epochs --epochs
-opt --optimizer
--check
--save-logits
--logits-output-dir
--tensor-filter
--embd-gemma-default
--fim-qwen-1.5b-default
--fim-qwen-3b-default
--fim-qwen-7b-default
--fim-qwen-7b-spec
--fim-qwen-14b-spec
--fim-qwen-30b-default
--gpt-oss-20b-default
--gpt-oss-120b-default
--vision-gemma-4b-default
--vision-gemma-12b-default
--spec-default
"""
GROUPS = [tuple(line.split()) for line in LLAMA_CPP_FLAGS.strip().splitlines()]

SHARED = {
    # llama.cpp's first name -> (the settings of ours it may land in, a value, the value we must read)
    "-m": ({"model"}, "x.gguf", Path("x.gguf")),
    "-p": ({"prompt"}, "hi", "hi"),
    "-f": ({"prompt_file"}, "p.txt", Path("p.txt")),
    "-n": ({"max_tokens", "n_predict"}, "7", 7),
    "-c": ({"n_ctx"}, "512", 512),
    "-t": ({"n_threads"}, "1", 1),
    "-s": ({"seed"}, "5", 5),
    "-sys": ({"system_prompt"}, "be brief", "be brief"),
    "-ngl": ({"n_gpu_layers"}, "3", 3),
    "-sm": ({"split_mode"}, "row", "row"),
    "-mg": ({"main_gpu"}, "1", 1),
    "-b": ({"n_batch"}, "256", 256),
    "-ub": ({"n_ubatch"}, "128", 128),
    "-fa": ({"flash_attn"}, "on", "on"),
    "-ctk": ({"type_k"}, "q8_0", "q8_0"),
    "-ctv": ({"type_v"}, "q8_0", "q8_0"),
    "--temp": ({"temperature"}, "0.5", 0.5),
    "--top-k": ({"top_k"}, "5", 5),
    "--top-p": ({"top_p"}, "0.5", 0.5),
    "--min-p": ({"min_p"}, "0.1", 0.1),
    "--repeat-penalty": ({"repeat_penalty"}, "1.1", 1.1),
    "--repeat-last-n": ({"repeat_last_n"}, "32", 32),
    "--presence-penalty": ({"presence_penalty"}, "0.5", 0.5),
    "--frequency-penalty": ({"frequency_penalty"}, "0.25", 0.25),
    "--spec-draft-model": ({"draft_model"}, "d.gguf", Path("d.gguf")),
    "--spec-draft-n-min": ({"draft_min"}, "2", 2),
    "--spec-draft-p-min": ({"p_min"}, "0.5", 0.5),
    "--spec-draft-ngl": ({"n_gpu_layers_draft"}, "0", 0),
    "--draft": ({"draft_max"}, "4", 4),
    "-lcs": ({"lookup_cache_static"}, "s.lcs", Path("s.lcs")),
    "-lcd": ({"lookup_cache_dynamic"}, "d.lcd", Path("d.lcd")),
    "-a": ({"alias"}, "mine", ["mine"]),
    "--host": ({"host"}, "0.0.0.0", "0.0.0.0"),
    "--port": ({"port"}, "8081", 8081),
    "--api-key": ({"api_key"}, "k", "k"),
    "--sse-ping-interval": ({"sse_ping_interval"}, "5", 5),
    "--spec-ngram-simple-size-n": ({"spec_ngram_simple_size_n"}, "3", 3),
    "--spec-ngram-simple-size-m": ({"spec_ngram_simple_size_m"}, "16", 16),
    "--spec-ngram-map-k-size-n": ({"spec_ngram_map_k_size_n"}, "3", 3),
    "--spec-ngram-map-k-size-m": ({"spec_ngram_map_k_size_m"}, "16", 16),
    "--spec-ngram-map-k-min-hits": ({"spec_ngram_map_k_min_hits"}, "2", 2),
    "--spec-ngram-map-k4v-size-n": ({"spec_ngram_map_k4v_size_n"}, "3", 3),
    "--spec-ngram-map-k4v-size-m": ({"spec_ngram_map_k4v_size_m"}, "16", 16),
    "--spec-ngram-map-k4v-min-hits": ({"spec_ngram_map_k4v_min_hits"}, "2", 2),
    "--spec-ngram-mod-n-match": ({"spec_ngram_mod_n_match"}, "8", 8),
    "--spec-ngram-mod-n-min": ({"spec_ngram_mod_n_min"}, "4", 4),
    "--spec-ngram-mod-n-max": ({"spec_ngram_mod_n_max"}, "16", 16),
}
"""Every llama.cpp option one of our commands has: where it lands, keyed by one of llama.cpp's names."""
COMMANDS = ("run", "serve", "compare", "bench", "flags")
"""The commands that take llama.cpp's settings."""
POSITIONAL = {"flags": ["none"]}
"""What a command needs besides options to parse at all."""


def command_parsers() -> dict:
    sub = next(a for a in build_parser()._actions if a.__class__.__name__ == "_SubParsersAction")
    return {name: sub.choices[name] for name in COMMANDS}


def group_of(flag: str) -> tuple[str, ...]:
    return next(g for g in GROUPS if flag in g)


def parse(parser, argv):
    """The namespace, or None when the parser refuses ``argv`` (a usage error: exit 2)."""
    try:
        return parser.parse_args(POSITIONAL.get(parser.prog.split()[-1], []) + argv)
    except SystemExit as exc:
        assert exc.code == 2, exc.code
        return None


def test_every_shared_flag_is_in_llama_cpps_table():
    for flag in SHARED:
        assert group_of(flag)


@pytest.mark.parametrize("command", COMMANDS)
def test_each_llama_cpp_name_of_a_setting_we_share_lands_in_that_setting(command):
    parser = command_parsers()[command]
    ours = {s for a in parser._actions for s in a.option_strings}
    shared = 0
    for flag, (dests, value, expected) in SHARED.items():
        names = group_of(flag)
        known = [n for n in names if n in ours]
        if not known:
            continue
        shared += 1
        assert known == list(names), f"{command}: llama.cpp's {names} but we take only {known}"
        for name in names:
            before = parse(parser, [])
            args = parse(parser, [name, value])
            assert args is not None, f"{command} {name} {value} refused"
            changed = {k for k, v in vars(args).items() if vars(before).get(k) != v} - {"source_flags_given"}
            assert changed and changed <= dests, f"{command} {name}: set {changed}, llama.cpp sets {dests}"
            assert getattr(args, changed.pop()) == expected, f"{command} {name} {value}"
    assert shared >= 8, f"{command} shares only {shared} of llama.cpp's settings"


@pytest.mark.parametrize("command", COMMANDS)
def test_every_other_llama_cpp_flag_is_refused_not_guessed(command):
    parser = command_parsers()[command]
    ours = {s for a in parser._actions for s in a.option_strings}
    for names in GROUPS:
        if any(n in ours for n in names):
            continue
        for name in names:
            args = parse(parser, [name, "1"])
            assert args is None, f"{command} took llama.cpp's {name} (not a setting of ours) as {vars(args)}"


@pytest.mark.parametrize("argv", [["-n", "8"], ["-t", "1"], ["-c", "512"], ["-m", "x.gguf"]])
def test_the_short_flags_the_issue_names_mean_llama_cpps_setting_in_run(argv):
    args = parse(command_parsers()["run"], argv)
    assert args is not None
    assert args.n_gpu_layers is None and args.tensor_split is None and args.main_gpu is None


@pytest.mark.parametrize("argv", [["--max-tok", "4"], ["--thread", "1"], ["-ng", "3"], ["-ct", "f16"]])
def test_no_prefix_of_an_option_is_taken(argv):
    assert parse(command_parsers()["run"], argv) is None


def test_a_value_attached_to_a_one_letter_option_is_not_split_off():
    """llama.cpp's -cnv (conversation) and -st (single turn) are not -c nv and -s t."""
    p = ExactOptionParser()
    p.add_argument("-c", type=str)
    p.add_argument("-s", type=str)
    for argv in (["-cnv"], ["-st"]):
        with pytest.raises(SystemExit):
            p.parse_args(argv)
    assert p.parse_args(["-c", "nv"]).c == "nv"


@pytest.mark.parametrize("command", COMMANDS)
def test_threads_come_from_their_one_declaration_with_its_range_and_help(command):
    parser = command_parsers()[command]
    (action,) = [a for a in parser._actions if "--threads" in a.option_strings]
    assert action.option_strings == list(N_THREADS.flags) and action.dest == "n_threads"
    assert action.help.startswith(N_THREADS.help_text())
    assert parse(parser, ["-t", str(THREADS_MAX)]).n_threads == THREADS_MAX
    assert parse(parser, ["-t", str(THREADS_MAX + 1)]) is None
    assert parse(parser, []).n_threads == N_THREADS.default == 0
