"""The AdaServe paper's set-ups as the simulator runs them, shared by the calibrations and
the figure pages.

Each names its deployment (adaserve/sim/data/setups/<name>.json: hardware, acceptance,
output lengths and every system's engine settings, each with its source; docs/sim.md's
choice table), and what the calibrations fit it to.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from adaserve.sim import SimSetup
from adaserve.sim.hardware import HardwareModel
from adaserve.sim.setups import Deployment
from adaserve.sim.workload import SimRequest, read_paper_trace, stop_at_eos

from benchmarks.shared.common import KIT  # noqa: F401 (the kit, read by every paper page)
KIT_REF = "../shared/paper-scale"  # how pages name the kit
EOS_SEED = 0  # the calibrations' draw of output lengths; a figure run draws with its own seed

# The paper's systems, in its legend order, and how they are named here
SYSTEMS = ("adaserve-authors", "sarathi", "vllm", "vllm-spec-4", "vllm-spec-6", "vllm-spec-8")
PAPER_NAME = {"adaserve-authors": "AdaServe", "sarathi": "Sarathi-Serve", "vllm": "vLLM",
              "vllm-spec-4": "vLLM-Spec(4)", "vllm-spec-6": "vLLM-Spec(6)",
              "vllm-spec-8": "vLLM-Spec(8)"}
BASELINES = SYSTEMS[1:]
# the preset ``adaserve`` before prefill=yield and admit=deadline joined it (issue 38), the
# spec that runs it now: ablated on the test set, run on Fig. 14, and what the fleet's
# replicas still run
BEFORE = "adaserve:prefill=chunk,admit=fifo"


@dataclass(frozen=True, slots=True)
class PaperSetup:
    key: str  # llama | qwen | seed70b | seed7b
    title: str
    deployment: str  # adaserve/sim/data/setups/<deployment>.json
    free_draft_hardware: str  # the hardware model with no draft cost (the draft is fitted on it)
    speculation_share: float  # Fig. 15: speculation's share of AdaServe's iteration time
    # (0: not measured for this pair; its draft borrows the Llama fit's constant)
    draft_params_b: float  # the draft's parameters, billions (LM head included)
    lowest_rate: str = ""  # Fig. 8's first point (the calibrations' reference), "" for none

    @property
    def deploy(self) -> Deployment:
        return _deployment(self.deployment)

    @property
    def hardware(self) -> str:
        """AdaServe's hardware model (the baselines may run another: deploy.systems)."""
        return self.deploy.hardware

    @property
    def acceptance(self) -> str:
        return self.deploy.acceptance

    @property
    def engine(self) -> dict[str, Any]:
        return dict(self.deploy.engine)

    def sim_setup(self, system: str, **overrides: Any) -> SimSetup:
        """The simulated server ``system`` runs on here; ``overrides`` are SimSetup fields
        (``hardware`` may be a HardwareModel, ``acceptance`` a model): calibrations and the
        ablation change one at a time."""
        return self.deploy.setup(system, **overrides)

    def requests(self, trace: Path, eos_seed: int = EOS_SEED) -> list[SimRequest]:
        """A paper trace as this set-up serves it: the SLOs in its baseline's units, the
        outputs ending at EOS (the deployment's hazard; ``eos_seed`` draws where)."""
        base = HardwareModel.load(self.hardware).baseline_latency_ms
        return stop_at_eos(read_paper_trace(trace, base), self.deploy.eos_hazard, eos_seed)


@functools.lru_cache(maxsize=None)
def _deployment(name: str) -> Deployment:
    return Deployment.load(name)


LLAMA = PaperSetup(
    key="llama", title="Llama-3.1-70B-Instruct (TP4 A100), draft Llama-3.2-1B",
    deployment="paper-llama3.1-70b", free_draft_hardware="llama3.1-70b-a100-tp4",
    speculation_share=0.315, draft_params_b=1.236, lowest_rate="2.6")
QWEN = PaperSetup(
    key="qwen", title="Qwen2.5-32B-Instruct (TP2 A100), draft Qwen2.5-0.5B",
    deployment="paper-qwen2.5-32b", free_draft_hardware="qwen2.5-32b-a100-tp2",
    speculation_share=0.270, draft_params_b=0.494, lowest_rate="2.4")
SETUPS = {s.key: s for s in (LLAMA, QWEN)}

# Seed 002's own set-up (its §6): Llama-2 targets on A100 from Vidur's profiles, the draft
# Felladrin/Llama-160M-Chat-v1, priced as the paper's drafts are with the per-forward
# constant of the Llama-3.2-1B fit (no breakdown was measured for this pair).
SEED_70B = PaperSetup(
    key="seed70b", title="Llama-2-70B-chat (TP4 A100), draft Llama-160M",
    deployment="seed-llama2-70b", free_draft_hardware="vidur-llama2-70b-a100-tp4",
    speculation_share=0.0, draft_params_b=0.138)
SEED_7B = PaperSetup(
    key="seed7b", title="Llama-2-7B-chat (TP1 A100), draft Llama-160M",
    deployment="seed-llama2-7b", free_draft_hardware="vidur-llama2-7b-a100-tp1",
    speculation_share=0.0, draft_params_b=0.138)
SEED_SETUPS = {s.key: s for s in (SEED_70B, SEED_7B)}
