"""A chat template's reasoning blocks (Qwen3's ``<think>...</think>``, DeepSeek-R1's) found and parsed out of
the answer as llama-server's chat route does (llama.cpp 0c1e570).

- The markers (``analyze_reasoning``), from probe renders as ``common/chat-diff-analyzer.cpp``
  ``analyze_reasoning`` finds them: an assistant message rendered with and without ``reasoning_content``
  (``compare_reasoning_presence``: the markers around the probe's thinking text, spaces kept: Qwen3's
  ``<think>\\n`` and ``\\n</think>\\n\\n``), the generation prompt with ``enable_thinking`` false and true
  (``compare_thinking_enabled``: what one of them adds at its end), and the "old Qwen/DeepSeek thinking
  template" workaround (a template that splits ``content`` at ``</think>`` and never reads
  ``reasoning_content``). Tag-based markers only (``reasoning_mode::TAG_BASED``); the tools-only scope
  (``compare_reasoning_scope``) and the tail-anchored probe are not followed.
- The parse (``parse_reasoning``), the PEG parser ``common/chat-auto-parser-generator.cpp`` builds
  (``autoparser::build_parser``, ``analyze_reasoning::build_parser``): the input is the generation prompt +
  the answer (``common/chat.cpp`` ``common_chat_peg_parse``); ``p.prefix(generation_prompt, reasoning_start)``
  (the prompt up to the reasoning start) ``<<`` (spaces skipped) the optional block ``optspace(start)
  reasoning(until(end)) optspace(end)`` (``common/chat-peg-parser.cpp``: each space around a marker
  optional), then the content (the rest). Parsed leniently always (``COMMON_PEG_PARSE_FLAG_LENIENT``): text
  that may still grow into a marker at the end "needs more input", which ends the parse there (the block's
  reasoning so far kept, no content yet). Whitespace-only reasoning is dropped (``common_chat_peg_mapper::
  from_ast``). ``reasoning_format: none`` keeps the block in the content (the spaces before it still skipped).
- The stream (``ReasoningSplit``): each token re-parses the answer so far; the deltas are what grew
  (``common_chat_msg_diff::compute_diffs``): ``reasoning_content`` while the block is open, ``content`` after.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from inspector.serve.errors import ApiError
from inspector.serve.json_grammar import literal
from inspector.serve.tool_format import render_diff

THINKING_CONTENT = "REASON_PART I am thinking END_R"
USER_MSG = "U_USER_MSG Hello END_U"
ASSISTANT_MSG = "A_ASST_MSG I can help END_A"
"""The probe chat's texts (``chat-diff-analyzer.cpp``'s)."""
_SPACE = " \t\n\r\v\f"
_MARKER = r"(?:<[^>]*>|\[[^\]]*\])"  # p.marker(): "<" until(">") ">" | "[" until("]") "]"


@dataclass(frozen=True)
class ReasoningFormat:
    """A template's reasoning markers as analyzed (spaces around them kept; ``start`` may be empty: a block
    closed by ``end`` only)."""

    start: str
    end: str

    @property
    def start_tag(self) -> str:
        return self.start.strip(_SPACE)

    @property
    def end_tag(self) -> str:
        return self.end.strip(_SPACE)


def analyze_reasoning(source: str, render) -> ReasoningFormat | None:
    """The template's reasoning markers, or None when it has no reasoning blocks. ``render(messages,
    generation_prompt, enable_thinking)`` renders a chat (a render that fails counts as no reasoning found)."""
    user = {"role": "user", "content": USER_MSG}
    start = end = ""

    def text(messages, gp, thinking):
        try:
            return render(messages, gp, thinking)
        except Exception:  # a template that refuses the probe: nothing to learn from it
            return None

    plain = text([user, {"role": "assistant", "content": ASSISTANT_MSG}], False, True)
    rich = text([user, {"role": "assistant", "content": ASSISTANT_MSG, "reasoning_content": THINKING_CONTENT}],
                False, True)
    if plain is not None and rich is not None and THINKING_CONTENT in render_diff(plain, rich)[1]:
        t = re.escape(THINKING_CONTENT)
        m = re.search(f"({_MARKER}\\s*){t}(\\s*{_MARKER}\\s*)", rich)
        if m:
            start, end = m.group(1), m.group(2)
        else:
            m = re.search(f"{t}\\s*({_MARKER}\\s*)?", rich)
            end = (m.group(1) or "") if m else ""
    off = text([user], True, False)
    on = text([user], True, True)
    if off is not None and on is not None:
        left, right = render_diff(off, on)
        lt, rt = left.strip(_SPACE), right.strip(_SPACE)
        if not lt and right:
            if rt and on.endswith(rt) and not start:
                start = right
        elif not rt and left:
            if lt and off.endswith(lt) and not end:
                seg = [s for s in re.split(f"({_MARKER})", off) if s.strip(_SPACE)]
                if len(seg) >= 2 and seg[-1] == lt and re.fullmatch(_MARKER, seg[-2]):
                    start = seg[-2]
                end = left
    if not end and "content.split('</think>')" in source and "reasoning_content" not in source \
            and "<SPECIAL_12>" not in source:
        return ReasoningFormat("<think>", "</think>")  # the old Qwen/DeepSeek thinking template workaround
    return ReasoningFormat(start, end) if end else None


def _optspace(tag: str) -> tuple[str, str, str]:
    """``optspace``: the tag's leading spaces, its core, its trailing spaces (each space optional)."""
    core = tag.strip(_SPACE)
    if not core:
        return "", "", tag
    i = tag.index(core)
    return tag[:i], core, tag[i + len(core):]


class _NeedMore(Exception):
    """The input ends inside something that may still grow (the lenient parse's "need more input")."""


def _literal(text: str, i: int, word: str) -> int:
    """The index after ``word`` at ``text[i]``; -1 when it is not there; ``_NeedMore`` when the text ends
    inside it."""
    rest = text[i:i + len(word)]
    if word.startswith(rest) and len(rest) < len(word):
        raise _NeedMore
    return i + len(word) if rest == word else -1


def _optional_chars(text: str, i: int, chars: str) -> int:
    for c in chars:  # each an optional one-character literal (at the end of the input: matches nothing)
        if i < len(text) and text[i] == c:
            i += 1
    return i


def _block(text: str, i: int, fmt: ReasoningFormat) -> tuple[str, int]:
    """The reasoning block at ``text[i]``: (its reasoning, the index after it); -1: no block there.
    ``_NeedMore`` carries the reasoning so far as its argument."""
    if fmt.start_tag:
        pre, core, post = _optspace(fmt.start)
        i = _optional_chars(text, i, pre)
        j = _literal(text, i, core)
        if j < 0:
            return "", -1
        i = _optional_chars(text, j, post)
    tag = fmt.end_tag
    at = text.find(tag, i)
    if at < 0:  # until(end) at the end of the input: a tail that may begin the end marker is left out
        cut = len(text)
        for k in range(min(len(tag) - 1, len(text) - i), 0, -1):
            if tag.startswith(text[len(text) - k:]):
                cut = len(text) - k
                break
        raise _NeedMore(text[i:cut])
    reasoning = text[i:at]
    pre, core, post = _optspace(fmt.end)
    return reasoning, _optional_chars(text, at + len(core), post)


def parse_reasoning(output: str, fmt: ReasoningFormat, generation_prompt: str,
                    extract: bool = True) -> tuple[str, str]:
    """(reasoning, content) of an answer ``output`` (the whole answer, or the part streamed so far): the
    module docstring's parse. ``extract`` False: ``reasoning_format: none``."""
    cut = generation_prompt.find(fmt.start_tag) if fmt.start_tag else -1
    prefix = generation_prompt if cut < 0 else generation_prompt[:cut]
    text = generation_prompt + output
    i = len(prefix)
    while i < len(text) and text[i] in _SPACE:
        i += 1
    reasoning = ""
    if extract and i < len(text):
        try:
            reasoning, j = _block(text, i, fmt)
        except _NeedMore as more:
            reasoning = more.args[0] if more.args else ""
            return ("" if not reasoning.strip(_SPACE) else reasoning), ""
        if j >= 0:
            i = j
    if not reasoning.strip(_SPACE):
        reasoning = ""
    return reasoning, text[i:]


@dataclass
class ReasoningParse:
    """How a request's answer is split: the template's markers, the request's generation prompt (the
    parse's input begins with it) and whether the reasoning is extracted (``reasoning_format``)."""

    fmt: ReasoningFormat
    generation_prompt: str
    extract: bool = True

    def split(self, output: str) -> tuple[str, str]:
        return parse_reasoning(output, self.fmt, self.generation_prompt, self.extract)


def template_reasoning(rt, cache: dict) -> ReasoningFormat | None:
    """The reasoning markers of ``rt``'s chat template, found once and kept in ``cache`` (call under the lock)."""
    source = rt.chat_template() or ""
    key = ("reasoning", source)
    if key not in cache:
        def render(messages, gp, thinking):
            return rt.chat_messages_prompt(messages, None, {"enable_thinking": thinking}, gp)

        cache[key] = analyze_reasoning(source, render) if source else None
    return cache[key]


def enable_thinking(body_kwargs: dict, default: bool) -> bool:
    """``enable_thinking`` as llama-server reads it (``oaicompat_chat_params_parse``): the template's default
    (true when it has reasoning blocks), a boolean ``chat_template_kwargs.enable_thinking`` over it (a string
    there refused), ``reasoning_effort: none`` false."""
    value = body_kwargs.get("enable_thinking")
    if isinstance(value, str):
        raise ApiError('invalid type for "enable_thinking" (expected boolean, got string)')
    if isinstance(value, bool):
        default = value
    return default


def prepare_reasoning(rt, p, cache: dict, messages: list[dict]) -> dict:
    """A chat request's template variables with ``enable_thinking`` (llama-server gives it to every template:
    the template's default, or the request's) and ``p.reasoning`` set (a ``ReasoningParse``) when the
    template has reasoning blocks. Runs under the runtime's lock."""
    fmt = template_reasoning(rt, cache)
    thinking = enable_thinking(p.template_kwargs, fmt is not None)
    if p.reasoning_effort_none:
        thinking = False
    kwargs = {"enable_thinking": thinking, **p.template_kwargs}
    if fmt is None:
        return kwargs
    tools = list(p.tools) or None
    with_gp = rt.chat_messages_prompt(messages, tools, kwargs, True)
    without = rt.chat_messages_prompt(messages, tools, kwargs, False)
    n = 0
    while n < min(len(with_gp), len(without)) and with_gp[n] == without[n]:
        n += 1
    p.reasoning = ReasoningParse(fmt, with_gp[n:], p.reasoning_format != "none")
    c = p.constraints
    if c is not None and c.grammar is not None and c.triggers and fmt.start_tag:
        p.constraints = replace(c, gate=gate_tokens(rt, fmt, with_gp[n:]))
    opened = fmt.start_tag and fmt.start_tag in p.reasoning.generation_prompt
    if opened and p.reasoning.extract and p.tool_format is not None and p.tool_choice == "required":
        raise ApiError("this model's chat template opens the reasoning block in its generation prompt; "
                       "spec-inspector serve does not constrain tool calls (tool_choice: required) after it; "
                       "use tool_choice auto or send the request without 'tools'")
    return kwargs


def gate_tokens(rt, fmt: ReasoningFormat, generation_prompt: str) -> tuple:
    """A lazy grammar's reasoning gate (``Constraints.gate``): the markers' tokens and the generation prompt's
    (``common/sampling.cpp``: tokenized with special tokens, a first token that only adds a space left out)."""
    def tok(text: str) -> tuple[int, ...]:
        return tuple(rt.tokenize(text, add_special=False, parse_special=True))

    prefill = list(tok(generation_prompt))
    if prefill and generation_prompt and not generation_prompt[0].isspace():
        piece = rt.token_piece(prefill[0], True)
        if piece[:1].isspace():
            prefill = prefill[1:]
    return tok(fmt.start_tag), tok(fmt.end_tag), tuple(prefill)


def reasoning_rules(fmt: ReasoningFormat, until_rules) -> tuple[str, dict[str, str]]:
    """The optional reasoning block as a GBNF expression and its ``until`` rules (the grammar llama-server's
    parser writes before the tool calls: ``("<think>" "\\n"? until("</think>") "\\n"? "</think>" "\\n"? "\\n"?)?``)."""
    def opt(tag: str) -> list[str]:
        pre, core, post = _optspace(tag)
        return [f"{literal(c)}?" for c in pre] + [literal(core)] + [f"{literal(c)}?" for c in post]

    rules = until_rules("reasoning-text", fmt.end_tag)
    parts = (opt(fmt.start) if fmt.start_tag else []) + ["reasoning-text"] + opt(fmt.end)
    return "(" + " ".join(parts) + ")?", rules


class ReasoningSplit:
    """A stream's reasoning and content so far: ``feed`` the raw text of each token, get the deltas
    (reasoning, content) not sent yet; ``content_of`` maps the content part before it is compared (a tool
    answer's visible content)."""

    def __init__(self, parse: ReasoningParse) -> None:
        self.parse = parse
        self.raw = ""
        self.reasoning = ""

    def feed(self, text: str) -> tuple[str, str]:
        """(reasoning delta, the content so far) after ``text``."""
        self.raw += text
        reasoning, content = self.parse.split(self.raw)
        delta = reasoning[len(self.reasoning):] if reasoning.startswith(self.reasoning) else ""
        if reasoning.startswith(self.reasoning):
            self.reasoning = reasoning
        return delta, content
