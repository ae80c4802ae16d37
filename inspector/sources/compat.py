"""Draft/target compatibility, with the rules of llama.cpp's own speculative code
(``common_speculative_are_compatible`` in common/speculative.cpp).

Checked before any generation; a refusal names the failed check and both values.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

VOCAB_MAX_SIZE_DIFFERENCE = 128
"""llama.cpp ``SPEC_VOCAB_MAX_SIZE_DIFFERENCE``: vocabulary sizes may differ by at most this."""
VOCAB_CHECK_START_TOKEN_ID = 5
"""llama.cpp ``SPEC_VOCAB_CHECK_START_TOKEN_ID``: token texts are compared from this id on."""

VOCAB_TYPE_NAMES = {0: "none", 1: "SPM", 2: "BPE", 3: "WPM", 4: "UGM", 5: "RWKV", 6: "PLAMO2"}


class IncompatibleDraft(Exception):
    """The draft model cannot propose for the target; ``check`` names the failed rule."""

    def __init__(self, check: str, target_value, draft_value, detail: str = "") -> None:
        super().__init__(
            f"draft model refused: {check} differs (target {target_value}, draft {draft_value})"
            + (f"; {detail}" if detail else "")
        )
        self.check = check
        self.target_value = target_value
        self.draft_value = draft_value


@dataclass(frozen=True, slots=True)
class VocabFacts:
    """What the compatibility rules read from one model's vocabulary."""

    vocab_type: int
    add_bos: bool
    bos: int
    add_eos: bool
    eos: int
    n_vocab: int
    token_text: Callable[[int], bytes]
    """id -> the vocabulary's raw token text (``llama_vocab_get_text``)."""


def check_compatible(target: VocabFacts, draft: VocabFacts) -> None:
    """Raise ``IncompatibleDraft`` unless ``draft`` may propose for ``target``.

    Rules, in llama.cpp's order: same vocabulary type; same add-BOS flag and,
    when added, same BOS id; same for EOS; vocabulary sizes within 128; the
    same text for every token id from 5 to the smaller vocabulary size.
    """
    if target.vocab_type != draft.vocab_type:
        raise IncompatibleDraft(
            "vocabulary type",
            f"{VOCAB_TYPE_NAMES.get(target.vocab_type, target.vocab_type)}",
            f"{VOCAB_TYPE_NAMES.get(draft.vocab_type, draft.vocab_type)}",
        )
    if target.add_bos != draft.add_bos or (target.add_bos and target.bos != draft.bos):
        raise IncompatibleDraft("BOS token (add flag, id)", (target.add_bos, target.bos), (draft.add_bos, draft.bos))
    if target.add_eos != draft.add_eos or (target.add_eos and target.eos != draft.eos):
        raise IncompatibleDraft("EOS token (add flag, id)", (target.add_eos, target.eos), (draft.add_eos, draft.eos))
    diff = abs(target.n_vocab - draft.n_vocab)
    if diff > VOCAB_MAX_SIZE_DIFFERENCE:
        raise IncompatibleDraft("vocabulary size", target.n_vocab, draft.n_vocab,
                                f"they may differ by at most {VOCAB_MAX_SIZE_DIFFERENCE}")
    for i in range(VOCAB_CHECK_START_TOKEN_ID, min(target.n_vocab, draft.n_vocab)):
        a, b = target.token_text(i), draft.token_text(i)
        if a != b:
            raise IncompatibleDraft(f"text of token {i}", repr(a), repr(b))


def _vocab_values(runtime) -> tuple:
    """The vocabulary figures and every token's text (bytes), picklable: ``vocab_facts`` of a runtime
    in another process (``RemoteRuntime.apply``)."""
    f = vocab_facts(runtime)
    return (f.vocab_type, f.add_bos, f.bos, f.add_eos, f.eos, f.n_vocab, [f.token_text(i) for i in range(f.n_vocab)])


def vocab_facts(runtime) -> VocabFacts:
    """``VocabFacts`` of a loaded ``LlamaRuntime`` (or of a ``RemoteRuntime``: read in its process)."""
    import llama_cpp  # loaded by then (a runtime is): not for the sources that never call this

    apply = getattr(runtime, "apply", None)
    if apply is not None:
        *figures, texts = apply(_vocab_values)
        return VocabFacts(*figures, lambda i: texts[i] if 0 <= i < len(texts) else b"")
    v = runtime.vocab

    def text(i: int) -> bytes:
        return llama_cpp.llama_vocab_get_text(v, i) or b""

    return VocabFacts(
        int(llama_cpp.llama_vocab_type(v)),
        bool(llama_cpp.llama_vocab_get_add_bos(v)),
        int(llama_cpp.llama_vocab_bos(v)),
        bool(llama_cpp.llama_vocab_get_add_eos(v)),
        int(llama_cpp.llama_vocab_eos(v)),
        int(llama_cpp.llama_vocab_n_tokens(v)),
        text,
    )
