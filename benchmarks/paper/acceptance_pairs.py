"""The model pairs whose acceptance is fitted to published tokens per step, and where
their points are (acceptance.py; ../shared/paper-scale/acceptance/)."""

from __future__ import annotations

import csv
import dataclasses
from pathlib import Path

from benchmarks.paper.kit import KIT  # noqa: F401 (the kit, for the scripts that fit)

OUTPUT_TOKENS = 256  # the paper's fixed output length (Figs. 8, 9, 12)
SPREADS = (0.0, 0.5, 1.0)
MAX_SPREAD = 3.0
# Spec-Bench's SpS passes no num_assistant_tokens (evaluation/inference_sps.py) and pins
# transformers 4.37.1, whose GenerationConfig starts the draft at 5 tokens on the
# "heuristic" schedule: +2 after a step that accepts them all, -1 otherwise (floor 1).
SEED_K = 5
LLAMA_SPREAD = 0.54  # the Llama pair's fitted request_spread (synthetic-llama3.1-70b-1b)

# What a pair's published tokens per step count, by the Lives.pooled name that matches it.
COUNTS = {
    "matched": "vLLM-Spec(k) counted as vLLM v0 counts accepted draft tokens: every chain "
               "position whose token is the target's choice after the draft's own prefix, "
               "also past the first rejection, no bonus. AdaServe's count is the walk's: "
               "accepted + the bonus.",
    "committed": "SpS counted as Spec-Bench counts it (model/sps/decoding.py, "
                 "`new_cur_len - cur_len` per step): the draft tokens accepted up to the "
                 "first mismatch plus the target's bonus token, the walk's count + 1.",
}


@dataclasses.dataclass(frozen=True)
class Pair:
    """A model pair: where its published points are, what they count, where its fit goes."""

    target: str  # the kit CSV's `target` column
    model: str  # acceptance model name: adaserve/sim/data/acceptance/<model>.json
    page: str  # results/<page>.{md,json}
    title: str  # "target / draft", the page's title
    source: str  # "draft -> target", the model file's source text
    depths: tuple[int, ...]  # AdaServe-shaped check trees (width 3), the artifact's range
    method: str = "vLLM-Spec"  # the kit CSV's `method`: "<method>(k)" rows, or a one-chain one
    count: str = "matched"  # what the points count: a COUNTS key
    chains: tuple[int, ...] = (4, 6, 8)  # draft lengths of the fitted chains
    request_spread: float | None = None  # None: fitted with alignment; else held there
    figure: str = "the paper's Fig. 12"  # where the points are published
    data: str = "Fig. 12, values read off the plot, about +/-0.05"
    others: tuple[str, ...] = ()  # the method's other targets: a trend check, not fitted
    caveats: tuple[str, ...] = ()  # said on the page and in the model file's source


PAIRS = {
    "llama": Pair("meta-llama/Llama-3.1-70B-Instruct", "synthetic-llama3.1-70b-1b",
                  "sim/acceptance-fit-llama70b", "Llama-3.1-70B / Llama-3.2-1B",
                  "Llama-3.2-1B -> Llama-3.1-70B", (4, 5, 6, 7, 8)),
    # the artifact's Qwen run scripts: max tree depth 5, min depth 3, width 3
    "qwen": Pair("Qwen/Qwen2.5-32B-Instruct", "synthetic-qwen2.5-32b-0.5b",
                 "sim/acceptance-fit-qwen32b", "Qwen2.5-32B / Qwen2.5-0.5B",
                 "Qwen2.5-0.5B -> Qwen2.5-32B", (3, 4, 5)),
    # Nothing is published for the seed's Llama-2-70B-chat / Llama-160M-Chat-v1: Spec-Bench's
    # small-draft SpS on its largest target stands in; one point cannot fit two parameters.
    "seed": Pair("lmsys/vicuna-33b-v1.3", "synthetic-llama2-70b-160m", "sim/acceptance-fit-seed",
                 "Llama-2-70B-chat / Llama-160M-Chat-v1 (stand-in: vicuna-33b / vicuna-68m)",
                 "vicuna-68m -> vicuna-33b-v1.3", (2, 3, 4, 5), method="SpS",
                 count="committed", chains=(SEED_K,), request_spread=LLAMA_SPREAD,
                 figure="Spec-Bench's SpS (a stand-in)",
                 data="Spec-Bench Leaderboard.md @ fd2c1cd, SpS, 1x A100-80GB, greedy, "
                      "batch 1, 480 prompts; printed to 2 decimals",
                 others=("lmsys/vicuna-7b-v1.3", "lmsys/vicuna-13b-v1.3"),
                 caveats=(
                     "Nothing is published for the seed paper's pair (Felladrin/"
                     "Llama-160M-Chat-v1 drafting for Llama-2-70B-chat, A100): Spec-Bench's "
                     "SpS, vicuna-68m drafting for vicuna-33b-v1.3, stands in, a separate "
                     "small draft for the largest LLaMA-family target published.",
                     f"Draft length k = {SEED_K}: Spec-Bench's evaluation/inference_sps.py "
                     "passes no num_assistant_tokens and its requirements.txt pins "
                     "transformers 4.37.1, whose default is 5 on the dynamic \"heuristic\" "
                     "schedule (+2 after a step that accepts every draft token, -1 otherwise, "
                     "floor 1; Spec-Bench carries it from one request to the next). 5 is the "
                     "schedule's initial value, not its running mean.")),
}


def paper_points(kit: Path, pair: Pair
                 ) -> tuple[dict[int, float], dict[float, float], dict[str, float]]:
    """One pair's published points: its method by chain length k, AdaServe by RPS (the
    paper's pairs only), and the method's value for each of `pair.others`."""
    spec, ada, others = {}, {}, {}
    with open(kit / "acceptance/mean_accepted_tokens.csv", newline="") as f:
        for row in csv.DictReader(f):
            method, tau = row["method"], float(row["tau"])
            k = None
            if method.startswith(f"{pair.method}("):
                k = int(method[len(pair.method) + 1:].split(")")[0])
            elif method == pair.method and len(pair.chains) == 1:
                k = pair.chains[0]  # a method published at one draft length, unnamed
            if row["target"] == pair.target:
                if k is not None:
                    spec[k] = tau
                elif method.startswith("AdaServe"):
                    ada[float(row["dataset"].rsplit("RPS ", 1)[1])] = tau
            elif row["target"] in pair.others and k is not None:
                others[row["target"]] = tau
    return spec, ada, others
