"""GBNF for an integer between bounds (``minimum`` / ``maximum`` / ``exclusiveMinimum`` / ``exclusiveMaximum``),
as llama.cpp 0c1e570 writes it: ``build_min_max_int`` of ``common/json-schema-to-grammar.cpp``, step for step
(the same text, so the same language: at most 16 digits without a bound, digits ranges per length between
bounds, a leading ``-`` for negatives).
"""

from __future__ import annotations

from inspector.serve.json_schema_read import INT64_MAX, INT64_MIN

INT_MAX = 2**31 - 1


def _digit_range(out: list[str], a: str, b: str) -> None:
    out.append("[" + (a if a == b else f"{a}-{b}") + "]")


def _more_digits(out: list[str], lo: int, hi: int) -> None:
    out.append("[0-9]")
    if lo == hi == 1:
        return
    out.append("{" + str(lo))
    if hi != lo:
        out.append(",")
        if hi != INT_MAX:
            out.append(str(hi))
    out.append("}")


def _uniform_range(out: list[str], a: str, b: str) -> None:
    i = 0
    while i < len(a) and i < len(b) and a[i] == b[i]:
        i += 1
    if i > 0:
        out.append('"' + a[:i] + '"')
    if i < len(a) and i < len(b):
        if i > 0:
            out.append(" ")
        sub_len = len(a) - i - 1
        if sub_len > 0:
            a_sub, b_sub = a[i + 1:], b[i + 1:]
            zeros, nines = "0" * sub_len, "9" * sub_len
            to_reached = False
            out.append("(")
            if a_sub == zeros:
                _digit_range(out, a[i], chr(ord(b[i]) - 1))
                out.append(" ")
                _more_digits(out, sub_len, sub_len)
            else:
                out.append(f"[{a[i]}] (")
                _uniform_range(out, a_sub, nines)
                out.append(")")
                if ord(a[i]) < ord(b[i]) - 1:
                    out.append(" | ")
                    if b_sub == nines:
                        _digit_range(out, chr(ord(a[i]) + 1), b[i])
                        to_reached = True
                    else:
                        _digit_range(out, chr(ord(a[i]) + 1), chr(ord(b[i]) - 1))
                    out.append(" ")
                    _more_digits(out, sub_len, sub_len)
            if not to_reached:
                out.append(" | ")
                _digit_range(out, b[i], b[i])
                out.append(" ")
                _uniform_range(out, zeros, b_sub)
            out.append(")")
        else:
            out.append(f"[{a[i]}-{b[i]}]")


def min_max_int(lo: int, hi: int, out: list[str], decimals_left: int = 16, top_level: bool = True) -> None:
    """Append to ``out`` the GBNF of the integers from ``lo`` to ``hi`` (INT64_MIN / INT64_MAX: unbounded)."""
    has_min, has_max = lo != INT64_MIN, hi != INT64_MAX
    if has_min and has_max:
        if lo < 0 and hi < 0:
            out.append('"-" (')
            min_max_int(-hi, -lo, out, decimals_left, True)
            out.append(")")
            return
        if lo < 0:
            out.append('"-" (')
            min_max_int(0, -lo, out, decimals_left, True)
            out.append(") | ")
            lo = 0
        lo_s, hi_s = str(lo), str(hi)
        for digits in range(len(lo_s), len(hi_s)):
            _uniform_range(out, lo_s, "9" * digits)
            lo_s = "1" + "0" * digits
            out.append(" | ")
        _uniform_range(out, lo_s, hi_s)
        return
    less_decimals = max(decimals_left - 1, 1)
    if has_min:
        if lo < 0:
            out.append('"-" (')
            min_max_int(INT64_MIN, -lo, out, decimals_left, False)
            out.append(") | [0] | [1-9] ")
            _more_digits(out, 0, decimals_left - 1)
        elif lo == 0:
            if top_level:
                out.append("[0] | [1-9] ")
                _more_digits(out, 0, less_decimals)
            else:
                _more_digits(out, 1, decimals_left)
        elif lo <= 9:
            c = str(lo)
            start = "1" if top_level else "0"
            if c > start:
                _digit_range(out, start, chr(ord(c) - 1))
                out.append(" ")
                _more_digits(out, 1, less_decimals)
                out.append(" | ")
            _digit_range(out, c, "9")
            out.append(" ")
            _more_digits(out, 0, less_decimals)
        else:
            lo_s = str(lo)
            c = lo_s[0]
            if c > "1":
                _digit_range(out, "1" if top_level else "0", chr(ord(c) - 1))
                out.append(" ")
                _more_digits(out, len(lo_s), less_decimals)
                out.append(" | ")
            _digit_range(out, c, c)
            out.append(" (")
            min_max_int(int(lo_s[1:]), INT64_MAX, out, less_decimals, False)
            out.append(")")
            if c < "9":
                out.append(" | ")
                _digit_range(out, chr(ord(c) + 1), "9")
                out.append(" ")
                _more_digits(out, len(lo_s) - 1, less_decimals)
        return
    if has_max:
        if hi >= 0:
            if top_level:
                out.append('"-" [1-9] ')
                _more_digits(out, 0, less_decimals)
                out.append(" | ")
            min_max_int(0, hi, out, decimals_left, True)
        else:
            out.append('"-" (')
            min_max_int(-hi, INT64_MAX, out, decimals_left, False)
            out.append(")")
        return
    raise ValueError("At least one of min_value or max_value must be set")


def integer_range(lo: int, hi: int) -> str:
    """The rule body llama.cpp's ``visit`` writes for an integer kind with a bound: ``( ... )``."""
    out = ["("]
    min_max_int(lo, hi, out)
    out.append(")")
    return "".join(out)
