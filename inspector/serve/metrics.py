"""``GET /metrics``: Prometheus text with llama-server's metric names (prometheus-client writes it).

Names, help texts and types from llama.cpp 0c1e570 ``tools/server/server-context.cpp`` (the
``/metrics`` handler), as captured in ``LLAMA_SERVER_API.md``: the ``llamacpp:`` counters of prompt and
generated tokens and their seconds, ``n_decode_total``, ``n_tokens_max``, the speculative counters
(``spec_decode_num_draft_tokens_total``, ``..._accepted_tokens_total``, ``..._drafts_total`` and
``spec_decode_num_accepted_tokens_per_pos_total{position}``, one line per position 0 .. draft max - 1,
zeros included, once a draft was verified: ``server-task.cpp`` writes none before) and the gauges.
Accepted counts are llama-server's (``server_counted_accepted``).
``n_tokens_max`` is written as a gauge (prometheus-client names every counter ``..._total``; the sample's
name is llama-server's).
"""

from __future__ import annotations

import threading

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

COUNTERS = (
    ("prompt_tokens", "Number of prompt tokens processed, excluding cached tokens"),
    ("prompt_tokens_cached", "Number of prompt tokens reused from the cache"),
    ("prompt_seconds", "Total time spent processing prompts"),
    ("tokens_predicted", "Number of generation tokens processed"),
    ("tokens_predicted_seconds", "Total time spent generating tokens"),
    ("n_decode", "Total number of llama_decode() calls, excluding speculative decoding and multimodal decoding"),
    ("spec_decode_num_draft_tokens", "Speculative: Total draft tokens generated"),
    ("spec_decode_num_accepted_tokens", "Speculative: Total draft tokens accepted by the target model"),
    ("spec_decode_num_drafts", "Speculative: Total speculative decoding verification steps"),
)


class ServeMetrics:
    """The server's counters, updated once per finished request (``observe``, engine thread) and read by
    ``/metrics`` (any thread). ``draft_max``: the per-position lines written even when zero.
    ``queue``: a callable giving ``(processing, deferred)`` requests now."""

    def __init__(self, draft_max: int = 0, queue=lambda: (0, 0), steps=None) -> None:
        self._lock = threading.Lock()
        self.values = {name: 0.0 for name, _ in COUNTERS}
        self.n_tokens_max = 0
        self.per_position: list[int] = [0] * max(0, draft_max)
        self._queue = queue
        self.steps = steps
        """The batched schedule's ``StepBatch`` (None: one decode per slot): ``n_decode`` and the busy
        slots per decode are its steps', as llama-server counts its ``update_slots`` decodes."""
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)

    def observe(self, result, n_ctx: int) -> None:
        """Add one finished request (a ``JobResult``; times in ms, counts in tokens)."""
        with self._lock:
            v = self.values
            v["prompt_tokens"] += result.prompt_n
            v["prompt_tokens_cached"] += result.cache_n
            v["prompt_seconds"] += result.prompt_ms / 1000.0
            v["tokens_predicted"] += result.predicted_n
            v["tokens_predicted_seconds"] += result.predicted_ms / 1000.0
            v["n_decode"] += result.decodes
            v["spec_decode_num_draft_tokens"] += result.draft_n
            v["spec_decode_num_accepted_tokens"] += result.draft_n_accepted
            v["spec_decode_num_drafts"] += result.drafts
            self.n_tokens_max = max(self.n_tokens_max, result.cache_n + result.prompt_n + result.predicted_n)
            per = self.per_position
            if len(per) < len(result.accepted_per_position):
                per.extend([0] * (len(result.accepted_per_position) - len(per)))
            for i, n in enumerate(result.accepted_per_position):
                per[i] += n

    def collect(self):
        """prometheus-client's collector protocol: the metric families, in llama-server's order."""
        with self._lock:
            v = dict(self.values)
            per = list(self.per_position)
            n_max = self.n_tokens_max
        busy = 1.0 if v["n_decode"] else 0.0
        if self.steps is not None and self.steps.step_count:
            v["n_decode"], busy = self.steps.step_count, self.steps.busy_per_decode
        for name, doc in COUNTERS[:6]:
            yield CounterMetricFamily(f"llamacpp:{name}", doc, value=v[name])
        yield GaugeMetricFamily("llamacpp:n_tokens_max", "Largest observed sequence length (prompt + generation)",
                                value=n_max)
        for name, doc in COUNTERS[6:]:
            yield CounterMetricFamily(f"llamacpp:{name}", doc, value=v[name])
        if v["spec_decode_num_drafts"]:  # llama-server writes these once a slot verified a draft (0c1e570)
            pos = CounterMetricFamily("llamacpp:spec_decode_num_accepted_tokens_per_pos",
                                      "Speculative: Number of draft tokens accepted per draft position",
                                      labels=["position"])
            for i, n in enumerate(per):
                pos.add_metric([str(i)], n)
            yield pos
        prompt_rate = v["prompt_tokens"] / v["prompt_seconds"] if v["prompt_seconds"] else 0.0
        gen_rate = v["tokens_predicted"] / v["tokens_predicted_seconds"] if v["tokens_predicted_seconds"] else 0.0
        processing, deferred = self._queue()
        yield GaugeMetricFamily("llamacpp:prompt_tokens_seconds", "Average prompt throughput in tokens/s",
                                value=prompt_rate)
        yield GaugeMetricFamily("llamacpp:predicted_tokens_seconds", "Average generation throughput in tokens/s",
                                value=gen_rate)
        yield GaugeMetricFamily("llamacpp:requests_processing", "Number of requests processing", value=processing)
        yield GaugeMetricFamily("llamacpp:requests_deferred", "Number of requests deferred", value=deferred)
        yield GaugeMetricFamily("llamacpp:n_busy_slots_per_decode",
                                "Average number of busy slots per llama_decode() call", value=busy)

    def text(self) -> bytes:
        """The ``/metrics`` body."""
        return generate_latest(self.registry)
