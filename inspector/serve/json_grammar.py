"""JSON schema -> GBNF for ``json_schema`` and ``response_format``, in the language llama-server 0c1e570 builds.

Why not a library: llama-cpp-python 0.3.36's ``llama_cpp.llama_grammar.json_schema_to_gbnf`` is a port of an
older llama.cpp converter whose grammar accepts another language than 0c1e570's: its whitespace rule is
``space ::= " "?`` where 0c1e570 has ``space ::= | " " | "\\n"{1,2} [ \\t]{0,20}``, and every value there ends
with ``space`` (``1 ,`` is allowed) where 0c1e570 puts the space after ``{``, ``:``, ``,`` and before ``}``
only. A constrained run must pick the same tokens as llama-server, so this module writes 0c1e570's rules
(``common/json-schema-to-grammar.cpp``: ``PRIMITIVE_RULES``, ``SPACE_RULE``, ``build_repetition``,
``_build_object_rule``, ``visit``; ``common/json-schema.cpp`` for how a schema reads) for the schema keywords
listed in ``SUPPORTED``; any other keyword raises ``SchemaUnsupported`` (the request is refused, never
constrained differently). Rule names differ from llama.cpp's; the language is the same.

``chat_grammar`` wraps a schema as llama-server's chat route does for ``response_format`` with a template
that has no reasoning block (``common/chat-auto-parser-generator.cpp``, ``build_parser``: optional spaces, then
the value, either inside a ```` ```json ```` fence or alone, then optional spaces).
"""

from __future__ import annotations

import json

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
    "char": ('[^"\\\\\\x7F\\x00-\\x1F] | [\\\\] (["\\\\bfnrt] | "u" [0-9a-fA-F]{4})', ()),
    "string": ('"\\"" char* "\\""', ("char",)),
    "null": ('"null"', ()),
}
SUPPORTED = {"type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems", "enum",
             "const", "minLength", "maxLength", "title", "description", "$schema", "default", "examples"}
"""Schema keywords converted; ``title``, ``description``, ``$schema``, ``default``, ``examples`` change nothing."""
BIG = 2**31 - 1


class SchemaUnsupported(ValueError):
    """A schema keyword or form this converter does not write (the message names it and its path)."""


def literal(text: str) -> str:
    """A GBNF string literal (``format_literal``: only CR, LF and the quote escaped)."""
    return '"' + text.replace("\r", "\\r").replace("\n", "\\n").replace('"', '\\"') + '"'


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


class SchemaRules:
    """GBNF rules being written: ``visit`` adds a schema's rules and returns the name of its top rule;
    ``rules`` (name -> body) may take more rules; ``text`` writes them all."""

    def __init__(self) -> None:
        self.rules: dict[str, str] = {"space": SPACE_RULE}
        self.n = 0

    def text(self) -> str:
        """The grammar text, one ``name ::= body`` line per rule."""
        return "\n".join(f"{name} ::= {body}" for name, body in self.rules.items()) + "\n"

    def primitive(self, name: str) -> str:
        if name not in self.rules:
            body, deps = PRIMITIVES[name]
            self.rules[name] = body
            for d in deps:
                self.primitive(d)
        return name

    def rule(self, body: str) -> str:
        self.n += 1
        name = f"r{self.n}"
        self.rules[name] = body
        return name

    def visit(self, s, path: str) -> str:
        if s is True or s == {}:
            return self.primitive("value")
        if not isinstance(s, dict):
            raise SchemaUnsupported(f"{path or '/'}: a schema must be an object or true")
        extra = sorted(set(s) - SUPPORTED)
        if extra:
            raise SchemaUnsupported(f"{path or '/'}: schema keyword(s) {', '.join(extra)} are not supported by "
                                    f"spec-inspector serve's grammar conversion")
        t = s.get("type")
        if "const" in s:
            return self.rule(literal(json.dumps(s["const"], separators=(",", ":"), ensure_ascii=False)))
        if "enum" in s:
            values = s["enum"]
            if not isinstance(values, list) or not values:
                raise SchemaUnsupported(f"{path}/enum: enum must be a non-empty array")
            return self.rule("(" + " | ".join(literal(json.dumps(v, separators=(",", ":"), ensure_ascii=False))
                                              for v in values) + ")")
        if t is None:
            if "properties" in s or ("additionalProperties" in s and s["additionalProperties"] is not True):
                t = "object"
            elif "items" in s:
                t = "array"
            elif "minLength" in s or "maxLength" in s:
                t = "string"
            else:
                return self.primitive("value")
        if not isinstance(t, str):
            raise SchemaUnsupported(f"{path}/type: a list of types is not supported by spec-inspector serve")
        if t == "object":
            return self.object(s, path)
        if t == "array":
            items = s.get("items", {})
            lo, hi = int(s.get("minItems", 0)), s.get("maxItems")
            if items in ({}, True) and lo == 0 and hi is None:
                return self.primitive("array")
            item = self.visit(items, path + "/items")
            return self.rule('"[" space ' + repetition(item, lo, BIG if hi is None else int(hi), '"," space')
                             + ' space "]"')
        if t == "string":
            lo, hi = int(s.get("minLength", 0)), s.get("maxLength")
            if lo > 0 or hi is not None:
                char = self.primitive("char")
                return self.rule('"\\"" ' + repetition(char, lo, BIG if hi is None else int(hi)) + ' "\\""')
            return self.primitive("string")
        if t in ("integer", "number", "boolean", "null"):
            return self.primitive(t)
        raise SchemaUnsupported(f"{path}/type: unknown type {t!r}")

    def object(self, s: dict, path: str) -> str:
        props = s.get("properties", {})
        if not isinstance(props, dict):
            raise SchemaUnsupported(f"{path}/properties: properties must be an object")
        required = {r for r in s.get("required", ()) if isinstance(r, str)}
        if "additionalProperties" in s:
            ap = s["additionalProperties"]
            additional = {} if ap is True else (ap if isinstance(ap, dict) else None)
        else:
            additional = {} if "properties" not in s else None
        if not props and additional == {}:
            return self.primitive("object")
        kv, req, opt = {}, [], []
        for name, sub in props.items():
            value = self.visit(sub, f"{path}/properties/{name}")
            kv[name] = self.rule(literal(json.dumps(name, ensure_ascii=False)) + ' space ":" space ' + value)
            (req if name in required else opt).append(name)
        if additional is not None:
            value = self.primitive("value") if additional == {} else self.visit(additional, path + "/additionalProperties")
            if props:
                raise SchemaUnsupported(f"{path}: additionalProperties next to properties is not supported by "
                                        "spec-inspector serve's grammar conversion")
            kv["*"] = self.rule(self.primitive("string") + ' ":" space ' + value)
            opt.append("*")
        if not req and not opt:
            return self.rule('"{" space "}"')
        rule = '"{" space ' + ' "," space '.join(kv[k] for k in req)
        if opt:
            rule += " ("
            if req:
                rule += ' "," space ( '

            def refs(ks: list[str], first_optional: bool) -> str:
                k = ks[0]
                comma = '( "," space ' + kv[k] + " )"
                res = comma + ("*" if k == "*" else "?") if first_optional else kv[k] + (" " + comma + "*" if k == "*" else "")
                if len(ks) > 1:
                    res += " " + self.rule(refs(ks[1:], True))
                return res

            rule += " | ".join(refs(opt[i:], False) for i in range(len(opt)))
            if req:
                rule += " )"
            rule += " )?"
        return self.rule(rule + ' space "}"')


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
    """GBNF (rule ``root``) for ``schema`` (a JSON schema, parsed); ``wrap_chat``: as llama-server's chat route
    wraps a ``response_format`` (module docstring). Raises ``SchemaUnsupported``."""
    c = SchemaRules()
    top = c.visit(schema, "")
    if wrap_chat:
        c.rules["root"] = CHAT_ROOT[len("root ::= "):] + f'{top} space "```" | space {top} space )'
    else:
        c.rules["root"] = top
    return c.text()
