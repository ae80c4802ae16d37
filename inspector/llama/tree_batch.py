"""A tree window's batch in llama.cpp (``inspector.engine.tree``): the sequences its branches borrow and
the batch rows, llama.cpp's own encoding (``examples/speculative/speculative.cpp`` at 0c1e570,
``n_seq_dft``): one KV sequence per branch, each row on the sequences of the branches through it, at the
window's base position + its depth.

``llama_batch_allocr`` (``src/llama-batch.cpp``) checks what this needs: each sequence's rows continue
its cells (a borrowed sequence first gets every cell of the session's, ``llama_memory_seq_cp``, so the
two start and end alike, as sequences coupled in one row must), and its positions are consecutive (each
branch is a chain). A row attends to the cells of its first sequence up to its own position
(``llama_kv_cache::set_input_kq_mask``): its ancestors, nothing of other branches.
"""

from __future__ import annotations

from typing import Sequence

import llama_cpp

from inspector.engine.errors import EngineError


class BranchSequences:
    """The sequence ids a context keeps for the branches of one tree window at a time: ``ids`` (beyond
    the sessions' own), lent by ``lend`` and returned by ``keep`` (or ``give_back`` after an error).
    Every call runs under the scheduler lock."""

    def __init__(self, mem, ids: Sequence[int]) -> None:
        self.mem = mem
        self.ids = tuple(ids)
        self.lent: tuple[int, ...] = ()
        """The sequences of the pending tree's branches (branch 0: the session's own), or ()."""

    def lend(self, sid: int, n_branches: int) -> tuple[int, ...]:
        """Sequences for ``n_branches`` branches of session ``sid``'s tree: ``sid``, then borrowed ones,
        each emptied and given every cell of ``sid``. Raises ``EngineError`` when there are not enough."""
        if n_branches - 1 > len(self.ids):
            raise EngineError(f"a tree of {n_branches} branches exceeds this context's {len(self.ids) + 1}")
        self.lent = (sid, *self.ids[: n_branches - 1])
        for s in self.lent[1:]:
            llama_cpp.llama_memory_seq_rm(self.mem, s, -1, -1)
            llama_cpp.llama_memory_seq_cp(self.mem, sid, s, -1, -1)
        return self.lent

    def keep(self, sid: int, branch: int, position: int) -> None:
        """Keep in ``sid`` the root (at ``position``) and branch ``branch``'s rows, drop the tree's other
        rows and return the borrowed sequences: ``sid`` then holds a chain. Raises ``EngineError`` when
        no tree is pending or ``branch`` is not one of its."""
        if not self.lent:
            raise EngineError("no tree window is pending: keep_branch follows decode_tree")
        if not 0 <= branch < len(self.lent):
            n = len(self.lent)
            self.give_back()
            raise EngineError(f"branch {branch} is not one of the tree's {n}")
        kept = self.lent[branch]
        if kept != sid:
            llama_cpp.llama_memory_seq_rm(self.mem, sid, position + 1, -1)
            llama_cpp.llama_memory_seq_cp(self.mem, kept, sid, position + 1, -1)
        self.give_back()

    def give_back(self) -> None:
        """Empty the borrowed sequences (their cells of the tree leave the cache with them)."""
        for s in self.lent[1:]:
            llama_cpp.llama_memory_seq_rm(self.mem, s, -1, -1)
        self.lent = ()


def fill_tree_batch(batch, tokens: Sequence[int], position: int, depth: Sequence[int],
                    on: Sequence[Sequence[int]], seqs: Sequence[int]) -> None:
    """Write the tree's rows into ``batch`` (a ``llama_batch`` with room for them and their sequence ids):
    row i is ``tokens[i]`` at ``position + depth[i]`` on the sequences ``seqs[b]`` of its branches
    ``on[i]``, with logits on every row."""
    tok, pos, nseq, seq, lg = batch.token, batch.pos, batch.n_seq_id, batch.seq_id, batch.logits
    for i, t in enumerate(tokens):
        tok[i] = t
        pos[i] = position + depth[i]
        branches = on[i]
        nseq[i] = len(branches)
        row_seqs = seq[i]
        for j, b in enumerate(branches):
            row_seqs[j] = seqs[b]
        lg[i] = 1
    batch.n_tokens = len(tokens)
