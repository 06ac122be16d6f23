"""What a policy's planning costs an iteration on the embedded engine, and a digest of every
decision it made, so a speed-up can be shown to change nothing.

The real engine core and the real SmolLM2 pair (with the machine's kept start-up profile),
a fixed workload: 40 short prompts (loadgen's "short" set, seed 7), one every 12 iterations,
classes urgent / urgent / moderate / relaxed in turn, 48 tokens each, greedy. The engine's
clock advances a fixed amount at each reading, so every timing input the policy sees (its
latency refit, the requests' TPOT so far, the door) is the same from run to run; only the
wall time of plan + select is measured. Per policy: the median and mean of plan + select
per iteration, in interleaved rounds, and a digest of the plans, selections and output
tokens. Prints a table and writes results/plan_cost.{md,json}; each run is kept beside the
earlier ones with the code version it ran (``code_sha``, the simulator's key of the
scheduler and engine source), so a run before a change and one after sit side by side on
the page, and equal digests say the change moved no decision.

    PYTHONPATH=. python -m benchmarks.engine.plan_cost [--policies adaserve,incremental]
    PYTHONPATH=. python -m benchmarks.engine.plan_cost --render
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import time

from benchmarks.shared.page import Made, kept, render_flags, table, write_page

NAME = "plan_cost"
PROMPTS, EVERY, TOKENS, STEPS = 40, 12, 48, 600
TICK_S, TICK_PER_REQUEST_S = 0.007, 0.002  # the fake clock's step at each reading


def run_once(policy: str) -> dict:
    """One pass of the workload under ``policy``: per-iteration plan + select seconds and
    the digest of every decision."""
    import torch

    from adaserve.engine import EngineConfig, QueueFull, SamplingParams
    from adaserve.engine.core import EngineCore
    from adaserve.engine.engine import encode_chat
    from adaserve.engine.loader import load_models
    from adaserve.loadgen.workload import prompt_set
    from adaserve.scheduler import SLO
    from adaserve.server.startup_profile import kept_path, startup_profile

    torch.set_num_threads(2)
    cfg = EngineConfig(policy=policy, max_batch=16)
    models = load_models(cfg)
    core = EngineCore(cfg, models, startup_profile(cfg, models))
    now = [0.0]

    def tick() -> float:
        now[0] += TICK_S + TICK_PER_REQUEST_S * core.n_decode
        return now[0]

    core.clock = tick
    policy_obj, seconds, digest = core.policy, [], hashlib.sha256()
    plan, select = policy_obj.plan, policy_obj.select

    def timed_plan(view):
        t0 = time.perf_counter()
        p = plan(view)
        seconds.append(time.perf_counter() - t0)
        digest.update(repr((p.depth, p.width, p.budget, p.t_spec_s)).encode())
        return p

    def timed_select(view, p, cands):
        t0 = time.perf_counter()
        sel = select(view, p, cands)
        seconds[-1] += time.perf_counter() - t0
        digest.update(sel.mask.tobytes())
        return sel

    policy_obj.plan, policy_obj.select = timed_plan, timed_select
    prompts = prompt_set("short", PROMPTS, 7)
    slos = [SLO(0.0449, True, 1.1), SLO(0.0449, True, 1.1), SLO(0.1078, True, 1.8),
            SLO(0.3592, True, 6.0)]
    sent = 0
    for step in range(STEPS):
        if step % EVERY == 0 and sent < PROMPTS:
            ids = encode_chat(models.tokenizer, prompts[sent].as_messages())
            try:
                core.add(f"r{sent}", ids, SamplingParams(max_tokens=TOKENS, temperature=0),
                         slos[sent % len(slos)])
            except QueueFull as e:  # a refusal is a decision too
                digest.update(f"refused {sent}: {type(e).__name__}".encode())
            sent += 1
        if core.has_work:
            for o in core.step():
                digest.update(repr((o.request_id, list(o.token_ids))).encode())
    kept_profile = kept_path(cfg, str(models.device))
    return {"seconds": seconds, "digest": digest.hexdigest()[:16],
            "profile_sha": hashlib.sha256(kept_profile.read_bytes()).hexdigest()[:12]}


def measure(policies: list[str], rounds: int, note: str) -> dict:
    from benchmarks.paper.runs import code_sha

    per: dict[str, dict] = {p: {"medians_ms": [], "means_ms": [], "digests": []}
                            for p in policies}
    for _ in range(rounds):
        for p in policies:  # interleaved, so a slow spell of the machine falls on all
            r = run_once(p)
            per[p]["medians_ms"].append(statistics.median(r["seconds"]) * 1e3)
            per[p]["means_ms"].append(statistics.mean(r["seconds"]) * 1e3)
            per[p]["digests"].append(r["digest"])
            per[p]["iterations"] = len(r["seconds"])
            per[p]["profile_sha"] = r["profile_sha"]  # the decisions depend on it too
    return {"made": Made.now("benchmarks.engine.plan_cost").to_dict(),
            "code_sha": code_sha()[:12], "note": note, "rounds": rounds, "policies": per}


def render(runs: list[dict]) -> list[str]:
    last = Made(**runs[-1]["made"])
    lines = last.header("Planning cost per iteration on the embedded engine")
    lines += ["Plan + select per iteration (the policy's own Python), on the real engine and "
              f"pair over a fixed workload ({PROMPTS} short prompts, one every {EVERY} "
              f"iterations, {TOKENS} tokens each, classes urgent / urgent / moderate / "
              "relaxed, a clock that advances a fixed amount at each reading), median over "
              "the rounds of each round's median and mean. The digest covers every plan, "
              "selection and output token: equal digests under one start-up profile, the "
              "same decisions. Every run kept is listed, newest last; nothing else runs on "
              "the machine (2 cores) while one does.", ""]
    rows = []
    for run in runs:
        made = Made(**run["made"])
        for p, d in run["policies"].items():
            digests = sorted(set(d["digests"]))
            rows.append([made.date, made.commit, run["code_sha"], run.get("note") or "",
                         d["profile_sha"], p,
                         d["iterations"],
                         f"{statistics.median(d['medians_ms']):.3f}",
                         f"{statistics.median(d['means_ms']):.3f}", run["rounds"],
                         ", ".join(digests)])
    lines += table(["date (UTC)", "commit", "code", "what ran", "profile", "policy",
                    "iterations", "median ms", "mean ms", "rounds", "digest"], rows,
                   "lllllllrrrl")
    lines += ["", "Commands: " + "; ".join(f"`{Made(**r['made']).command}`" for r in runs), ""]
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--policies", default="adaserve,incremental")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--note", default="", help="what the working tree ran, where it is not "
                    "the commit (e.g. files checked out from an earlier one); on the page")
    render_flags(ap, NAME)
    args = ap.parse_args()
    # a measurement adds its run to the kept ones; a render needs them
    runs = (kept(NAME, args.out)["runs"] if args.render or (args.out / f"{NAME}.json").is_file()
            else [])
    if not args.render:
        runs.append(measure(args.policies.split(","), args.rounds, args.note))
    write_page(NAME, render(runs), args.out, None if args.render else {"runs": runs})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
