"""One server's measured run for benchmarks/sglang/cpu.py: the client side (streamed
requests, closed loop, TTFT/TPOT as the client sees them), the server side (the ADASERVE
worker's iteration log over the same window) and a load-generator run."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

CLASSES = ("urgent", "moderate", "relaxed")
MULTIPLES = {"urgent": 1.0, "moderate": 2.4, "relaxed": 8.0}  # DESIGN.md's default classes


def stream_one(url: str, text: str, tokens: int, slo_class: str | None) -> dict:
    """One streamed greedy /generate (the same route and body on every server)."""
    headers = {"X-SLO-Class": slo_class} if slo_class else {}
    body = {"text": text, "stream": True, "sampling_params": {
        "temperature": 0, "ignore_eos": True, "max_new_tokens": tokens}}
    t0 = time.perf_counter()
    arrivals, last = [], None
    with httpx.stream("POST", url + "/generate", json=body, headers=headers,
                      timeout=1800) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                last = json.loads(line[6:])
                arrivals.append(time.perf_counter())
    meta = last["meta_info"]
    n = int(meta["completion_tokens"])
    # TPOT from the first streamed chunk to the last; a chunk may carry several tokens
    tpot = (arrivals[-1] - arrivals[0]) / (n - 1) if n > 1 and len(arrivals) > 1 else None
    if meta.get("spec_verify_ct"):  # SGLang: every verify step emits >= 1 token
        accepted = n / int(meta["spec_verify_ct"])
    else:
        accepted = meta.get("accepted_tokens_per_step")  # embedded
    return {"class": slo_class, "tokens": n, "ttft_s": arrivals[0] - t0, "tpot_s": tpot,
            "accepted": accepted, "ids": last.get("output_ids")}


def greedy_ids(url: str, prompts: list[str], tokens: int) -> list[list[int] | None]:
    return [stream_one(url, p, tokens, None)["ids"] for p in prompts]


def drive(url: str, prompts: list[str], tokens: int, concurrency: int,
          classes: list[str]) -> tuple[list[dict], float, float, float]:
    """The closed-loop workload: (records, wall seconds, start and end on the clock the
    iteration log stamps, time.time())."""
    start, t0 = time.time(), time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        recs = list(pool.map(lambda pc: stream_one(url, pc[0], tokens, pc[1]),
                             zip(prompts, classes)))
    return recs, time.perf_counter() - t0, start, time.time()


def per_class(recs: list[dict], slo_ms: dict[str, float]) -> dict:
    out = {}
    for c in CLASSES:
        rs = [r for r in recs if r["class"] == c]
        if not rs:
            continue
        acc = [r["accepted"] for r in rs if r["accepted"] is not None]
        tp = [r["tpot_s"] * 1e3 for r in rs if r["tpot_s"] is not None]
        out[c] = {"n": len(rs), "slo_ms": slo_ms[c],
                  "accepted_per_step": statistics.mean(acc) if acc else None,
                  "tpot_ms": statistics.median(tp) if tp else None,
                  "ttft_ms": statistics.median(r["ttft_s"] * 1e3 for r in rs),
                  "attained": sum(t <= slo_ms[c] for t in tp) / len(rs)}
    return out


def iterations(log: Path, start: float, end: float, ragged: bool | None = None) -> dict | None:
    """The worker's decoding iterations between ``start`` and ``end`` (epoch seconds; each
    line is stamped when its iteration ended), those of one verify if ``ragged`` is given,
    summarized: medians of the phase times, means of the token counts, accepted tokens per
    step = emitted / requests, and emitted tokens per second of iteration time."""
    if not log.exists():
        return None
    its = [json.loads(x) for x in log.read_text().splitlines() if x.strip()]
    its = [i for i in its if start <= i["t"] - i["seconds"] and i["t"] <= end
           and (ragged is None or i["ragged"] == ragged)]
    if not its:
        return None

    def med(key: str) -> float:
        return statistics.median(i[key] for i in its) * 1e3

    def mean(key: str) -> float:
        return statistics.mean(i[key] for i in its)

    stepped = [i for i in its if i["draft_steps"] > 0 and i["verify_s"] > 0]
    return {"iterations": len(its), "iteration_ms": med("seconds"), "draft_ms": med("draft_s"),
            "verify_ms": med("verify_s"), "extend_ms": med("extend_s"),
            "verify_tokens": mean("verify_tokens"), "layout_tokens": mean("layout_tokens"),
            "selected_tokens": mean("selected_tokens"), "running": mean("running"),
            "accepted_per_step": sum(i["emitted_tokens"] for i in its)
            / sum(i["running"] for i in its),
            "emitted_per_s": sum(i["emitted_tokens"] for i in its)
            / sum(i["seconds"] for i in its),
            "ragged": all(i["ragged"] for i in its),
            "over_budget": sum(i["verify_tokens"] > max(i["budget"], i["running"])
                               for i in its if i["ragged"]),
            # a draft step (one draft forward over the n x w beams, and its top-k) against
            # the target's verify forward in the same iteration, and the tokens per request
            # each computed
            "draft_step_ms": (statistics.median(i["draft_steps_s"] / i["draft_steps"]
                                                for i in stepped) * 1e3 if stepped else None),
            "draft_step_tokens": (statistics.mean(i["width"] for i in stepped)
                                  if stepped else None),
            "verify_tokens_per_request": mean("verify_tokens") / mean("running"),
            "select_ms": med("select_s"),
            "draft_to_target": (statistics.median(i["draft_steps_s"] / i["draft_steps"]
                                                  / i["verify_s"] for i in stepped)
                                if stepped else None)}


def loadgen(host: str, out: Path, rate: float, requests: int, tokens: int, seed: int,
            class_tpot_ms: dict[str, float] | None, prompts: str = "short") -> dict:
    """`adaserve loadgen` against ``host`` (its command, as a user would run it); its
    summary.json rows by class. Where the classes' milliseconds are given, both backends are
    judged against their own baseline's multiples whatever their /server_info says; None:
    each request names its class only, and the server's classes judge it."""
    cmd = [sys.executable, "-m", "adaserve.cli", "loadgen", "--host", host, "--rate", str(rate),
           "--requests", str(requests), "--prompts", prompts, "--max-tokens", str(tokens),
           "--mix-exact", "--seed", str(seed), "--out", str(out)]
    if class_tpot_ms is not None:
        spec = ",".join(f"{k}={v:.3f}" for k, v in class_tpot_ms.items())
        cmd[-2:-2] = ["--class-tpot-ms", spec]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    summary = json.loads((out / "summary.json").read_text())
    return {"command": "adaserve loadgen " + " ".join(cmd[4:]),
            "rows": {r["slo_class"]: r for r in summary["rows"]}}
