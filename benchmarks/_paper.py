"""The AdaServe paper's two set-ups as the simulator runs them (issue 19), shared by the
draft-cost calibration and the figure pages.

Each names its hardware model, its acceptance model and the engine limits the artifact's
run scripts give AdaServe (../shared/paper-scale/latency/adaserve_artifact_params.csv, the
"exps/fig8,9|fig10|fig11|fig14|fig15 run scripts" rows): tree depth and width caps and
the batch cap. The baselines get the same batch cap: the kit has no vLLM max-num-seqs for
the paper's runs (vLLM's default is 256), and one cap keeps the comparison about policy.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from adaserve.sim import SimSetup, load_acceptance
from adaserve.sim.acceptance import AcceptanceModel
from adaserve.sim.hardware import HardwareModel

KIT = Path(__file__).resolve().parents[2] / "shared" / "paper-scale"
KIT_REF = "../shared/paper-scale"  # how pages name the kit
PREFILL_CHUNK = 512  # `adaserve simulate`'s default: tokens prefilled per iteration

# The paper's systems, in its legend order, and how they are named here
SYSTEMS = ("adaserve", "sarathi", "vllm", "vllm-spec-4", "vllm-spec-6", "vllm-spec-8")
PAPER_NAME = {"adaserve": "AdaServe", "sarathi": "Sarathi-Serve", "vllm": "vLLM",
              "vllm-spec-4": "vLLM-Spec(4)", "vllm-spec-6": "vLLM-Spec(6)",
              "vllm-spec-8": "vLLM-Spec(8)"}


@dataclass(frozen=True, slots=True)
class PaperSetup:
    key: str  # llama | qwen
    title: str
    hardware: str  # a shipped hardware model (drafting priced: the calibrated one)
    free_draft_hardware: str  # the same without a draft cost (issue 17's model)
    acceptance: str
    max_depth: int
    max_width: int
    max_batch: int
    speculation_share: float  # Fig. 15: speculation's share of AdaServe's iteration time
    # (0: not measured for this pair; its draft borrows the Llama fit's constant)
    draft_params_b: float  # the draft's parameters, billions (LM head included)

    def sim_setup(self, hardware: HardwareModel, policy: str,
                  acceptance: AcceptanceModel | None = None, **changes) -> SimSetup:
        """The simulated server every page runs: this set-up's caps, Eq. 8's depth as
        published, PREFILL_CHUNK; ``changes`` override SimSetup fields (the ablation)."""
        sim = SimSetup(hardware, acceptance or load_acceptance(self.acceptance),
                       policy=policy, max_batch=self.max_batch, prefill_chunk=PREFILL_CHUNK,
                       max_depth=self.max_depth, max_width=self.max_width,
                       cost_aware_depth=False)
        return replace(sim, **changes)


LLAMA = PaperSetup(
    key="llama", title="Llama-3.1-70B-Instruct (TP4 A100), draft Llama-3.2-1B",
    hardware="llama3.1-70b-a100-tp4-draft", free_draft_hardware="llama3.1-70b-a100-tp4",
    acceptance="synthetic-llama3.1-70b-1b", max_depth=8, max_width=3, max_batch=64,
    speculation_share=0.315, draft_params_b=1.236)
QWEN = PaperSetup(
    key="qwen", title="Qwen2.5-32B-Instruct (TP2 A100), draft Qwen2.5-0.5B",
    hardware="qwen2.5-32b-a100-tp2-draft", free_draft_hardware="qwen2.5-32b-a100-tp2",
    acceptance="synthetic-qwen2.5-32b-0.5b", max_depth=5, max_width=3, max_batch=80,
    speculation_share=0.270, draft_params_b=0.494)
SETUPS = {s.key: s for s in (LLAMA, QWEN)}

# Seed 002's own set-up (its §6): Llama-2 targets on A100 from Vidur's profiles, the draft
# Felladrin/Llama-160M-Chat-v1, priced as the paper's drafts are with the per-forward
# constant of the Llama-3.2-1B fit (no breakdown was measured for this pair). The seed
# states no tree caps or batch cap: the engine's defaults (D 8, W 16, batch 64).
SEED_70B = PaperSetup(
    key="seed70b", title="Llama-2-70B-chat (TP4 A100), draft Llama-160M",
    hardware="vidur-llama2-70b-a100-tp4-draft", free_draft_hardware="vidur-llama2-70b-a100-tp4",
    acceptance="synthetic-llama2-70b-160m", max_depth=8, max_width=16, max_batch=64,
    speculation_share=0.0, draft_params_b=0.138)
SEED_7B = PaperSetup(
    key="seed7b", title="Llama-2-7B-chat (TP1 A100), draft Llama-160M",
    hardware="vidur-llama2-7b-a100-tp1-draft", free_draft_hardware="vidur-llama2-7b-a100-tp1",
    acceptance="synthetic-llama2-70b-160m", max_depth=8, max_width=16, max_batch=64,
    speculation_share=0.0, draft_params_b=0.138)
SEED_SETUPS = {s.key: s for s in (SEED_70B, SEED_7B)}
