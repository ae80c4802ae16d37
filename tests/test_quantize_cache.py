"""Conversions of a model (drafts, ``--target-weights``) are cached by the file's content
(``inspector.llama.quantize.fingerprint``), not its modification time: a reinstalled or copied model
finds the conversion made before instead of leaving another ~100 MB file beside it."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from inspector.llama.quantize import fingerprint, make_draft


def test_a_copy_of_the_model_with_another_time_finds_the_conversion_made_from_the_original(model_path, tmp_path):
    out = tmp_path / "drafts"
    first = make_draft(model_path, "Q4_0", out)
    made = first.stat().st_mtime_ns
    copy = tmp_path / "reinstalled" / Path(model_path).name
    copy.parent.mkdir()
    shutil.copyfile(model_path, copy)
    os.utime(copy, (1_000_000, 1_000_000))
    again = make_draft(copy, "Q4_0", out)
    assert again == first and again.stat().st_mtime_ns == made
    assert [p.name for p in out.iterdir()] == [first.name]


def test_files_that_differ_only_in_their_last_byte_or_their_length_have_different_keys(tmp_path):
    data = os.urandom(3 << 20)
    a, b, c = tmp_path / "a.gguf", tmp_path / "b.gguf", tmp_path / "c.gguf"
    a.write_bytes(data)
    b.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    c.write_bytes(data + b"\0")
    assert len({fingerprint(a), fingerprint(b), fingerprint(c)}) == 3
    assert fingerprint(a) == fingerprint(tmp_path / "a.gguf") and len(fingerprint(a)) == 12
