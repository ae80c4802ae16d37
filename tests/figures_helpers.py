"""Reading receipts' probability figures in tests: every block of a document, and two values equal to float32
rounding (issue 56: the host path against backend sampling)."""

from __future__ import annotations

import math


def probability_blocks(doc: dict) -> list[tuple[str, dict]]:
    """Every probabilities block of a receipts document, with where it is."""
    out = []

    def walk(o, path):
        if isinstance(o, dict):
            if "top_p" in o and "basis" in o:
                out.append((path, o))
                return
            for k, v in o.items():
                walk(v, f"{path}/{k}")
        elif isinstance(o, list):
            for i, v in enumerate(o):
                walk(v, f"{path}[{i}]")

    walk(doc, "")
    return out


def figures_close(a, b) -> bool:
    """Two figures' values (or lists of them) equal, floats to 1e-3 relative / 1e-6 absolute (float32 sums summed
    in another order: a tiny entropy's fourth digit)."""
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(figures_close(p, q) for p, q in zip(a, b))
    if isinstance(a, float) or isinstance(b, float):
        return a is not None and b is not None and math.isclose(a, b, rel_tol=1e-3, abs_tol=1e-6)
    return a == b
