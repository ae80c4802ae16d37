"""Issue 37, item 6: the files a source option names (the lookup caches ``-lcs``/``-lcd``, the suffix
source's ``memory_file``) are read as every other input is (``inspector.bounded_read``): a FIFO, a
device or a socket refused by its type without waiting on it, a regular file read up to a stated
limit by the bytes actually read. Real FIFOs, ``/dev/zero`` and real processes; each process runs
with its address space capped (2 GB), so an unbounded read ends in a MemoryError within seconds
instead of taking the machine's memory."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import threading

import pytest

from inspector.sources import llama_ngram_cache as nc
from inspector.sources.registry import SourceContext, make_source
from inspector.sources.suffix import memory as suffix_memory

needs_dev_zero = pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero on this platform")
ADDRESS_SPACE = 2 << 30


def _capped() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def cli(*args, timeout=120):
    """The CLI with a capped address space; a hang ends the test with TimeoutExpired."""
    return subprocess.run([sys.executable, "-m", "inspector", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, preexec_fn=_capped)


def error_line(p) -> str:
    assert p.returncode == 1, p.stderr
    assert "Traceback" not in p.stderr and "MemoryError" not in p.stderr, p.stderr
    lines = [l for l in p.stderr.splitlines() if l.strip() and not l.startswith("loading ")]
    assert len(lines) == 1, p.stderr
    return lines[0]


OPTIONS = {
    "static": ("ngram-cache", "lookup_cache_static", "static lookup cache"),
    "dynamic": ("ngram-cache", "lookup_cache_dynamic", "dynamic lookup cache"),
    "memory": ("suffix", "memory_file", "suffix memory file"),
}


def _make(which: str, path) -> object:
    source, key, _what = OPTIONS[which]
    return make_source(source, SourceContext(None, memory={}), {key: str(path)})


@pytest.mark.parametrize("which", list(OPTIONS))
def test_a_fifo_named_by_a_source_option_is_refused_without_waiting(tmp_path, which):
    """A blocking open of a FIFO without a writer waits forever: run in a thread, bounded by a join."""
    fifo = tmp_path / "cache.bin"
    os.mkfifo(fifo)
    out: dict = {}

    def go():
        try:
            _make(which, fifo)
        except BaseException as exc:  # noqa: BLE001 (read below)
            out["error"] = exc

    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    thread.join(10)
    try:
        assert not thread.is_alive(), f"{which}: still waiting on the FIFO after 10 s"
    finally:
        if thread.is_alive():  # let the stuck reader go: a writer opens and closes, the read sees its end
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            thread.join(5)
    error = out.get("error")
    assert isinstance(error, ValueError), out
    assert str(error) == f"{OPTIONS[which][2]} {fifo} is a FIFO (named pipe); expected a regular file"


@needs_dev_zero
@pytest.mark.parametrize("which", list(OPTIONS))
def test_dev_zero_named_by_a_source_option_is_refused_in_a_process_of_capped_memory(which):
    source, key, what = OPTIONS[which]
    code = ("from inspector.sources.registry import SourceContext, make_source\n"
            f"make_source({source!r}, SourceContext(None, memory={{}}), {{{key!r}: '/dev/zero'}})\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, preexec_fn=_capped)
    assert p.returncode == 1 and "MemoryError" not in p.stderr, p.stderr
    assert p.stderr.strip().splitlines()[-1] == (f"ValueError: {what} /dev/zero is a character device; "
                                                 "expected a regular file"), p.stderr


def test_a_file_over_the_stated_limit_is_refused_by_the_bytes_read(tmp_path, monkeypatch):
    monkeypatch.setattr(nc, "MAX_CACHE_FILE_BYTES", 64)
    monkeypatch.setattr(suffix_memory, "MAX_MEMORY_FILE_BYTES", 64)
    big = tmp_path / "big.bin"
    nc.save({(1, 2, -1, -1): {3: 5, 4: 1, 5: 1, 6: 1, 7: 1, 8: 1, 9: 1, 10: 1}}, str(big))  # 92 bytes
    with pytest.raises(ValueError) as err:
        _make("static", big)
    assert str(err.value) == f"static lookup cache {big} is more than 64 bytes, the limit"
    memory = tmp_path / "memory.json"
    memory.write_text('{"format": "spec-inspector suffix memory", "version": 1, "sequences": [[1, 2, 3, 4, 5, 6]]}')
    with pytest.raises(ValueError) as err:
        _make("memory", memory)
    assert str(err.value) == f"suffix memory file {memory} is more than 64 bytes, the limit"


def test_the_limits_are_stated_in_the_options_help():
    from inspector.sources.registry import describe_source

    for source, key, _what in OPTIONS.values():
        help_text = next(o.help for o in describe_source(source).options if o.name == key)
        assert "a regular file of at most 256 MiB" in help_text, help_text


def test_a_suffix_memory_of_deeply_nested_json_is_one_line(tmp_path):
    memory = tmp_path / "deep.json"
    memory.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError) as err:
        _make("memory", memory)
    assert str(err.value) == f"suffix memory file {memory} is not a suffix memory: its JSON is nested too deeply"


@needs_dev_zero
@pytest.mark.parametrize("argv, what", [
    (["--source", "ngram-cache", "--lookup-cache-static", "/dev/zero"], "static lookup cache /dev/zero"),
    (["--source", "suffix", "--source-option", "memory_file=/dev/zero"], "suffix memory file /dev/zero"),
])
def test_run_with_dev_zero_as_a_source_file_is_one_line(argv, what):
    line = error_line(cli("run", "--example", "copy-exact", "--max-tokens", "4", *argv))
    assert line == f"spec-inspector: error: {what} is a character device; expected a regular file"


def test_compare_with_a_fifo_as_a_lookup_cache_is_one_line_in_its_row(tmp_path):
    fifo = tmp_path / "static.lcs"
    os.mkfifo(fifo)
    p = cli("compare", "--prompt", "one two three", "--max-tokens", "4", "--config", "none",
            "--config", f"ngram-cache:lookup_cache_static={fifo}")
    assert "Traceback" not in p.stderr, p.stderr
    assert f"static lookup cache {fifo} is a FIFO (named pipe); expected a regular file" in p.stdout + p.stderr, (
        p.stdout, p.stderr)
