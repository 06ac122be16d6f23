"""Sampling with speculation is lossless: the tokens it emits follow the target's own
distribution. Chi-square goodness of fit of 4000 sampled continuations against the exact
distribution of the first three tokens (computed by transformers on the same weights), at
significance 0.001 per position (three positions: family-wise <= 0.003). The same test
must reject the distribution at a 25% higher temperature, so it has the power to see a
distorted sampler. The draft forms: a perturbed copy of the target with its whole KV or a
bounded one (1 sink + 3 recent tokens: the 4-token prompt and its 3 outputs overflow it;
with 2 the perturbed draft accepted too little to exercise the walk), and the target
itself with a bounded KV (self-speculation)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from scipy.stats import chisquare
from tiny_models import hf_tiny, perturbed, tiny_models, tiny_state

from adaserve.engine import EngineConfig, SamplingParams
from adaserve.engine.core import EngineCore

PROMPT = [5, 17, 42, 8]
N = 4000
ALPHA = 1e-3


def _filtered(logits: torch.Tensor, temperature: float, top_k: int, top_p: float) -> np.ndarray:
    """The sampling distribution, written independently of engine/sampling.py."""
    z = (logits.double() / temperature).numpy()
    p = np.exp(z - z.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    out = np.zeros_like(p)
    for i in range(p.shape[0]):
        order = np.argsort(-p[i], kind="stable")
        keep = order[: top_k] if top_k else order
        mass = np.cumsum(p[i, keep])
        keep = keep[: int(np.searchsorted(mass, top_p - 1e-12)) + 1]
        out[i, keep] = p[i, keep]
        out[i] /= out[i].sum()
    return out


def _exact_marginals(hf, temperature, top_k, top_p) -> list[np.ndarray]:
    """Exact distribution of output tokens 1, 2 and 3 (by enumerating all prefixes)."""
    v = 64
    with torch.no_grad():
        p1 = _filtered(hf(torch.tensor([PROMPT])).logits[0, -1:], temperature, top_k, top_p)[0]
        x1 = torch.arange(v)[:, None]
        seq2 = torch.cat([torch.tensor(PROMPT).expand(v, -1), x1], 1)
        p2_given = _filtered(hf(seq2).logits[:, -1], temperature, top_k, top_p)  # [v, v]
        seq3 = torch.cat([seq2.repeat_interleave(v, 0), x1.repeat(v, 1)], 1)  # [v*v, L+2]
        p3_given = _filtered(hf(seq3).logits[:, -1], temperature, top_k, top_p)  # [v*v, v]
    joint12 = p1[:, None] * p2_given  # [v, v]
    p2 = joint12.sum(0)
    p3 = (joint12.reshape(-1, 1) * p3_given).sum(0)
    return [p1, p2, p3]


def _p_value(counts: np.ndarray, probs: np.ndarray) -> float:
    """Chi-square p-value; cells expected under 5 are pooled into one."""
    exp = probs * counts.sum()
    small = exp < 5
    obs_c = np.append(counts[~small], counts[small].sum())
    exp_c = np.append(exp[~small], exp[small].sum())
    if exp_c[-1] == 0:
        assert obs_c[-1] == 0, "tokens sampled that have probability zero"
        obs_c, exp_c = obs_c[:-1], exp_c[:-1]
    return float(chisquare(obs_c, exp_c).pvalue)


# the draft: the perturbed copy or the target itself, its KV whole or bounded
FORMS = {"perturbed-full": (False, None), "perturbed-window": (False, 3),
         "self-window": (True, 3)}


def _sample(tokenizer, params_kw, form: str = "perturbed-full") -> np.ndarray:
    target = tiny_state(1)
    draft = perturbed(target, 2, noise=0.05)  # close enough to be accepted, often wrong
    is_self, window = FORMS[form]
    cfg = EngineConfig(policy="adaserve", draft="tiny", budget=48, max_batch=8,
                       max_context=64, kv_cache_mb=64, max_waiting=N, draft_window=window,
                       draft_sinks=1)
    models = tiny_models(tokenizer, target, draft)
    if is_self:
        models = dataclasses.replace(models, draft=models.target)
    core = EngineCore(cfg, models)
    out: dict[str, list[int]] = {}
    for s in range(N):
        rid = f"s{s}"
        core.add(rid, PROMPT, SamplingParams(max_tokens=3, seed=s, ignore_eos=True, **params_kw))
        out[rid] = []
    while core.has_work:
        for o in core.step():
            out[o.request_id].extend(o.token_ids)
    depth = [s.depth for s in core.stats]
    assert max(depth) >= 2, "the draft never speculated"
    accepted = sum(s.emitted_tokens for s in core.stats) / sum(s.running for s in core.stats)
    assert accepted > 1.2, "too few draft tokens accepted to exercise the walk"
    return np.array([out[f"s{s}"] for s in range(N)])  # [N, 3]


@pytest.mark.parametrize("params_kw, form", [
    ({"temperature": 1.0}, "perturbed-full"),
    ({"temperature": 0.8, "top_k": 12, "top_p": 0.9}, "perturbed-full"),
    ({"temperature": 1.0}, "perturbed-window"),
    ({"temperature": 1.0}, "self-window"),
], ids=["plain", "topk-topp", "plain-window", "plain-self-window"])
@pytest.mark.slow
def test_speculative_sampling_matches_target_distribution(tokenizer, params_kw, form):
    samples = _sample(tokenizer, params_kw, form)
    exact = _exact_marginals(hf_tiny(tiny_state(1)), params_kw["temperature"],
                             params_kw.get("top_k", 0), params_kw.get("top_p", 1.0))
    for pos in range(3):
        counts = np.bincount(samples[:, pos], minlength=64)
        assert _p_value(counts, exact[pos]) > ALPHA, f"output token {pos + 1} is off"
    # power: a sampler 25% too hot would be caught by the same statistic
    hot = _exact_marginals(hf_tiny(tiny_state(1)), 1.25 * params_kw["temperature"],
                           params_kw.get("top_k", 0), params_kw.get("top_p", 1.0))
    counts = np.bincount(samples[:, 1], minlength=64)
    assert _p_value(counts, hot[1]) < 1e-6
