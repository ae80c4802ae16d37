"""Issue 25, family 2 (and issue 37, items 1, 4, 5): every output path and every bounded value is checked
before any work starts, the files named in source options and ``--config`` strings included.

Real processes; every case is refused as a usage error (exit 2, one line, no model loaded) and the
inputs are left exactly as they were."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import inspector
from inspector.receipts import load_document


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
    # issue 37: penalties whose float32 arithmetic overflows (NaN receipts after the run)
    (["run", "--prompt", "x", "--presence-penalty=-1e308"], "from -1e9 to 1e9"),
    (["run", "--prompt", "x", "--frequency-penalty", "1e38"], "from -1e9 to 1e9"),
    (["run", "--prompt", "x", "--repeat-penalty", "1e-300"], "from 1e-9 to 1e9"),
    (["compare", "--prompt", "x", "--repeat-penalty", "1e308"], "from 1e-9 to 1e9"),
    (["serve", "--presence-penalty", "1e10"], "from -1e9 to 1e9"),
])
def test_values_the_receipts_bound_are_refused_at_the_command_line_with_the_range(argv, needle):
    line = usage_line(cli(*argv))
    assert needle in line, line


def test_help_states_the_ranges():
    p = cli("run", "--help")
    assert p.returncode == 0
    text = " ".join(p.stdout.split())
    assert "0..2147483647" in text and "0..512" in text
    assert "(1e-9..1e9)" in text and text.count("(-1e9..1e9)") == 2  # the penalties (issue 37)


def test_penalties_at_their_bounds_run_and_their_receipts_are_written(tmp_path):
    out = tmp_path / "r.json"
    p = cli("run", "--prompt", "Say hi hi hi hi.", "--max-tokens", "6", "--threads", "1", "--quiet",
            "--ngram-min", "1", "--presence-penalty=-1e9", "--frequency-penalty", "1e9", "--repeat-penalty", "1e-9",
            "--receipts", out)
    assert p.returncode == 0, p.stderr
    assert "RuntimeWarning" not in p.stderr and "NaN" not in p.stderr
    assert load_document(out)["settings"]["sampling"]["presence_penalty"] == -1e9


# Issue 37, item 1: the files inside source options and caches are inputs (and some outputs) too.
@pytest.fixture
def source_files(tmp_path):
    for name in ("m.gguf", "c.lcs", "d.lcd", "m.json", "r.json", "p.txt"):
        (tmp_path / name).write_bytes(b"keep me " + name.encode())
    return tmp_path


@pytest.mark.parametrize("argv, said", [
    (["compare", "--prompt", "x", "--config", "draft:draft_model={d}/m.gguf", "--json", "{d}/m.gguf"],
     "--json {d}/m.gguf is also --config draft:draft_model"),
    (["compare", "--prompt", "x", "--config", "replay:replay={d}/r.json", "--json", "{d}/r.json"],
     "--json {d}/r.json is also --config replay:replay"),
    (["compare", "--prompt", "x", "--config", "ngram-cache:lookup_cache_static={d}/c.lcs", "--csv", "{d}/c.lcs"],
     "--csv {d}/c.lcs is also --config ngram-cache:lookup_cache_static"),
    (["run", "--prompt", "x", "--lookup-cache-static", "{d}/c.lcs", "--receipts", "{d}/c.lcs"],
     "--receipts {d}/c.lcs is also --lookup-cache-static"),
    (["run", "--prompt", "x", "--source", "suffix", "--source-option", "memory_file={d}/m.json", "--receipts",
      "{d}/m.json"], "--receipts {d}/m.json is also --source-option memory_file"),
    (["run", "--prompt", "x", "--lookup-cache-dynamic", "{d}/d.lcd", "--autosave", "{d}/d.lcd"],
     "--autosave {d}/d.lcd is also --lookup-cache-dynamic"),
    (["serve", "--source", "suffix", "--source-option", "memory_file={d}/m.json", "--session", "{d}/m.json"],
     "--session {d}/m.json is also --source-option memory_file"),
    (["compare", "--prompt", "x", "--llama-server", "{d}/m.gguf", "--csv", "{d}/m.gguf"],
     "--csv {d}/m.gguf is also --llama-server"),
    # a file a source writes is no other input either
    (["run", "--prompt-file", "{d}/p.txt", "--source", "suffix", "--source-option", "memory_file={d}/p.txt"],
     "--source-option memory_file={d}/p.txt is also --prompt-file: the source writes it"),
    (["run", "--prompt", "x", "--source", "ngram-cache", "-lcs", "{d}/c.lcs", "-lcd", "{d}/./c.lcs"],
     "--lookup-cache-dynamic {d}/c.lcs is also --lookup-cache-static: the source writes it"),
    (["bench", "--llama-server", "--model", "{d}/m.gguf", "--config", "suffix:memory_file={d}/m.gguf"],
     "--config suffix:memory_file={d}/m.gguf is also --model: the source writes it"),
])
def test_a_file_named_in_a_source_option_is_never_overwritten(source_files, argv, said):
    before = {f.name: f.read_bytes() for f in source_files.iterdir()}
    line = usage_line(cli(*[a.format(d=source_files) for a in argv], timeout=60))  # unchecked, serve would serve
    assert said.format(d=source_files) in line, line
    assert {f.name: f.read_bytes() for f in source_files.iterdir()} == before


def test_every_declared_path_option_of_every_source_is_known_to_the_check(source_files, capsys):
    # From the declarations, not a list: a new path option is checked without touching inspector/cli/paths.py.
    from inspector.cli.main import main
    from inspector.sources.registry import describe_source, source_names

    declared = [(name, o) for name in source_names() for o in describe_source(name).options or ()
                if o.kind == "path"]
    assert {o.name for _n, o in declared} >= {"draft_model", "replay", "lookup_cache_static",
                                               "lookup_cache_dynamic", "memory_file"}
    assert {o.name for _n, o in declared if o.writes} == {"lookup_cache_dynamic", "memory_file"}
    target = source_files / "m.json"
    for name, o in declared:
        assert main(["compare", "--prompt", "x", "--config", f"{name}:{o.name}={target}", "--json", str(target)]) == 2
        assert f"is also --config {name}:{o.name}" in capsys.readouterr().err
    assert target.read_bytes() == b"keep me m.json"


# Issue 37, item 5: one rule for "~" in every path flag and source option: the user's home folder.
def test_a_tilde_is_the_home_folder_wherever_a_path_is_named(tmp_path):
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    here = os.pathsep.join(p for p in (str(Path(inspector.__file__).parents[1]), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "HOME": str(home), "PYTHONPATH": here}  # this inspector, from another working folder
    p = subprocess.run([sys.executable, "-m", "inspector", "run", "--prompt", "Hi", "--max-tokens", "2", "--threads",
                        "1", "--quiet", "--receipts", "~/r.json", "--autosave=~/a.jsonl", "--source", "suffix",
                        "--source-option", "memory_file=~/m.json"], capture_output=True, text=True, timeout=300,
                       cwd=work, env=env)
    assert p.returncode == 0, p.stderr
    assert f"receipts: {home / 'r.json'}" in p.stdout
    assert sorted(f.name for f in home.iterdir()) == ["a.jsonl", "m.json", "r.json"]
    assert list(work.iterdir()) == []  # no folder named "~"
    (home / "p.txt").write_text("Say hi.\n")
    p = subprocess.run([sys.executable, "-m", "inspector", "run", "--prompt-file", "~/p.txt", "--receipts",
                        str(home / "p.txt")], capture_output=True, text=True, timeout=120, cwd=work, env=env)
    assert "is also --prompt-file" in usage_line(p)
