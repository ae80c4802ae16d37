"""A request body read as llama-server 0c1e570 reads it, every field checked, unknown ones refused.

The fields, their aliases and limits follow ``tools/server/server-schema.cpp``
(``make_llama_cmpl_schema``: ``n_predict`` alias ``max_tokens`` / ``max_completion_tokens``, -1 ..
INT32_MAX; ``n_probs`` alias ``logprobs``; ``cache_prompt``, ``return_tokens``, the samplers and
penalties) and ``server-common.cpp`` (``oaicompat_chat_params_parse``: ``messages``, ``logprobs`` +
``top_logprobs``, ``n`` = 1, ``stream_options.include_usage``). What the inspector cannot do (a
mirostat, tools, several completions) is refused with a message naming the field; a field
that only names its "off" value (``mirostat: 0``, ``typical_p: 1``, ``n: 1``) is taken, since clients
send them. Request defaults are the server's (``ServeDefaults``: ``spec-inspector serve``'s flags,
which default to llama-server's).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from inspector.engine.llama_settings import RANDOM_SEED, SAMPLING
from inspector.engine.settings import MAX_TOP_PROBABILITIES, SamplingSettings, interpret_setting
from inspector.serve.constraint_params import CONSTRAINT_FIELDS, parse_constraints
from inspector.serve.errors import ApiError
from inspector.serve.prompt_params import parse_messages, parse_prompts, parse_tools

REASONING_FORMATS = ("none", "auto", "deepseek", "deepseek-legacy")
"""``reasoning_format`` names llama-server takes (``common_reasoning_format_from_name``, common/chat.cpp 0c1e570)."""

MAX_TOP_PROBS = MAX_TOP_PROBABILITIES
"""Most probabilities per token (``n_probs``, ``top_logprobs``; llama-server has no bound, and a row has at
most its vocabulary): a request asking more than the window's 5 gets its rows' figures with that many
(``GenerationSettings.top_probabilities``), so an accepted draft token's are the target's own. A negative
count is 0, as in llama-server (``n_probs > 0`` asks for them)."""
CHAT_LOGPROBS_DEFAULT = 20
"""``top_logprobs`` of a chat request with ``logprobs: true`` and no ``top_logprobs`` (llama.cpp 0c1e570
``tools/server/server-common.cpp``, ``oaicompat_chat_params_parse``)."""

NEUTRAL = {
    "typical_p": (1.0,), "mirostat": (0,), "dry_multiplier": (0.0,), "xtc_probability": (0.0,),
    "dynatemp_range": (0.0,), "n_keep": (0, -1), "n_discard": (0,), "n_indent": (0,), "ignore_eos": (False,),
    "return_progress": (False,), "min_keep": (0,),
    "n": (1,), "n_cmpl": (1,), "best_of": (1,), "echo": (False,),
    "backend_sampling": (False,), "n_cache_reuse": (0,), "lora": ([],), "verbose": (False,),
    "t_max_predict_ms": (-1, 0), "grammar_lazy": (False,),
}
"""Fields taken only with the value that leaves their feature out (what llama-server does then is what
we do); any other value is refused."""
NEUTRAL_BELOW_ZERO = ("top_n_sigma", "adaptive_target")
"""Fields whose negative values leave the stage out."""
IGNORED = ("model", "user", "include", "prompt_cache_key", "service_tier", "truncation", "background",
           "max_tool_calls", "text", "safety_identifier", "dry_base", "dry_allowed_length", "dry_penalty_last_n", "dry_sequence_breakers",
           "mirostat_tau", "mirostat_eta", "xtc_threshold", "dynatemp_exponent", "adaptive_decay", "stream_options",
           "metadata", "store")
"""Fields that change nothing here when their feature is off (the model name names nothing to check: one
model is served; the Responses API's ``include``, ``prompt_cache_key``, ``text`` ... llama-server passes on
to its chat parameters, which ignore them)."""
DEFAULT_PING_S = 30
"""llama-server's ``--sse-ping-interval`` default (``common/common.h`` ``sse_ping_interval``), seconds."""
SAMPLER_ORDER = ("penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc", "temperature")
"""llama-server's default sampler chain (``samplers``): ours applies the same order."""

COMMON = {"stream", "cache_prompt", "return_tokens", *SAMPLING, "stop", "samplers", "n_predict", "max_tokens",
          "max_completion_tokens", "n_probs", "timings_per_token", "response_fields", "post_sampling_probs",
          "id_slot", "sse_ping_interval"}
"""Every endpoint's fields; each declared sampling setting is a request field by its name (llama-server's)."""
REQUEST_LIMITS = {"top_p": (0.0, 1.0), "min_p": (0.0, 1.0), "repeat_last_n": (-1, 2**31 - 1), "seed": (-1, 2**32 - 1)}
"""The bounds a request's sampling field is read with (``-1``: llama-server's "whole context" / random
seed, refused or drawn below); every value is then checked by the setting's rule (``interpret_setting``)."""
ENDPOINT_FIELDS = {
    "completion": COMMON | CONSTRAINT_FIELDS | {"prompt", "logprobs"},
    "completions": COMMON | CONSTRAINT_FIELDS | {"prompt", "logprobs"},
    "chat": COMMON | CONSTRAINT_FIELDS | {"messages", "logprobs", "top_logprobs", "response_format", "tools",
                                          "tool_choice", "parallel_tool_calls", "chat_template_kwargs",
                                          "reasoning_effort", "reasoning_format"},
}
"""What each endpoint takes besides ``NEUTRAL``, ``NEUTRAL_BELOW_ZERO`` and ``IGNORED``."""


@dataclass(frozen=True)
class ServeDefaults:
    """What a request gets for a field it does not send: ``spec-inspector serve``'s flags (llama.cpp's
    names; they default to llama-server's: temperature 0.8, top-k 40, top-p 0.95, min-p 0.05, a random
    seed, ``n_predict`` -1 = until end of generation or a full context)."""

    sampling: SamplingSettings = field(default_factory=lambda: SamplingSettings(temperature=0.8))
    n_predict: int = -1
    random_seed: bool = True
    """No ``seed`` in the request: draw one (llama-server's default seed is -1)."""
    sse_ping_interval: int = DEFAULT_PING_S
    """Seconds of silence after which a stream gets a ``:`` comment (``--sse-ping-interval``; -1: never)."""


@dataclass
class CompletionParams:
    """One request's generation parameters, checked. Token counts in tokens."""

    endpoint: str
    prompt: object = None
    """A completion's prompt: a string or a list of token ids and strings; None for chat."""
    prompts: tuple = ()
    """Every prompt of a completion request (llama-server answers each, in order); ``prompt`` is one of them."""
    index: int = 0
    """Which of the request's prompts this is (the replies' ``index``)."""
    messages: tuple = ()
    """Chat: ``({"role", "content"}, ...)`` with text content."""
    stream: bool = False
    include_usage: bool = False
    cache_prompt: bool = True
    return_tokens: bool = False
    id_slot: int = -1
    """The slot the request asks for (llama-server's ``id_slot``; -1: any idle one)."""
    n_predict: int = -1
    n_probs: int = 0
    logprobs: bool = False
    """OpenAI ``logprobs`` (chat: true/false; completions: its number sets ``n_probs``)."""
    stop: tuple[str, ...] = ()
    sampling: SamplingSettings = field(default_factory=SamplingSettings)
    notes: tuple[str, ...] = ()
    model: str | None = None
    timings_per_token: bool = False
    """Every stream event carries the ``timings`` so far."""
    sse_ping_interval: int = DEFAULT_PING_S
    """A stream's keep-alive: seconds of silence before a ``:`` comment (-1: none; llama-server's field)."""
    post_sampling_probs: bool = False
    """Probabilities after the sampler chain (``prob``, ``top_probs``) instead of the raw softmax's logs."""
    tools: tuple = ()
    """Chat: the request's tool definitions (given to the chat template)."""
    tool_choice: str = "auto"
    """Chat: ``none``, ``auto``, ``required``, or ``function`` (one named function: llama-server reads it as auto)."""
    parallel_tool_calls: bool | None = None
    """Chat: several calls in one call section (None: as the template can, llama-server's default)."""
    tool_format: object = None
    """Chat: the template's ``ToolFormat`` when the answer's tool calls are parsed back (set when prepared)."""
    template_kwargs: dict = field(default_factory=dict)
    """Chat: ``chat_template_kwargs``, more variables for the template."""
    reasoning_format: str = "auto"
    """Chat: ``reasoning_format`` (``none``: a reasoning block stays in the content)."""
    reasoning_effort_none: bool = False
    """Chat: ``reasoning_effort: none`` (``enable_thinking`` false)."""
    reasoning: object = None
    """Chat: the ``inspector.serve.reasoning.ReasoningParse`` of a template with reasoning blocks (set when prepared)."""
    response_fields: tuple[str, ...] = ()
    """Only these fields (``/``-joined paths) of a ``/completion`` reply (``replies.nested_values``)."""
    constraints: object = None
    """``logit_bias``, grammar (``inspector.serve.constraint_params``): a ``RequestConstraints`` as read, a
    ``Constraints`` once resolved against the model (``app._prepare``), or None."""


def _type_name(v) -> str:
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, float)):
        return "number"
    if v is None:
        return "null"
    return {str: "string", list: "array", dict: "object"}.get(type(v), type(v).__name__)


def _lone_surrogate(text: str) -> str:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"a lone surrogate \\u{ord(text[exc.start]):04x} at character {exc.start}"
    return ""


def unicode_problem(value, path: str = "") -> str:
    """"" when every string in ``value`` (parsed JSON: keys too) is text; else one line naming the first
    field holding a lone surrogate (Python's ``json`` reads ``"\\ud800"`` as one, which no UTF-8 text
    holds): "Field 'messages[0].content': invalid Unicode: a lone surrogate \\ud800 at character 0"."""
    if isinstance(value, str):
        bad = _lone_surrogate(value)
        return f"Field '{path or '(body)'}': invalid Unicode: {bad}" if bad else ""
    if isinstance(value, dict):
        for k, v in value.items():
            bad = _lone_surrogate(k)
            if bad:
                return f"a field name in '{path or '(body)'}' is invalid Unicode: {bad}"
            found = unicode_problem(v, f"{path}.{k}" if path else k)
            if found:
                return found
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found = unicode_problem(v, f"{path}[{i}]")
            if found:
                return found
    return ""


def _number(body: dict, name: str, kind: type, low=None, high=None):
    v = body[name]
    if isinstance(v, float) and not math.isfinite(v):  # Python's json reads NaN and Infinity; JSON has neither
        shown = "NaN" if math.isnan(v) else ("Infinity" if v > 0 else "-Infinity")
        raise ApiError(f"Field '{name}': must be a finite number, observed {shown}")
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ApiError(f"Field '{name}': [json.exception.type_error.302] type must be number, but is "
                       f"{_type_name(v)}")
    if kind is int:
        if isinstance(v, float) and not v.is_integer():
            raise ApiError(f"Field '{name}': must be a whole number, observed {v}")
        v = int(v)
    else:
        v = float(v)
    if (low is not None and v < low) or (high is not None and v > high):
        shown = str if kind is int else "{:f}".format  # C++ std::to_string
        if low is None:
            raise ApiError(f"Field '{name}': Value must be at most {shown(high)}, but got {shown(v)}")
        raise ApiError(f"Field '{name}': Value must be between {shown(low)} <= value <= {shown(high)}, "
                       f"but got {shown(v)}")
    return v


def _bool(body: dict, name: str) -> bool:
    v = body[name]
    if not isinstance(v, bool):
        raise ApiError(f"Field '{name}': [json.exception.type_error.302] type must be boolean, but is "
                       f"{_type_name(v)}")
    return v


def _stop(v) -> tuple[str, ...]:
    if v is None:
        return ()
    if isinstance(v, str):
        v = [v]
    if not isinstance(v, list) or not all(isinstance(s, str) for s in v):
        raise ApiError("Field 'stop': must be a string or an array of strings")
    return tuple(s for s in v if s)


def _check_fields(body: dict, endpoint: str) -> None:
    allowed = ENDPOINT_FIELDS[endpoint]
    for name, value in body.items():
        if name in allowed or name in IGNORED:
            continue
        if name in NEUTRAL:
            if value is None or value in NEUTRAL[name]:
                continue
            off = " or ".join(repr(v) for v in NEUTRAL[name])
            raise ApiError(f"field '{name}' = {value!r} is not supported by spec-inspector serve (only {off}, which "
                           "leaves it out)")
        if name in NEUTRAL_BELOW_ZERO:
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0:
                continue
            raise ApiError(f"field '{name}' = {value!r} is not supported by spec-inspector serve (only a negative "
                           "value, which leaves it out)")
        known = sorted(allowed | set(NEUTRAL) | set(IGNORED))
        raise ApiError(f"unknown field '{name}' for this endpoint (spec-inspector serve refuses what it would not "
                       f"apply; known: {', '.join(known)})")


def _sampling(body: dict, defaults: ServeDefaults) -> tuple[SamplingSettings, list[str]]:
    base = defaults.sampling
    values = {name: getattr(base, name) for name in SAMPLING if name != "seed"}
    for name in values:
        if body.get(name) is not None:
            values[name] = _number(body, name, SAMPLING[name].type, *REQUEST_LIMITS.get(name, (None, None)))
    if values["repeat_last_n"] == -1:
        raise ApiError("Field 'repeat_last_n': -1 (the whole context) is not supported by spec-inspector serve; "
                       "give a count of tokens")
    notes = []
    seed = base.seed
    if body.get("seed") is not None:
        seed = _number(body, "seed", int, *REQUEST_LIMITS["seed"])
        if seed in (-1, 2**32 - 1):
            seed = RANDOM_SEED
    elif defaults.random_seed:
        seed = RANDOM_SEED
    out = {}
    for name, value in {**values, "seed": seed}.items():
        try:
            v, note = interpret_setting(name, value)
        except ValueError as exc:
            raise ApiError(f"Field '{name}': {exc}") from None
        out[name] = v
        if note and name != "seed":
            notes.append(note)
    try:
        sampling = SamplingSettings(**out)
    except ValueError as exc:
        raise ApiError(str(exc)) from None
    samplers = body.get("samplers")
    if samplers is not None and not sampling.greedy:
        names = samplers if isinstance(samplers, list) else None
        if names is None or [s for s in SAMPLER_ORDER if s in names] != [s for s in names if s in SAMPLER_ORDER] \
                or not {"top_k", "top_p", "min_p", "temperature"} <= set(names):
            raise ApiError(f"Field 'samplers': spec-inspector serve samples in llama-server's default order "
                           f"({', '.join(SAMPLER_ORDER)}); leave it out, or sample greedily (temperature 0)")
    return sampling, notes


def parse_request(body, endpoint: str, defaults: ServeDefaults) -> CompletionParams:
    """``body`` (parsed JSON) of ``endpoint`` (``completion``: ``/completion``; ``completions``:
    ``/v1/completions``; ``chat``: ``/v1/chat/completions``) as ``CompletionParams``. Raises ``ApiError``
    (400) naming the field for a missing prompt or messages, a wrong type, a value out of range, an
    unknown field, a feature spec-inspector does not serve, NaN or Infinity in a number or a lone
    surrogate in a string."""
    if not isinstance(body, dict):
        raise ApiError(f"the request body must be a JSON object, observed {_type_name(body)}")
    problem = unicode_problem(body)
    if problem:
        raise ApiError(problem)
    _check_fields(body, endpoint)
    p = CompletionParams(endpoint, n_predict=defaults.n_predict)
    if endpoint == "chat":
        if "messages" not in body:
            raise ApiError("'messages' is required")
        p.messages = parse_messages(body["messages"])
        p.tools = parse_tools(body.get("tools"))
        kw = body.get("chat_template_kwargs")
        if kw is not None and not isinstance(kw, dict):
            raise ApiError("Field 'chat_template_kwargs': must be an object")
        p.template_kwargs = dict(kw or {})
        effort = body.get("reasoning_effort")  # server-common.cpp: a template variable; "none" removes it
        if isinstance(effort, str) and effort and effort != "none":
            p.template_kwargs["reasoning_effort"] = effort
        elif effort == "none":
            p.template_kwargs.pop("reasoning_effort", None)
            p.reasoning_effort_none = True
        fmt = body.get("reasoning_format")
        if fmt is not None:
            if not isinstance(fmt, str) or fmt not in REASONING_FORMATS:
                raise ApiError(f"Unknown reasoning format: {fmt}")
            if fmt == "deepseek-legacy" and body.get("stream") is True:
                raise ApiError("Field 'reasoning_format': 'deepseek-legacy' (reasoning inline in a stream) is not "
                               "supported by spec-inspector serve; use 'deepseek', 'auto' or 'none'")
            p.reasoning_format = fmt
        choice = body.get("tool_choice")
        p.tool_choice = choice if isinstance(choice, str) else "auto" if choice is None else "function"
        if isinstance(body.get("parallel_tool_calls"), bool):
            p.parallel_tool_calls = body["parallel_tool_calls"]
        if p.tools and p.tool_choice != "none" and "grammar" in body:
            raise ApiError("Cannot use custom grammar constraints with tools.")
    else:
        if "prompt" not in body:
            raise ApiError("[json.exception.out_of_range.403] key 'prompt' not found")
        p.prompts = parse_prompts(body["prompt"])
        p.prompt = p.prompts[0]
    if isinstance(body.get("model"), str):
        p.model = body["model"]
    rf = body.get("response_fields")
    if rf is not None:
        if not isinstance(rf, list) or not all(isinstance(f, str) for f in rf):
            raise ApiError("Field 'response_fields': must be an array of strings")
        p.response_fields = tuple(rf)
    for name in ("stream", "cache_prompt", "return_tokens", "timings_per_token", "post_sampling_probs"):
        if body.get(name) is not None:
            setattr(p, name, _bool(body, name))
    so = body.get("stream_options")
    if isinstance(so, dict) and so.get("include_usage") is True:
        p.include_usage = True
    for name in ("n_predict", "max_completion_tokens", "max_tokens"):  # n_predict wins, as in llama-server
        if body.get(name) is not None:
            p.n_predict = _number(body, name, int, -1, 2**31 - 1)
            break
    if body.get("id_slot") is not None:
        p.id_slot = _number(body, "id_slot", int, -1, 255)
    p.sse_ping_interval = defaults.sse_ping_interval
    if body.get("sse_ping_interval") is not None:  # server-schema.cpp's hard limits
        p.sse_ping_interval = _number(body, "sse_ping_interval", int, -1, 2**31 - 1)
    if body.get("n_probs") is not None:
        p.n_probs = max(0, _number(body, "n_probs", int, None, MAX_TOP_PROBS))
    if endpoint == "chat":
        if body.get("logprobs") is not None:
            p.logprobs = _bool(body, "logprobs")
        if body.get("top_logprobs") is not None:
            top = max(0, _number(body, "top_logprobs", int, None, MAX_TOP_PROBS))
            if not p.logprobs:
                raise ApiError("top_logprobs requires logprobs to be set to true")
            p.n_probs = top
        elif p.logprobs:
            p.n_probs = CHAT_LOGPROBS_DEFAULT
    elif endpoint == "completion" and body.get("n_probs") is None and body.get("logprobs") is not None:
        p.n_probs = max(0, _number(body, "logprobs", int, None, MAX_TOP_PROBS))  # n_probs' alias (server-schema.cpp)
    elif endpoint == "completions" and body.get("logprobs") is not None:
        p.n_probs = max(0, _number(body, "logprobs", int, None, MAX_TOP_PROBS))
        p.logprobs = p.n_probs > 0
    p.constraints = parse_constraints(body, endpoint)
    p.stop = _stop(body.get("stop"))
    p.sampling, notes = _sampling(body, defaults)
    p.notes = tuple(notes)
    return p

