"""Kill rate per module of the last ``mutmut run`` (issue 42; docs: architecture.md, "Mutation testing").

Reads mutmut's own result files (``mutants/**/*.py.meta``: the test run's exit code per mutant) and
prints, per mutated module: mutants, killed, survived, not covered by the pure tests, and the kill rate
(killed / (killed + survived), in percent). ``--survivors MODULE`` lists that module's surviving mutant
names, for ``mutmut show NAME``. Run from the project folder: ``python tests/mutation_report.py``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

from mutmut.stats import status_by_exit_code


def module_results(root: Path) -> dict[str, Counter]:
    """{module path: Counter of mutmut statuses ("killed", "survived", "no tests", ...)}."""
    out: dict[str, Counter] = {}
    for meta in sorted(root.rglob("*.py.meta")):
        codes = json.loads(meta.read_text("utf-8"))["exit_code_by_key"]
        module = str(meta.relative_to(root))[: -len(".meta")]
        out[module] = Counter(status_by_exit_code[c] for c in codes.values())
    return out


def survivors(root: Path, module: str) -> list[str]:
    """The surviving mutants' names in ``module`` (a path such as ``inspector/engine/profit.py``)."""
    codes = json.loads((root / (module + ".meta")).read_text("utf-8"))["exit_code_by_key"]
    return [name for name, code in codes.items() if status_by_exit_code[code] == "survived"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mutants", default="mutants", help="mutmut's folder (default: mutants)")
    parser.add_argument("--survivors", metavar="MODULE", help="list the surviving mutants of MODULE")
    args = parser.parse_args(argv)
    root = Path(args.mutants)
    if not root.is_dir():
        print(f"{root}: no mutmut results here; run `mutmut run` first", file=sys.stderr)
        return 1
    if args.survivors:
        print("\n".join(survivors(root, args.survivors)))
        return 0
    print(f"{'module':45} {'mutants':>7} {'killed':>7} {'survived':>8} {'no tests':>8} {'kill rate':>9}")
    total = Counter()
    for module, c in module_results(root).items():
        total += c
        tested = c["killed"] + c["survived"]
        rate = f"{100 * c['killed'] / tested:.0f}%" if tested else "-"
        print(f"{module:45} {sum(c.values()):7d} {c['killed']:7d} {c['survived']:8d} {c['no tests']:8d} {rate:>9}")
    tested = total["killed"] + total["survived"]
    print(f"{'all':45} {sum(total.values()):7d} {total['killed']:7d} {total['survived']:8d} {total['no tests']:8d} "
          f"{100 * total['killed'] / max(tested, 1):8.0f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
