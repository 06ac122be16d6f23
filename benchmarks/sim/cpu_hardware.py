"""The CPU hardware models of the simulator, fitted from measurements (issue 17).

Two models, both written as data files into adaserve/sim/data/hardware/:

- ``cpu-smollm2-135m-table``: each forward as `adaserve profile` measured it, the engine
  alone on a quiet machine. A table over batch tokens (the profile's own grid) plus one
  context term shared by all rows, least squares over every sample. The shipped
  ``cpu-smollm2-135m`` is the profile's linear T = alpha*N_ctx + gamma*N + delta, which
  misses the small-N end by ~17 ms (61 ms for one token, where the profile measured 43).
- ``cpu-smollm2-135m-served``: the same forwards as the served engine takes them, from the
  iteration logs of a bench sweep (`adaserve serve --iteration-log`). Two numbers are
  fitted, on one policy's iterations only (``--fit-policy``, default incremental: it
  drafts nothing, so every second of its iterations is a target forward or host time):
  a factor on every forward (the engine shares 2 cores with the HTTP server and the load
  generator) and a host time per decoding iteration. The other policies' iterations are
  held out: the page shows how well the fit predicts them.

    python -m benchmarks.sim.cpu_hardware [--profile P.json] [--sweep results/rate ...]

Prints the fit and the held-out residuals; writes results/sim/cpu-hardware.{md,json}.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path

import numpy as np

from benchmarks.shared.common import RESULTS, commit, machine

from adaserve.scheduler import SpecPlan
from adaserve.sim.hardware import DATA, HardwareModel

TARGET, DRAFT = "smollm2-135m", "smollm2-135m-distilled"


def table_fit(samples: dict) -> dict:
    """One latency per batch-token count plus one shared slope per context token."""
    tok = np.asarray(samples["batch_tokens"], float)
    ctx = np.asarray(samples["context_tokens"], float)
    sec = np.asarray(samples["seconds"], float)
    grid = np.unique(tok)
    onehot = (tok[:, None] == grid[None, :]).astype(float)
    design = np.concatenate([onehot, ctx[:, None] / 1e3], axis=1)
    coef, *_ = np.linalg.lstsq(design, sec * 1e3, rcond=None)
    ms, per_1k = coef[:-1], max(0.0, float(coef[-1]))
    # a table must not fall with more tokens: noise at neighbouring rows can make it dip
    ms = np.maximum.accumulate(np.maximum(ms, 0.0))
    pred = onehot @ ms + ctx / 1e3 * per_1k
    r2 = 1 - np.sum((sec * 1e3 - pred) ** 2) / np.sum((sec * 1e3 - sec.mean() * 1e3) ** 2)
    return {"kind": "table", "tokens": grid.tolist(), "ms": [round(float(m), 3) for m in ms],
            "attention_ms_per_1k_context": round(per_1k, 4), "r2": round(float(r2), 4)}


def profile_model(profile: dict, name: str, source: str) -> dict:
    s = profile["samples"]
    target, draft = table_fit(s["target"]), table_fit(s["draft"])
    return {
        "name": name, "target_model": TARGET, "draft_model": DRAFT,
        "gpu": f"none: {machine()}, fp32", "tp": 1, "source": source,
        "target": {k: v for k, v in target.items() if k != "r2"},
        "draft": {k: v for k, v in draft.items() if k != "r2"},
        "budget": int(profile["budget"]),
        "baseline_latency_ms": float(profile["baseline_latency_s"]) * 1e3,
        "iteration_overhead_ms": 0.0, "pads_rows": True,
        # the embedded engine runs an iteration's prefill and verify as two forwards
        "fuses_prefill": False,
        "fit": {"target_r2": target["r2"], "draft_r2": draft["r2"]},
        "notes": [
            "Forwards of the engine alone, measured by `adaserve profile` on a quiet machine; "
            "no host time. The served engine's iterations take longer: "
            "cpu-smollm2-135m-served adds what the served process measured. The prefill "
            "forwards are priced over a whole chunk of tokens as one request's.",
            "Refit: python -m benchmarks.sim.cpu_hardware"],
    }


def iteration_s(hw: HardwareModel, it: dict, drafts: bool) -> float:
    """What the simulator charges an iteration the served engine logged. The log keeps
    sums, not each request's tokens, so the padded rows are approximated by an even split
    (exact for incremental: one token per request)."""
    n = max(1, it["running"])
    t = 0.0
    if it["prefill_tokens"]:
        # short prompts, one chunk: the chunk's own context is about its length
        t += hw.prefill_s(0, [it["prefill_tokens"]], with_draft=drafts)
    if drafts and it["depth"] > 0:
        t += hw.draft_s(it["context_tokens"],
                        SpecPlan(depth=it["depth"], width=it["width"]).draft_step_tokens(n))
    per_req = int(np.ceil(it["verify_tokens"] / n))
    return t + hw.verify_s(it["context_tokens"], [per_req] * n)


def read_logs(sweeps: list[Path]) -> dict[str, list[dict]]:
    """Iteration log rows per policy, from every server of the sweeps."""
    rows: dict[str, list[dict]] = {}
    for sweep in sweeps:
        for log in sorted((sweep / "raw").glob("serve-*.iterations.jsonl")):
            policy = log.name[len("serve-"):].rsplit("-", 1)[0]
            rows.setdefault(policy, []).extend(
                json.loads(x) for x in log.read_text().splitlines() if x.strip())
    return rows


def fit_served(base: HardwareModel, logs: dict[str, list[dict]], fit_policy: str
               ) -> tuple[float, float]:
    """seconds = factor * (the base model's charge without host time) + host."""
    its = logs[fit_policy]
    pred = np.array([iteration_s(base, it, fit_policy != "incremental") for it in its])
    meas = np.array([it["seconds"] for it in its])
    design = np.stack([pred, np.ones_like(pred)], axis=1)
    (factor, host), *_ = np.linalg.lstsq(design, meas, rcond=None)
    return float(factor), max(0.0, float(host))


def scaled(model: dict, factor: float, host_s: float, name: str, source: str) -> dict:
    out = json.loads(json.dumps(model))
    for part in ("target", "draft"):
        c = out[part]
        c["ms"] = [round(m * factor, 3) for m in c["ms"]]
        c["attention_ms_per_1k_context"] = round(c["attention_ms_per_1k_context"] * factor, 4)
    out.update(name=name, source=source, iteration_overhead_ms=round(host_s * 1e3, 3),
               fit={**out["fit"], "forward_factor": round(factor, 4)})
    out["notes"] = [
        f"Every forward of cpu-smollm2-135m-table x {factor:.3f}, plus {host_s * 1e3:.1f} ms "
        "of host time per decoding iteration: fitted to the served engine's own iteration logs "
        "(`adaserve serve --iteration-log`) while it served a bench sweep beside its load "
        "generator on the same 2 cores.", "Refit: python -m benchmarks.sim.cpu_hardware"]
    return out


def residuals(hw: HardwareModel, logs: dict[str, list[dict]]) -> list[dict]:
    out = []
    for policy, its in logs.items():
        drafts = policy != "incremental"  # the sweeps run B = 4: every other policy drafts
        pred = np.array([iteration_s(hw, it, drafts) for it in its])
        meas = np.array([it["seconds"] for it in its])
        ratio = pred / meas
        out.append({"policy": policy, "iterations": len(its),
                    "measured_ms_mean": 1e3 * meas.mean(), "predicted_ms_mean": 1e3 * pred.mean(),
                    "ratio_p10": float(np.percentile(ratio, 10)),
                    "ratio_median": float(np.median(ratio)),
                    "ratio_p90": float(np.percentile(ratio, 90)),
                    "sum_ratio": float(pred.sum() / meas.sum())})
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--profile", type=Path,
                   default=Path.home() / ".cache/adaserve/profiles"
                   / "smollm2_135m__smollm2_135m_distilled.json")
    p.add_argument("--sweep", type=Path, action="append", default=None,
                   help="a bench sweep whose raw/ holds iteration logs (repeatable; default "
                        "results/rate and results/urgent)")
    p.add_argument("--fit-policy", default="incremental")
    args = p.parse_args()
    sweeps = args.sweep or [RESULTS / "rate", RESULTS / "urgent"]
    profile = json.loads(args.profile.read_text())
    base = profile_model(profile, "cpu-smollm2-135m-table",
                         f"`adaserve profile` on the dev machine, {profile['date']}: a table "
                         "per batch tokens and one context term, least squares over the "
                         "profile's samples (benchmarks/sim/cpu_hardware.py)")
    # the sweeps ran at --budget 4; the file keeps the profile's own B
    base_hw = HardwareModel.from_dict(base)
    logs = read_logs(sweeps)
    factor, host = fit_served(base_hw, logs, args.fit_policy)
    served = scaled(base, factor, host, "cpu-smollm2-135m-served",
                    f"cpu-smollm2-135m-table fitted to the served engine's iteration logs of "
                    f"{', '.join(str(s) for s in sweeps)} ({args.fit_policy}'s iterations), "
                    f"{dt.date.today()}")
    served_hw = HardwareModel.from_dict(served)
    for model in (base, served):
        (DATA / f"{model['name']}.json").write_text(json.dumps(model, indent=2) + "\n")
    res_base, res_served = residuals(base_hw, logs), residuals(served_hw, logs)
    lines = [
        "# CPU hardware models for the simulator", "",
        f"- command: `python -m benchmarks.sim.cpu_hardware {' '.join(sys.argv[1:])}`",
        f"- machine: {machine()}", f"- date: {dt.date.today()}, commit {commit()}",
        f"- profile: `{args.profile.name}` of {profile['date']}; sweeps: "
        f"{', '.join(str(s) for s in sweeps)}", "",
        "## The engine alone (cpu-smollm2-135m-table)", "",
        f"Table fit to the profile's samples: target R^2 {base['fit']['target_r2']}, draft "
        f"R^2 {base['fit']['draft_r2']}; context term "
        f"{base['target']['attention_ms_per_1k_context']} ms (target) and "
        f"{base['draft']['attention_ms_per_1k_context']} ms (draft) per 1,000 tokens.", "",
        "| batch tokens | " + " | ".join(f"{t:g}" for t in base["target"]["tokens"]) + " |",
        "|---|" + "---|" * len(base["target"]["tokens"]),
        "| target ms | " + " | ".join(f"{m:.1f}" for m in base["target"]["ms"]) + " |",
        "| draft ms | " + " | ".join(f"{m:.1f}" for m in base["draft"]["ms"]) + " |", "",
        "## Served (cpu-smollm2-135m-served)", "",
        f"Fitted on {args.fit_policy}'s {len(logs[args.fit_policy])} logged iterations: "
        f"every forward x **{factor:.3f}**, plus **{host * 1e3:.1f} ms** host time per "
        "decoding iteration. The other policies are held out.", "",
        "Predicted / measured iteration time, per policy (the log keeps token sums: the "
        "padded rows of a tree batch are approximated by an even split):", "",
        "| policy | iterations | measured ms (mean) | engine-alone model: sum ratio, median | "
        "served model: sum ratio | p10 | median | p90 |", "|---|---|---|---|---|---|---|---|"]
    for b, s in zip(res_base, res_served):
        held = "" if s["policy"] != args.fit_policy else " (fitted)"
        lines.append(f"| {s['policy']}{held} | {s['iterations']} | {s['measured_ms_mean']:.1f} | "
                     f"{b['sum_ratio']:.2f}, {b['ratio_median']:.2f} | {s['sum_ratio']:.2f} | "
                     f"{s['ratio_p10']:.2f} | {s['ratio_median']:.2f} | {s['ratio_p90']:.2f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    out = RESULTS / "sim"
    out.mkdir(parents=True, exist_ok=True)
    (out / "cpu-hardware.md").write_text(text)
    (out / "cpu-hardware.json").write_text(json.dumps(
        {"factor": factor, "host_s": host, "engine_alone": res_base, "served": res_served},
        indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
