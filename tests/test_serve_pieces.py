"""Split characters in serve's answers as llama-server writes them (tools/server 0c1e570): a probability
entry's ``token`` is cut to whole characters while ``bytes`` keeps every byte (server-task.cpp
``validate_utf8``), and ``/tokenize``'s pieces are text when valid UTF-8, else byte values
(server-context.cpp). No model: the byte sequences are written out here."""

from __future__ import annotations

from inspector.serve.job import TokenOut
from inspector.serve.replies import piece_json, probs_json

TO = "東".encode()  # e6 9d b1


def test_a_token_holding_part_of_a_character_has_empty_text_and_all_its_bytes():
    t = TokenOut(token=7, text="", piece=TO[:2], p=0.5, top=((7, 0.5), (8, 0.25)))
    pieces = {7: TO[:2], 8: b"a" + TO[:1]}
    out = probs_json(t, 2, pieces.__getitem__)
    assert out["token"] == "" and out["bytes"] == [0xE6, 0x9D]
    assert [e["token"] for e in out["top_logprobs"]] == ["", "a"]
    assert out["top_logprobs"][1]["bytes"] == [0x61, 0xE6]
    assert "\ufffd" not in str(out)


def test_tokenize_pieces_are_text_or_byte_values():
    assert piece_json("東京".encode()) == "東京"
    assert piece_json(TO[:1]) == [0xE6]
    assert piece_json(b"") == ""
