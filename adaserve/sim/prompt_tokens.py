"""The tokens of a load-generator prompt, for the simulator, which has no server to count
them: SmolLM2's own tokenizer through its chat template (what the served engine counts,
and the ids a replay recording is keyed on), or an estimate of the count from the words
for when that tokenizer is not at hand."""

from __future__ import annotations

import math
from collections.abc import Callable

from adaserve.loadgen.workload import TEMPLATE_TOKENS, TOKENS_PER_WORD, PromptSpec

COUNTERS = ("tokenizer", "estimate")


def estimate(p: PromptSpec) -> int:
    """30 + 1.2 per word (loadgen.workload: where the rule comes from)."""
    words = sum(len(text.split()) for _, text in p.messages)
    return TEMPLATE_TOKENS + math.ceil(TOKENS_PER_WORD * words)


def tokenizer_ids() -> Callable[[PromptSpec], tuple[int, ...]]:
    """The default model's tokenizer (adaserve.loadgen.tokens). Each prompt is encoded
    once."""
    from adaserve.engine.engine import encode_chat
    from adaserve.loadgen.tokens import target_tokenizer

    tok = target_tokenizer()
    cache: dict[PromptSpec, tuple[int, ...]] = {}

    def ids(p: PromptSpec) -> tuple[int, ...]:
        if p not in cache:
            cache[p] = tuple(encode_chat(tok, p.as_messages()))
        return cache[p]

    return ids
