"""The child process of ``inspector.llama.build_check``: load a model and decode a few tokens.

``python -m inspector.llama.build_probe MODEL`` exits 0 when the build survives; a build that crashes
on this machine dies by a signal here instead of in the user's process.
"""

from __future__ import annotations

import sys

from inspector.llama.runtime import LlamaRuntime


def main(model_path: str) -> int:
    """Load ``model_path`` (a small context), prefill a short prompt, then verify a 4-row batch and take
    three plain steps, as a run does; 0."""
    rt = LlamaRuntime(model_path, n_ctx=64, n_batch=16, n_seq_max=1)
    try:
        sid = rt.open_session()
        prompt = rt.tokenize("Hello, world")
        token = rt.prefill_predict(sid, prompt, 0)
        position = len(prompt)
        rt.decode_rows(sid, [token] * 4, position)
        rt.trim(sid, position)
        for _ in range(3):
            token = rt.decode_rows(sid, [token], position)[0]
            position += 1
    finally:
        rt.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
