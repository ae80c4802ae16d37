"""Command-line flags for where the model runs, with llama.cpp's names (``common/arg.cpp`` of the
llama.cpp that llama-cpp-python 0.3.36 vendors): ``-ngl``/``--n-gpu-layers``, ``--split-mode``,
``--main-gpu``, ``--tensor-split``, ``--rpc`` (and ours, ``--rpc-timeout``); and the
``rpc-server`` and ``devices`` commands (``inspector.llama.devices``)."""

from __future__ import annotations

import argparse
import sys

from inspector.cli.ranges import MAX_DEVICES, finite_shares, whole_number
from inspector.engine.llama_settings import COUNT_MAX
from inspector.cli.rpc_server import add_command as add_rpc_server_command
from inspector.engine.errors import RuntimeLost
from inspector.llama.devices import (REBUILD_HINT, RPC_TIMEOUT_S, SPLIT_MODES, Offload, RpcUnavailable, list_devices,
                                     local_gpus, parse_endpoints, rpc_supported)
from inspector.llama.remote import devices_with_rpc


def add_offload_flags(p: argparse.ArgumentParser) -> None:
    """Add the offload flags to ``p``."""
    p.add_argument("-ngl", "--n-gpu-layers", "--gpu-layers", dest="n_gpu_layers", type=whole_number(-1),
                   default=None, metavar="N", help=f"layers on the GPU or RPC devices (llama.cpp -ngl; -1 = all; "
                                                   f"-1..{COUNT_MAX}) [llama.cpp's default: all]")
    p.add_argument("--split-mode", "-sm", dest="split_mode", choices=list(SPLIT_MODES), default=None,
                   help="how to split the model across devices (llama.cpp -sm) [layer]")
    p.add_argument("--main-gpu", "-mg", dest="main_gpu", type=whole_number(0, MAX_DEVICES - 1), default=None,
                   metavar="I", help=f"the device for the whole model with --split-mode none (llama.cpp -mg; "
                                     f"0..{MAX_DEVICES - 1}) [0]")
    p.add_argument("--tensor-split", "-ts", dest="tensor_split", type=finite_shares, default=None, metavar="A,B,...",
                   help=f"share of the model on each device, e.g. 3,1 (llama.cpp -ts; finite, >= 0, "
                        f"at most {MAX_DEVICES})")
    p.add_argument("--rpc", type=_endpoints, default=(), metavar="HOST:PORT[,HOST:PORT...]",
                   help="offload to llama.cpp RPC servers (spec-inspector rpc-server, or llama.cpp's rpc-server); "
                        "the model then runs in a child process, which a lost server cannot take the app down with")
    p.add_argument("--rpc-timeout", type=whole_number(1, 86400, name="seconds"), default=int(RPC_TIMEOUT_S),
                   metavar="S", help="with --rpc: a model call the servers do not answer within S seconds per batch "
                                     "of up to n_batch rows (a frozen server: llama.cpp's client would wait forever) "
                                     "ends the run as a lost server does, its receipts kept "
                                     f"[{RPC_TIMEOUT_S:g}; 1..86400]")


def _endpoints(text: str) -> tuple[str, ...]:
    try:
        return parse_endpoints(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def offload_from_args(args):
    """The ``Offload`` the flags ask for (``inspector.llama.devices.Offload``). Raises ``ValueError``."""
    return Offload(n_gpu_layers=getattr(args, "n_gpu_layers", None), split_mode=getattr(args, "split_mode", None),
                   main_gpu=getattr(args, "main_gpu", None), tensor_split=getattr(args, "tensor_split", None),
                   rpc=tuple(getattr(args, "rpc", ()) or ()), rpc_timeout_s=getattr(args, "rpc_timeout", None))


def add_commands(sub) -> None:
    """The ``rpc-server`` (``inspector.cli.rpc_server``) and ``devices`` commands."""
    add_rpc_server_command(sub)
    dv = sub.add_parser("devices", help="list the devices llama.cpp sees (and RPC servers' devices)")
    dv.add_argument("--rpc", type=_endpoints, default=(), metavar="HOST:PORT[,HOST:PORT...]",
                    help="also add these RPC servers and list their devices")


def cmd_devices(args) -> int:
    """Print every device llama.cpp sees (with ``--rpc``: listed by a child process that adds the servers)."""
    try:
        devices = devices_with_rpc(args.rpc) if args.rpc else list_devices()
    except (RpcUnavailable, RuntimeLost) as exc:
        print(f"spec-inspector devices: error: {exc}", file=sys.stderr)
        return 1
    for d in devices:
        mem = f"{d.total_bytes / 2**20:.0f} MiB, {d.free_bytes / 2**20:.0f} MiB free" if d.total_bytes else "memory n/a"
        print(f"{d.name:8s} {d.type:5s} {d.description} ({mem})")
    gpus = [d.name for d in local_gpus()]
    print(f"this llama.cpp: local GPUs {', '.join(gpus) or 'none'}, RPC {'yes' if rpc_supported() else 'no (' + REBUILD_HINT + ')'}")
    return 0
