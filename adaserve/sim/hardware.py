"""Hardware models: what one forward of the target or the draft costs, as data files.

A model names its target, draft, GPU, TP and source, and prices a forward of N tokens over
N_ctx cached context tokens by one of two cost kinds:
- ``linear``: TurboSpec's T = alpha*N_ctx + gamma*N + delta (seed 000 Eq. 3), which is what
  ``adaserve profile`` fits on the machine at hand;
- ``table``: a measured latency-vs-tokens table (linear interpolation, extrapolated along
  the last segment) plus the memory-bound attention term, ms per 1,000 cached tokens
  (../shared/paper-scale/README.md, "Decode/verify attention term");
- ``context-table``: `adaserve profile`'s context table (scheduler/context_cost.py): one
  forward's seconds over requests x tokens per request x context per request, so a batch
  is priced from its shape and mean context, and long contexts as they were measured
  (`python -m adaserve.sim.from_profile` writes such a model from a saved profile); a
  prefill chunk is one request of its tokens, past the table's 8 extrapolated linearly.
The shipped models live in adaserve/sim/data/hardware/*.json; `HardwareModel.load` takes a
name there or a path to a user's own file (docs/sim-models.md says how to make one).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

from adaserve.scheduler import ContextTable, LatencyModel

DATA = Path(__file__).parent / "data" / "hardware"


class ForwardCost(Protocol):
    def predict(self, context_tokens: int, batch_tokens: int,
                requests: int | None = None) -> float:
        """Seconds for one forward of batch_tokens tokens over context_tokens cached ones,
        over ``requests`` requests (read by the context table only; None: one)."""


@dataclass(frozen=True, slots=True)
class TableCost:
    """A latency table over batch tokens plus a per-context-token attention term."""

    tokens: tuple[float, ...]  # increasing
    ms: tuple[float, ...]
    attention_ms_per_1k_context: float = 0.0

    def __post_init__(self) -> None:
        t, m = np.asarray(self.tokens, float), np.asarray(self.ms, float)
        if t.size < 2 or t.shape != m.shape or np.any(np.diff(t) <= 0):
            raise ValueError("a latency table needs >= 2 rows with increasing token counts")
        if not (np.all(np.isfinite(m)) and np.all(m >= 0)):
            raise ValueError("latency table times must be finite and >= 0 ms")
        if not (math.isfinite(self.attention_ms_per_1k_context)
                and self.attention_ms_per_1k_context >= 0):
            raise ValueError("attention_ms_per_1k_context must be finite and >= 0")

    def cheapest_segment_start(self) -> int:
        """The token count where the table's marginal cost per token first reaches its
        lowest: from there on a verified token costs the least it ever will. The paper
        set-ups' verify budget B (docs/sim.md, the choice table): its EuroSys version takes
        B from profiling, "an optimal budget that balances throughput and latency", and
        states no value."""
        t, m = np.asarray(self.tokens, float), np.asarray(self.ms, float)
        slopes = np.diff(m) / np.diff(t)
        return int(t[int(np.flatnonzero(np.isclose(slopes, slopes.min()))[0])])

    def predict(self, context_tokens: int, batch_tokens: int,
                requests: int | None = None) -> float:
        t, m = self.tokens, self.ms  # prices the sums: ``requests`` is not read
        x = float(batch_tokens)
        if x > t[-1]:  # extrapolate along the last segment
            ms = m[-1] + (x - t[-1]) * (m[-1] - m[-2]) / (t[-1] - t[-2])
        else:
            ms = float(np.interp(x, t, m))
        return (ms + self.attention_ms_per_1k_context * context_tokens / 1e3) / 1e3


def _cost(d: dict) -> ForwardCost:
    kind = d.get("kind")
    if kind == "linear":
        return LatencyModel.from_dict(d)
    if kind == "table":
        return TableCost(tuple(d["tokens"]), tuple(d["ms"]),
                         float(d.get("attention_ms_per_1k_context", 0.0)))
    if kind == "context-table":
        return ContextTable.from_dict(d)
    raise ValueError(f"a forward cost needs kind 'linear', 'table' or 'context-table', "
                     f"got {kind!r}")


@dataclass(frozen=True, slots=True)
class HardwareModel:
    """What the simulator charges for each part of an iteration."""

    name: str
    target_model: str
    draft_model: str | None
    gpu: str
    tp: int
    source: str
    target: ForwardCost
    draft: ForwardCost | None  # None: drafting is free (not measured)
    budget: int  # B, the token budget the engine would profile on this hardware
    baseline_latency_ms: float  # the SLO unit (DESIGN.md "Definitions")
    iteration_overhead_ms: float = 0.0  # host-side time per decoding iteration
    # True: a forward costs its padded rows, requests x the longest request's tokens (the
    # embedded engine's batches, and how `adaserve profile` measured them); False: the
    # tokens themselves (packed batches, as the paper's systems run them)
    pads_rows: bool = False
    # True: an iteration's prefill chunk and its verify tokens run as one target forward
    # (Sarathi-Serve's fused batch: one weight read on a GPU); False: two forwards, as the
    # embedded engine runs them (prefill, then verify)
    fuses_prefill: bool = False
    # vLLM's engine (the baselines' -vllm models): a decode or verify forward over more than
    # `graph_max_batch` sequences is `eager_ms` slower. The names say where the step was
    # first placed, CUDA-graph capture; the paper models fit it as a proxy for their
    # speculative chains' collapse under load (benchmarks/paper/calibrate.py,
    # GRAPH_MAX_BATCH). None: not modelled. (Prefill forwards are priced by the table
    # alone: it was measured on FlexFlow's forwards, graphs or not.)
    graph_max_batch: int | None = None
    eager_ms: float = 0.0
    # vLLM 0.8's speculative scorer with CUDA graphs on (its MQA scorer needs eager mode):
    # batch expansion, one decode sequence per verified position of each request, so the
    # forward decodes sum(selected) sequences and reads each request's KV once per position
    expands_batch: bool = False
    notes: tuple[str, ...] = field(default=())

    def batch_tokens(self, per_request: Sequence[int]) -> int:
        """What a forward over these requests' tokens costs as: padded rows or the sum."""
        if self.pads_rows:
            return len(per_request) * max(per_request, default=0)
        return int(sum(per_request))

    def prefill_s(self, context_tokens: int, chunk_tokens: Sequence[int],
                  with_draft: bool = True) -> float:
        """One prefill forward of the target, and of the draft when the engine runs one (it
        feeds the draft the same chunks)."""
        n, rows = self.batch_tokens(chunk_tokens), len(chunk_tokens)
        t = self.target.predict(context_tokens, n, rows)
        if with_draft and self.draft is not None:
            t += self.draft.predict(context_tokens, n, rows)
        return t

    def draft_s(self, context_tokens: int, step_tokens: Sequence[int],
                requests: int | None = None) -> float:
        """Draft steps of the given batch tokens each, over ``requests`` requests (read by a
        context table only)."""
        if self.draft is None:
            return 0.0
        return sum(self.draft.predict(context_tokens, k, requests) for k in step_tokens)

    def verify_s(self, context_tokens: int, selected: Sequence[int]) -> float:
        """The target forward over each request's selected tokens, and the host overhead."""
        return (self.target.predict(self._read_context(context_tokens, selected),
                                    self.batch_tokens(selected), len(selected))
                + (self._eager_s(selected) + self.iteration_overhead_ms) / 1e3)

    def _read_context(self, context_tokens: int, selected: Sequence[int]) -> float:
        """Cached tokens the forward reads: each request's once, or once per verified
        position with batch expansion (the batch's mean positions per request)."""
        if not self.expands_batch or not selected:
            return context_tokens
        return context_tokens * sum(selected) / len(selected)

    def _eager_s(self, selected: Sequence[int]) -> float:
        """ms a decode forward loses to running eagerly (graph_max_batch), 0 when captured."""
        if self.graph_max_batch is None:
            return 0.0
        sequences = sum(selected) if self.expands_batch else len(selected)
        return self.eager_ms if sequences > self.graph_max_batch else 0.0

    def fused_verify_s(self, context_tokens: int, selected: Sequence[int],
                       prefill_context: int, chunk_tokens: Sequence[int]) -> float:
        """``verify_s`` when the verify forward carries the iteration's prefill chunk too
        (``fuses_prefill``): one target forward over the chunks and the selected tokens,
        less the target's prefill forward that ``prefill_s`` has charged already."""
        fused = self.target.predict(prefill_context + self._read_context(context_tokens, selected),
                                    self.batch_tokens([*chunk_tokens, *selected]),
                                    len(chunk_tokens) + len(selected))
        alone = self.target.predict(prefill_context, self.batch_tokens(chunk_tokens),
                                    len(chunk_tokens))
        # a measured table need not grow with tokens (Vidur's all-reduce steps: 39.3 ms at
        # 16 tokens, 33.1 at 32 on llama3-70b TP4), so the fused forward can price below the
        # prefill alone; the verify tokens then ride along for free, never back in time
        return max(fused - alone, 0.0) + (self._eager_s(selected)
                                          + self.iteration_overhead_ms) / 1e3

    @classmethod
    def from_dict(cls, d: dict) -> HardwareModel:
        try:
            return cls(name=d["name"], target_model=d["target_model"],
                       draft_model=d.get("draft_model"), gpu=d["gpu"], tp=int(d["tp"]),
                       source=d["source"], target=_cost(d["target"]),
                       draft=None if d.get("draft") is None else _cost(d["draft"]),
                       budget=int(d["budget"]),
                       baseline_latency_ms=float(d["baseline_latency_ms"]),
                       iteration_overhead_ms=float(d.get("iteration_overhead_ms", 0.0)),
                       pads_rows=bool(d.get("pads_rows", False)),
                       fuses_prefill=bool(d.get("fuses_prefill", False)),
                       graph_max_batch=(None if d.get("graph_max_batch") is None
                                        else int(d["graph_max_batch"])),
                       eager_ms=float(d.get("eager_ms", 0.0)),
                       expands_batch=bool(d.get("expands_batch", False)),
                       notes=tuple(d.get("notes", ())))
        except KeyError as e:
            raise ValueError(f"hardware model {d.get('name', '?')} lacks the field {e}") from None

    @classmethod
    def load(cls, name_or_path: str | Path) -> HardwareModel:
        """A shipped model by name (see `available()`), or a JSON file."""
        path = Path(name_or_path)
        if not path.is_file():
            path = DATA / f"{name_or_path}.json"
        if not path.is_file():
            raise ValueError(f"no hardware model {name_or_path!r}; shipped: "
                             f"{', '.join(available())}, or give a JSON file")
        return cls.from_dict(json.loads(path.read_text()))


def available() -> list[str]:
    return sorted(p.stem for p in DATA.glob("*.json"))


def linear_fit(cost: ForwardCost) -> LatencyModel:
    """The linear latency model `adaserve profile` would fit on this hardware: the model
    itself if it is one, else a fit over 1..1,024 tokens and 0..64k context tokens."""
    if isinstance(cost, LatencyModel):
        return cost
    tokens = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
    ctx = [0, 16_384, 65_536]
    grid = [(c, t) for c in ctx for t in tokens]
    return LatencyModel.fit([c for c, _ in grid], [t for _, t in grid],
                            [cost.predict(c, t) for c, t in grid])
