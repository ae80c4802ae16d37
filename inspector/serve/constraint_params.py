"""A request's ``logit_bias``, ``grammar``, ``json_schema`` and ``response_format``, read as llama-server 0c1e570.

Reading (``parse_constraints``, no model needed) follows ``tools/server/server-schema.cpp`` (the ``logit_bias``
and ``json_schema``/``grammar`` fields) and, for ``/v1/chat/completions``, ``tools/server/server-common.cpp``
(``oaicompat_chat_params_parse``: ``response_format``, "Cannot use both json_schema and grammar"):

- ``logit_bias``: an array of ``[token id or text, bias]`` pairs or an object ``{"token id or text": bias}``;
  a bias is a number, or ``false`` for a ban (-inf); an entry of another shape, or with another bias, is
  skipped, not refused; a token id outside the vocabulary is dropped; a text gives each of its tokens the bias
  (tokenized without BOS and without parsing special tokens, ``common_tokenize(vocab, text, false)``); an object
  key is a token id when all of it reads as a whole number (``strtol``), else a text. Any other value: no bias.
- ``json_schema`` (present, and no ``grammar`` field): converted to a grammar (``inspector.serve.json_grammar``);
  otherwise a non-empty ``grammar`` string is the grammar.
- chat: ``response_format`` ``json_object`` (its ``schema``, else any object) or ``json_schema``
  (``json_schema.schema``, an empty one meaning any object); ``text`` or no type: nothing; another type: 400.
  The schema is wrapped as llama-server's chat route wraps it (``json_grammar.schema_grammar(wrap_chat=True)``).

Resolving (``resolve_constraints``, under the runtime's lock) tokenizes texts, drops ids outside the vocabulary
and checks that llama.cpp parses the grammar (llama-server answers 400 "Failed to parse grammar" otherwise).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from inspector.engine.constraints import Constraints
from inspector.serve.errors import SERVER, ApiError
from inspector.serve.json_grammar import reversed_repetition, schema_grammar
from inspector.serve.json_schema_read import SchemaUnsupported

CONSTRAINT_FIELDS = {"grammar", "json_schema", "logit_bias"}
"""Fields every completion endpoint takes (chat also ``response_format``)."""
_WHOLE = re.compile(r"[ \t\n\v\f\r]*[+-]?[0-9]+")


@dataclass(frozen=True)
class RequestConstraints:
    """What a request asked for, before the model is consulted: ``bias`` holds ``(token id or text, bias)``."""

    grammar: str | None = None
    bias: tuple[tuple[int | str, float], ...] = ()


def _bias_value(v) -> float | None:
    if isinstance(v, bool):
        return -math.inf if v is False else None
    if isinstance(v, (int, float)):
        return float(v)
    return None


def _key(key: str) -> int | str:
    """An object key as llama-server reads it with ``strtol``: a whole number when all of it is one."""
    if key == "" or _WHOLE.fullmatch(key):
        return int(key) if key.strip() else 0
    return key


def _logit_bias(value) -> tuple:
    out = []
    if isinstance(value, list):
        for el in value:
            if not isinstance(el, list) or len(el) != 2:
                continue
            bias = _bias_value(el[1])
            if bias is None:
                continue
            if isinstance(el[0], int) and not isinstance(el[0], bool):
                out.append((el[0], bias))
            elif isinstance(el[0], str):
                out.append((el[0], bias))
    elif isinstance(value, dict):
        for key, v in value.items():
            bias = _bias_value(v)
            if bias is not None:
                out.append((_key(key), bias))
    return tuple(out)


def _schema(schema, wrap_chat: bool) -> str:
    try:
        return schema_grammar(schema, wrap_chat)
    except (SchemaUnsupported, ValueError, TypeError) as exc:
        raise ApiError(f"\"json_schema\": {exc}") from None


def parse_constraints(body: dict, endpoint: str) -> RequestConstraints | None:
    """The request's constraints (None when it asks for none). Raises ``ApiError`` as llama-server does: 500 for
    chat's two grammars (a ``std::runtime_error`` there), 400 for an unknown ``response_format`` type; 400 for a
    schema this server does not convert."""
    bias = _logit_bias(body.get("logit_bias"))
    grammar = None
    if endpoint == "chat":
        schema = body.get("json_schema")
        text = body.get("grammar") if isinstance(body.get("grammar"), str) else ""
        if schema is not None and text:
            raise ApiError("Cannot use both json_schema and grammar", SERVER)  # a runtime_error there: 500
        rf = body.get("response_format")
        if isinstance(rf, dict):
            kind = rf.get("type") if isinstance(rf.get("type"), str) else ""
            if kind == "json_object":
                if "schema" in rf or not schema:
                    schema = rf.get("schema") if rf.get("schema") is not None else {}
            elif kind == "json_schema":
                wrapper = rf.get("json_schema") if isinstance(rf.get("json_schema"), dict) else {}
                schema = wrapper.get("schema") if wrapper.get("schema") is not None else {}
            elif kind not in ("", "text"):
                raise ApiError(f"response_format type must be one of \"text\" or \"json_object\", but got: {kind}")
        if isinstance(schema, dict) and not schema:
            schema = {"type": "object"}
        if schema is not None:
            grammar = _schema(schema, True)
        elif text:
            grammar = text
    elif "json_schema" in body and "grammar" not in body:
        schema = body["json_schema"]
        grammar = _schema({} if schema is None else schema, False)
    elif isinstance(body.get("grammar"), str) and body["grammar"]:
        grammar = body["grammar"]
    if grammar is None and not bias:
        return None
    return RequestConstraints(grammar, bias)


def resolve_constraints(rt, request: RequestConstraints | None) -> Constraints | None:
    """``request`` against runtime ``rt`` (call under its lock): texts tokenized, ids outside the vocabulary
    dropped, the grammar parsed by llama.cpp. Raises ``ApiError`` (400) for a grammar llama.cpp refuses."""
    if request is None:
        return None
    pairs = []
    for token, bias in request.bias:
        if isinstance(token, str):
            pairs += [(t, bias) for t in rt.tokenize(token, add_special=False, parse_special=False)]
        elif 0 <= token < rt.n_vocab:
            pairs.append((token, bias))
    if request.grammar is not None:
        bad = reversed_repetition(request.grammar)
        if bad:  # llama.cpp's grammar parser runs out of memory and aborts the process on it
            raise ApiError(f"the grammar holds the repetition {bad}, its maximum below its minimum "
                           "(llama.cpp's grammar parser aborts on it; llama-server dies, spec-inspector refuses it)")
        from inspector.llama.grammar import check_grammar  # loads llama.cpp: only when a grammar is checked

        ok = rt.apply(check_grammar, request.grammar) if hasattr(rt, "apply") else check_grammar(rt, request.grammar)
        if not ok:
            raise ApiError("Failed to parse grammar")
    c = Constraints(grammar=request.grammar, logit_bias=tuple(pairs))
    return None if c.empty else c
