"""Named simulated deployments: a hardware model, an acceptance model, the workload's output
lengths and each serving system's engine settings, as one data file
(adaserve/sim/data/setups/*.json, each with its sources).

The paper's set-ups (`paper-llama3.1-70b`, `paper-qwen2.5-32b`) are the AdaServe authors'
servers as their artifact ran them, and the baselines as it ran theirs; docs/sim-authors.md's
choice table says where every value comes from. `adaserve simulate --setup NAME` runs one,
and any flag given beside it overrides that one value.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adaserve.scheduler import AdaServeRules
from adaserve.sim.driver import SimSetup
from adaserve.sim.hardware import HardwareModel
from adaserve.sim.models import load_acceptance

DATA = Path(__file__).parent / "data" / "setups"
# the SimSetup fields a set-up file may give, for every system or for one
ENGINE_FIELDS = ("prefill_mode", "budget", "max_batch", "prefill_chunk", "max_depth",
                 "max_width", "min_depth", "draft_budget", "cost_aware_depth",
                 "planning_draft_ms", "rules", "slo_drop_slack")


@dataclass(frozen=True, slots=True)
class Deployment:
    """One set-up file: what is simulated, per system."""

    name: str
    title: str
    source: str
    hardware: str  # a shipped hardware model name or a file
    acceptance: str
    eos_hazard: float = 0.0  # per output token (adaserve.sim.workload.stop_at_eos); 0: none
    engine: Mapping[str, Any] = field(default_factory=dict)  # every system's settings
    # per system: settings that differ, and "hardware" for a system run on other hardware;
    # a spec with options (adaserve:pace=off) runs with its preset's entry
    systems: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for where, settings in (("engine", self.engine), *self.systems.items()):
            unknown = set(settings) - set(ENGINE_FIELDS) - {"hardware"}
            if unknown or (where == "engine" and "hardware" in settings):
                raise ValueError(f"set-up {self.name}: {where} has unknown settings "
                                 f"{sorted(unknown or {'hardware'})}; allowed: "
                                 f"{', '.join(ENGINE_FIELDS)} (and per system: hardware)")

    def settings_of(self, system: str) -> Mapping[str, Any]:
        """The settings a system (or a spec, by its preset's name) has beyond ``engine``."""
        return self.systems.get(system.partition(":")[0], {})

    def hardware_of(self, system: str) -> str:
        return self.settings_of(system).get("hardware", self.hardware)

    def setup(self, system: str, **overrides: Any) -> SimSetup:
        """The SimSetup a system runs on here; ``overrides`` (SimSetup fields) win."""
        settings = {**self.engine, **self.settings_of(system), **overrides}
        hardware = settings.pop("hardware", None) or self.hardware_of(system)
        hw = HardwareModel.load(hardware) if isinstance(hardware, (str, Path)) else hardware
        acceptance = settings.pop("acceptance", None) or load_acceptance(self.acceptance)
        if isinstance(settings.get("rules"), Mapping):  # as the file writes them
            settings["rules"] = AdaServeRules(**settings["rules"])
        return SimSetup(hw, acceptance, policy=system, **settings)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Deployment:
        try:
            return cls(name=d["name"], title=d["title"], source=d["source"],
                       hardware=d["hardware"], acceptance=d["acceptance"],
                       eos_hazard=float(d.get("eos_hazard", 0.0)),
                       engine=dict(d.get("engine", {})),
                       systems={k: dict(v) for k, v in d.get("systems", {}).items()},
                       notes=tuple(d.get("notes", ())))
        except KeyError as e:
            raise ValueError(f"set-up {d.get('name', '?')} lacks the field {e}") from None

    @classmethod
    def load(cls, name_or_path: str | Path) -> Deployment:
        path = Path(name_or_path)
        if not path.is_file():
            path = DATA / f"{name_or_path}.json"
        if not path.is_file():
            raise ValueError(f"no set-up {name_or_path!r}; shipped: {', '.join(available())}, "
                             "or give a JSON file")
        return cls.from_dict(json.loads(path.read_text()))


def available() -> list[str]:
    return sorted(p.stem for p in DATA.glob("*.json"))
