"""A string schema's ``pattern`` (a regular expression) as GBNF, as llama.cpp 0c1e570 converts it:
``_visit_pattern`` / ``_pattern_to_rule`` and ``gbnf_escape_length`` of ``common/json-schema-to-grammar.cpp``.

Only a pattern anchored with ``^`` and ``$`` is converted; one llama.cpp finds unsupported (not anchored, a
lookaround or named group, an anchor inside, an escape such as ``\\d`` or ``\\w``, a stray ``]`` or ``}``)
reads as any string (llama.cpp prints a warning and does the same); one it finds invalid (unbalanced
parentheses, an unterminated class, nothing to repeat, a trailing backslash) fails the conversion with its
``Invalid pattern ...`` message.

llama.cpp walks the pattern byte by byte (UTF-8), so this port does too (each byte as one ``latin-1``
character); a non-ASCII character right before a quantifier is cut inside its bytes there and gives a grammar
llama.cpp cannot parse: that form is refused here (``SchemaUnsupported``, one line).
"""

from __future__ import annotations

from inspector.serve.json_schema_read import SchemaUnsupported
from inspector.serve.schema_numbers import INT_MAX

NON_LITERAL = set("|.()[]{}*+?^$")
ESCAPED_IN_REGEXPS_BUT_NOT_IN_LITERALS = set("^$.[]()|{}*+?")
MAX_PATTERN_DEPTH = 100


class Unsupported(Exception):
    """A valid regular expression without a grammar equivalent (llama.cpp: ``unsupported_pattern``)."""


class Invalid(Exception):
    """Not a valid regular expression (llama.cpp: ``invalid_pattern``)."""


def gbnf_escape_length(p: str, pos: int) -> int:
    """How many characters of ``p`` from ``pos`` make one escape GBNF reads alike (0: none)."""
    if pos + 1 >= len(p) or p[pos] != "\\":
        return 0
    nxt = p[pos + 1]
    n_hex = {"x": 2, "u": 4, "U": 8}.get(nxt)
    if n_hex is None:
        return 2 if nxt in 'trn\\"[]-' else 0
    if pos + 2 + n_hex > len(p):
        return 0
    if any(h not in "0123456789abcdefABCDEF" for h in p[pos + 2:pos + 2 + n_hex]):
        return 0
    return 2 + n_hex


def _int(text: str) -> int:
    """``std::stoi``: leading spaces, a sign, digits; ``Unsupported`` where it throws."""
    t = text.lstrip(" \t\n\v\f\r")
    sign = -1 if t.startswith("-") else 1
    body = t[1:] if t.startswith(("+", "-")) else t
    n = len(body) - len(body.lstrip("0123456789"))
    if n == 0 or int(body[:n]) * sign > INT_MAX or int(body[:n]) * sign < -INT_MAX - 1:
        raise Unsupported("invalid number in curly brackets")
    return sign * int(body[:n])


def pattern_to_rule(conv, pattern: str, name: str, repetition) -> str:
    """``_pattern_to_rule``: adds the pattern's rules to ``conv`` (``add_rule``, ``dot``) and returns the rule
    name; ``repetition`` is ``build_repetition``. ``pattern`` here is UTF-8 bytes as latin-1 characters."""
    if len(pattern) < 2 or pattern[0] != "^" or pattern[-1] != "$":
        raise Unsupported("not anchored with '^' and '$'")
    sub = pattern[1:-1]
    sub_rule_ids: dict[str, str] = {}
    length = len(sub)
    state = {"i": 0, "depth": 0}

    def to_rule(item: tuple[str, bool]) -> str:
        return f'"{item[0]}"' if item[1] else item[0]

    def transform() -> tuple[str, bool]:
        seq: list[tuple[str, bool]] = []

        def join_seq() -> tuple[str, bool]:
            ret: list[tuple[str, bool]] = []
            literal = ""
            for text, is_literal in seq:
                if is_literal:
                    literal += text
                else:
                    if literal:
                        ret.append((literal, True))
                        literal = ""
                    ret.append((text, False))
            if literal:
                ret.append((literal, True))
            return " ".join(to_rule(item) for item in ret), False

        while state["i"] < length:
            i = state["i"]
            c = sub[i]
            if c == ".":
                seq.append((conv.dot(), False))
                state["i"] += 1
            elif c == "(":
                i += 1
                if i < length and sub[i] == "?":
                    if i + 1 < length and sub[i + 1] == ":":
                        i += 2  # a non-capturing group reads as a group
                    else:
                        raise Unsupported("unsupported group syntax")
                state["i"] = i
                state["depth"] += 1
                if state["depth"] > MAX_PATTERN_DEPTH:
                    raise Unsupported("pattern nesting too deep")
                seq.append(("(" + to_rule(transform()) + ")", False))
            elif c == ")":
                state["i"] += 1
                if state["depth"] == 0:
                    raise Invalid("unbalanced parentheses")
                state["depth"] -= 1
                return join_seq()
            elif c in "^$":
                raise Unsupported("anchor inside the pattern")
            elif c == "[":
                brackets = c
                i += 1
                while i < length and sub[i] != "]":
                    if sub[i] == "\\":
                        n = gbnf_escape_length(sub, i)
                        if n == 0:
                            raise Unsupported("unsupported escape in character class: " + sub[i:i + 2])
                        brackets += sub[i:i + n]
                        i += n
                    else:
                        brackets += sub[i]
                        i += 1
                if i >= length:
                    raise Invalid("unterminated character class")
                state["i"] = i + 1
                seq.append((brackets + "]", False))
            elif c == "|":
                seq.append(("|", False))
                state["i"] += 1
            elif c in "*+?":
                if not seq:
                    raise Invalid("nothing to repeat")
                seq[-1] = (to_rule(seq[-1]) + c, False)
                state["i"] += 1
            elif c == "{":
                brackets = c
                i += 1
                while i < length and sub[i] != "}":
                    brackets += sub[i]
                    i += 1
                if i >= length:
                    raise Unsupported("unterminated curly brackets")
                state["i"] = i + 1
                nums = brackets[1:].split(",")
                if len(nums) not in (1, 2):
                    raise Unsupported("wrong number of values in curly brackets")
                if len(nums) == 1:
                    lo = hi = _int(nums[0])
                else:
                    lo = _int(nums[0]) if nums[0] else 0
                    hi = _int(nums[1]) if nums[1] else INT_MAX
                if not seq:
                    raise Invalid("nothing to repeat")
                text, is_literal = seq[-1]
                if not is_literal:
                    if text not in sub_rule_ids:
                        sub_rule_ids[text] = ""  # counted before the rule is named, as llama.cpp's map does
                        sub_rule_ids[text] = conv.add_rule(f"{name}-{len(sub_rule_ids)}", text)
                    text = sub_rule_ids[text]
                seq[-1] = (repetition(f'"{text}"' if is_literal else text, lo, hi), False)
            else:
                literal = ""
                while i < length:
                    if sub[i] == "\\":
                        if i == length - 1:
                            raise Invalid("trailing backslash")
                        nxt = sub[i + 1]
                        if nxt in ESCAPED_IN_REGEXPS_BUT_NOT_IN_LITERALS:
                            literal += nxt
                            i += 2
                        else:
                            n = gbnf_escape_length(sub, i)
                            if n == 0:
                                raise Unsupported("unsupported escape: " + sub[i:i + 2])
                            literal += sub[i:i + n]
                            i += n
                    elif sub[i] == '"':
                        literal += '\\"'
                        i += 1
                    elif sub[i] not in NON_LITERAL and (i == length - 1 or not literal or sub[i + 1] == "."
                                                        or sub[i + 1] not in NON_LITERAL):
                        literal += sub[i]
                        i += 1
                    else:
                        break
                if not literal:  # nothing was consumed, e.g. a stray ']' or '}'
                    raise Unsupported("unsupported character: " + c)
                state["i"] = i
                seq.append((literal, True))
        return join_seq()

    rule = to_rule(transform())
    if state["depth"] != 0:
        raise Invalid("unbalanced parentheses")
    return conv.add_rule(name, '"\\"" (' + rule + ') "\\""')


def visit_pattern(conv, pattern: str, name: str, repetition) -> str:
    """``_visit_pattern``: the pattern's rule; an unsupported pattern reads as any string (the rules added on
    the way dropped); an invalid one is recorded in ``conv.errors`` (the conversion fails) and gives ""."""
    snapshot = dict(conv.rules)
    raw = pattern.encode("utf-8").decode("latin-1")
    try:
        top = pattern_to_rule(conv, raw, name, repetition)
    except Unsupported:
        conv.rules.clear()
        conv.rules.update(snapshot)
        return conv.add_rule(name, conv.primitive("string"))
    except Invalid as err:
        conv.rules.clear()
        conv.rules.update(snapshot)
        conv.errors.append(f"Invalid pattern {pattern}: {err}")
        return ""
    added = [key for key in conv.rules if key not in snapshot]
    for key in added:
        try:
            conv.rules[key] = conv.rules[key].encode("latin-1").decode("utf-8")
        except UnicodeDecodeError:
            raise SchemaUnsupported(f"pattern {pattern!r}: a non-ASCII character right before a quantifier is cut "
                                    "inside its UTF-8 bytes by llama.cpp (its grammar does not parse); not "
                                    "converted") from None
    return top
