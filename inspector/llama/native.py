"""Reaching llama.cpp from ctypes without entering Python on its hot paths.

``init_backend``: llama.cpp's backend, initialised once per process;
``abort_callback``: the abort flag llama.cpp polls hundreds of times per decode, read in C;
``raw_logits_function``: the logits buffer's address as an int, for cheap numpy views.
"""

from __future__ import annotations

import ctypes
import threading

import llama_cpp

_backend_ready = False
_backend_lock = threading.Lock()


def init_backend() -> None:
    """``llama_backend_init`` once per process (thread safe); every runtime and device query calls it
    first."""
    global _backend_ready
    with _backend_lock:
        if not _backend_ready:
            llama_cpp.llama_backend_init()
            _backend_ready = True


def abort_callback():
    """llama.cpp abort callback that reads a flag byte without entering Python.

    A Python callback would be called hundreds of times per decode and must
    take the GIL each time, so a busy GUI thread would slow every decode.
    libc's ``strlen`` over a 2-byte buffer ``[flag, 0]`` returns 1 when the
    flag byte is set and 0 otherwise: exactly the ``bool (*)(void *)`` that
    ``llama_set_abort_callback`` wants. Where libc is not found, a Python
    callback reading the same byte is used.
    Returns (flag buffer, callback).
    """
    flag = ctypes.create_string_buffer(2)
    try:
        strlen = ctypes.CDLL(None).strlen
        return flag, ctypes.cast(strlen, llama_cpp.ggml_abort_callback)
    except (OSError, AttributeError, TypeError):  # pragma: no cover - non-POSIX
        return flag, llama_cpp.ggml_abort_callback(lambda _data: flag.raw[0] != 0)


def raw_logits_function():
    """``llama_get_logits`` returning the address as an int (``c_void_p``): a
    separate function object from llama-cpp-python's, so its typed wrapper is
    untouched. Reading rows through a cached ctypes array type and
    ``np.frombuffer`` costs a few microseconds where ``np.ctypeslib.as_array``
    costs 50-70 (measured on the bundled model, issue 5)."""
    try:
        fn = llama_cpp.llama_cpp._lib["llama_get_logits"]
    except (AttributeError, KeyError, TypeError):  # pragma: no cover - other bindings layout
        return None
    fn.argtypes = [llama_cpp.llama_context_p_ctypes]
    fn.restype = ctypes.c_void_p
    return fn


def library_function_address(name: str) -> int:
    """The address of libllama's exported function ``name`` (e.g. ``llama_decode``), for C code that calls it
    directly (``inspector/llama/decode_worker.c``). Raises ``AttributeError`` when libllama has none."""
    fn = llama_cpp.llama_cpp._lib[name]
    return ctypes.cast(fn, ctypes.c_void_p).value or 0
