"""The receipts reference: every field of ``assets/receipts.schema.json`` as markdown tables (issue 55).

The documentation's receipts page is its intro prose plus ``reference_markdown(schema())``, put where the
page holds ``MARKER``: by the MkDocs hook (``inspector/docs/hooks.py``) when the site is built, and by Help >
Read me in the window. The reference is read from the schema, so it cannot fall out of step with it.

One section per document kind (a request, a conversation), then one per object the schema defines once
(``$defs``: receipt, event, summary, ...), then the value types; nested objects are flattened into dotted
names (``settings.sampling.temperature``), and a field of a defined type links to its section.
"""

from __future__ import annotations

MARKER = "<!-- receipts-reference -->"
"""The line of the receipts page that the generated reference replaces."""

DOCUMENT_TITLES = {"request": "Request document", "conversation_document": "Conversation document"}
"""The two document kinds (the schema's ``then`` and ``else``), first on the page."""


def ref_name(ref: str) -> str:
    """The ``$defs`` name a ``$ref`` points at (``#/$defs/count`` -> ``count``)."""
    return ref.rsplit("/", 1)[-1]


def anchor(name: str) -> str:
    """The anchor of the section of ``$defs`` entry ``name`` (its heading is the name itself)."""
    return name.lower()


def type_text(node: dict) -> str:
    """A field's type in words: ``integer, 0..2147483647``, ``array of [token](#token)``, ``one of `a`, `b```."""
    if "$ref" in node:
        name = ref_name(node["$ref"])
        return f"[{name}](#{anchor(name)})"
    if "const" in node:
        return f"`{node['const']}`"
    if "enum" in node:
        return "one of " + ", ".join(f"`{v}`" for v in node["enum"])
    for key in ("oneOf", "anyOf"):
        if key in node:
            return " or ".join(type_text(n) for n in node[key])
    kind = node.get("type", "any")
    text = " or ".join(kind) if isinstance(kind, list) else kind
    if kind == "array" and "items" in node:
        text = f"array of {type_text(node['items'])}"
    low = node.get("minimum", node.get("exclusiveMinimum"))
    if low is not None or "maximum" in node:
        text += f", {'' if low is None else low}..{node.get('maximum', '')}"
    return text


def cell(text: str) -> str:
    """``text`` fit for one markdown table cell (no line breaks, pipes escaped)."""
    return " ".join(str(text).split()).replace("|", "\\|")


def field_rows(node: dict, prefix: str = "") -> list[str]:
    """Table rows (name, type, required, description) of every property of object ``node``, nested objects'
    properties after their own row under dotted names."""
    rows = []
    required = set(node.get("required", ()))
    for name, prop in node.get("properties", {}).items():
        full = f"{prefix}{name}"
        rows.append(f"| `{full}` | {cell(type_text(prop))} | {'yes' if name in required else ''} "
                    f"| {cell(prop.get('description', ''))} |")
        inner = prop.get("items", {}) if prop.get("type") == "array" else prop
        if "properties" in inner:
            rows.extend(field_rows(inner, f"{full}{'[]' if inner is not prop else ''}."))
    return rows


def object_section(name: str, node: dict, title: str | None = None) -> list[str]:
    """The markdown lines of one object's section: heading, description, fields table."""
    lines = [f"## {title or name}", ""]
    if title:
        lines += [f"The schema's `{name}`.", ""]
    if node.get("description"):
        lines += [" ".join(node["description"].split()), ""]
    lines += ["| field | type | required | description |", "|---|---|---|---|", *field_rows(node), ""]
    return lines


def reference_markdown(schema: dict) -> str:
    """The receipts reference of ``schema`` (the receipts JSON Schema) as markdown: the document kinds, every
    object of ``$defs`` and a table of the value types."""
    defs = schema.get("$defs", {})
    lines = [f"Schema `{schema.get('$id', '')}`: {' '.join(schema.get('description', '').split())}", ""]
    for name, title in DOCUMENT_TITLES.items():
        if name in defs:
            lines += [f'<a id="{anchor(name)}"></a>', ""] + object_section(name, defs[name], title)
    for name, node in defs.items():
        if name not in DOCUMENT_TITLES and "properties" in node:
            lines += object_section(name, node)
    values = [(n, d) for n, d in defs.items() if n not in DOCUMENT_TITLES and "properties" not in d]
    if values:
        lines += ["## Value types", "", "| name | type | description |", "|---|---|---|"]
        lines += [f'| <a id="{anchor(n)}"></a>`{n}` | {cell(type_text(d))} | {cell(d.get("description", ""))} |'
                  for n, d in values]
        lines.append("")
    return "\n".join(lines)


def fill_page(markdown: str, schema: dict) -> str:
    """The receipts page ``markdown`` with ``MARKER`` replaced by the reference of ``schema``."""
    return markdown.replace(MARKER, reference_markdown(schema))
