"""``spec-inspector diff A B``: what changed between two runs of the same prompts (``inspector.session.diff``).

A and B: request documents, conversation documents (``run --turns``, the window's conversation) or served
sessions (``serve``'s session document), in any mix: each request of A is compared with the request of B that has
its prompt. Exit status 0; 1 with ``--fail-on-divergence`` when an output parts; 2 for a file that cannot be read
or two documents without a common prompt (one line on stderr), as diff(1).
"""

from __future__ import annotations

import json
from pathlib import Path

from inspector.cli.common import fail
from inspector.receipts import ReceiptsFileError, load_document
from inspector.session.diff import DiffRefused, diff_documents, format_diff, matched_requests, requests_of

EXIT_DIVERGED = 1
"""``--fail-on-divergence`` and an output parted."""
EXIT_TROUBLE = 2
"""A file that cannot be read, or two documents without a common prompt: diff(1)'s statuses (0 same, 1
different, 2 trouble), so a script tells a divergence from a file it could not compare."""


def add_diff_command(sub) -> None:
    """The ``diff`` subcommand's arguments (on ``sub``, the CLI's subparsers)."""
    d = sub.add_parser("diff", help="what changed between two runs of the same prompt (setup, output, speculation)",
                       description="Compare two receipts documents of the same prompts (request, conversation or "
                                   "served session, any mix): what differs in the setup, whether the outputs are "
                                   "equal and where they part, and the speculation side by side with B / A.")
    d.add_argument("a", type=Path, help="receipts .json (the run before the change)")
    d.add_argument("b", type=Path, help="receipts .json (the run after it)")
    d.add_argument("--json", type=Path, metavar="OUT", help="also write the diff as JSON")
    d.add_argument("--fail-on-divergence", action="store_true",
                   help=f"exit with status {EXIT_DIVERGED} when an output parts from the other's")


def cmd_diff(args) -> int:
    docs = []
    for path in (args.a, args.b):
        try:
            docs.append(load_document(path))
        except ReceiptsFileError as exc:
            return fail(str(exc), EXIT_TROUBLE)
    a, b = docs
    try:
        pairs, only_a, only_b = matched_requests(a, b)
    except DiffRefused as exc:
        return fail(str(exc), EXIT_TROUBLE)
    ra, rb = requests_of(a), requests_of(b)
    several = len(ra) > 1 or len(rb) > 1
    out, parted = [], False
    for i, j in pairs:
        d = diff_documents(ra[i], rb[j])
        parted |= not d.outputs_equal
        if several:
            print(f"== request {i + 1} of A, {j + 1} of B ==")
        print(format_diff(d, f"{args.a}" + (f" request {i + 1}" if several else ""),
                          f"{args.b}" + (f" request {j + 1}" if several else "")))
        print()
        out.append({"a_request": i + 1, "b_request": j + 1, **d.to_json()})
    for side, left in (("A", only_a), ("B", only_b)):
        if left:
            print(f"{side}'s requests without a match in the other: {', '.join(str(k + 1) for k in left)}")
    if args.json:
        args.json.write_text(json.dumps({"a": str(args.a), "b": str(args.b), "pairs": out,
                                         "a_unmatched": [k + 1 for k in only_a],
                                         "b_unmatched": [k + 1 for k in only_b]}, indent=1), encoding="utf-8")
    return EXIT_DIVERGED if parted and args.fail_on_divergence else 0
