"""A JSON schema read into kinds, as llama.cpp 0c1e570 reads one before writing its grammar.

Port of ``common/json-schema.cpp`` (``common_chat_schema_builder``, ``common_chat_schema_from_json``) and the
kinds of ``common/json-schema.h``: which keywords count and in what order (``build_node``: ``$ref`` first,
then ``oneOf`` / ``anyOf``, a ``type`` array as one alternative per type, ``const``, ``enum``, then the
``type``; without a type the structural keywords decide), which are ignored (``title``, ``description``,
``default``, ``$schema``, ``examples``, ``$defs`` themselves, ``minimum`` on a ``number``, ...), how bounds
and counts are read, and the errors it raises (``SchemaUnsupported`` with llama.cpp's message, as
``json_schema_to_grammar`` words it: ``JSON schema conversion failed:\\nJSON schema error at <path>: ...``).

JSON values are Python's (``json.loads``); where nlohmann's JSON differs (a ``bool`` is not a number, an
integer outside int64/uint64 is a double, ``get<int>`` and ``get<int64_t>`` wrap) the helpers below do as
nlohmann does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

INT64_MIN, INT64_MAX = -2**63, 2**63 - 1
FORMATS = {"date": "date", "time": "time", "date-time": "date-time", "uuid": "uuid"}
FORMATS.update({f"uuid{i}": "uuid" for i in range(1, 6)})
"""``get_format``: the formats that constrain (uuid1..uuid5 read as uuid); any other format reads as none."""


class SchemaUnsupported(ValueError):
    """A schema llama.cpp refuses too: the message is llama.cpp's (``json_schema_to_grammar``'s ``what()``, as
    ``/completion``'s ``json_schema`` reports it), or, for the few forms this port cannot write alike, says so.
    ``chat``: the message as llama-server's chat route has it (after its "Automatic parser generation failed:
    "): a reading error there is not prefixed with "JSON schema conversion failed:\n"."""

    def __init__(self, message: str, chat: str | None = None) -> None:
        super().__init__(message)
        self.chat = message if chat is None else chat


def conversion_failed(message: str, read: bool = False) -> SchemaUnsupported:
    """The error of ``json_schema_to_grammar``; ``read``: a reading error (``common_chat_schema_from_json``)."""
    return SchemaUnsupported("JSON schema conversion failed:\n" + message, message if read else None)


@dataclass(eq=False)
class Node:
    """One schema node (``common_chat_schema_*``): ``kind`` is ``kind_name``'s word (any, ref, anyOf, allOf,
    const, enum, null, boolean, number, integer, string, array, tuple, object); the other fields are the
    kind's own (see each ``build_*`` below)."""

    kind: str
    children: list = field(default_factory=list)  # anyOf / allOf alternatives, a tuple's items
    value: object = None  # const
    values: list = field(default_factory=list)  # enum
    ref: str = ""
    target: Node | None = None  # a ref's node, set once the whole document is read
    minimum: int = INT64_MIN  # integer, inclusive
    maximum: int = INT64_MAX
    pattern: str = ""  # string ("" when absent)
    format: str = ""  # string: "", uuid, date, time, date-time
    min_length: int = 0
    max_length: int = -1  # -1: unbounded
    items: Node | None = None  # array
    min_items: int = 0
    max_items: int = -1
    properties: list = field(default_factory=list)  # object: (name, node, required) in schema order
    additional: Node | None = None  # object: None when additional properties are not allowed


def is_int(v) -> bool:
    """nlohmann's ``is_number_integer``: an int in int64 or uint64 range (a bool is not a number)."""
    return isinstance(v, int) and not isinstance(v, bool) and INT64_MIN <= v < 2**64


def is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _wrap(v: int, bits: int) -> int:
    """C's conversion of an integer to a signed type of ``bits`` bits (two's complement wrap)."""
    return (v + 2**(bits - 1)) % 2**bits - 2**(bits - 1)


def _to_int64(d: float) -> int:
    """``(int64_t) d`` on x86-64: out of range (or not finite) gives INT64_MIN."""
    if not math.isfinite(d) or not INT64_MIN <= d < 2**63:
        return INT64_MIN
    return int(d)


def _stoull(text: str) -> int | None:
    """``std::stoull``: optional spaces and sign, then the leading digits; None where it throws."""
    t = text.lstrip(" \t\n\v\f\r")
    sign = -1 if t.startswith("-") else 1
    if t.startswith(("+", "-")):
        t = t[1:]
    digits = len(t) - len(t.lstrip("0123456789"))
    if digits == 0:
        return None
    v = int(t[:digits])
    if v >= 2**64:
        return None  # out_of_range
    return (sign * v) % 2**64


class _Reader:
    """``common_chat_schema_builder``: ``read`` builds the root node; every ``$ref`` target is read once (its
    key reserved first, so a cycle back to it stops) and the ref nodes get their targets at the end."""

    def __init__(self, root) -> None:
        self.root = root
        self.refs: dict[str, Node | None] = {}
        self.pending: list[Node] = []

    @staticmethod
    def fail(path: str, msg: str):
        raise conversion_failed(f"JSON schema error at {path}: {msg}", read=True)

    def read(self) -> Node:
        node = self.node(self.root, "#")
        for ref in self.pending:
            ref.target = self.refs[ref.ref]
        return node

    def count(self, s: dict, key: str, path: str, default: int) -> int:
        if key not in s:
            return default
        v = s[key]
        if not is_int(v) or _wrap(v, 32) < 0:
            self.fail(path, key + " must be a non-negative integer")
        return _wrap(v, 32)

    def bound(self, s: dict, key: str, path: str, round_up: bool) -> int:
        """``get_bound``: a fractional bound rounded inwards."""
        v = s[key]
        if is_int(v):
            return _wrap(v, 64)
        if not is_number(v):
            self.fail(path, key + " must be a number")
        try:
            d = float(v)
        except OverflowError:  # an integer beyond int64/uint64 is a double in nlohmann's JSON
            d = math.copysign(math.inf, v)
        if not math.isfinite(d):
            return INT64_MIN
        return _to_int64(math.ceil(d) if round_up else math.floor(d))

    def format(self, s: dict, path: str) -> str:
        if "format" not in s:
            return ""
        if not isinstance(s["format"], str):
            self.fail(path, "format must be a string")
        return FORMATS.get(s["format"], "")

    def resolve(self, ref: str, path: str):
        target = self.root
        for sel in ref[1:].split("/")[1:]:
            if isinstance(target, dict) and sel in target:
                target = target[sel]
            elif isinstance(target, list):
                idx = _stoull(sel)
                if idx is None:
                    idx = len(target)
                if idx >= len(target):
                    self.fail(path, f"cannot resolve $ref {ref}, {sel} is out of range")
                target = target[idx]
            else:
                self.fail(path, f"cannot resolve $ref {ref}, {sel} not found")
        return target

    def ref(self, value, path: str) -> Node:
        if not isinstance(value, str):
            self.fail(path, "$ref must be a string")
        if not value.startswith("#/"):
            self.fail(path, f"unsupported $ref {value}, only references into the same document are supported")
        if value not in self.refs:
            self.refs[value] = None
            self.refs[value] = self.node(self.resolve(value, path), value)
        node = Node("ref", ref=value)
        self.pending.append(node)
        return node

    def alternatives(self, kind: str, alts, path: str) -> Node:
        if not isinstance(alts, list):
            self.fail(path, "must be an array of schemas")
        if not alts:
            self.fail(path, "must not be empty")
        return Node(kind, children=[self.node(alt, f"{path}/{i}") for i, alt in enumerate(alts)])

    def object(self, s: dict, path: str) -> Node:
        required = set()
        if isinstance(s.get("required"), list):
            required = {r for r in s["required"] if isinstance(r, str)}
        node = Node("object")
        if "properties" in s:
            props = s["properties"]
            if not isinstance(props, dict):
                self.fail(path, "properties must be an object")
            node.properties = [(name, self.node(prop, f"{path}/properties/{name}"), name in required)
                               for name, prop in props.items()]
        if "additionalProperties" in s:
            ap = s["additionalProperties"]
            if isinstance(ap, bool):
                node.additional = Node("any") if ap else None
            elif isinstance(ap, dict):
                node.additional = self.node(ap, path + "/additionalProperties")
            else:
                self.fail(path, "additionalProperties must be a boolean or a schema")
        elif "properties" not in s:
            node.additional = Node("any")  # {"type": "object"} on its own accepts any object
        return node

    def array(self, s: dict, path: str) -> Node:
        node = Node("array", items=Node("any"))
        if "items" in s or "prefixItems" in s:
            key = "items" if "items" in s else "prefixItems"  # items wins; a schema there is the item schema
            items = s[key]
            if isinstance(items, list):
                return Node("tuple", children=[self.node(it, f"{path}/{key}/{i}") for i, it in enumerate(items)])
            node.items = self.node(items, f"{path}/{key}")
        node.min_items = self.count(s, "minItems", path, 0)
        node.max_items = self.count(s, "maxItems", path, -1)
        return node

    def string(self, s: dict, path: str) -> Node:
        node = Node("string")
        if "pattern" in s:
            if not isinstance(s["pattern"], str):
                self.fail(path, "pattern must be a string")
            node.pattern = s["pattern"]
        node.format = self.format(s, path)
        node.min_length = self.count(s, "minLength", path, 0)
        node.max_length = self.count(s, "maxLength", path, -1)
        return node

    def integer(self, s: dict, path: str) -> Node:
        node = Node("integer")
        if "minimum" in s:
            node.minimum = self.bound(s, "minimum", path, True)
        elif "exclusiveMinimum" in s:
            node.minimum = _wrap(self.bound(s, "exclusiveMinimum", path, False) + 1, 64)
        if "maximum" in s:
            node.maximum = self.bound(s, "maximum", path, False)
        elif "exclusiveMaximum" in s:
            node.maximum = _wrap(self.bound(s, "exclusiveMaximum", path, True) - 1, 64)
        return node

    def node(self, s, path: str) -> Node:
        if not isinstance(s, dict):
            self.fail(path, "schema must be an object")
        if "$ref" in s:
            return self.ref(s["$ref"], path)
        if "oneOf" in s or "anyOf" in s:
            key = "oneOf" if "oneOf" in s else "anyOf"
            return self.alternatives("anyOf", s[key], f"{path}/{key}")
        t = s.get("type")
        if isinstance(t, list):  # {"type": ["a", "b"], ...} is {"anyOf": [{"type": "a", ...}, {"type": "b", ...}]}
            if not t:
                self.fail(path, "type must not be empty")
            return Node("anyOf", children=[self.node({**s, "type": one}, f"{path}/type/{i}") for i, one in enumerate(t)])
        if "const" in s:
            return Node("const", value=s["const"])
        if "enum" in s:
            if not isinstance(s["enum"], list) or not s["enum"]:
                self.fail(path, "enum must be a non-empty array")
            return Node("enum", values=list(s["enum"]))
        if t is not None and not isinstance(t, str):
            self.fail(path, "type must be a string or an array of strings")
        t = t or ""
        ap = s.get("additionalProperties")
        has_properties = "properties" in s or ("additionalProperties" in s and ap is not True)
        if not t:  # without a type the structural keywords decide, in the converter's order
            if has_properties:
                return self.object(s, path)
            if "allOf" in s:
                return self.alternatives("allOf", s["allOf"], path + "/allOf")
            if "items" in s or "prefixItems" in s:
                return self.array(s, path)
            if "pattern" in s or "minLength" in s or "maxLength" in s or self.format(s, path):
                return self.string(s, path)
            return Node("any")
        if t == "object":
            if not has_properties and "allOf" in s:
                return self.alternatives("allOf", s["allOf"], path + "/allOf")
            return self.object(s, path)
        if t == "string":
            if "allOf" in s:
                return self.alternatives("allOf", s["allOf"], path + "/allOf")
            return self.string(s, path)
        if t == "array":
            return self.array(s, path)
        if t == "integer":
            return self.integer(s, path)
        if t in ("number", "boolean", "null"):
            return Node(t)
        self.fail(path, "unrecognized type " + t)


def read_schema(schema) -> Node:
    """``common_chat_schema_from_json``: ``schema`` (parsed JSON) as its root node, refs resolved.
    Raises ``SchemaUnsupported`` with llama.cpp's message where llama.cpp refuses the schema."""
    return _Reader(schema).read()
