"""Loading a GGUF's weights with llama.cpp's offload settings: ``-ngl``, split mode, main GPU,
tensor split and RPC servers (``inspector.llama.devices.Offload``), with a progress callback.

``load_model`` is the model half of ``LlamaRuntime``'s construction (the context is the other):
it registers the RPC servers, loads the weights, reads from llama.cpp's load log where the layers
went, and says when an offload setting had nothing to act on.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import Callable

import llama_cpp

from inspector.llama import llama_log
from inspector.llama.devices import SPLIT_MODES, Offload, add_rpc_servers, device_array, local_gpus
from inspector.llama.model_file import ModelFileError, ModelInfo
from inspector.llama.native import init_backend
from inspector.llama.native_signals import signals_deferred, stop_requested


@dataclass
class LoadedModel:
    """A loaded ``llama_model`` pointer (``model``) and how it was placed."""

    model: object
    offload: Offload
    rpc_devices: list
    """The RPC servers' devices (``inspector.llama.devices``), [] without ``--rpc``."""
    layers: str
    """Where the layers went, e.g. "31/31 layers on RPC0[127.0.0.1:50052]" (llama.cpp's load log)."""
    offload_note: str
    """One line when a setting could not be honoured (layers asked for, no device to put them on)."""
    keep: tuple = field(default=(), repr=False)
    """ctypes objects llama.cpp was given pointers to (device list, tensor split, progress callback):
    keep them as long as the model."""


def load_model(info: ModelInfo, offload: Offload | None = None,
               progress: Callable[[float], None] | None = None) -> LoadedModel:
    """Load the checked GGUF ``info`` (``check_gguf``) with ``offload`` (None: llama.cpp's defaults);
    ``progress`` is called with 0.0..1.0 while the weights load (its exceptions are ignored); a
    signal while they load cancels the load and is raised after it (``native_signals``).
    Raises ``ModelFileError`` when llama.cpp cannot load the file, ``RpcUnavailable`` for an RPC server
    that does not answer."""
    init_backend()
    o = offload if offload is not None else Offload()
    rpc_devices = add_rpc_servers(o.rpc) if o.rpc else []
    mparams = llama_cpp.llama_model_default_params()
    keep = []
    if rpc_devices:  # the layers go to the RPC servers (llama.cpp's --rpc adds them to the list)
        devices = device_array([*rpc_devices, *local_gpus()])
        mparams.devices = ctypes.cast(devices, ctypes.c_void_p)
        keep.append(devices)
    if o.n_gpu_layers is not None:
        mparams.n_gpu_layers = o.n_gpu_layers
    if o.split_mode is not None:
        mparams.split_mode = SPLIT_MODES[o.split_mode]
    if o.main_gpu is not None:
        mparams.main_gpu = o.main_gpu
    if o.tensor_split is not None:
        tensor_split = (ctypes.c_float * 128)(*o.tensor_split[:128])
        mparams.tensor_split = tensor_split
        keep.append(tensor_split)
    note = ""
    if (o.n_gpu_layers or 0) != 0 and not rpc_devices and not local_gpus():
        note = (f"-ngl {o.n_gpu_layers} has no effect: llama.cpp sees no GPU here and no RPC "
                "server was given (--rpc HOST:PORT), so every layer runs on the CPU")

    def _progress(value: float, _data) -> bool:  # False cancels the load: Ctrl-C, SIGTERM, SIGHUP
        if progress is not None:
            try:
                progress(float(value))
            except Exception:
                pass
        return not stop_requested()

    callback = llama_cpp.llama_progress_callback(_progress)
    mparams.progress_callback = callback
    keep.append(callback)
    with signals_deferred() as deferred:  # a signal now is raised after the load, never lost in a callback
        with llama_log.captured() as captured:
            model = llama_cpp.llama_model_load_from_file(str(info.path).encode(), mparams)
        if model and deferred.signum is not None:  # it came after the last progress step
            llama_cpp.llama_model_free(model)
    layers = llama_log.where_layers_went(captured, {d.name: d.label() for d in rpc_devices})
    if not model:
        raise ModelFileError(
            info.path,
            f"llama.cpp could not load it (architecture {info.architecture!r} may be unsupported, "
            f"or the file is damaged)",
        )
    return LoadedModel(model, o, rpc_devices, layers, note, tuple(keep))


def create_context(model, cparams) -> tuple[object | None, list]:
    """``llama_init_from_model(model, cparams)`` with llama.cpp's log captured: (the context, or None
    when llama.cpp refused it, and the captured log lines for ``llama_log.refusal``/``settled``). A signal
    that arrives inside llama.cpp's log callback is raised after the call, once the context it made
    is freed, never lost."""
    ctx = None
    with signals_deferred() as deferred:
        with llama_log.captured() as log:
            ctx = llama_cpp.llama_init_from_model(model, cparams)
        if deferred.signum is not None and ctx:  # raised as the block ends: free the context
            llama_cpp.llama_free(ctx)
            ctx = None
    return ctx, log
