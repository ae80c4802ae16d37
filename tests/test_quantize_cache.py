"""Conversions of a model (drafts, ``--target-weights``) are cached by the file's content
(``inspector.llama.quantize.fingerprint``), not its modification time: a reinstalled or copied model
finds the conversion made before instead of leaving another ~100 MB file beside it."""

from __future__ import annotations

import json
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
    assert [p.name for p in out.glob("*.gguf")] == [first.name]


def test_files_that_differ_in_one_byte_anywhere_or_in_length_have_different_keys(tmp_path):
    data = os.urandom(5 << 20)
    files = [tmp_path / f"{name}.gguf" for name in "abcd"]
    files[0].write_bytes(data)
    files[1].write_bytes(data[:-1] + bytes([data[-1] ^ 1]))  # the last byte
    middle = len(data) // 2
    files[2].write_bytes(data[:middle] + bytes([data[middle] ^ 1]) + data[middle + 1:])  # a weight in the middle
    files[3].write_bytes(data + b"\0")
    assert len({fingerprint(f) for f in files}) == 4
    assert fingerprint(files[0]) == fingerprint(tmp_path / "a.gguf") and len(fingerprint(files[0])) == 12


def test_a_remembered_key_is_used_while_the_file_is_unchanged_and_computed_again_when_it_changes(tmp_path):
    model, folder = tmp_path / "m.gguf", tmp_path / "drafts"
    folder.mkdir()
    model.write_bytes(b"one" * 1000)
    first = fingerprint(model, folder)
    index = json.loads((folder / "fingerprints.json").read_text())
    assert index[str(model.resolve())][-1] == first
    index[str(model.resolve())][-1] = "remembered00"
    (folder / "fingerprints.json").write_text(json.dumps(index))
    assert fingerprint(model, folder) == "remembered00"  # unchanged (size and time): not read again
    model.write_bytes(b"two" * 1000)  # same size, other content, another time
    os.utime(model, ns=(10**18, 10**18))
    second = fingerprint(model, folder)
    assert second not in (first, "remembered00") and second == fingerprint(model)


def test_conversions_keyed_by_the_old_modification_time_are_removed_when_the_model_is_converted(model_path,
                                                                                                  tmp_path):
    out = tmp_path / "drafts"
    out.mkdir()
    stem, size = Path(model_path).stem, os.path.getsize(model_path)
    old = out / f"{stem}.Q4_0.{size}-1796406098.gguf"
    other = out / f"{stem}.Q8_0.{size}-1796406098.gguf"  # another type: not this conversion's
    old.write_bytes(b"old")
    other.write_bytes(b"old")
    made = make_draft(model_path, "Q4_0", out)
    assert not old.exists() and other.exists() and made.exists()


def test_the_clean_up_compares_names_as_text_and_keeps_another_models_conversion(model_path, tmp_path):
    model = tmp_path / "model[1].gguf"  # glob characters in the name
    shutil.copyfile(model_path, model)
    folder, size = tmp_path / "drafts", os.path.getsize(model)
    folder.mkdir()
    mine, other = folder / f"model[1].Q4_0.{size}-1234567890.gguf", folder / f"model1.Q4_0.{size}-1234567890.gguf"
    for f in (mine, other):
        f.write_bytes(b"old")
    make_draft(model, "Q4_0", folder)
    assert not mine.exists() and other.exists()
