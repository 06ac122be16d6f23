"""A machine's profile of a model pair: budget B, latency models, baseline latency, and the
forward's cost against context (a ContextTable per model; profiles saved before it have
none and behave as they did)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from adaserve.engine.weights import cache_root
from adaserve.scheduler import CalibratedLatency, ContextTable, IterationLatency, LatencyModel


@dataclass(frozen=True, slots=True)
class Profile:
    model: str
    draft: str | None
    budget: int  # B (seed 002 §3), by budget_rule
    knee_found: bool  # whether a hinge fit found a bend (informational since budget_rule)
    target: LatencyModel  # T = a*N_ctx + g*N_tok + c for one target forward (seed 000)
    draft_model: LatencyModel | None  # the same for one draft step
    baseline_latency_s: float  # min iteration latency of incremental, batch 8, in 32, out 128
    machine: str
    date: str
    samples: dict  # the raw measurements the fits came from
    # How budget was read off the curve. Profiles saved before the ratio rule have none:
    # "hinge" (the two-segment knee, which picked B = 16 or more on this CPU, where such
    # a verify costs more than speculation repays); the engine does not trust their B.
    budget_rule: str = "hinge"
    # One forward's seconds over requests x tokens per request x context per request
    # (scheduler/context_cost.py); None in profiles saved before it: the engine then
    # prices iterations by the linear models, as it did.
    target_table: ContextTable | None = None
    draft_table: ContextTable | None = None  # timed as the draft runs: its bounded window

    @property
    def budget_trusted(self) -> bool:
        return self.budget_rule.startswith("ratio")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["target"] = self.target.to_dict()
        d["draft_model"] = None if self.draft_model is None else self.draft_model.to_dict()
        for key in ("target_table", "draft_table"):
            table = getattr(self, key)
            d[key] = None if table is None else table.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Profile:
        d = dict(d)
        d["target"] = LatencyModel.from_dict(d["target"])
        if d.get("draft_model") is not None:
            d["draft_model"] = LatencyModel.from_dict(d["draft_model"])
        for key in ("target_table", "draft_table"):
            if d.get(key) is not None:
                d[key] = ContextTable.from_dict(d[key])
        return cls(**d)

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=2))

    @classmethod
    def load(cls, path: Path) -> Profile:
        try:
            return cls.from_dict(json.loads(Path(path).read_text()))
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"{path} is not a valid adaserve profile ({e}); "
                             "run `adaserve profile` again") from e


def default_profile_path(model: str, draft: str | None) -> Path:
    def slug(s: str | None) -> str:
        return "none" if s is None else "".join(c if c.isalnum() else "_" for c in s)[-60:]

    return cache_root() / "profiles" / f"{slug(model)}__{slug(draft)}.json"


def profile_latency(profile: Profile | None, refit: bool,
                    use_table: bool = True) -> CalibratedLatency:
    """The iteration-latency predictor an engine plans with from its profile.

    With a context table (and ``use_table``: the engine's ``context_table`` option) the iteration is priced from the batch's shape (requests, tokens
    per request, mean context; scheduler/context_cost.py) and only its scale is corrected,
    from decode iterations: the online refit is linear in the two sums (refit.py) and would
    flatten the very verify x context shape the table measured. Without one (profiles
    saved before it, or none) the predictor is what it was: the linear models, refitted
    online when ``refit``."""
    if profile is None:
        return CalibratedLatency(None)
    if use_table and profile.target_table is not None:
        draft = None if profile.draft_model is None else (profile.draft_table
                                                          or profile.draft_model)
        return CalibratedLatency(IterationLatency(profile.target_table, draft), decode_only=True)
    return CalibratedLatency(IterationLatency(profile.target, profile.draft_model), refit=refit)
