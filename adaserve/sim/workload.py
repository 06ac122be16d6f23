"""What the simulator serves: requests with arrival times, lengths and TPOT SLOs, from a
paper-trace CSV or from the load generator's arrival schedules."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from adaserve.loadgen.arrivals import Arrival, schedule
from adaserve.loadgen import paper_trace
from adaserve.loadgen.paper_trace import paper_class, read_rows  # noqa: F401 (re-exported)
from adaserve.loadgen.workload import ClassMix, PromptSpec


@dataclass(frozen=True, slots=True)
class SimRequest:
    index: int
    t: float  # seconds after the run starts: when the client sends it
    slo_class: str
    slo_ms: float | None  # TPOT SLO; None: best effort
    prompt_tokens: int
    output_tokens: int  # max_tokens: the cap the client sends
    prompt_ids: tuple[int, ...] | None = None  # the real prompt (replay needs it), else zeros
    slo_relative: bool = False  # the SLO is a multiple of the baseline latency (SLO.relative)
    # Where the model ends the output (its EOS after this many tokens); None: it runs to
    # the cap. Only the simulated model (SimExecutor) reads it: the engine and every
    # policy learn it as a real server does, when the EOS token comes out.
    ends_at: int | None = None

    def __post_init__(self) -> None:
        if self.prompt_ids is not None and len(self.prompt_ids) != self.prompt_tokens:
            raise ValueError(f"request {self.index}: prompt_ids has {len(self.prompt_ids)} "
                             f"tokens, prompt_tokens says {self.prompt_tokens}")
        if self.prompt_tokens < 1 or self.output_tokens < 1:
            raise ValueError(f"request {self.index}: prompt and output need >= 1 token")
        if self.ends_at is not None and not 1 <= self.ends_at <= self.output_tokens:
            raise ValueError(f"request {self.index}: ends_at must lie in [1, output_tokens "
                             f"{self.output_tokens}], got {self.ends_at!r}")
        if not (math.isfinite(self.t) and self.t >= 0):
            raise ValueError(f"request {self.index}: arrival time must be finite and >= 0")


def read_paper_trace(path: Path | str, baseline_ms: float, limit: int | None = None
                     ) -> list[SimRequest]:
    """The AdaServe artifact's trace format (../shared/paper-scale/README.md, traces/):
    slo_ratio > 0 is a multiple of the baseline latency, < 0 an absolute TPOT SLO in ms."""
    out = []
    for i, row in enumerate(read_rows(path, limit)):
        try:
            out.append(SimRequest(i, row.t, row.slo_class, row.slo_ms(baseline_ms),
                                  row.input_length, row.output_length,
                                  slo_relative=row.slo_ratio > 0))
        except ValueError as e:
            raise ValueError(f"{path}, row {i + 2}: {e}") from None
    return out


def from_arrivals(arrivals: Sequence[Arrival], slo_ms: Mapping[str, float | None],
                  prompt_tokens: Callable[[PromptSpec], int],
                  relative: frozenset[str] = frozenset()) -> list[SimRequest]:
    """The load generator's schedule (Poisson, gamma, Azure trace), with each class's TPOT
    SLO and the prompt lengths as the target's tokenizer counts them; ``relative`` names
    the classes stated as multiples of the baseline latency."""
    missing = sorted({a.slo_class for a in arrivals} - set(slo_ms))
    if missing:
        raise ValueError(f"no TPOT SLO given for the classes {missing}")
    return [SimRequest(a.index, a.t, a.slo_class, slo_ms[a.slo_class], prompt_tokens(a.prompt),
                       a.max_tokens, slo_relative=a.slo_class in relative) for a in arrivals]


def fixed_lengths(times: np.ndarray, mix: ClassMix, slo_ms: Mapping[str, float | None],
                  prompt_tokens: int, output_tokens: int, seed: int = 0,
                  mix_draw: str = "exact",
                  relative: frozenset[str] = frozenset()) -> list[SimRequest]:
    """Requests at ``times``, classes assigned as the load generator assigns them (the same
    seed and mix give the same classes), every prompt and output of the given lengths."""
    one = PromptSpec("synthetic", (), output_tokens)
    return from_arrivals(schedule(times, mix, [one], seed, mix_draw=mix_draw), slo_ms,
                         lambda _: prompt_tokens, relative)


def stop_at_eos(requests: Sequence[SimRequest], hazard: float, seed: int = 0
                ) -> list[SimRequest]:
    """The requests with outputs that end at the model's EOS: each output token is the last
    with probability ``hazard``, so a request's length is min(its cap, G), G geometric.
    A trace's output_length is the cap its server was given (the AdaServe artifact's
    --max-output-length); a real model stops earlier. The cap stays what the client sends
    (``output_tokens``, max_tokens); where the output ends goes to ``ends_at``, which only
    the simulated model reads. The lengths are keyed on ``seed`` and the request's index:
    every system run on these requests serves the same lengths."""
    if not (math.isfinite(hazard) and 0 <= hazard < 1):
        raise ValueError(f"the EOS hazard must be in [0, 1), got {hazard!r}")
    if hazard == 0 or not requests:
        return list(requests)
    n = max(r.index for r in requests) + 1
    g = np.random.default_rng([seed, 0xE05]).geometric(hazard, n)  # [n] by request index
    return [dataclasses.replace(r, ends_at=int(g[r.index]) if g[r.index] < r.output_tokens
                                else None) for r in requests]


def output_length(r: SimRequest) -> int:
    """How many tokens the request's output will have: where the model ends it, else the
    cap. For reports and tests; a scheduler never sees it."""
    return r.output_tokens if r.ends_at is None else r.ends_at


def eos_mean(hazard: float, cap: int) -> float:
    """Mean output length at ``cap`` under ``stop_at_eos``: E[min(G, cap)]."""
    return cap if hazard == 0 else (1 - (1 - hazard) ** cap) / hazard


def mean_rate(requests: Sequence[SimRequest]) -> float:
    """Requests per second between the first arrival and the last."""
    return paper_trace.mean_rate([r.t for r in requests])


def at_rate(requests: Sequence[SimRequest], rate: float) -> list[SimRequest]:
    """The same requests with every gap scaled so their mean rate is ``rate`` (as the load
    generator scales a paper trace's)."""
    times = paper_trace.at_rate([r.t for r in requests], rate)
    return [dataclasses.replace(r, t=t) for r, t in zip(requests, times)]
