"""llama.cpp's context and sampling settings, each declared once (issue 38).

A ``Setting`` says everything about one setting: its name as llama.cpp spells it (the field of
``common_params`` / ``common_params_sampling`` and of llama-server's request, our keyword and the
receipts field), llama.cpp's flags with their short aliases (``common/arg.cpp`` of llama.cpp 0c1e570),
its type, our default and llama-server's (``common/common.h``), its range or choices, its help, and
llama-server's flag. Everything else reads these declarations (``CONTEXT``, ``SAMPLING``, ``N_CTX``):

- the command line's flags: ``inspector.cli.context``, ``inspector.cli.sampling``;
- the window's controls: ``inspector.gui.panel.context_controls`` and the panel's Sampling group;
- the typed objects that travel to the runtime and the engine, made here by ``settings_class``:
  ``ContextSettings`` (``inspector.llama.context_settings``: applied to llama.cpp's context) and
  ``SamplingSettings`` (``inspector.engine.settings``: the target's sampler); their fields are the
  receipts fields (the model's ``llama_cpp`` block, ``settings.sampling``);
- llama-server's arguments, written and read: ``inspector.sources.server_flags``.

Pure Python: no Qt, no llama.cpp import.
"""

from __future__ import annotations

from dataclasses import dataclass, field, make_dataclass
from typing import Any, Mapping

DEFAULT_N_CTX = 2048
"""Context size (positions, prompt + output) when nothing else is asked for: ``run --n-ctx``,
``bench``, ``compare`` and the window's context field."""
SEED_MAX = 0xFFFFFFFE
"""Largest seed of a reproducible run. llama.cpp's seed is a uint32
(``llama_sampler_init_dist(uint32_t seed)``) and 0xFFFFFFFF is
``LLAMA_DEFAULT_SEED``, which llama.cpp replaces with a random seed
(src/llama-sampling.cpp ``get_rng_seed``): a run with it could not be replayed."""
RANDOM_SEED = -1
"""llama.cpp's "random seed" (``-1``, ``--seed -1`` in llama.cpp's tools; the
same uint32 as ``LLAMA_DEFAULT_SEED``). Settings never hold it:
``inspector.engine.settings.interpret_setting`` replaces it with a drawn seed that the receipts record."""
PENALTY_LIMIT = 1e9
"""Largest magnitude of a presence or frequency penalty, and of a repeat penalty or its inverse. The
penalties are float32 arithmetic on a logit (``inspector.engine.penalties``, as llama.cpp's sampler):
``logit / repeat_penalty - count * frequency_penalty - presence_penalty`` with a count up to the
context (< 2**31) stays below 1e19 here, far inside float32 (3.4e38); a penalty of 1e308 is infinite
in float32 and its NaN logits would make the receipts unwritable after the run."""
COUNT_MAX = 2147483647
"""The largest count a receipts document holds (``$defs/count``), llama.cpp's int32."""

SERVER_N_BATCH = 2048
"""llama-server's logical batch (``-b``, ``common_params.n_batch``), clamped by llama.cpp to ``-c``."""
OUR_N_BATCH = 512
"""Our logical batch (rows per decode) when none is given (``run -b``, the window's ``-b``); llama-server's
is ``SERVER_N_BATCH`` (the same arithmetic: the physical batch decides it; ours keeps a decode's logits
buffer small)."""
SERVER_N_UBATCH = 512
"""llama-server's physical batch (``-ub``, ``common_params.n_ubatch``): the rows one compute pass takes."""
FLASH_ATTN = {"auto": -1, "off": 0, "on": 1}
"""``-fa`` values -> llama.cpp's ``llama_flash_attn_type`` (llama-server's default: ``auto``)."""
KV_CACHE_TYPES = {"f32": 0, "f16": 1, "bf16": 30, "q8_0": 8, "q4_0": 2, "q4_1": 3, "iq4_nl": 20, "q5_0": 6,
                  "q5_1": 7}
"""``-ctk``/``-ctv`` values (llama.cpp's ``kv_cache_types``, in its order) -> ``ggml_type``
(llama-server's default: ``f16``). Every one but f32, f16 and bf16 is quantized."""
UNQUANTIZED = ("f32", "f16", "bf16")


@dataclass(frozen=True)
class SettingRule:
    """The valid values of one setting.

    ``kind``: ``"int"`` (a whole number) or ``"float"`` (a finite number).
    ``minimum``/``maximum``: bounds (None: unbounded); ``minimum_open``: the
    minimum itself is excluded. ``valid``: the range as the error message
    states it. ``meaning``: what the values mean, where it is not obvious
    (shown after the range).
    """

    kind: str
    minimum: float | None = None
    maximum: float | None = None
    minimum_open: bool = False
    valid: str = ""
    meaning: str = ""


KINDS = {"int": int, "float": float, "choice": str}
"""A setting's kind -> the Python type of its value."""


@dataclass(frozen=True)
class Setting:
    """One llama.cpp setting, declared once.

    ``name``: llama.cpp's name (``common_params`` field, llama-server's request field), our keyword and
    the receipts field. ``kind``: ``int``, ``float`` or ``choice`` (one of ``choices``, a mapping name ->
    llama.cpp's code). ``default``: ours (``run``'s); ``server_default``: llama-server's (a flag whose
    value differs from it is given to llama-server; None: always given). ``flags``: the command line's
    names (llama.cpp's, short aliases included, then ours), ``metavar``; ``server_flags``: llama-server's flag, then its
    other names (() : none). ``help``: one line, the ``--help`` text and the window's tooltip (the
    default is added, ``default_text``); ``default_note``: said after the default (``= disabled``).
    ``minimum``/``maximum``: a whole number's range on the command line (``maximum`` None:
    ``COUNT_MAX``); ``rule``: the engine's rule (``SettingRule``, sampling settings: checked by
    ``inspector.engine.settings.check_setting``, which also gives llama.cpp's meanings of values
    outside it). Window: ``label``; ``control``: a spin box's ``(low, high, step)`` (the rule's bounds
    where narrower; a ``float`` step makes a decimal box), None for a choice or for no control.
    ``cparam``: the ``llama_context_params`` field it sets (context settings, the code of a choice);
    ``sized``: a size the runtime takes on its own (``n_ctx``, ``n_batch``), not a ``ContextSettings``
    field. ``title``: the setting in words (default: ``name`` with spaces), as the receipts' lines of
    what differs from llama-server say it."""

    name: str
    kind: str
    default: Any
    flags: tuple[str, ...]
    help: str
    server_default: Any = None
    server_flags: tuple[str, ...] = ()
    choices: Mapping[str, int] = field(default_factory=dict)
    metavar: str | None = None
    default_note: str = ""
    minimum: int | None = None
    maximum: int | None = None
    rule: SettingRule | None = None
    label: str = ""
    control: tuple[float, float, float] | None = None
    cparam: str | None = None
    sized: bool = False
    title: str = ""

    def __post_init__(self) -> None:
        """Raises ``ValueError`` for an unknown kind, a choice without choices or a name that is not an
        identifier (it becomes a dataclass field and an argparse ``dest``)."""
        if not self.name.isidentifier():
            raise ValueError(f"a setting's name must be an identifier, observed {self.name!r}")
        if self.kind not in KINDS:
            raise ValueError(f"setting {self.name}: kind must be one of {', '.join(KINDS)}, observed {self.kind!r}")
        if self.kind == "choice" and not self.choices:
            raise ValueError(f"setting {self.name}: a choice needs choices")
        if not self.label:
            object.__setattr__(self, "label", self.name)
        if not self.title:
            object.__setattr__(self, "title", self.name.replace("_", " "))

    @property
    def type(self) -> type:
        """The Python type of a value (``KINDS``)."""
        return KINDS[self.kind]

    def default_text(self, serve: bool = False) -> str:
        """The default as ``--help`` and a tooltip say it, e.g. ``[512; llama-server's default: 2048]``;
        ``serve``: llama-server's default is ours (``spec-inspector serve``)."""
        ours = self.server_default if serve else self.default
        shown = f"{ours} {self.default_note}".rstrip()
        if self.server_default is None:
            return f"[{shown}]"
        if serve or ours == self.server_default:
            return f"[{shown}, llama-server's default]"
        return f"[{shown}; llama-server's default: {self.server_default}]"

    def span(self) -> str:
        """The range of the setting's ``rule`` as ``--help`` states it, e.g. ``-1e9..1e9`` (an open end is
        left empty); "" without a rule."""
        if self.rule is None:
            return ""

        def shown(x) -> str:
            return "" if x is None else f"{x:g}".replace("e+0", "e").replace("e-0", "e-").replace("e+", "e")

        return f"{shown(self.rule.minimum)}..{shown(self.rule.maximum)}"

    def help_text(self, serve: bool = False) -> str:
        """``help`` with its range (``{span}``: ``span``) and its default (``default_text``): the
        command line's help and the window's tooltip."""
        return f"{self.help.replace('{span}', self.span())} {self.default_text(serve)}"

    def check(self, value) -> Any:
        """``value`` if it is one llama.cpp takes for this setting (a choice's name, a whole number in
        ``minimum``..``maximum``); else ``ValueError`` naming the setting, the value and the range. A
        setting with a ``rule`` is checked by the engine (``check_setting``), not here."""
        if self.kind == "choice":
            if value not in self.choices:
                raise ValueError(f"{self.label} must be one of {', '.join(self.choices)}, observed {value!r}")
        elif self.kind == "int" and self.rule is None:
            low, high = self.minimum, self.maximum if self.maximum is not None else COUNT_MAX
            if isinstance(value, bool) or not isinstance(value, int) or (low is not None and value < low) \
                    or value > high:
                raise ValueError(f"{self.name} must be a whole number >= {low}, observed {value!r}")
        return value

    def code(self, value) -> Any:
        """The value as llama.cpp's ``llama_context_params`` holds it (a choice's code)."""
        return self.choices[value] if self.kind == "choice" else value


def server_flag_args(declared, values, text=str) -> list[str]:
    """llama-server's flags for the ``declared`` settings (``Setting``s) whose value in ``values`` (an
    object with them as attributes) is not llama-server's default, in declaration order; a setting
    without a llama-server flag is left out. ``text``: how a value is written (default ``str``)."""
    out: list[str] = []
    for s in declared:
        value = getattr(values, s.name)
        if s.server_flags and value != s.server_default:
            out += [s.server_flags[0], text(value)]
    return out


def settings_class(name: str, declared, base: type, module: str, doc: str) -> type:
    """A frozen dataclass ``name`` with one field per ``declared`` setting (its ``type`` and ``default``,
    in declaration order) and ``base``'s methods (a ``base`` with ``__slots__ = ()`` gives a slotted
    class: attribute reads as fast as a written-out dataclass's). ``module``: where it is found again
    (pickling: the runtime in a child process gets it)."""
    cls = make_dataclass(name, [(s.name, s.type, field(default=s.default)) for s in declared], bases=(base,),
                         frozen=True, slots=bool(getattr(base, "__slots__", None) == ()),
                         namespace={"__doc__": doc})
    cls.__module__ = module
    cls.__qualname__ = name
    return cls


CONTEXT_HELP_MORE = "applied when the model loads (the window: at the next model load)"

N_CTX = Setting(
    "n_ctx", "int", DEFAULT_N_CTX, ("-c", "--ctx-size", "--n-ctx"), metavar="N", minimum=1, sized=True,
    control=(64, 131072, 1), label="-c", title="context",
    help=f"context size in tokens (llama.cpp -c; 1..{COUNT_MAX})", server_flags=("-c", "--ctx-size"))
"""``-c``: always given to llama-server (no ``server_default``: its default 0 takes the model's training
context). The window's context box is in its Limits group (``inspector.gui.panel.generation_groups``), its range
``control``: from 64 (a smaller context holds no chat prompt and its answer) to 131072 (128k, the longest
context of the models our users run; the command line takes more)."""

THREADS_MAX = 512
"""ggml's ``GGML_MAX_N_THREADS``: more threads than this llama.cpp cannot start."""

N_THREADS = Setting(
    "n_threads", "int", 0, ("-t", "--threads"), metavar="N", minimum=0, maximum=THREADS_MAX, sized=True,
    default_note="= all cores", control=(0, THREADS_MAX, 1), label="-t", title="threads",
    help=f"CPU threads for decoding (llama.cpp -t; 0..{THREADS_MAX}, ggml's limit)", server_flags=("-t", "--threads"))
"""``-t``: every command that loads the model and the window's threads box; given to llama-server when not 0
(``inspector.sources.server_flags``). The receipts' ``model.n_threads`` is the count in use (0 resolved)."""

CONTEXT: dict[str, Setting] = {s.name: s for s in (
    Setting("n_batch", "int", OUR_N_BATCH, ("-b", "--batch-size", "--n-batch"), metavar="N", minimum=1,
            server_default=SERVER_N_BATCH, server_flags=("-b", "--batch-size"), sized=True, control=(1, 131072, 1),
            label="-b", title="logical batch",
            help=f"logical batch: most rows per decode (llama.cpp -b; 1..{COUNT_MAX}); speculation needs >= 2 "
                 "(proposals are capped at N - 1)"),
    Setting("n_ubatch", "int", SERVER_N_UBATCH, ("-ub", "--ubatch-size"), metavar="N", minimum=1,
            server_default=SERVER_N_UBATCH, server_flags=("-ub", "--ubatch-size"), cparam="n_ubatch",
            control=(1, 131072, 1), label="-ub", title="physical batch",
            help=f"physical batch: rows per compute pass, at most -b (llama.cpp -ub; 1..{COUNT_MAX})"),
    Setting("flash_attn", "choice", "auto", ("-fa", "--flash-attn"), choices=FLASH_ATTN, server_default="auto",
            server_flags=("-fa", "--flash-attn"), cparam="flash_attn_type", label="-fa",
            title="flash attention",
            help="flash attention (llama.cpp -fa: on, off, or auto = where the backend has it)"),
    Setting("type_k", "choice", "f16", ("-ctk", "--cache-type-k"), choices=KV_CACHE_TYPES, metavar="TYPE",
            server_default="f16", server_flags=("-ctk", "--cache-type-k"), cparam="type_k", label="-ctk",
            title="K cache type",
            help=f"K cache data type (llama.cpp -ctk: {', '.join(KV_CACHE_TYPES)})"),
    Setting("type_v", "choice", "f16", ("-ctv", "--cache-type-v"), choices=KV_CACHE_TYPES, metavar="TYPE",
            server_default="f16", server_flags=("-ctv", "--cache-type-v"), cparam="type_v", label="-ctv",
            title="V cache type",
            help=f"V cache data type (llama.cpp -ctv: {', '.join(KV_CACHE_TYPES)}; a quantized one needs -fa on "
                 "or auto)"),
)}
"""llama.cpp's context settings, in the order of the command line's help and the window's grid. Each one
not ``sized`` is a ``ContextSettings`` field (``inspector.llama.context_settings``), set on llama.cpp's
``llama_context_params`` through ``cparam``."""

SAMPLING: dict[str, Setting] = {s.name: s for s in (
    Setting("temperature", "float", 0.0, ("--temperature", "--temp"), server_default=0.8,
            server_flags=("--temp", "--temperature"), control=(0.0, 5.0, 0.1),
            help="<= 0 = greedy, as in llama.cpp",
            rule=SettingRule("float", 0.0, valid="a finite number >= 0",
                             meaning="0 is greedy decoding (argmax); llama.cpp's temp < 0, also greedy, is stored "
                                     "as 0")),
    Setting("top_k", "int", 40, ("--top-k",), server_default=40, server_flags=("--top-k",), label="top-k",
            control=(0, 1000, 1), help="<= 0 = no top-k limit, as in llama.cpp",
            rule=SettingRule("int", valid="a whole number",
                             meaning="<= 0 is no top-k limit, as in llama.cpp src/llama-sampling.cpp: k <= 0 leaves "
                                     "the candidates as they are")),
    Setting("top_p", "float", 0.95, ("--top-p",), server_default=0.95, server_flags=("--top-p",), label="top-p",
            control=(0.0, 1.0, 0.05), help="0..1; 0 or 1 = no top-p stage",
            rule=SettingRule("float", 0.0, 1.0, valid="a number from 0 to 1", meaning="0 and 1 leave the top-p "
                                                                                       "stage out")),
    Setting("min_p", "float", 0.05, ("--min-p",), server_default=0.05, server_flags=("--min-p",), label="min-p",
            control=(0.0, 1.0, 0.01), help="0..1; 0 or 1 = no min-p stage",
            rule=SettingRule("float", 0.0, 1.0, valid="a number from 0 to 1", meaning="0 and 1 leave the min-p "
                                                                                       "stage out")),
    Setting("seed", "int", 0, ("--seed", "-s"), server_default=RANDOM_SEED, server_flags=("--seed", "-s"),
            control=(0, 2**31 - 1, 1),
            help=f"0..{SEED_MAX}; -1 = a random seed (llama.cpp's), drawn and recorded in the receipts",
            rule=SettingRule("int", 0, SEED_MAX, valid=f"a whole number from 0 to {SEED_MAX}",
                             meaning="a llama.cpp uint32 seed; llama.cpp's random seed, -1 or 4294967295 "
                                     "(LLAMA_DEFAULT_SEED), is drawn before settings are made")),
    Setting("repeat_penalty", "float", 1.0, ("--repeat-penalty",), server_default=1.0, metavar="N",
            server_flags=("--repeat-penalty",), default_note="= disabled", label="repeat", control=(0.01, 5.0, 0.05),
            help="llama.cpp --repeat-penalty: a positive logit of a token seen in the last --repeat-last-n tokens is "
                 "divided by N, a negative one multiplied ({span})",
            rule=SettingRule("float", 1 / PENALTY_LIMIT, PENALTY_LIMIT, valid="a number from 1e-9 to 1e9",
                             meaning="llama.cpp --repeat-penalty: 1 is no repeat penalty; beyond, the sampler's "
                                     "float32 logits overflow")),
    Setting("repeat_last_n", "int", 64, ("--repeat-last-n",), server_default=64, metavar="N",
            server_flags=("--repeat-last-n",), default_note="(0 = disabled)", label="last n", control=(0, 131072, 1),
            help="llama.cpp --repeat-last-n: the penalties look at the sequence's last N tokens, prompt included "
                 "(>= 0)",
            rule=SettingRule("int", 0, valid="a whole number >= 0",
                             meaning="llama.cpp --repeat-last-n: the last N tokens are penalized; 0 disables the "
                                     "penalties")),
    Setting("presence_penalty", "float", 0.0, ("--presence-penalty",), server_default=0.0, metavar="N",
            server_flags=("--presence-penalty",), default_note="= disabled", label="presence",
            control=(-5.0, 5.0, 0.1),
            help="llama.cpp --presence-penalty: subtracted from the logit of each token seen in the last "
                 "--repeat-last-n tokens ({span})",
            rule=SettingRule("float", -PENALTY_LIMIT, PENALTY_LIMIT, valid="a number from -1e9 to 1e9",
                             meaning="llama.cpp --presence-penalty: 0 is no presence penalty; beyond, the "
                                     "sampler's float32 logits overflow")),
    Setting("frequency_penalty", "float", 0.0, ("--frequency-penalty",), server_default=0.0, metavar="N",
            server_flags=("--frequency-penalty",), default_note="= disabled", label="freq.",
            control=(-5.0, 5.0, 0.1),
            help="llama.cpp --frequency-penalty: subtracted once per occurrence in the last --repeat-last-n tokens "
                 "({span})",
            rule=SettingRule("float", -PENALTY_LIMIT, PENALTY_LIMIT, valid="a number from -1e9 to 1e9",
                             meaning="llama.cpp --frequency-penalty: 0 is no frequency penalty; beyond, the "
                                     "sampler's float32 logits overflow")),
)}
"""llama.cpp's sampling settings (``common_params_sampling``), in the order of ``SamplingSettings``' fields
(``inspector.engine.settings``), of the command line's help and of the window's Sampling group. Each is
checked by its ``rule``; llama-server's seed is random (``RANDOM_SEED``), ours never is, so ``--seed`` is
always given to it."""


def context_object_settings() -> list[Setting]:
    """The ``CONTEXT`` settings that are ``ContextSettings`` fields (not ``sized``), in order."""
    return [s for s in CONTEXT.values() if not s.sized]
