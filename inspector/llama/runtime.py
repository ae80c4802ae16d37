"""``LlamaRuntime``: the engine's runtime over llama-cpp-python's low-level API.

One llama.cpp context; each session is a KV-cache sequence (``seq_id``) with
its own sampler chain. Every method here is meant to run under the
``RuntimeScheduler`` lock (the engine never calls it otherwise), so nothing
here locks. Preconditions that would make llama.cpp abort the process
(LLAMA_CPP_NOTES "Process-killing preconditions") are checked in Python first.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from dataclasses import replace
from typing import Callable, Sequence

from inspector.engine.errors import DecodeAborted, DecodeFailed, EngineError
from inspector.engine.probabilities import TOP, WindowProbabilities, summarise_rows
from inspector.engine.settings import SamplingSettings
from inspector.engine.tree import depths, row_branches
from inspector.llama.model_file import ModelInfo, check_gguf
from inspector.llama.context_settings import ContextRefused, ContextSettings, settled
from inspector.llama.server_parity import describe_runtime
from inspector.llama.sequence_state import SequenceState
from inspector.llama.session_batch import SessionBatch
from inspector.llama.sessions import SessionTable
from inspector.llama.grammar import constrain_session
from inspector.llama.joined_decode import fill_rows, join_step
from inspector.llama.tree_batch import BranchSequences, fill_tree_batch

logging.getLogger("llama-cpp-python").setLevel(logging.CRITICAL)
import llama_cpp  # noqa: E402  (after the log level, so loading stays quiet)
import numpy as np  # noqa: E402

from inspector.llama import llama_log  # noqa: E402  (imports llama_cpp)
from inspector.llama.abort import AbortSwitch  # noqa: E402
from inspector.llama.decode_thread import BatchDecoder  # noqa: E402
from inspector.llama.build_check import check_build, llama_library_path, probe_model  # noqa: E402
from inspector.llama.graph_figures import GraphFigures  # noqa: E402
from inspector.llama.machine import machine_facts  # noqa: E402
from inspector.llama.model_load import create_context, load_model  # noqa: E402
from inspector.llama.logits import LogitsReader  # noqa: E402
from inspector.llama.rollback import RollbackProbe, probe_rollback  # noqa: E402
from inspector.llama.vocab import Vocabulary  # noqa: E402

llama_log.install()


TREE_BRANCHES = 8
"""Most branches of a tree window (``LlamaRuntime.tree_branches``, fewer when the batch is small): the context gets
``TREE_BRANCHES - 1`` more KV sequences, borrowed for a branch (``decode_tree``)."""


class LlamaRuntime:
    """A loaded GGUF model and one context holding several sessions.

    ``model_path``: a GGUF file, checked with ``check_gguf`` first. ``n_ctx``: context size (positions, shared by all
    sessions: the KV cache is unified, so each session may use up to ``n_ctx``). ``n_batch``: most rows per decode; a
    verify batch is at most ``n_batch`` rows (so proposals are capped at ``n_batch - 1``). ``n_seq_max``: most
    sessions at once (a tree window borrows ``TREE_BRANCHES - 1`` more). ``n_threads``: CPU threads.
    ``swa_full``: full-size sliding-window cache (needed for exact rollback on sliding-window models such as Gemma 3; LLAMA_CPP_NOTES "Gemma
    3"). ``progress``: called with 0.0..1.0 while the weights load. ``offload``: llama.cpp's offload settings
    (``inspector.llama.devices.Offload``: ``-ngl``, split mode, RPC servers); None = llama.cpp's defaults. RPC servers
    are registered here, so a runtime with RPC belongs in a child process (``inspector.llama.remote``).
    Raises ``ModelFileError`` for a file llama.cpp cannot load, ``RpcUnavailable`` for an RPC server that does not
    answer (or a build without RPC). ``context_values``: llama.cpp's context settings by name (``ContextSettings``'s
    fields: ``-ub``, ``-fa``, ``-ctk``, ``-ctv``, declared in ``inspector.engine.llama_settings.CONTEXT``;
    ``n_ubatch=64, flash_attn="on"``, or ``**settings.values()``; absent: llama-server's defaults); ``ValueError`` for a
    value llama.cpp does not take, ``ContextRefused`` (a ``ModelFileError``) for a combination it refuses, before the
    weights load; ``TypeError`` for a name that is not one.
    """

    local_logits = True
    """``last_logits`` is a view here: a plain step's row is copied for a figure batch (``deferred_figures``)."""

    def __init__(
        self,
        model_path: str | os.PathLike,
        *,
        n_ctx: int = 2048,
        n_batch: int = 512,
        n_seq_max: int = 4,
        n_threads: int | None = None,
        swa_full: bool = True,
        progress: Callable[[float], None] | None = None,
        offload=None,
        **context_values,
    ) -> None:
        if n_ctx < 2:
            raise ValueError(f"n_ctx must be >= 2, observed {n_ctx}")
        if n_batch < 1:
            raise ValueError(f"n_batch must be >= 1, observed {n_batch}")
        asked = ContextSettings(**context_values)
        if asked.refusal():
            raise ContextRefused(model_path, f"llama.cpp refuses this context: {asked.refusal()}")
        self.info: ModelInfo = check_gguf(model_path)
        self.model_path = self.info.path
        check_build(probe_model(self.model_path), machine_facts()["llama_cpp_system_info"],
                    llama_library_path())  # a build that crashes here: one line, not a segfault
        loaded = load_model(self.info, offload, progress)
        self.model = loaded.model
        self._load_refs = loaded.keep  # llama.cpp holds pointers into them
        self.offload = loaded.offload
        self.rpc_devices = loaded.rpc_devices
        self.layers = loaded.layers
        """Where the layers went, e.g. "31/31 layers on RPC0[127.0.0.1:50052]" (llama.cpp's load log)."""
        self.offload_note = loaded.offload_note
        """One line when a setting could not be honoured (layers asked for, no device to put them on)."""
        self.vocabulary = Vocabulary(self.model, self.model_path)
        """Tokens, their text and the chat template (``inspector.llama.vocab``)."""
        v = self.vocabulary  # its methods are the runtime's own (each documented there):
        self.is_eog, self.token_piece, self.token_text = v.is_eog, v.token_piece, v.token_text
        self.detokenize, self.tokenize, self.chat_template = v.detokenize, v.tokenize, v.chat_template
        self.chat_prompt, self.chat_messages_prompt, self.prompt_tokens = (v.chat_prompt, v.chat_messages_prompt,
                                                                           v.prompt_tokens)
        self.vocab, self.n_vocab, self.vocab_type = v.vocab, v.n_vocab, v.vocab_type
        self.n_ctx, self.n_batch, self.n_seq_max = n_ctx, min(n_batch, n_ctx), max(1, n_seq_max)
        cparams = llama_cpp.llama_context_default_params()
        cparams.n_ctx = n_ctx
        cparams.n_batch = self.n_batch
        asked.apply(cparams)  # -ub (capped at n_batch, as llama.cpp does), -fa, -ctk, -ctv
        # llama.cpp reserves an output row per sequence when it makes the context and takes at most
        # n_batch outputs (cparams.n_outputs_max, src/llama-context.cpp 0c1e570): no more sequences than
        # that, or llama_init_from_model aborts the process (n_batch 1, say).
        self.tree_branches = max(1, min(TREE_BRANCHES, self.n_batch - self.n_seq_max + 1))
        """Most branches (leaves) of one tree window (``decode_tree``); 1 when n_batch leaves no room."""
        borrowed = range(self.n_seq_max, self.n_seq_max + self.tree_branches - 1)
        cparams.n_seq_max = self.n_seq_max + len(borrowed)
        cparams.kv_unified = True
        cparams.swa_full = swa_full
        self.swa_full = swa_full
        self._rollback: RollbackProbe | None = None
        threads = n_threads or os.cpu_count() or 1
        cparams.n_threads = threads
        cparams.n_threads_batch = threads
        cparams.no_perf = True
        # A sequence sampled in the graph (sample_in_graph) may have as many output rows as the batch; without a
        # sampler on the context this changes nothing (src/llama-context.cpp checks it for sampled sequences only).
        cparams.n_outputs_max_per_seq = 0
        self.n_threads = threads
        self.n_ubatch = cparams.n_ubatch
        self.n_swa = int(llama_cpp.llama_model_n_swa(self.model))
        """The model's sliding attention window (tokens; 0: none)."""
        self.ctx, log = create_context(self.model, cparams)
        if not self.ctx:
            llama_cpp.llama_model_free(self.model)
            self.model = None
            why = llama_log.refusal(log)
            raise ContextRefused(self.model_path, f"llama.cpp could not create a context of {n_ctx} positions"
                                 + (f" with {replace(asked, n_ubatch=self.n_ubatch).flags()}: {why}" if why else ""))
        self.context = replace(settled(log, asked), n_ubatch=self.n_ubatch)
        """The context settings llama.cpp settled on (``auto`` flash attention resolved to on or off)."""
        self.asked = asked
        """The context settings asked for (``-fa auto`` stays ``auto``: llama-server's way to say it)."""
        self.flash_attn = self.context.flash_attn
        self.mem = llama_cpp.llama_get_memory(self.ctx)
        self.branch_seqs = BranchSequences(self.mem, borrowed)
        """The sequences a tree window's branches borrow (``inspector.llama.tree_batch``)."""
        self._batch = llama_cpp.llama_batch_init(self.n_batch, 0, cparams.n_seq_max)
        self.decode_ns = 0
        """Total time spent inside ``llama_decode`` (nanoseconds), for benchmarks."""
        self.decode_calls = 0
        """``llama_decode`` calls so far (a tree window is one: tests, benchmarks)."""
        self.predict_ns = 0
        """Time picking greedy predictions from the rows' logits (argmax, ns; benchmarks)."""
        self.probability_ns = 0
        """Time in ``row_probabilities`` (ns) over the rows it summarised (benchmarks)."""
        self.probability_rows = 0
        self.decoder = BatchDecoder(self.ctx)  # every llama_decode on one OS thread (inspector.llama.decode_thread)
        self.abort = AbortSwitch(self.ctx)
        """Aborts the decode in flight (``request_abort``; ``inspector.llama.abort``)."""
        self.sessions = SessionTable(self.n_seq_max, self.mem)
        """The open sessions: sampler chains, greedy or not, penalties (``inspector.llama.sessions``)."""
        # Abilities the components have, each documented there (the ``Runtime`` protocol lists them all):
        self.request_abort = self.abort.request
        self.session_open, self.grammar_rejection = self.sessions.is_open, self.sessions.grammar_rejection
        self.keep_branch = self.branch_seqs.keep
        self.batch_rows = SessionBatch(self._batch, self.sessions, self.n_batch, n_ctx)
        """The batch, checked and filled with one session's rows (``inspector.llama.session_batch``)."""
        state = SequenceState(self.ctx)  # llama-server's prompt cache (``inspector.llama.sequence_state``):
        self.save_sequence, self.restore_sequence = state.save, state.restore
        self.logits = LogitsReader(self.ctx, self.n_vocab)
        """The last decode's logits as numpy views (``inspector.llama.logits``)."""
        self.last_logits, self.row_logits, self.row_logits_top2 = self.logits.rows, self.logits.row, self.logits.top2
        self.graph_figures: GraphFigures | None = None
        """Backend sampling (``sample_in_graph``): the sessions whose rows are sampled in llama.cpp's graph."""
        self.steps = None
        """The batched schedule's ``StepBatch`` (``RuntimeScheduler.batch_steps``), or None: decodes run alone."""
        self.architecture = self.info.architecture
        self.converted_from: str | None = None
        """The model file this one was converted from (``inspector.llama.quantize.weight_form``, set by
        whoever converted it), or None: named in the receipts' ``model`` block."""
        self.converted_from_weights = ""
        """That file's own main weight type (set with ``converted_from``)."""

    # -- lifecycle -----------------------------------------------------------
    def close(self) -> None:
        """Free every sampler, the batch, the context and the model (idempotent)."""
        for s in self.sessions.ids():
            self.drop_session(s)
        if getattr(self, "graph_figures", None) is not None:
            self.graph_figures.close()
        if getattr(self, "decoder", None) is not None:
            self.decoder.close()
        if getattr(self, "_batch", None) is not None:
            llama_cpp.llama_batch_free(self._batch)
            self._batch = None
            if getattr(self, "batch_rows", None) is not None:
                self.batch_rows.batch = None  # no fill writes into the freed batch
        if getattr(self, "ctx", None):
            llama_cpp.llama_free(self.ctx)
            self.ctx = None
        if getattr(self, "model", None):
            llama_cpp.llama_model_free(self.model)
            self.model = None

    def __del__(self) -> None:  # pragma: no cover - best effort
        with contextlib.suppress(Exception):
            self.close()

    def set_threads(self, n_threads: int) -> None:
        """Use ``n_threads`` CPU threads for later decodes (``llama_set_n_threads``; under the scheduler lock)."""
        n = max(1, int(n_threads))
        llama_cpp.llama_set_n_threads(self.ctx, n, n)
        self.n_threads = n

    # -- sessions ------------------------------------------------------------
    def sample_in_graph(self, top: int = TOP) -> None:
        """Backend sampling (llama.cpp's ``-bs``, issue 56): from now on a session opened with greedy
        ``SamplingSettings`` and no penalties has each output row's prediction and probability figures
        (``top`` tokens kept) computed in llama.cpp's graph, on the device that computed the logits, and its
        logits stay there (``inspector.llama.graph_figures``). Sessions opened without settings (``None``:
        the rollback and cost probes), reopened ``on_host`` and the others keep the host path. Raises
        ``EngineError`` when the sampler cannot run here or ``top`` is out of its range."""
        self.graph_figures = GraphFigures(self.ctx, max(2, top))
        self.local_logits = False  # each plain step summarises its own row (deferred_figures.figure_batch)

    def open_session(self, sampling: SamplingSettings | None = None) -> int:
        """Open a session (a free KV sequence id) with its own sampler; its id (``EngineError``: all in use).
        With ``sample_in_graph`` on, a greedy session without penalties samples in the graph."""
        sid = self.sessions.open_free(sampling or SamplingSettings())
        if self.graph_figures is not None:
            self.graph_figures.place(sid, sampling is not None, self.sessions)
        return sid

    def reopen_session(self, sid: int, sampling: SamplingSettings, kept: int, tokens: Sequence[int],
                       on_host: bool = False) -> int:
        """Keep positions ``0 .. kept - 1`` of session ``sid`` (``tokens[:kept]``), remove the rest and give it
        a new sampler: the next request of a served slot reuses its prompt cache (llama-server's
        ``cache_prompt``; ``SessionTable.reopen_keeping``, its errors). Returns the KV length. ``on_host``: its
        rows stay on the host path even when ``sample_in_graph`` would take them (a request that wants the
        logits: llama-server's ``n_probs`` before sampling)."""
        self.sessions.reopen_keeping(sid, sampling, kept, tokens)
        if self.graph_figures is not None:
            self.graph_figures.place(sid, not on_host, self.sessions)
        return self.kv_length(sid)

    def drop_session(self, sid: int) -> None:
        """Remove the whole sequence from the KV cache and free its sampler."""
        llama_cpp.llama_memory_seq_rm(self.mem, sid, -1, -1)
        if self.graph_figures is not None:
            self.graph_figures.detach(sid)
        self.sessions.drop(sid)

    def constrain(self, sid: int, constraints, start: int, known: Sequence[int] = ()) -> None:
        """Give session ``sid`` a grammar and logit bias (``Constraints``; ``inspector.llama.grammar.constrain_session``)."""
        constrain_session(self, sid, constraints, start, known)
        if self.graph_figures is not None and sid in self.sessions.constraints:
            self.graph_figures.detach(sid)  # a grammar or a bias works on the logits: the host path

    def kv_length(self, sid: int) -> int:
        """Tokens of session ``sid`` in the KV cache (``llama_memory_seq_pos_max`` + 1)."""
        return int(llama_cpp.llama_memory_seq_pos_max(self.mem, sid)) + 1

    # -- decoding ------------------------------------------------------------
    def _rows(self, sid: int, tokens: Sequence[int], position: int, all_logits: bool,
              abort: threading.Event | None) -> None:
        """Decode one session's rows: alone, or in the batched schedule's step (``steps``). A session sampled in
        the graph (``sample_in_graph``) tells its sampler each row's proposed token first, and where its rows are
        after."""
        g = self.graph_figures
        on_device = g is not None and g.on(sid)
        if on_device:
            g.propose(sid, tokens[1:])  # row i judges proposal token i (the verification batch's next row)
        if self.steps is None:
            self.batch_rows.fill(sid, tokens, position, all_logits)
            self._decode(len(tokens), position, abort, sid)
            if on_device:
                self.logits.on_device, g.base = True, -(len(tokens) if all_logits else 1)
            return
        self.batch_rows.check(sid, len(tokens), position, position + len(tokens))
        self.sessions.filled(sid, tokens, position)
        joined = join_step(self.steps, self.logits, sid, tokens, position, all_logits, abort)
        self.logits.on_device = on_device  # the step may hold other sessions' rows: this session's way is its own
        if on_device:
            g.base = joined.batch_first

    def decode_step(self, rows) -> None:
        """Decode one step of the batched schedule: ``rows`` (``BatchRow``, several sessions) in ONE
        ``llama_decode`` (``StepBatch`` calls it under the lock). Raises as ``decode_rows``."""
        fill_rows(self._batch, rows)
        self._decode(len(rows), rows[0].position if rows else 0, None)

    def _decode(self, n: int, position: int, abort: threading.Event | None, sid: int = -1) -> None:
        self.logits.window(0, 0, 0)
        self.logits.on_device = False
        self.abort.begin(sid, abort)
        t = time.perf_counter_ns()
        self.decode_calls += 1
        try:
            rc = self.decoder.decode(self._batch)
        finally:
            self.decode_ns += time.perf_counter_ns() - t
            self.abort.end()
        if rc == 2:
            raise DecodeAborted(rc, n, position)
        if rc != 0:
            raise DecodeFailed(rc, n, position)

    def decode_rows(
        self, sid: int, tokens: Sequence[int], position: int, abort: threading.Event | None = None
    ) -> list[int]:
        """Decode ``tokens`` at positions ``position..`` in ONE batch with logits on every row, and return the
        session sampler's prediction for each row (verification: N rows; a plain step: 1; under a grammar as
        ``inspector.llama.grammar`` says). ``abort``: when set during the decode, llama.cpp stops it
        (``DecodeAborted``). Raises ``EngineError`` if the batch exceeds ``n_batch`` or the context,
        ``DecodeFailed`` on a non-zero ``llama_decode`` status."""
        n = len(tokens)
        self._rows(sid, tokens, position, True, abort)
        c = self.sessions.constraints.get(sid)  # grammar, logit bias: inspector.llama.grammar
        if c is not None:
            picked = c.rows(self, sid, tokens, position, n)
            if picked:
                return picked
        elif self.sessions.has_penalties(sid):
            self.penalize_last_rows(sid, n, position)
        return self._predictions(sid, n)

    def _predictions(self, sid: int, n: int) -> list[int]:
        """Session ``sid``'s sampler's prediction of each of the last decode's ``n`` rows (``LogitsReader.
        predictions``); greedy picks count in ``predict_ns``."""
        if not self.sessions.is_greedy(sid):
            return self.logits.predictions(n, self.sessions.chain(sid))
        t = time.perf_counter_ns()
        out = self.graph_figures.predictions(n) if self.logits.on_device else self.logits.predictions(n)
        self.predict_ns += time.perf_counter_ns() - t
        return out

    def decode_logits(
        self, sid: int, tokens: Sequence[int], position: int, abort: threading.Event | None = None
    ) -> "np.ndarray":
        """Like ``decode_rows`` but return every row's logits, shape (rows, n_vocab),
        a float32 copy (for the ``rejection`` verification rule)."""
        n = len(tokens)
        self._rows(sid, tokens, position, True, abort)
        c = self.sessions.constraints.get(sid)
        if c is not None:
            c.logits_only(self, sid, n, position)  # bias, then penalties; EngineError under a grammar
        elif self.sessions.has_penalties(sid):
            self.penalize_last_rows(sid, n, position)
        return self.last_logits(n).copy()

    def decode_tree(
        self, sid: int, tokens: Sequence[int], parents: Sequence[int], position: int,
        abort: threading.Event | None = None,
    ) -> list[int]:
        """Decode a token tree in ONE batch and return the session sampler's prediction for each row
        (``inspector.engine.tree``; the batch: ``inspector.llama.tree_batch``): ``tokens`` are the rows (row
        0 the current token, at ``position``), ``parents[i]`` the parent row of row i + 1. Follow with
        ``keep_branch`` under the same lock, which returns the borrowed sequences; on an error here they
        are returned already, and ``sid`` may hold some of the tree's cells (the caller trims it).

        Raises ``EngineError`` for more branches than ``tree_branches``, a session with penalties, a batch
        past ``n_batch`` or the context; ``DecodeAborted`` / ``DecodeFailed`` as ``decode_rows``."""
        n = len(tokens)
        if len(parents) != n - 1:
            raise EngineError(f"a tree of {n} rows needs {n - 1} parents, observed {len(parents)}")
        depth, on = depths(parents), row_branches(parents)
        if self.steps is not None:
            raise EngineError("tree windows need one slot (serve -np 1): the batched schedule joins chains only")
        if self.sessions.has_penalties(sid) or sid in self.sessions.constraints:
            raise EngineError("tree windows take no penalties (repeat, frequency, presence), grammar or logit "
                              "bias: use a chain, or none of them")
        self.batch_rows.check(sid, n, position, position + max(depth) + 1)
        if len(on[0]) < 2 and self.graph_figures is not None and self.graph_figures.on(sid):
            raise EngineError("a one-branch tree is a chain: decode it with decode_rows")
        # Sampling in the graph (sample_in_graph) or not, a tree's rows take the host path: a tree's second branch
        # borrows a sequence, which samples on the host, so llama.cpp copies every row's logits (needs_raw_logits,
        # src/llama-context.cpp 0c1e570).
        fill_tree_batch(self._batch, tokens, position, depth, on, self.branch_seqs.lend(sid, len(on[0])))
        try:
            self._decode(n, position, abort, sid)
        except BaseException:
            self.branch_seqs.give_back()
            raise
        return self._predictions(sid, n)

    def penalize_last_rows(self, sid: int, n: int, position: int) -> None:
        """Apply session ``sid``'s penalties in place to the last decode's ``n`` rows with logits, the
        rows of positions ``position ..`` (``inspector.engine.penalties.penalize_rows``)."""
        t = time.perf_counter_ns()
        self.sessions.penalize(sid, self.last_logits(n), position)
        self.predict_ns += time.perf_counter_ns() - t

    def row_probabilities(self, n: int, proposed: Sequence[int], predictions: Sequence[int],
                          sampling: SamplingSettings | None = None,
                          rows: Sequence[int] | None = None, top: int = TOP) -> WindowProbabilities:
        """The per-row probability figures of the last decode's ``n`` rows (all with logits), from its
        logits in place (``inspector.engine.probabilities.summarise_rows``; arguments as there);
        ``rows``: only these rows, in this order (a tree window's kept branch); ``top``: the most likely
        tokens kept per row. Adds its time to
        ``probability_ns`` and the rows summarised to ``probability_rows`` (benchmarks)."""
        t = time.perf_counter_ns()
        if self.logits.on_device:  # sample_in_graph: the graph's sums, not the logits
            picked = range(n) if rows is None else rows
            out = self.graph_figures.figures(picked, proposed, predictions, top)
            self.probability_ns += time.perf_counter_ns() - t
            self.probability_rows += len(picked)
            return out
        logits = self.last_logits(n)
        if rows is not None:
            logits = logits[list(rows)]
        out = summarise_rows(logits, proposed, predictions, sampling, top=top)
        self.probability_ns += time.perf_counter_ns() - t
        self.probability_rows += len(logits)
        return out

    def prefill(self, sid: int, tokens: Sequence[int], position: int) -> None:
        """Decode ``tokens`` into session ``sid`` from ``position``, in chunks of
        ``n_batch``, asking for logits on the last row only (never sampled here)."""
        if self.steps is not None:  # the step's budget chunks the prompt, as llama-server's batch does
            if tokens:
                self._rows(sid, tokens, position, False, None)
            return
        step = self.n_batch
        on_device = self.graph_figures is not None and self.graph_figures.on(sid)
        if on_device:
            self.graph_figures.propose(sid, ())
        for start in range(0, len(tokens), step):
            chunk = tokens[start : start + step]
            self.batch_rows.fill(sid, chunk, position + start, False)
            self._decode(len(chunk), position + start, None)
        if on_device:
            self.logits.on_device, self.graph_figures.base = True, -1

    def prefill_predict(self, sid: int, tokens: Sequence[int], position: int) -> int:
        """``prefill`` ``tokens`` (>= 1) and return the session sampler's prediction from the last
        row's logits: the first generated token, as llama.cpp's server takes it (SPEC "Prefill and
        the first token"; llama.cpp 0c1e570 ``tools/server/server-context.cpp``: the prompt's last
        batch row has ``logits = true`` and the slot samples its output index). The logits stay
        readable (``row_probabilities(1, ...)``, ``row_logits_top2(-1)``) until the next decode.
        Raises ``EngineError`` for an empty ``tokens``, ``DecodeFailed`` as ``_decode`` does."""
        if not tokens:
            raise EngineError("nothing to prefill: expected at least 1 token, observed 0")
        self.prefill(sid, tokens, position)
        c = self.sessions.constraints.get(sid)
        if c is not None and (picked := c.rows(self, sid, None, position + len(tokens) - 1, 1)) is not None:
            return picked[0]
        if c is None and self.sessions.has_penalties(sid):
            self.penalize_last_rows(sid, 1, position + len(tokens) - 1)
        if self.logits.on_device:
            return self.graph_figures.predictions(1)[0]
        if self.sessions.is_greedy(sid):
            return int(self.last_logits(1)[0].argmax())
        return int(llama_cpp.llama_sampler_sample(self.sessions.chain(sid), self.ctx, self.logits.batch_index(-1)))

    def trim(self, sid: int, position: int) -> bool:
        """Remove positions >= ``position`` of session ``sid``. Returns llama.cpp's answer (``llama_memory_seq_rm``):
        False when a partial removal is impossible (recurrent/hybrid caches); the caller re-reads ``kv_length``."""
        removed = bool(llama_cpp.llama_memory_seq_rm(self.mem, sid, position, -1))
        if removed:
            self.sessions.trimmed(sid, position)
        return removed

    def retire_checkpoint(self, sid: int, start: int, count: int) -> None:
        """Nothing to release: llama.cpp's KV cache keeps no verify checkpoint. Kept as a runtime operation
        so a full accept still records its repair lock acquisition (SPEC step 7, ``runtime_lock_acquires`` = 2)."""

    # -- cache capabilities --------------------------------------------------
    @property
    def rollback(self) -> "RollbackProbe":
        """Whether this context's KV cache can remove a partial suffix exactly (probed once, on first use: under
        the scheduler lock, or before any session runs)."""
        if self._rollback is None:
            self._rollback = self.probe_rollback()
        return self._rollback

    def probe_rollback(self) -> "RollbackProbe":
        """Probe partial-suffix removal on a spare session (``inspector.llama.rollback.probe_rollback``)."""
        return probe_rollback(self)

    def describe(self) -> dict:
        """Model facts for the receipts document (``inspector.llama.server_parity.describe_runtime``)."""
        return describe_runtime(self)
