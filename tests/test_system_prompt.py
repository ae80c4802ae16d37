"""A system prompt (issue 26; llama.cpp's ``-sys``/``--system-prompt``): the chat template's system message
before the prompt, on the command line, in conversations and in the receipts. The bundled model's words
are never asserted: the template's text and token counts are."""

from __future__ import annotations

import json

from inspector.receipts import load_document

from test_cli import cli, one_clear_line

SYSTEM = "You answer in exactly three words."


def test_a_system_prompt_goes_before_the_users_message_and_stays_in_the_receipts(tmp_path):
    with_sys, without = tmp_path / "s.json", tmp_path / "n.json"
    for out, extra in ((with_sys, ["--system-prompt", SYSTEM]), (without, [])):
        r = cli("run", "--prompt", "Name a colour.", "--max-tokens", "3", "--quiet", "--threads", "1",
                "--receipts", out, *extra)
        assert r.returncode == 0, r.stderr
    doc, plain = load_document(with_sys), load_document(without)  # both validate against the schema
    assert doc["settings"]["system_prompt"] == SYSTEM and "system_prompt" not in plain["settings"]
    templated = doc["prompt"]["templated_text"]
    assert SYSTEM in templated and templated.index(SYSTEM) < templated.index("Name a colour.")
    assert SYSTEM not in plain["prompt"]["templated_text"]
    # The template's own default system message (this model's has one) is replaced, not kept beside it.
    assert doc["prompt"]["token_ids"] != plain["prompt"]["token_ids"]


def test_a_system_prompt_with_a_raw_prompt_is_a_usage_error_before_the_model_loads():
    r = cli("run", "--prompt", "hi", "--raw", "-sys", SYSTEM)
    assert r.returncode == 2 and r.stdout == ""
    assert "--system-prompt goes through the chat template" in one_clear_line(r.stderr)


def test_every_turn_of_a_conversation_starts_from_the_system_prompt(tmp_path):
    turns = tmp_path / "t.txt"
    turns.write_text("Say one word.\n---\nSay it again.\n")
    out = tmp_path / "r.json"
    r = cli("run", "--turns", turns, "--system-prompt", SYSTEM, "--max-tokens", "4", "--quiet", "--threads", "1",
            "--receipts", out)
    assert r.returncode == 0, r.stderr
    doc = load_document(out)
    one, two = doc["turns"]
    for turn in (one, two):
        assert turn["conversation"]["history"][:1] == [{"role": "system", "content": SYSTEM}]
        assert turn["settings"]["system_prompt"] == SYSTEM
        assert turn["prompt"]["templated_text"].count(SYSTEM) == 1
    assert [m["role"] for m in doc["conversation"]["messages"]] == ["system", "user", "assistant", "user", "assistant"]


def test_compare_takes_the_system_prompt_into_every_configurations_prompt(tmp_path):
    out_sys, out_plain = tmp_path / "s.json", tmp_path / "p.json"
    for out, extra in ((out_sys, ["--system-prompt", SYSTEM]), (out_plain, [])):
        r = cli("compare", "--prompt", "Name a colour.", "--config", "none", "--max-tokens", "2", "--threads", "1",
                "--json", out, *extra)
        assert r.returncode == 0, r.stderr
    with_sys, plain = json.loads(out_sys.read_text()), json.loads(out_plain.read_text())
    assert with_sys["prompt_token_count"] != plain["prompt_token_count"]  # another system message


def test_the_windows_system_prompt_runs_is_kept_and_opens_every_turn_of_the_conversation(qtbot, runtime, tmp_path):
    from inspector.gui.panel.control_panel import ControlPanel
    from test_gui_support import make_window, part, run_to_end

    w = make_window(qtbot, runtime, tmp_path, max_tokens=4)
    model = w.model
    panel = part(w, ControlPanel)
    panel.system_prompt.setText(SYSTEM)
    run_to_end(qtbot, w)
    first = model.session
    assert first.settings["system_prompt"] == SYSTEM
    with qtbot.waitSignal(model.runFinished, timeout=180_000):
        assert w.turns.send("Say it again.")
    second = model.session
    assert second.settings["system_prompt"] == SYSTEM
    assert second.conversation["history"][0] == {"role": "system", "content": SYSTEM}
    assert second.header.templated_text.count(SYSTEM) == 1
    panel.raw.setChecked(True)
    assert not panel.system_prompt.isEnabled()  # a raw prompt goes without the template


def test_compare_over_turns_opens_every_configurations_chat_with_the_system_prompt(scheduler):
    """``compare --turns -sys``: every turn's prompt of every configuration holds the system message once,
    the first turn's prompt is exactly ``run``'s, and the result records it (only when given)."""
    from inspector.bench.compare import parse_config, run_compare
    from inspector.engine import GenerationSettings

    runtime = scheduler.runtime
    turns = ["Say one word.", "Say it again."]
    settings = GenerationSettings(max_new_tokens=2)
    configs = [parse_config("none"), parse_config("ngram:draft_max=4")]
    result = run_compare(scheduler, [], configs, settings, turns=turns, keep_runs=True, system_prompt=SYSTEM)
    assert all(r.error is None for r in result.rows)
    assert result.system_prompt == SYSTEM and result.to_json()["system_prompt"] == SYSTEM
    for run in result.runs:
        first, second = run.generations
        assert first.tokens[:first.prompt_token_count] == runtime.prompt_tokens(turns[0], system_prompt=SYSTEM)
        text = runtime.detokenize(second.tokens[:second.prompt_token_count])
        assert text.count(SYSTEM) == 1 and text.index(SYSTEM) < text.index(turns[0]) < text.index(turns[1])
    plain = run_compare(scheduler, [], configs[:1], settings, turns=turns[:1], keep_runs=True)
    assert "system_prompt" not in plain.to_json()
    assert SYSTEM not in runtime.detokenize(plain.runs[0].generations[0].tokens)


def test_compare_turns_takes_the_system_prompt_on_the_command_line(tmp_path):
    turns = tmp_path / "t.txt"
    turns.write_text("Say one word.\n---\nSay it again.\n")
    out = tmp_path / "c.json"
    r = cli("compare", "--turns", turns, "-sys", SYSTEM, "--config", "none", "--max-tokens", "2", "--threads", "1",
            "--json", out)
    assert r.returncode == 0, r.stderr
    assert json.loads(out.read_text())["system_prompt"] == SYSTEM
