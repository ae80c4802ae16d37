"""Tree or chain, for one run's own windows (issue 40 item 4): what the tree windows committed and cost,
against what the first branch of each tree (the chain the source would have proposed alone, the same
node budget aside) would have committed from the same rows' predictions.

Every row of a tree window was verified, so for the first branch's rows the target's predictions are
known exactly: its chain would have accepted the tokens matching them, the first mismatch's prediction
committed, no more. Later windows would have started elsewhere, so this is per window, not a replay;
the cost model prices both (c(tree rows) against c(first branch rows)).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from inspector.engine.tree import branch_rows, leaves


@dataclass(frozen=True)
class TreeVersusChain:
    """Sums over a run's tree windows: tokens committed and rows verified by the trees, and by their first
    branches as chains; ``tree_ms`` / ``chain_ms`` their cost on the cost model (None without one)."""

    windows: int
    tree_tokens: int
    tree_rows: int
    chain_tokens: int
    chain_rows: int
    tree_ms: float | None
    chain_ms: float | None

    def text(self) -> str:
        """One line for the Statistics tab and ``run``'s summary."""
        head = (f"{self.windows} tree windows committed {self.tree_tokens} tokens verifying {self.tree_rows} rows; "
                f"their first branches alone {self.chain_tokens} tokens from {self.chain_rows} rows")
        if self.tree_ms is None or self.chain_ms is None or not self.chain_tokens or not self.tree_tokens:
            return head + " (measure the cost model to price both)"
        tree_rate = self.tree_tokens / self.tree_ms
        chain_rate = self.chain_tokens / self.chain_ms
        faster = "trees" if tree_rate >= chain_rate else "chains"
        ratio = max(tree_rate, chain_rate) / min(tree_rate, chain_rate)
        return (f"{head}: on the cost model {faster} were {ratio:.2f}x faster per token in these windows "
                f"({self.tree_ms:.0f} ms against {self.chain_ms:.0f} ms)")


def first_branch_outcome(tree) -> tuple[int, int]:
    """(tokens committed, rows verified) had the tree's first branch (root to its first leaf) been
    proposed alone: the tokens matching its rows' predictions, then one (the correction or the bonus)."""
    parents = tree.node_parents
    rows = branch_rows(parents, leaves(parents)[0])
    committed = 1
    previous = 0
    for r in rows:
        if tree.node_token_ids[r - 1] != tree.row_predictions[previous]:
            break
        committed += 1
        previous = r
    return committed, 1 + len(rows)


def tree_versus_chain(receipts: Sequence, cost_model=None) -> TreeVersusChain | None:
    """The comparison over ``receipts``' tree windows (``WindowReceipt`` with ``tree``), or None when
    there is none. ``cost_model``: a ``CostModel`` to price both, or None."""
    trees = [r for r in receipts if getattr(r, "tree", None) is not None]
    if not trees:
        return None
    outcomes = [first_branch_outcome(r.tree) for r in trees]
    tree_rows = [r.decoded_rows for r in trees]
    chain_rows = [rows for _, rows in outcomes]
    price = (lambda rows: sum(cost_model.cost(k) for k in rows)) if cost_model is not None else None
    return TreeVersusChain(len(trees), sum(r.canonical_prediction_count for r in trees), sum(tree_rows),
                           sum(c for c, _ in outcomes), sum(chain_rows),
                           None if price is None else price(tree_rows), None if price is None else price(chain_rows))
