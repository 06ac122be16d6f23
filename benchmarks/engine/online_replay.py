"""The online trainer's settings, compared in a third of a run's time (docs/draft.md
"Online adaptation"): a kept domain-shift run's stream served again through the real
`OnlineTrainer`, without the engine.

Greedy output does not depend on the draft, so a run of `adaserve bench --experiment
domain-shift` fixes the stream: its state.pt (kept locally, not in git) holds every
request's prompt and output in the order they finished. The target's top 16 at every
output position is computed once (<run>/teacher.pt). Then each variant serves the stream
again in the same order: per request, the serving draft's greedy agreement along the
output gives its chain-4 tokens per step (as the run's own replay does) and the misses the
engine would buffer; every 8th request is held back; an update every --interval requests.
With the run's own settings it checks itself against the run. Prints a line per variant,
appends it to results/online_replay.json and rewrites results/online_replay.md.

    python -m benchmarks.engine.online_replay --run results/domain-shift --interval 32
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import fcntl
import json
import time
from pathlib import Path

import numpy as np

from benchmarks.shared.common import RESULTS, commit, machine

TOP_K = 16  # as OnlineDraftConfig.top_k


def teacher(run: Path, threads: int) -> list[dict]:
    """Per request, in finish order: prompt, output, the run's `off`, and the target's
    top-k at each output position (cached in <run>/teacher.pt)."""
    import torch

    cache = run / "teacher.pt"
    if cache.is_file():
        return torch.load(cache, weights_only=False)
    from adaserve.distill.teacher import score_sequence
    from adaserve.engine import EngineConfig
    from adaserve.engine.loader import load_models

    torch.set_num_threads(threads)
    target = load_models(EngineConfig(policy="chain-4")).target
    out = []
    with torch.no_grad():
        for r in torch.load(run / "state.pt", weights_only=False)["rows"]:
            toks, n = list(r["prompt"]) + list(r["tokens"]), len(r["prompt"])
            top = torch.softmax(score_sequence(target, toks, n).float(), -1).topk(TOP_K, -1)
            if not np.array_equal(top.indices[:, 0].numpy(), np.asarray(r["tokens"])):
                raise ValueError(f"request {r['i']}: the target's greedy tokens are not the "
                                 "run's output; was it made with another model?")
            out.append({"i": r["i"], "kind": r["kind"], "off": r["off"],
                        "prompt": np.asarray(r["prompt"], np.int32),
                        "tokens": np.asarray(r["tokens"], np.int32),
                        "ids": top.indices.numpy().astype(np.int32),
                        "probs": top.values.numpy().astype(np.float16)})
    torch.save(out, cache)
    return out


def misses(agree: np.ndarray, k: int) -> np.ndarray:
    """Output positions where a greedy k-chain's draft proposal is refused (what
    DisagreementBuffer keeps): the first disagreement of each step, not the one after a
    fully accepted chain (the draft proposed nothing there). Position 0 is the prefill's."""
    from adaserve.loadgen.domain_shift import chain_steps

    return np.asarray([p + a for p, a in chain_steps(agree, k, start=1)
                       if a < k and p + a < len(agree)], np.int64)


def replay(data: list[dict], cfg, batch: int) -> dict:
    """The stream served again with online adaptation under ``cfg``."""
    from adaserve.distill.online import OnlineTrainer, _draft_dir, student_from_draft
    from adaserve.engine import EngineConfig
    from adaserve.engine.loader import load_models
    from adaserve.engine.online_records import ServedRecord
    from adaserve.loadgen.domain_shift import K, agreement_along, chain_tokens_per_step
    from adaserve.loadgen.shift_report import windows

    ecfg = EngineConfig(policy="chain-4")
    models = load_models(ecfg)
    embed = models.draft.embed.float()
    trainer = OnlineTrainer(cfg, student_from_draft(_draft_dir(ecfg), embed))
    original = student_from_draft(_draft_dir(ecfg), embed)
    held = collections.deque(maxlen=cfg.heldout_requests)
    fresh, rows, reports, since = [], [], [], 0
    for n, d in enumerate(data, 1):
        toks = np.concatenate([d["prompt"], d["tokens"]])
        agree = agreement_along(trainer.student, toks.tolist(), len(d["prompt"]))
        rows.append({"i": d["i"], "kind": d["kind"], "off": d["off"],
                     "served": chain_tokens_per_step(agree)})
        pos = misses(agree, K)
        rec = ServedRecord(toks, len(d["prompt"]), len(d["prompt"]) + pos, d["ids"][pos],
                           d["probs"][pos])
        since += 1
        if n % cfg.heldout_every == 0:
            held.append(rec)
        elif len(pos):
            fresh.append(rec)
        # the run's batches finish whole before the next starts: updates fall between them
        if n % batch == 0 and since >= cfg.interval and fresh and held:
            report, _ = trainer.update(fresh, list(held))
            reports.append(report)
            fresh, since = [], 0
    own = [d for d in data if d["kind"] == "short"][:64]

    def own_tps(student) -> float:
        return float(np.mean([chain_tokens_per_step(agreement_along(
            student, np.concatenate([d["prompt"], d["tokens"]]).tolist(), len(d["prompt"])))
            for d in own]))

    ws = windows(sorted(rows, key=lambda r: r["i"]))
    return {"windows": [round(100 * w["gain"], 1) for w in ws],
            "updates": len(reports), "swapped": sum(r.swapped for r in reports),
            "head_rows_moved": sum(r.head_rows for r in reports),
            "own": own_tps(trainer.student) / own_tps(original)}


# the stream the settings were chosen on; every other kept run's stream is a test stream
DEV_RUNS = ("results/domain-shift",)


def summary(entries: list[dict]) -> list[dict]:
    """One row per run and settings, over the trainer seeds replayed: the mean of the
    windows from request 600 (the stream is all code there) and of the last window."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for e in entries:
        words = e["settings"].split()
        if "--seed" in words:  # the trainer's seed is a repeat, not a setting
            i = words.index("--seed")
            words = words[:i] + words[i + 2:]
        groups.setdefault((e["run"], " ".join(words) or "(defaults)"), []).append(e)
    return [{"run": run, "settings": settings, "n": len(es),
             "set": "dev" if run in DEV_RUNS else "test",
             "from_600": float(np.mean([np.mean(e["result"]["windows"][6:]) for e in es])),
             "last": float(np.mean([e["result"]["windows"][-1] for e in es])),
             "lasts": [e["result"]["windows"][-1] for e in es]}
            for (run, settings), es in groups.items()]


def render(entries: list[dict]) -> str:
    lines = ["# Online trainer settings, replayed on kept domain-shift streams",
             "",
             "- command: `python -m benchmarks.engine.online_replay --run RUN [settings]`, "
             "one row each (`--render` rewrites this page from results/online_replay.json)",
             f"- code version: commit {entries[-1]['commit']} (the last row; each row names "
             "its own)",
             "",
             "Each row: the module with the settings shown, on the run named "
             "(benchmarks/engine/online_replay.py says how). Windows: on / "
             "off - 1 (%) per 100 requests, as the run's page; own: adapted / original "
             "tokens per step on 64 own-domain requests. Counts, not times: other load does "
             "not move them. `(defaults)`: interval 32, 8 steps, lr 2e-4, replay share 0.5, "
             "held-back slice 32, head rows 0, anchor weight 0 (the trainer as it was before "
             "anchors; the engine's default anchor weight is 0.25 since 2026-11-26).",
             "",
             "Mean over the trainer seeds replayed (`--seed`; the dev stream is the one "
             "settings were chosen on, a test stream is any other):",
             "",
             "| run | set | settings | seeds | mean, windows 600-1000 | mean, last window "
             "(each) |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {g['run']} | {g['set']} | `{g['settings']}` | {g['n']} | "
              f"{g['from_600']:+.1f}% | {g['last']:+.1f}% ("
              + ", ".join(f"{x:+.1f}" for x in g["lasts"]) + ") |" for g in summary(entries)]
    lines += ["",
              "Every replay:",
              "",
              "| run | settings | windows 500-1000 | last | updates (swapped) | head rows moved "
              "| own | commit, date, machine |",
              "|---|---|---|---|---|---|---|---|"]
    for e in entries:
        r = e["result"]
        lines.append(f"| {e['run']} | `{e['settings']}` | "
                     + ", ".join(f"{g:+.1f}" for g in r["windows"][5:])
                     + f" | **{r['windows'][-1]:+.1f}%** | {r['updates']} ({r['swapped']}) | "
                     f"{r['head_rows_moved']} | {r['own']:.2f}x | {e['commit']}, {e['date']}, "
                     f"{e['machine']} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run", type=Path, default=RESULTS / "domain-shift",
                   help="a domain-shift run's directory, with its state.pt")
    p.add_argument("--interval", type=int, default=32)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--lr", type=float, default=2e-4)
    p.add_argument("--replay-share", type=float, default=0.5)
    p.add_argument("--heldout-requests", type=int, default=32)
    p.add_argument("--head-rows", type=int, default=0)
    p.add_argument("--anchor-weight", type=float, default=None,
                   help="(default: OnlineDraftConfig's; a page row names it unless 0, the "
                        "setting of every row made before the option)")
    p.add_argument("--seed", type=int, default=0,
                   help="the trainer's seed (its replay draws and batch order): another "
                        "seed shows how far one run's numbers are from another's")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--render", action="store_true",
                   help="only rewrite results/online_replay.md from its JSON")
    args = p.parse_args()
    if args.render:
        entries = json.loads((RESULTS / "online_replay.json").read_text())
        (RESULTS / "online_replay.md").write_text(render(entries))
        return 0
    import torch

    from adaserve.engine.online_config import online_config

    torch.set_num_threads(args.threads)
    t0 = time.time()
    data = teacher(args.run, args.threads)
    batch = json.loads((args.run / "summary.json").read_text())["settings"]["batch"]
    cfg = online_config(interval=args.interval, steps=args.steps, lr=args.lr,
                        replay_share=args.replay_share, heldout_requests=args.heldout_requests,
                        head_rows=args.head_rows, anchor_weight=args.anchor_weight,
                        seed=args.seed)
    # a row names every setting apart from the ones the first rows ran with ("(defaults)")
    settings = " ".join(f"--{k.replace('_', '-')} {v}"
                        for k, v in {**vars(args), "anchor_weight": cfg.anchor_weight}.items()
                        if k not in ("run", "threads", "render")
                        and v != {"anchor_weight": 0.0}.get(k, p.get_default(k)))
    entry = {"run": str(args.run), "settings": settings or "(defaults)",
             "result": replay(data, cfg, batch), "minutes": round((time.time() - t0) / 60, 1),
             "commit": commit(), "machine": machine(),
             "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="minutes")}
    print(json.dumps(entry))
    path = RESULTS / "online_replay.json"
    with open(RESULTS / ".online_replay.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # variants run side by side append to one file
        entries = json.loads(path.read_text()) if path.is_file() else []
        entries.append(entry)
        path.write_text(json.dumps(entries, indent=1) + "\n")
        (RESULTS / "online_replay.md").write_text(render(entries))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
