"""Issue 25, family 4: the tracebacks the issue lists are one clean line each (real processes,
the real bundled model for the cases that need a run; never its words)."""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys

from inspector import asset_path


def cli(*args, timeout=300, preexec_fn=None):
    return subprocess.run([sys.executable, "-m", "inspector", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, preexec_fn=preexec_fn)


CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, PR_CAPBSET_DROP = 1, 2, 24  # linux/capability.h, linux/prctl.h


def without_permission_override() -> None:
    """In the child before exec: a root process loses the capabilities that let it read a file whose
    permission bits say no (dropped from the bounding set, so the exec'd program never has them); other
    users never had them. Issue 42: CI runs as root, and the permission-denied path went untested."""
    if os.geteuid() != 0:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH):
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), f"prctl(PR_CAPBSET_DROP, {cap})")


def one_line(p, status=1) -> str:
    assert p.returncode == status, p.stderr
    assert "Traceback" not in p.stderr, p.stderr
    lines = [l for l in p.stderr.splitlines() if l.strip() and not l.startswith("loading ")]
    assert len(lines) == 1, p.stderr
    return lines[0]


def test_a_model_without_read_permission_is_one_line(tmp_path, model_path):
    model = tmp_path / "m.gguf"
    model.write_bytes(open(model_path, "rb").read(4096))
    model.chmod(0)
    line = one_line(cli("run", "--prompt", "x", "--model", model, preexec_fn=without_permission_override))
    assert "m.gguf" in line and "Permission denied" in line


def test_a_fifo_or_a_device_as_the_model_is_one_line_without_waiting(tmp_path):
    fifo = tmp_path / "m.gguf"
    os.mkfifo(fifo)
    line = one_line(cli("run", "--prompt", "x", "--model", fifo, timeout=60))
    assert "FIFO" in line and "m.gguf" in line
    if os.path.exists("/dev/zero"):
        line = one_line(cli("run", "--prompt", "x", "--model", "/dev/zero", timeout=60))
        assert "/dev/zero" in line and "character device" in line


def test_view_window_of_a_window_with_damaged_probability_columns_is_one_line(tmp_path):
    out = tmp_path / "r.json"
    p = cli("run", "--prompt-file", asset_path("prompts/copy-with-corrections.txt"), "--ngram-min", "1",
            "--max-tokens", "24", "--threads", "1", "--quiet", "--receipts", out)
    assert p.returncode == 0, p.stderr
    doc = json.loads(out.read_text("utf-8"))
    assert doc["windows"] and "probabilities" in doc["windows"][0]
    doc["windows"][0]["probabilities"]["predicted_p"] = []  # the columns no longer have one entry per row
    damaged = tmp_path / "damaged.json"
    damaged.write_text(json.dumps(doc), "utf-8")
    p = cli("view", damaged, "--window", "1")
    line = one_line(p)
    assert "window 1" in line and "damaged" in line
    assert "--- window" not in p.stdout  # nothing half printed


def test_a_dynamic_lookup_cache_in_a_missing_or_unwritable_folder_is_one_line_before_the_run(tmp_path):
    missing = tmp_path / "no" / "such" / "cache.bin"
    p = cli("run", "--prompt", "x", "--source", "ngram-cache", "--lookup-cache-dynamic", missing, "--threads", "1")
    line = one_line(p)
    assert "--lookup-cache-dynamic" in line and "does not exist" in line
    assert "summary" not in p.stdout  # refused before the run, not after it
    if os.path.isdir("/sys"):  # sysfs takes no new files, even from root
        line = one_line(cli("run", "--prompt", "x", "--source", "ngram-cache", "--lookup-cache-dynamic",
                            "/sys/cache.bin", "--threads", "1"))
        assert "--lookup-cache-dynamic" in line and "not writable" in line
