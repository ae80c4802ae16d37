"""Issue 25, family 2: every output path and every bounded value is checked before any work starts.

Real processes; every case is refused as a usage error (exit 2, one line, no model loaded) and the
inputs are left exactly as they were."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def cli(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "inspector", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout)


def usage_line(p) -> str:
    assert p.returncode == 2, p.stderr
    assert "Traceback" not in p.stderr and "loading " not in p.stderr, p.stderr  # nothing ran
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    assert len(lines) == 1, p.stderr
    return lines[0]


@pytest.fixture
def files(tmp_path):
    (tmp_path / "p.txt").write_text("Say hello.\n")
    (tmp_path / "t.txt").write_text("Say hello.\n---\nAgain.\n")
    (tmp_path / "r.json").write_text('{"not": "touched"}\n')
    return tmp_path


@pytest.mark.parametrize("argv, flags", [
    (["run", "--prompt-file", "{d}/p.txt", "--receipts", "{d}/p.txt"], ["--receipts", "--prompt-file"]),
    (["run", "--prompt-file", "{d}/p.txt", "--autosave", "{d}/p.txt"], ["--autosave", "--prompt-file"]),
    (["run", "--prompt", "x", "--source", "replay", "--replay", "{d}/r.json", "--receipts", "{d}/r.json"],
     ["--receipts", "--replay"]),
    (["run", "--turns", "{d}/t.txt", "--receipts", "{d}/t.txt"], ["--receipts", "--turns"]),
    (["run", "--prompt", "x", "--autosave", "{d}/o.json", "--receipts", "{d}/o.json"], ["--receipts", "--autosave"]),
    (["run", "--prompt-file", "{d}/p.txt", "--receipts", "{d}/./sub/../p.txt"], ["--receipts", "--prompt-file"]),
    (["run", "--prompt-file", "{d}/p.txt", "--receipts", "{d}/link.txt"], ["--receipts", "--prompt-file"]),
    (["trace", "{d}/r.json", "-o", "{d}/r.json"], ["-o/--out", "input FILE"]),
    (["compare", "--prompt-file", "{d}/p.txt", "--json", "{d}/p.txt"], ["--json", "--prompt-file"]),
    (["compare", "--prompt", "x", "--json", "{d}/c.out", "--csv", "{d}/c.out"], ["--csv", "--json"]),
])
def test_an_output_that_is_an_input_or_another_output_is_refused_and_nothing_changes(files, argv, flags):
    (files / "sub").mkdir()
    (files / "link.txt").symlink_to(files / "p.txt")
    before = {f.name: f.read_bytes() for f in files.iterdir() if f.is_file()}
    line = usage_line(cli(*[a.format(d=files) for a in argv]))
    assert all(f in line for f in flags), line
    assert {f.name: f.read_bytes() for f in files.iterdir() if f.is_file()} == before
    assert not (files / "o.json").exists() and not (files / "c.out").exists()


def test_receipts_onto_a_folder_or_a_special_file_is_refused_before_the_run(tmp_path):
    (tmp_path / "dir").mkdir()
    line = usage_line(cli("run", "--prompt", "x", "--receipts", tmp_path / "dir"))
    assert "--receipts" in line and "folder" in line
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    line = usage_line(cli("run", "--prompt", "x", "--receipts", fifo))
    assert "special file" in line
    (tmp_path / "file.txt").write_text("x")
    line = usage_line(cli("run", "--prompt", "x", "--autosave", tmp_path / "file.txt" / "a.jsonl"))
    assert "--autosave" in line and "not a folder" in line


def test_an_output_in_a_folder_that_cannot_be_written_is_refused_before_the_run(tmp_path):
    if os.geteuid() == 0:  # root writes anywhere permission bits say no: use a folder no one can write in
        folder = "/sys"  # sysfs: no new files, even for root
        if not os.path.isdir(folder):
            pytest.skip("no unwritable folder on this machine")
    else:
        folder = tmp_path / "ro"
        folder.mkdir()
        folder.chmod(0o555)
    line = usage_line(cli("run", "--prompt", "x", "--receipts", f"{folder}/r.json"))
    assert "--receipts" in line and "not writable" in line
    line = usage_line(cli("compare", "--prompt", "x", "--json", f"{folder}/c.json"))
    assert "--json" in line and "not writable" in line


def test_compare_creates_the_json_folder_before_anything_runs(tmp_path):
    # An unknown configuration is refused after the paths are checked: the folder is there, nothing ran.
    out = tmp_path / "new" / "deeper" / "c.json"
    line = usage_line(cli("compare", "--prompt", "x", "--config", "no-such-source", "--json", out))
    assert "no-such-source" in line
    assert out.parent.is_dir() and not out.exists()


@pytest.mark.parametrize("argv, needle", [
    (["run", "--prompt", "x", "--draft-max", "1000000000000"], "0..2147483647"),
    (["run", "--prompt", "x", "--draft-max", "2147483648"], "0..2147483647"),
    (["run", "--prompt", "x", "--threads", "1000000000000"], "0..512"),
    (["run", "--prompt", "x", "--n-ctx", "2147483648"], "1..2147483647"),
    (["run", "--prompt", "x", "--n-batch", "99999999999999"], "1..2147483647"),
    (["compare", "--prompt", "x", "--threads", "513"], "0..512"),
    (["bench", "--k-max", "2000"], "1..256"),
    (["bench", "--max-tokens", "100000"], "1..2048"),
    (["view", "x.json", "--window", "99999999999"], "1..2147483647"),
])
def test_values_the_receipts_bound_are_refused_at_the_command_line_with_the_range(argv, needle):
    line = usage_line(cli(*argv))
    assert needle in line, line


def test_help_states_the_ranges():
    p = cli("run", "--help")
    assert p.returncode == 0
    text = " ".join(p.stdout.split())
    assert "0..2147483647" in text and "0..512" in text
