"""A machine's profile of a model pair: budget B, latency models, baseline latency."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from adaserve.engine.weights import cache_root
from adaserve.scheduler import LatencyModel


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

    @property
    def budget_trusted(self) -> bool:
        return self.budget_rule.startswith("ratio")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["target"] = self.target.to_dict()
        d["draft_model"] = None if self.draft_model is None else self.draft_model.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Profile:
        d = dict(d)
        d["target"] = LatencyModel.from_dict(d["target"])
        if d.get("draft_model") is not None:
            d["draft_model"] = LatencyModel.from_dict(d["draft_model"])
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
