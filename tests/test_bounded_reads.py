"""Issue 25, family 3: reads bounded by the bytes read, special files refused by type, sizes with a
range, no NaN or Infinity in receipts. Real special files (``/dev/zero``, FIFOs) and real processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from inspector.bounded_read import BoundedReadError, read_bounded, read_bounded_text
from inspector.receipts import ReceiptsFileError, write_document

needs_dev_zero = pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero on this platform")


def cli(*args, timeout=60):  # a hang or an endless read ends the test with TimeoutExpired
    return subprocess.run([sys.executable, "-m", "inspector", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout)


def one_line(p, status) -> str:
    assert p.returncode == status, p.stderr
    assert "Traceback" not in p.stderr, p.stderr
    lines = [l for l in p.stderr.splitlines() if l.strip() and not l.startswith("loading ")]
    assert len(lines) == 1, p.stderr
    return lines[0]


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "pipe.json"
    os.mkfifo(path)
    return path


def test_the_limit_counts_the_bytes_read_not_the_size_reported(tmp_path):
    status = "/proc/self/status"  # a regular file that reports 0 bytes and holds hundreds
    if os.path.exists(status):
        assert os.stat(status).st_size == 0
        assert len(read_bounded(status, 1 << 20)) > 100
        with pytest.raises(BoundedReadError, match="more than 10 bytes"):
            read_bounded(status, 10)
    f = tmp_path / "f.txt"
    f.write_bytes(b"a\r\nb" + b"x" * 96)
    assert read_bounded_text(f, 100).startswith("a\nb")  # newlines as Path.read_text reads them
    with pytest.raises(BoundedReadError, match="more than 99 bytes"):
        read_bounded(f, 99)


@needs_dev_zero
def test_a_device_and_a_fifo_are_refused_by_type_without_a_read(fifo):
    with pytest.raises(BoundedReadError, match="character device"):
        read_bounded("/dev/zero", 1 << 30)
    with pytest.raises(BoundedReadError, match="FIFO"):
        read_bounded(fifo, 1 << 30)  # no writer: a blocking open would wait forever


@needs_dev_zero
@pytest.mark.parametrize("argv, status", [
    (["view", "/dev/zero"], 1),
    (["trace", "/dev/zero", "-o", "{d}/t.json"], 1),
    (["run", "--prompt-file", "/dev/zero"], 2),
    (["run", "--turns", "/dev/zero"], 2),
    (["run", "--source", "scripted", "--script-file", "/dev/zero", "--prompt", "x"], 2),
    (["compare", "--turns", "/dev/zero"], 2),
    (["run", "--prompt", "x", "--source", "replay", "--replay", "/dev/zero"], 1),
])
def test_dev_zero_anywhere_a_file_is_read_is_one_line(tmp_path, argv, status):
    line = one_line(cli(*[a.format(d=tmp_path) for a in argv]), status)
    assert "character device" in line and "/dev/zero" in line


@pytest.mark.parametrize("name", ["pipe.json", "pipe.jsonl"])
def test_view_of_a_fifo_is_refused_instead_of_waiting(tmp_path, name):
    path = tmp_path / name
    os.mkfifo(path)
    line = one_line(cli("view", path), 1)
    assert "FIFO" in line


def test_a_prompt_file_over_the_limit_is_one_line(tmp_path):
    big = tmp_path / "big.txt"
    with big.open("wb") as fh:
        fh.truncate(17 * 1024 * 1024)  # sparse: 17 MiB of zero bytes, over the 16 MiB text limit
    line = one_line(cli("run", "--prompt-file", big), 2)
    assert "more than" in line and "big.txt" in line


@pytest.mark.parametrize("argv, needle", [
    (["run", "--prompt", "x", "--ngram-max", "1000000000000"], "16"),
    (["run", "--prompt", "x", "--ngram-min", "17"], "16"),
    (["compare", "--prompt", "x", "--config", "ngram:n_max=1000000000000"], "16"),
    (["run", "--prompt", "x", "--tensor-split", "nan,inf"], "finite"),
    (["run", "--prompt", "x", "--tensor-split", "1,inf"], "finite"),
    (["run", "--prompt", "x", "--main-gpu", "1000000000000"], "0..15"),
    (["run", "--prompt", "x", "-ngl", "99999999999"], "-1..2147483647"),
])
def test_sizes_and_device_values_have_a_range(argv, needle):
    line = one_line(cli(*argv), 2)
    assert needle in line, line


def test_help_gives_the_ngram_range():
    p = cli("run", "--help")
    assert "(1..16)" in " ".join(p.stdout.split())


def test_no_nan_or_infinity_is_written_into_receipts(tmp_path):
    doc = json.loads((Path(__file__).parent / "data" / "receipts-v1.json").read_text("utf-8"))
    doc["settings"]["source"]["settings"] = {"share": float("inf"), "other": float("nan")}
    out = tmp_path / "r.json"
    with pytest.raises(ReceiptsFileError, match="strict JSON"):
        write_document(doc, out)
    assert not out.exists() and not list(tmp_path.iterdir())
