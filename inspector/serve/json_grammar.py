"""JSON schema -> GBNF for ``json_schema``, ``response_format`` and tool-call arguments, in the language
llama-server 0c1e570 builds.

Why not a library: llama-cpp-python 0.3.36's ``llama_cpp.llama_grammar.json_schema_to_gbnf`` is a port of an
older llama.cpp converter whose grammar accepts another language than 0c1e570's: its whitespace rule is
``space ::= " "?`` where 0c1e570 has ``space ::= | " " | "\\n"{1,2} [ \\t]{0,20}``, and every value there ends
with ``space`` (``1 ,`` is allowed) where 0c1e570 puts the space after ``{``, ``:``, ``,`` and before ``}``
only. A constrained run must pick the same tokens as llama-server, so this module writes 0c1e570's rules.

How: the schema is read into kinds as llama.cpp reads it (``inspector.serve.json_schema_read``, a port of
``common/json-schema.cpp``), then written as ``common/json-schema-to-grammar.cpp``'s
``common_chat_schema_converter`` writes it: ``visit``, ``_generate_union_rule`` (anyOf / oneOf / type arrays),
``_visit_all_of``, ``_resolve_ref`` (``ref-...`` rules shared by name, as there), ``_build_object_rule``
(with ``_not_strings`` for additional properties next to named ones), ``PRIMITIVE_RULES``,
``STRING_FORMAT_RULES``, ``build_repetition``; integer bounds in ``inspector.serve.schema_numbers``
(``build_min_max_int``) and ``pattern`` in ``inspector.serve.schema_pattern`` (``_visit_pattern``). Rule names
are llama.cpp's too (from the property path), so ``schema_grammar`` gives llama-server's text for
``/completion``'s ``json_schema``. ``SchemaUnsupported`` is raised where llama.cpp refuses the schema, with its
message (and for one pattern form llama.cpp turns into a grammar it cannot parse, see ``schema_pattern``).

``schema_grammar(wrap_chat=True)`` wraps a schema as llama-server's chat route does for ``response_format`` with a template
that has no reasoning block (``common/chat-auto-parser-generator.cpp``, ``build_parser``: optional spaces, then
the value (rule ``response-format-schema``), either inside a ```` ```json ```` fence or alone, then optional
spaces).
"""

from __future__ import annotations

import json
import math
import re

from inspector.serve.json_schema_read import (INT64_MAX, INT64_MIN, Node, SchemaUnsupported, conversion_failed,
                                              is_int, read_schema)
from inspector.serve.schema_numbers import INT_MAX, integer_range
from inspector.serve.schema_pattern import visit_pattern

__all__ = ["SchemaRules", "SchemaUnsupported", "schema_grammar", "chat_content", "literal", "CHAT_ROOT"]

SPACE_RULE = '| " " | "\\n"{1,2} [ \\t]{0,20}'
PRIMITIVES = {
    "boolean": ('("true" | "false")', ()),
    "decimal-part": ("[0-9]{1,16}", ()),
    "integral-part": ("[0] | [1-9] [0-9]{0,15}", ()),
    "number": ('("-"? integral-part) ("." decimal-part)? ([eE] [-+]? integral-part)?', ("integral-part", "decimal-part")),
    "integer": ('("-"? integral-part)', ("integral-part",)),
    "value": ("object | array | string | number | boolean | null", ("object", "array", "string", "number", "boolean", "null")),
    "object": ('"{" space ( string ":" space value ("," space string ":" space value)* )? space "}"', ("string", "value")),
    "array": ('"[" space ( value ("," space value)* )? space "]"', ("value",)),
    "uuid": ('"\\"" [0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12} "\\""', ()),
    "char": ('[^"\\\\\\x7F\\x00-\\x1F] | [\\\\] (["\\\\bfnrt] | "u" [0-9a-fA-F]{4})', ()),
    "string": ('"\\"" char* "\\""', ("char",)),
    "null": ('"null"', ()),
}
STRING_FORMATS = {
    "date": ('[0-9]{4} "-" ( "0" [1-9] | "1" [0-2] ) "-" ( "0" [1-9] | [1-2] [0-9] | "3" [0-1] )', ()),
    "time": ('([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{3} )? ( "Z" | ( "+" | "-" ) '
             '( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] )', ()),
    "date-time": ('date "T" time', ("date", "time")),
    "date-string": ('"\\"" date "\\""', ("date",)),
    "time-string": ('"\\"" time "\\""', ("time",)),
    "date-time-string": ('"\\"" date-time "\\""', ("date-time",)),
}
RESERVED = {"root", *PRIMITIVES, *STRING_FORMATS}
"""``is_reserved_name``: a schema rule of one of these names gets a ``-`` appended."""
BIG = INT_MAX
"""``build_repetition``'s "no maximum" (``std::numeric_limits<int>::max()``)."""
INVALID_RULE_CHARS = re.compile(r"[^a-zA-Z0-9-]+")
_ESCAPES = {"\r": "\\r", "\n": "\\n", '"': '\\"', "\\": "\\\\"}


def literal(text: str) -> str:
    """A GBNF string literal (``format_literal``: CR, LF, the quote and the backslash escaped)."""
    return '"' + re.sub(r'[\r\n"\\]', lambda m: _ESCAPES[m.group()], text) + '"'


def _dump_float(d: float) -> str:
    """nlohmann's ``dump`` of a double: shortest digits, plain from 1e-4 up to 15 digits before the point
    (``x.0`` for a whole number), else ``d.ddde+XX``; NaN and infinities as ``null``."""
    if not math.isfinite(d):
        return "null"
    if d == 0:
        return "-0.0" if math.copysign(1, d) < 0 else "0.0"
    sign, r = ("-" if d < 0 else ""), repr(abs(d))
    mantissa, _, exp = r.partition("e")
    whole, _, frac = mantissa.partition(".")
    digits = (whole + frac).lstrip("0")  # the value is int(digits) * 10**e
    e = int(exp or 0) - len(frac)
    stripped = digits.rstrip("0")
    e += len(digits) - len(stripped)
    digits = stripped
    k, n = len(digits), len(digits) + e
    if k <= n <= 15:
        out = digits + "0" * (n - k) + ".0"
    elif 0 < n <= 15:
        out = digits[:n] + "." + digits[n:]
    elif -4 < n <= 0:
        out = "0." + "0" * -n + digits
    else:
        x = n - 1
        out = (digits if k == 1 else digits[0] + "." + digits[1:]) + "e" + ("-" if x < 0 else "+") + f"{abs(x):02d}"
    return sign + out


def json_dump(v) -> str:
    """nlohmann's ``dump()`` (compact; keys in schema order; UTF-8 as is)."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v) if is_int(v) else _dump_float(float(v) if abs(v) < 2**1023 else math.copysign(math.inf, v))
    if isinstance(v, float):
        return _dump_float(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, list):
        return "[" + ",".join(json_dump(x) for x in v) + "]"
    return "{" + ",".join(json_dump(str(k)) + ":" + json_dump(x) for k, x in v.items()) + "}"


def repetition(item: str, lo: int, hi: int, sep: str = "") -> str:
    """``build_repetition`` of 0c1e570 (``hi`` = ``BIG`` for no maximum)."""
    if hi == 0:
        return ""
    if lo == 0 and hi == 1:
        return item + "?"
    if not sep:
        if lo == 1 and hi == BIG:
            return item + "+"
        if lo == 0 and hi == BIG:
            return item + "*"
        return item + "{" + str(lo) + "," + (str(hi) if hi != BIG else "") + "}"
    result = item + " " + repetition("(" + sep + " " + item + ")", 0 if lo == 0 else lo - 1, hi - 1 if hi != BIG else BIG)
    return "(" + result + ")?" if lo == 0 else result


def reversed_repetition(body: str) -> str:
    """The first ``{m,n}`` with ``n < m`` in a rule body (outside literals and character classes), or ""."""
    i = 0
    while i < len(body):
        c = body[i]
        if c in '"[':
            close, i = ('"' if c == '"' else "]"), i + 1
            while i < len(body) and body[i] != close:
                i += 2 if body[i] == "\\" else 1
        elif c == "{":
            m = re.match(r"\{(\d+),(\d+)\}", body[i:])
            if m and int(m[2]) < int(m[1]):
                return m.group()
        i += 1
    return ""


def _joined(name: str, suffix: str) -> str:
    return name + ("-" if name else "") + suffix


class SchemaRules:
    """GBNF rules being written (``common_chat_schema_converter``): ``visit`` reads a schema and adds its rules,
    returning the name of its top rule; ``rules`` (name -> body) may take more rules; ``text`` writes them
    all in the order they were added, ``sorted_text`` in llama.cpp's order (by name)."""

    def __init__(self) -> None:
        self.rules: dict[str, str] = {"space": SPACE_RULE}
        self.errors: list[str] = []
        self._resolving: set[str] = set()

    def text(self) -> str:
        """The grammar text, one ``name ::= body`` line per rule."""
        return "".join(f"{name} ::= {body}\n" for name, body in self.rules.items())

    def sorted_text(self) -> str:
        """``format_grammar``: the rules by name, as llama.cpp's ``std::map`` keeps them."""
        return "".join(f"{name} ::= {self.rules[name]}\n" for name in sorted(self.rules))

    def visit(self, schema, path: str = "", name: str | None = None) -> str:
        """Add the rules of ``schema`` (parsed JSON; a document of its own: ``$ref`` reads from its root) and
        return its top rule's name. ``name``: the name llama.cpp visits it under (``""``: the top rule is
        ``root``; llama-server's tool arguments are ``tool-<function name>-schema``); by default one made of
        ``path`` (where the schema sits in the request). Raises ``SchemaUnsupported`` (llama.cpp's message)."""
        if name is None:
            name = INVALID_RULE_CHARS.sub("-", path.strip("/"))
        try:
            top = self.node(read_schema(schema), name)
        except RecursionError:
            raise SchemaUnsupported("JSON schema conversion failed:\nthe schema nests too deeply") from None
        if self.errors:
            raise conversion_failed("\n".join(self.errors))
        for body in self.rules.values():
            bad = reversed_repetition(body)
            if bad:
                raise conversion_failed(f"the grammar would hold the repetition {bad}, its maximum below its minimum "
                                        "(llama.cpp's grammar parser aborts the process on it: llama-server 0c1e570 "
                                        "dies on this schema; refused here instead)")
        return top

    def add_rule(self, name: str, body: str) -> str:
        """``_add_rule``: the name made safe; a clash with another body gets a number appended."""
        esc = INVALID_RULE_CHARS.sub("-", name)
        if self.rules.get(esc, body) == body:
            self.rules[esc] = body
            return esc
        i = 0
        while f"{esc}{i}" in self.rules and self.rules[f"{esc}{i}"] != body:
            i += 1
        self.rules[f"{esc}{i}"] = body
        return f"{esc}{i}"

    def primitive(self, name: str, kind: str | None = None) -> str:
        """``_add_primitive``: the built-in rule ``kind`` (default ``name``) under ``name``, and its dependencies."""
        body, deps = PRIMITIVES.get(kind or name) or STRING_FORMATS[kind or name]
        n = self.add_rule(name, body)
        for dep in deps:
            if dep not in self.rules:
                self.primitive(dep)
        return n

    def dot(self) -> str:
        """A pattern's ``.`` (``dotall`` off, as for every schema llama-server converts)."""
        return self.add_rule("dot", "[^\\x0A\\x0D]")

    def _primitive_rule(self, rule_name: str, kind: str) -> str:
        """``_visit_primitive``."""
        return self.primitive("root" if rule_name == "root" else kind, kind)

    def node(self, n: Node, name: str) -> str:
        """``visit``: the rules of node ``n`` under ``name``."""
        rule_name = name + "-" if name in RESERVED else (name or "root")
        sub = _joined(name, "")
        k = n.kind
        if k == "ref":
            return self.add_rule(rule_name, self._ref(n))
        if k == "anyOf":
            alts = [self.node(alt, name + ("-" if name else "alternative-") + str(i)) for i, alt in enumerate(n.children)]
            return self.add_rule(rule_name, " | ".join(alts))
        if k == "allOf":
            return self._all_of(n, name, rule_name)
        if k == "const":
            return self.add_rule(rule_name, literal(json_dump(n.value)))
        if k == "enum":
            return self.add_rule(rule_name, "(" + " | ".join(literal(json_dump(v)) for v in n.values) + ")")
        if k == "object":
            if not n.properties and n.additional is not None and n.additional.kind == "any":
                return self.add_rule(rule_name, self.primitive("object"))
            props = [(p, s) for p, s, _ in n.properties]
            required = {p for p, _, r in n.properties if r}
            return self.add_rule(rule_name, self._object(props, required, name, n.additional))
        if k == "tuple":
            items = [self.node(item, f"{sub}tuple-{i}") for i, item in enumerate(n.children)]
            return self.add_rule(rule_name, '"[" space ' + ' "," space '.join(items) + ' space "]"')
        if k == "array":
            if n.items.kind == "any" and n.min_items == 0 and n.max_items < 0:
                return self._primitive_rule(rule_name, "array")
            item = self.node(n.items, sub + "item")
            hi = BIG if n.max_items < 0 else n.max_items
            return self.add_rule(rule_name, '"[" space ' + repetition(item, n.min_items, hi, '"," space')
                                 + ' space "]"')
        if k == "string":
            if n.pattern:
                return visit_pattern(self, n.pattern, rule_name, repetition)
            if n.format == "uuid":
                return self._primitive_rule(rule_name, "uuid")
            if n.format:
                return self.add_rule(rule_name, self.primitive(n.format + "-string"))
            if n.min_length > 0 or n.max_length >= 0:
                char = self.primitive("char")
                hi = BIG if n.max_length < 0 else n.max_length
                return self.add_rule(rule_name, '"\\"" ' + repetition(char, n.min_length, hi) + ' "\\""')
            return self._primitive_rule(rule_name, "string")
        if k == "integer":
            if n.minimum == INT64_MIN and n.maximum == INT64_MAX:
                return self._primitive_rule(rule_name, "integer")
            return self.add_rule(rule_name, integer_range(n.minimum, n.maximum))
        if k in ("number", "boolean", "null"):
            return self._primitive_rule(rule_name, k)
        return self.add_rule(rule_name, self.primitive("value"))  # any

    def _ref(self, n: Node) -> str:
        """``_resolve_ref``: the target's rules under ``ref-<fragment>``, once per name (a rule of that name
        already there is used as it is, as llama.cpp does, also when another document wrote it)."""
        fragment = n.ref[n.ref.index("#") + 1:] if "#" in n.ref else n.ref
        ref_name = "ref" + INVALID_RULE_CHARS.sub("-", fragment)
        if ref_name not in self.rules and n.ref not in self._resolving:
            if n.target is None:
                self.errors.append("Unresolved $ref " + n.ref)
                return ""
            self._resolving.add(n.ref)
            ref_name = self.node(n.target, ref_name)
            self._resolving.discard(n.ref)
        return ref_name

    def _all_of(self, n: Node, name: str, rule_name: str) -> str:
        """``_visit_all_of``: the properties of every object part (an anyOf part's objects as optional ones)
        merged into one object; enum parts: the values every part lists, when there are any."""
        required: set[str] = set()
        props: list[tuple[str, Node]] = []
        enum_values: dict[str, int] = {}

        def add(comp: Node, is_required: bool) -> None:
            if comp.kind == "ref":
                if comp.target is not None:
                    add(comp.target, is_required)
            elif comp.kind == "object":
                for p, s, _ in comp.properties:
                    props.append((p, s))
                    if is_required:
                        required.add(p)
            elif comp.kind == "enum":
                for v in comp.values:
                    text = literal(json_dump(v))
                    enum_values[text] = enum_values.get(text, 0) + 1

        for child in n.children:
            if child.kind == "anyOf":
                for alt in child.children:
                    add(alt, False)
            else:
                add(child, True)
        common = [t for t in sorted(enum_values) if enum_values[t] == len(n.children)]
        if common:
            return self.add_rule(rule_name, "(" + " | ".join(common) + ")")
        return self.add_rule(rule_name, self._object(props, required, name, None))

    def _object(self, props: list[tuple[str, Node]], required: set[str], name: str, additional: Node | None) -> str:
        """``_build_object_rule``: required properties in order, then the optional ones (each may start the
        optional tail), additional properties (keys not named, through ``_not_strings``) last."""
        req, opt, kv, names = [], [], {}, []
        for p, s in props:
            value = self.node(s, _joined(name, p))
            kv[p] = self.add_rule(_joined(name, p) + "-kv", literal(json_dump(p)) + ' space ":" space ' + value)
            (req if p in required else opt).append(p)
            names.append(p)
        if additional is not None:
            sub = _joined(name, "additional")
            value = self.node(additional, sub + "-value") if additional.kind != "any" else self.primitive("value")
            key = self.add_rule(sub + "-k", self._not_strings(names)) if names else self.primitive("string")
            kv["*"] = self.add_rule(sub + "-kv", key + ' ":" space ' + value)
            opt.append("*")
        if not req and not opt:
            return '"{" space "}"'
        rule = '"{" space ' + ' "," space '.join(kv[p] for p in req)
        if opt:
            rule += " ("
            if req:
                rule += ' "," space ( '

            def refs(ks: list[str], first_optional: bool) -> str:
                k = ks[0]
                comma = '( "," space ' + kv[k] + " )"
                if first_optional:
                    res = comma + ("*" if k == "*" else "?")
                else:
                    res = kv[k] + (" " + comma + "*" if k == "*" else "")
                if len(ks) > 1:
                    res += " " + self.add_rule(_joined(name, k) + "-rest", refs(ks[1:], True))
                return res

            rule += " | ".join(refs(opt[i:], False) for i in range(len(opt)))
            if req:
                rule += " )"
            rule += " )?"
        return rule + ' space "}"'

    def _not_strings(self, strings: list[str]) -> str:
        """``_not_strings``: a JSON string that is none of ``strings`` (a trie of their characters, written as
        llama.cpp writes it, characters unescaped inside ``[...]``)."""
        trie: list[dict] = [{}]
        ends: set[int] = set()
        for word in strings:
            at = 0
            for ch in word:
                if ch not in trie[at]:
                    trie.append({})
                    trie[at][ch] = len(trie) - 1
                at = trie[at][ch]
            ends.add(at)
        char = self.primitive("char")
        out = ['["] ( ']

        def walk(at: int) -> None:
            children = sorted(trie[at].items(), key=lambda kv: ord(kv[0]))
            for i, (ch, child) in enumerate(children):
                if i:
                    out.append(" | ")
                out.append(f"[{ch}]")
                if trie[child]:
                    out.append(" (")
                    walk(child)
                    out.append(")")
                else:
                    out.append(f" {char}+")
            if children:
                out.append(' | [^"' + "".join(ch for ch, _ in children) + "] " + char + "*")

        walk(0)
        out.append(" )")
        if 0 not in ends:
            out.append("?")
        out.append(' ["]')
        return "".join(out)


CHAT_ROOT = 'root ::= space space ( "```json" space '
"""How a ``wrap_chat`` grammar's root begins (``chat_content`` applies to replies under such a grammar)."""


def chat_content(text: str, grammar: str | None, complete: bool = True) -> str:
    """A chat reply's content under a ``response_format`` grammar (``grammar`` begins its root with
    ``CHAT_ROOT``), as llama-server's chat parser extracts it (``common/chat-auto-parser-generator.cpp``: the
    value is the content; the spaces around it and a ```` ```json ```` fence are not); other text as is.
    ``complete``: the answer ended (not cut by the token limit): a cut answer keeps its trailing spaces, as
    llama-server's partial parse does (the value is still open)."""
    if grammar is None or ("\n" + CHAT_ROOT) not in ("\n" + grammar):
        return text
    t = text.lstrip(" \t\n")
    if t.startswith("```json"):
        t = t[len("```json"):].lstrip(" \t\n")
        if complete and t.rstrip(" \t\n").endswith("```"):
            t = t.rstrip(" \t\n")[:-3]
    return t.rstrip(" \t\n") if complete else t


def schema_grammar(schema, wrap_chat: bool = False) -> str:
    """GBNF (rule ``root``) for ``schema`` (a JSON schema, parsed): llama.cpp's ``json_schema_to_grammar`` text
    (rules by name); ``wrap_chat``: as llama-server's chat route wraps a ``response_format`` (module docstring;
    the schema under ``response-format-schema``, ``root`` last). Raises ``SchemaUnsupported``."""
    c = SchemaRules()
    if not wrap_chat:
        c.visit(schema, name="")
        return c.sorted_text()
    top = c.visit(schema, name="response-format-schema")
    c.rules["root"] = CHAT_ROOT[len("root ::= "):] + f'{top} space "```" | space {top} space )'
    return c.text()
