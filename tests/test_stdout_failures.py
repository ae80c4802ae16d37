"""Issue 37, item 2: a standard output that fails never costs the receipts (real processes, real pipes
and special files, through a shell as a user types them).

A reader that leaves (``| head -c 20``) ends nothing but the printing: the run goes on, the receipts
are written and the exit status is the run's own (0), without a word. A full disk (``> /dev/full``)
or a closed standard output (``>&-``) is one line on stderr after the receipts are written, exit 1.
"""

from __future__ import annotations

import shlex
import subprocess
import sys

import pytest

from inspector.receipts import load_document

RUN = [sys.executable, "-m", "inspector", "run", "--prompt", "Count from 1 to 20.", "--max-tokens", "12",
       "--threads", "1"]


def shell(tail: str, receipts) -> subprocess.CompletedProcess:
    """``RUN --receipts RECEIPTS`` followed by ``tail`` in bash; prints the run's own exit status last."""
    command = " ".join(map(shlex.quote, [*RUN, "--receipts", str(receipts)]))
    return subprocess.run(["bash", "-c", f"{command} {tail}; echo \"status=${{PIPESTATUS[0]}}\" >&2"],
                          capture_output=True, text=True, timeout=300)


def status_of(p) -> int:
    return int(p.stderr.strip().splitlines()[-1].removeprefix("status="))


def test_a_reader_that_leaves_costs_nothing_but_the_printing(tmp_path):
    receipts = tmp_path / "r.json"
    p = shell("| head -c 20", receipts)
    assert status_of(p) == 0, p.stderr
    assert "Broken pipe" not in p.stderr and "generation error" not in p.stderr and "Traceback" not in p.stderr
    assert len(p.stdout) <= 20
    doc = load_document(receipts)  # whole and valid: the run went on to its end
    assert doc["output"]["finish_reason"] in ("length", "eog")
    assert doc["summary"]["generated_tokens"] >= 1


@pytest.mark.parametrize("tail, reason", [("> /dev/full", "No space left on device"),
                                          (">&-", "it is closed")])
def test_a_standard_output_that_cannot_be_written_is_one_line_after_the_receipts(tmp_path, tail, reason):
    receipts = tmp_path / "r.json"
    p = shell(tail, receipts)
    assert status_of(p) == 1, p.stderr
    assert "Traceback" not in p.stderr and "generation error" not in p.stderr, p.stderr
    said = [line for line in p.stderr.splitlines() if "standard output" in line]
    assert len(said) == 1 and reason in said[0], p.stderr
    doc = load_document(receipts)
    assert doc["output"]["finish_reason"] in ("length", "eog")
