"""The served model's tokenizer, for what is sized in tokens: the long-context documents
(workload.long_context_set) and, in the simulator, every prompt
(adaserve.sim.prompt_tokens). It loads in about a second without the weights; the first
use on a new machine converts the packaged model once, as `adaserve serve` would."""

from __future__ import annotations

import functools
from collections.abc import Callable


@functools.cache
def target_tokenizer():
    """SmolLM2's tokenizer (the default model's), loaded once per process."""
    from transformers import AutoTokenizer

    from adaserve.engine.weights import DEFAULT_MODEL, resolve_model

    return AutoTokenizer.from_pretrained(str(resolve_model(DEFAULT_MODEL)))


def text_tokens() -> Callable[[str], int]:
    """How many tokens the target's tokenizer makes of a text (no special tokens)."""
    tok = target_tokenizer()
    return lambda text: len(tok.encode(text, add_special_tokens=False))


def line_cutter() -> Callable[[str, int], str | None]:
    """cut(text, n): the longest run of text's leading whole lines that the target's
    tokenizer makes at most n tokens of, or None when all of text is fewer than n tokens.
    Two or three encodings: where the tokens of the whole text put token n+1 gives the
    cut, which is then counted on its own (a text's prefix need not split the same way)."""
    tok = target_tokenizer()
    count = text_tokens()

    def cut(text: str, n: int) -> str | None:
        offsets = tok(text, add_special_tokens=False,
                      return_offsets_mapping=True)["offset_mapping"]
        if len(offsets) < n:
            return None
        end = offsets[n][0] if len(offsets) > n else len(text)
        piece = text[:end]
        if end < len(text):
            piece = piece[:piece.rfind("\n") + 1]  # whole lines only
        piece = piece.rstrip()
        while piece and count(piece) > n:
            piece = piece[:max(0, piece.rfind("\n"))].rstrip()
        return piece

    return cut
