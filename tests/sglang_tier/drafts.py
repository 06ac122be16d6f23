"""Draft outputs exactly as SGLang's EAGLE draft loop lays them out: its own
select_top_k_tokens steps (the un-compiled originals) over random draft distributions."""

from __future__ import annotations

import torch
from sglang.srt.speculative import spec_utils


def _later():
    fn = spec_utils._select_top_k_tokens_later
    # torch.compile's wrapper: call the Python original (no compile on a CPU test)
    return getattr(fn, "_torchdynamo_orig_callable", fn)


def random_draft(bs: int, topk: int, steps: int, vocab: int = 40, *,
                 gen: torch.Generator, sharpness: float = 2.0):
    """(score_list, token_list, parents_list) of a `steps`-step, `topk`-beam draft."""
    def step_probs(rows: int) -> tuple[torch.Tensor, torch.Tensor]:
        logits = sharpness * torch.randn(rows, vocab, generator=gen)
        return torch.topk(torch.softmax(logits, -1), topk, dim=-1)

    score_list, token_list, parents_list = [], [], []
    topk_p, topk_index = step_probs(bs)
    scores = None
    for i in range(steps):
        if i == 0:
            _, _, scores, info = spec_utils._select_top_k_tokens_first(topk_p, topk_index, None, topk)
        else:
            _, _, scores, info = _later()(i, topk_p, topk_index, None, scores, topk)
        score_list.append(info[0])
        token_list.append(info[1])
        parents_list.append(info[2])
        if i == steps - 1:
            break
        topk_p, topk_index = step_probs(bs * topk)
    return score_list, token_list, [p.contiguous() for p in parents_list]
