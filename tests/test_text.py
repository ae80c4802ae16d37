"""Committed text: UTF-8 joining across token pieces and stop strings (pure logic)."""

from hypothesis import given, strategies as st

from inspector.engine.text import CommittedText


def pieces_of(chunks):
    table = {i: c for i, c in enumerate(chunks)}
    return table.__getitem__, list(table)


def stream(chunks, stop=()):
    piece, ids = pieces_of(chunks)
    t = CommittedText(piece, stop)
    streamed = "".join(t.push(i) for i in ids) + t.finish()
    return t, streamed


def test_a_multibyte_character_split_across_tokens_is_joined():
    data = "猫🙂".encode()
    t, streamed = stream([data[:2], data[2:5], data[5:]])
    assert streamed == t.text == "猫🙂"


def test_a_stop_string_across_a_token_boundary_cuts_the_text_before_it():
    t, streamed = stream([b"Hello wo", b"rld. More", b" text"], stop=("world",))
    assert streamed == t.text == "Hello "
    assert t.stopped_by == "world"


def test_text_that_only_looks_like_a_stop_prefix_is_released_later():
    t, streamed = stream([b"ab", b"c", b"d"], stop=("cx",))
    assert streamed == t.text == "abcd" and t.stopped_by is None


def test_nothing_after_the_stop_string_is_emitted():
    piece, ids = pieces_of([b"one ", b"STOP", b" two"])
    t = CommittedText(piece, ("STOP",))
    out = [t.push(i) for i in ids]
    assert out == ["one ", "", ""]


@given(st.text(min_size=0, max_size=40), st.lists(st.integers(1, 6), min_size=1, max_size=40),
       st.sampled_from(["", "ab", "\n\n", "é", "🙂x"]))
def test_streamed_text_always_equals_the_final_text(text, cuts, stop):
    data = text.encode()
    chunks, i = [], 0
    for c in cuts:
        if i >= len(data):
            break
        chunks.append(data[i : i + c])
        i += c
    if i < len(data):
        chunks.append(data[i:])
    t, streamed = stream(chunks, stop=(stop,) if stop else ())
    assert streamed == t.text
    expected = text.split(stop)[0] if stop else text
    assert t.text == expected


def test_text_cut_inside_a_character_keeps_the_bytes_out_and_counts_them_instead_of_a_replacement():
    data = "ok 猫".encode()  # the cat is 3 bytes: the run stopped after 2 of them
    t, streamed = stream([data[:3], data[3:5]])
    assert streamed == t.text == "ok "
    assert "\ufffd" not in t.text
    assert t.incomplete_bytes == 2


def test_an_invalid_byte_inside_the_text_is_still_a_replacement_and_a_whole_ending_counts_nothing():
    t, streamed = stream([b"a\xffb", "é".encode()])
    assert streamed == t.text == "a\ufffdbé"
    assert t.incomplete_bytes == 0


def test_finishing_twice_keeps_the_count_of_bytes_held_out():
    data = "猫".encode()
    piece, ids = pieces_of([data[:1]])
    t = CommittedText(piece)
    t.push(ids[0])
    t.finish()
    assert t.finish() == "" and t.incomplete_bytes == 1
