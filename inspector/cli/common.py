"""What every ``spec-inspector`` command shares: exit statuses, the one-line error, the user-error type.

Commands import these from here (never from ``inspector.cli``, which imports the commands)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from inspector.cli.context import context_options
from inspector.cli.devices import offload_from_args
from inspector.cli.sources import SourceFlagError, read_text_file
from inspector.engine.errors import EngineError
from inspector.llama.model_file import ModelFileError, bundled_model_path
from inspector.llama.quantize import QUANT_TYPES, open_target
from inspector.llama.devices import RpcUnavailable

EXIT_USAGE = 2
"""A bad argument or value (argparse's status)."""
EXIT_ERROR = 1
"""The command could not do its work (a file, a model, a server)."""
EXIT_GENERATION_ERROR = 3
"""The generation itself raised (an injected fault without ``--resume``)."""


class UserError(Exception):
    """A mistake in what the user asked, said in one line (``fail``) with ``EXIT_USAGE``."""


RUNTIME_OPEN_ERRORS = (ModelFileError, EngineError, ValueError, RpcUnavailable)
"""What ``open_target_runtime`` raises for a bad model, bad settings or an RPC server out of reach: each command
says it in one line (``fail``)."""


def progress_line(message: str) -> None:
    """Print ``message`` on stderr at once: a long command's progress, apart from its output."""
    print(message, file=sys.stderr, flush=True)


def fail(message: str, status: int = EXIT_ERROR) -> int:
    """Print ``spec-inspector: error: MESSAGE`` on stderr and return ``status``."""
    print(f"spec-inspector: error: {message}", file=sys.stderr)
    return status


def weight_type(text: str) -> str:
    """An argparse type: a llama.cpp weight type name (``QUANT_TYPES``), upper-cased; refused otherwise."""
    t = text.strip().upper()
    if t not in QUANT_TYPES:
        raise argparse.ArgumentTypeError(f"unknown weight type {text.strip()}: expected one of {', '.join(QUANT_TYPES)}")
    return t


def open_target_runtime(args, **runtime_options):
    """The ``LlamaRuntime`` a command runs: ``--model`` (default: the bundled one), in
    ``--target-weights`` form when given (``inspector.llama.quantize.open_target``: converted once,
    then cached; the receipts name the original). Raises ``ModelFileError``, ``EngineError``."""
    model = args.model or bundled_model_path()
    print(f"loading {model} ...", file=sys.stderr, flush=True)

    def converting(t: str) -> None:
        print(f"target weights {t}: converting {Path(model).name} if not done before "
              "(llama.cpp quantize, cached) ...", file=sys.stderr, flush=True)

    rt = open_target(model, getattr(args, "target_weights", None) or "", on_convert=converting,
                     offload=offload_from_args(args), **{**context_options(args), **runtime_options})
    if getattr(rt, "offload_note", ""):
        print(f"spec-inspector: note: {rt.offload_note}", file=sys.stderr)
    if getattr(rt, "rpc_devices", None):
        print(f"model: {rt.layers} (the model runs in a child process)", file=sys.stderr, flush=True)
    return rt


def read_text(path: Path, what: str) -> str:
    """A text file the user named (``cli.sources.read_text_file``); ``UserError`` with its one-line reason."""
    try:
        return read_text_file(path, what)
    except SourceFlagError as exc:
        raise UserError(str(exc)) from None


def strip_final_newline(text: str) -> str:
    """``text`` without one final newline (a prompt file's last line break is not part of the prompt)."""
    return text[:-1] if text.endswith("\n") else text


def add_backend_sampling_flag(parser) -> None:
    """``-bs`` / ``--backend-sampling`` (llama.cpp's name and meaning, ``common/arg.cpp``) on ``parser``."""
    parser.add_argument("-bs", "--backend-sampling", action="store_true",
                        help="llama.cpp's backend sampling (llama-server -bs): each row's greedy prediction and "
                             "probability figures are computed in llama.cpp's graph, where the logits are, and only "
                             "they cross to the host (greedy runs; a GPU saves the copy and the scan of each row)")


def backend_sampling_refusal(args, sampling) -> str:
    """Why ``run -bs`` / ``compare -bs`` cannot sample in the graph with these ``args`` and ``sampling``
    (``SamplingSettings``), said before the model loads; "" when they can. The sampler in the graph is greedy's
    without penalties (``inspector.llama.graph_figures``); ``--baseline`` reads the logits on the host."""
    if getattr(args, "baseline", False):
        return "--baseline reads the logits on the host: leave out -bs (or --baseline)"
    if not sampling.greedy:
        return ("-bs computes greedy rows in the graph; this run samples (--temp > 0): leave out -bs or use "
                "--temp 0")
    if sampling.penalized:
        return ("-bs computes greedy rows without penalties in the graph; this run has penalties (--repeat-penalty, "
                "--presence-penalty, --frequency-penalty): leave out -bs or the penalties")
    return ""


def start_backend_sampling(runtime, top: int) -> str:
    """Turn on ``runtime``'s backend sampling (``LlamaRuntime.sample_in_graph``, ``top`` tokens kept a row); the
    one-line reason when it cannot run here, or ""."""
    try:
        runtime.sample_in_graph(top)
    except EngineError as exc:
        return str(exc)
    return ""
