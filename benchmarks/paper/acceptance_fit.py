"""Fitting the synthetic acceptance model: decode requests on its trees, count what the
walk accepts, and solve its parameters against published tokens per step
(acceptance.py has what is fitted to what, and why)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from benchmarks.paper.acceptance_pairs import MAX_SPREAD, OUTPUT_TOKENS

from adaserve.engine.request import Request
from adaserve.engine.sampling import SamplingParams
from adaserve.scheduler import SLO, SpecPlan
from adaserve.sim import SyntheticAcceptance, SyntheticParams, walk


@dataclasses.dataclass
class Lives:
    """Per request: verification steps, tokens the walk accepted, chain positions matched."""

    steps: np.ndarray  # [n]
    accepted: np.ndarray  # [n]
    matched: np.ndarray  # [n]

    def pooled(self, what: str) -> float:
        """Per request-step, pooled over all requests (each step of each request weighs 1);
        `committed` is the walk's count with the bonus token: accepted + 1."""
        if what == "committed":
            return self.pooled("accepted") + 1
        return float(getattr(self, what).sum() / self.steps.sum())


def run_lives(model: SyntheticAcceptance, plan: SpecPlan, n: int, seed: int,
              prompt: int = 128) -> Lives:
    """n requests (seeds as the driver gives them) decoded to OUTPUT_TOKENS, every node of
    every tree verified, each step's trees and walk as SimExecutor takes them."""
    reqs = [Request(f"r{i}", list(range(prompt)), SamplingParams(), SLO(), seed=(seed << 32) + i)
            for i in range(n)]
    out = Lives(np.zeros(n), np.zeros(n), np.zeros(n))
    active = list(range(n))
    while active:
        t = model.trees([reqs[i] for i in active], plan)
        c = t.candidates
        mask = np.arange(c.width)[None, :] < c.size[:, None]  # [a, N] every real node
        nodes, tokens = walk(c, mask, t.target_token)
        says = np.take_along_axis(t.target_token, np.maximum(c.parent, 0), 1)  # [a, N]
        matched = (mask & (c.parent >= 0) & (c.token == says)).sum(1)  # [a]
        still = []
        for j, i in enumerate(active):
            r = reqs[i]
            out.steps[i] += 1
            out.accepted[i] += len(nodes[j])
            out.matched[i] += matched[j]
            r.tokens.extend(tokens[j][: OUTPUT_TOKENS - (len(r.tokens) - prompt)])
            if len(r.tokens) - prompt < OUTPUT_TOKENS:
                still.append(i)
        active = still
    return out


def chains(params: SyntheticParams, ks: tuple[int, ...], n: int, seed: int) -> dict[int, Lives]:
    model = SyntheticAcceptance(params)
    return {k: run_lives(model, SpecPlan(depth=k, width=1), n, seed) for k in ks}


def fit_alignment(base: SyntheticParams, what: str, ks: tuple[int, ...], target: np.ndarray,
                  n: int, seed: int, start: tuple[float, float] = (0.9, 0.95)
                  ) -> tuple[float, np.ndarray]:
    """The alignment whose chain values have zero k-weighted residual sum (the least-squares
    condition when each value moves in proportion to k), by the secant method in logit."""

    def values(x: float) -> np.ndarray:
        p = dataclasses.replace(base, alignment=float(1 / (1 + np.exp(-x))))
        return np.array([lv.pooled(what) for lv in chains(p, ks, n, seed).values()])

    def g(v: np.ndarray) -> float:
        return float(np.dot(ks, v - target))

    x0, x1 = (float(np.log(a / (1 - a))) for a in start)
    v0, v1 = values(x0), values(x1)
    for _ in range(6):
        if abs(g(v1)) < 0.05 or g(v1) == g(v0):
            break
        x2 = float(np.clip(x1 - g(v1) * (x1 - x0) / (g(v1) - g(v0)), -2.0, 9.0))
        x0, v0, x1, v1 = x1, v1, x2, values(x2)
    return float(1 / (1 + np.exp(-x1))), v1


def fit(base: SyntheticParams, what: str, ks: tuple[int, ...], target: np.ndarray, n: int,
        seed: int, spreads: tuple[float, ...]) -> tuple[SyntheticParams, list[dict]]:
    """Least squares over (alignment, request_spread): the profile over spreads, extended a
    step at a time up to MAX_SPREAD while its largest spread is the best, then a parabola
    through the best grid point and its neighbours."""
    spreads, rows, start = list(spreads), [], (0.9, 0.95)
    while len(rows) < len(spreads):
        s = spreads[len(rows)]
        a, v = fit_alignment(dataclasses.replace(base, request_spread=s), what, ks, target, n,
                             seed, start)
        start = (a, min(a + 0.01, 0.999))
        rows.append({"request_spread": s, "alignment": a, "values": v.tolist(),
                     "sse": float(((v - target) ** 2).sum())})
        print(f"  {what}: request_spread {s:.2f} -> alignment {a:.4f}, "
              f"values {np.round(v, 3).tolist()}, SSE {rows[-1]['sse']:.4f}", flush=True)
        if (len(rows) == len(spreads) > 1 and spreads[-1] < MAX_SPREAD
                and rows[-1]["sse"] == min(r["sse"] for r in rows)):
            spreads.append(round(2 * spreads[-1] - spreads[-2], 2))  # the optimum lies past it
    best = int(np.argmin([r["sse"] for r in rows]))
    s = spreads[best]
    if 0 < best < len(rows) - 1:
        x = np.array(spreads[best - 1:best + 2])
        c = np.polyfit(x, [r["sse"] for r in rows[best - 1:best + 2]], 2)
        if c[0] > 0:
            s = float(np.clip(-c[1] / (2 * c[0]), x[0], x[2]))
    s = round(s, 2)
    if s != spreads[best]:
        a0 = rows[best]["alignment"]
        a, v = fit_alignment(dataclasses.replace(base, request_spread=s), what, ks, target, n,
                             seed, (a0, min(a0 + 0.01, 0.999)))
        rows.append({"request_spread": s, "alignment": a, "values": v.tolist(),
                     "sse": float(((v - target) ** 2).sum()), "refined": True})
    final = min(rows, key=lambda r: r["sse"])
    return dataclasses.replace(base, request_spread=final["request_spread"],
                               alignment=round(final["alignment"], 4)), rows


def fit_miscalibration(base: SyntheticParams, what: str, ks: tuple[int, ...],
                       target: np.ndarray, n: int, seed: int,
                       tree_value: Callable[[SyntheticParams], float], want: float,
                       hi: float = 2.5, steps: int = 8) -> tuple[SyntheticParams, list[dict]]:
    """The draft's miscalibration gamma, fitted so that ``tree_value`` (AdaServe's tokens
    per step where the paper publishes its lightest load, simulated) is ``want``, with the
    chains still fitted: alignment is solved again at every gamma (request_spread held).

    A larger gamma makes the target take a child less often than the draft's q promises
    (q ** gamma); it lowers a tree's yield more than a chain's, whose positions the
    alignment keeps on the published values. Bisection from base's gamma (no lower: if the
    base already yields no more than ``want`` it stays); the value falls with gamma."""
    rows = []

    def probe(gamma: float, start: tuple[float, float]) -> None:
        a, v = fit_alignment(dataclasses.replace(base, miscalibration=gamma), what, ks,
                             target, n, seed, start)
        params = dataclasses.replace(base, miscalibration=round(gamma, 4),
                                     alignment=round(a, 4))
        got = tree_value(params)
        rows.append({"miscalibration": params.miscalibration, "alignment": params.alignment,
                     "chains": v.tolist(), "tree_value": got})
        print(f"  gamma {gamma:.3f}: alignment {a:.4f}, chains {np.round(v, 3).tolist()}, "
              f"AdaServe {got:.3f} (want {want})", flush=True)

    lo_g, hi_g = base.miscalibration, hi
    probe(lo_g, (base.alignment, min(base.alignment + 0.01, 0.999)))
    if rows[-1]["tree_value"] > want:
        for _ in range(steps):
            mid = (lo_g + hi_g) / 2
            a0 = rows[-1]["alignment"]
            probe(mid, (a0, min(a0 + 0.01, 0.999)))
            got = rows[-1]["tree_value"]
            if abs(got - want) < 0.02:
                break
            lo_g, hi_g = (mid, hi_g) if got > want else (lo_g, mid)
    closest = min(rows, key=lambda r: abs(r["tree_value"] - want))
    return dataclasses.replace(base, miscalibration=closest["miscalibration"],
                               alignment=closest["alignment"]), rows
