"""`adaserve bench --experiment domain-shift`: does online draft adaptation follow a shift
in what is served? (issue 40, seed 004 §5.2 "Distribution Shifts")

The stream is workload.domain_shift_set: the draft's own prompts first, then more and
more Python code. It is served in order, in fixed batches, on the embedded engine (a
static chain of 4 draft tokens, greedy, short outputs), with online adaptation on; the
updates are trained inline where they fall due (InlineTrainer), so the run is the same
every time and can stop and resume (--piece-minutes; run the same command again).

Side by side for every served request: accepted tokens per step as served (adapted
draft), and what the original draft would have had on the same request. Greedy output is
the same whatever the draft, so a chain's acceptance under a draft follows from the
draft's teacher-forced greedy agreement along that output (`chain_tokens_per_step`); the
page checks that replay against the served numbers where a request saw a single draft.
At the end: the original and the adapted draft replayed on the stream's first own-domain
requests (forgetting), and a sample of requests served across swaps generated again by
plain incremental decoding (outputs unchanged).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import math
import shlex
import sys
import time
from pathlib import Path

import numpy as np
import torch

K = 4  # the static chain's draft tokens


def chain_steps(agree: np.ndarray, k: int = K, start: int = 0) -> list[tuple[int, int]]:
    """The steps of a greedy k-token chain along an output, from position ``start``, where
    agree[j] says the draft's top token at output position j (given the true prefix) is
    the output token: (first position, draft tokens accepted) per step. Each step accepts
    the leading agreeing run (at most k) and adds the target's own token."""
    n, p, out = len(agree), start, []
    while p < n:
        a = 0
        while a < k and p + a < n and agree[p + a]:
            a += 1
        out.append((p, a))
        p += a + 1
    return out


def chain_tokens_per_step(agree: np.ndarray, k: int = K) -> float:
    """Tokens per step of a greedy k-token chain over an output of len(agree) tokens."""
    steps = len(chain_steps(agree, k))
    return len(agree) / steps if steps else 0.0


@torch.no_grad()
def agreement_along(student, tokens: list[int], n_prompt: int) -> np.ndarray:
    """[n_out] bool: the student's greedy token at each output position is the output's."""
    t = torch.tensor([tokens], dtype=torch.int64)
    h = student.hidden(t)[0, n_prompt - 1: len(tokens) - 1]
    pred = student.head_ids[student.logits(h).argmax(-1)].numpy()
    return pred == np.asarray(tokens[n_prompt:])


def run(args: argparse.Namespace) -> int:
    from adaserve.distill.online import InlineTrainer, student_from_draft, to_llama, _draft_dir
    from adaserve.engine import EngineConfig, SamplingParams
    from adaserve.engine.core import EngineCore
    from adaserve.engine.loader import load_models
    from adaserve.engine.online_config import online_config
    from adaserve.engine.online_draft import OnlineDraft
    from adaserve.loadgen.run import commit, machine
    from adaserve.loadgen.workload import domain_shift_set

    out = args.out or Path("results") / "domain-shift"
    out.mkdir(parents=True, exist_ok=True)
    ecfg = EngineConfig(policy="chain-4", max_batch=args.batch, max_context=1024)
    ocfg = online_config(interval=args.interval, sync=True, seed=args.seed,
                         head_rows=args.head_rows, replay_share=args.replay_share,
                         anchor_weight=args.anchor_weight, steps=args.steps)
    models = load_models(ecfg)
    tok = models.tokenizer
    stream = domain_shift_set(args.requests, args.seed, args.max_tokens)
    core = EngineCore(ecfg, models)
    trainer = InlineTrainer.for_models(ocfg, ecfg, models)
    online = OnlineDraft(ocfg, core.executor, trainer)
    original = student_from_draft(_draft_dir(ecfg), models.draft.embed.float())
    state_path = out / "state.pt"
    rows: list[dict] = []
    runs: list[dict] = []
    if state_path.is_file():  # resume: the adapted draft, its trainer, the buffer, the rows
        st = torch.load(state_path, weights_only=False)
        if st["settings"] != _settings(args):
            raise ValueError(f"{state_path} was made with other settings; use another --out")
        tr = trainer.trainer
        tr.restore(st["student"], st["opt"])
        tr.replay, tr.seen, tr.updates = st["replay"], st["seen"], st["updates"]
        tr.served_tokens = st["served_counts"]
        tr.rng.setstate(st["rng"])
        online.buffer.held.extend(st["held"])
        for rec in st["sealed"]:  # finished, not yet trained on
            online.buffer.sealed.append(rec)
            online.buffer.positions += len(rec.positions)
        online.buffer.served, online.reports = st["served"], st["reports"]
        online.version, online.since = st["version"], st["since"]
        rows, runs = st["rows"], st["runs"]
        if online.version:
            new = to_llama(tr.student.export_state(torch.float32), models.draft.cfg,
                           models.draft.embed, models.draft.skinny)
            core.executor.replace_draft(new.model, [], new.token_ids)
    t_start, i0 = time.time(), len(rows)
    i = i0
    while i < len(stream) and (time.time() - t_start) / 60 < args.piece_minutes:
        batch = list(range(i, min(i + args.batch, len(stream))))
        version_at = {}
        for j in batch:
            ids = tok.apply_chat_template(stream[j].as_messages(), add_generation_prompt=True,
                                          tokenize=True)
            ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
            core.add(f"q{j}", ids, SamplingParams(max_tokens=args.max_tokens))
            version_at[f"q{j}"] = online.version
        reqs = {f"q{j}": core.by_id[f"q{j}"] for j in batch}
        while core.has_work:
            outs = core.step()
            online.after_step(outs, len(core.waiting), core.slots)
            for o in outs:
                if not o.finished:
                    continue
                r, j = reqs[o.request_id], int(o.request_id[1:])
                one = version_at[o.request_id] == online.version  # served by one draft
                off = agreement_along(original, r.tokens, r.n_prompt)
                row = {"i": j, "kind": stream[j].kind, "out": len(r.tokens) - r.n_prompt,
                       "served": o.stats.accepted_tokens_per_step,
                       "off": chain_tokens_per_step(off), "version": online.version,
                       "one_draft": one, "tokens": r.tokens[r.n_prompt:],
                       "prompt": r.tokens[: r.n_prompt]}
                if one:  # the replay of the draft that served it, to check the method
                    on = agreement_along(trainer.trainer.student, r.tokens, r.n_prompt)
                    row["served_replay"] = chain_tokens_per_step(on)
                rows.append(row)
        i = batch[-1] + 1
        print(f"[domain-shift] {i}/{len(stream)} served, {online.version} swaps, "
              f"{len(online.reports) - online.version} rolled back, "
              f"{(time.time() - t_start) / 60:.1f} min", flush=True)
    runs.append({"from": i0, "to": i, "minutes": (time.time() - t_start) / 60,
                 "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                 "commit": commit(), "machine": machine(), "threads": torch.get_num_threads()})
    tr = trainer.trainer
    torch.save({"settings": _settings(args), "student": tr.student.state_dict(),
                "opt": tr.opt.state_dict(), "replay": tr.replay, "seen": tr.seen,
                "served_counts": tr.served_tokens,
                "updates": tr.updates, "rng": tr.rng.getstate(), "held": list(online.buffer.held),
                "sealed": list(online.buffer.sealed),
                "served": online.buffer.served, "reports": online.reports,
                "version": online.version, "since": online.since, "rows": rows, "runs": runs},
               state_path)
    if i < len(stream):
        print(f"[domain-shift] stopped after {args.piece_minutes} min: run the same command "
              "again to continue", flush=True)
        return 0
    summary = finish(args, rows, runs, online.reports, original, tr.student, models)
    from adaserve.loadgen.shift_report import write_page

    write_page(out, summary)
    print((out / "summary.md").read_text())
    return 0


def finish(args, rows, runs, reports, original, adapted, models) -> dict:
    """The end-of-run checks: forgetting on the own domain, outputs across swaps."""
    from adaserve.engine import EngineConfig, SamplingParams
    from adaserve.engine.core import EngineCore

    own = [r for r in rows if r["kind"] == "short"][: args.own_sample]
    own_off = [chain_tokens_per_step(agreement_along(original, r["prompt"] + r["tokens"],
                                                     len(r["prompt"]))) for r in own]
    own_on = [chain_tokens_per_step(agreement_along(adapted, r["prompt"] + r["tokens"],
                                                    len(r["prompt"]))) for r in own]
    # outputs served by an adapted draft, generated again without any draft
    swapped = [r for r in rows if r["version"] > 0]
    step = max(1, len(swapped) // max(1, args.parity_sample))
    sample = swapped[::step][: args.parity_sample]
    core = EngineCore(EngineConfig(policy="incremental", max_batch=args.batch), models)
    for r in sample:
        core.add(f"p{r['i']}", r["prompt"], SamplingParams(max_tokens=args.max_tokens))
    again: dict[str, list[int]] = {f"p{r['i']}": [] for r in sample}
    while core.has_work:
        for o in core.step():
            again[o.request_id].extend(o.token_ids)
    same = sum(again[f"p{r['i']}"] == r["tokens"] for r in sample)
    return {"rows": [{k: v for k, v in r.items() if k not in ("tokens", "prompt")}
                     for r in rows],
            "runs": runs, "settings": _settings(args),
            "reports": [dataclasses.asdict(x) for x in reports],
            "own": {"n": len(own), "off": float(np.mean(own_off)) if own else math.nan,
                    "on": float(np.mean(own_on)) if own else math.nan},
            "parity": {"checked": len(sample), "identical": same},
            "command": "adaserve bench --experiment domain-shift "
                       + " ".join(shlex.quote(a) for a in sys.argv[2:] if a != "--experiment"
                                  and a != "domain-shift")}


def _settings(args) -> dict:
    out = {"requests": args.requests, "batch": args.batch, "interval": args.interval,
           "max_tokens": args.max_tokens, "seed": args.seed}
    if args.head_rows:  # runs made before the option keep their settings
        out["head_rows"] = args.head_rows
    for k in ("replay_share", "anchor_weight", "steps"):  # only when given: older runs lack them
        if getattr(args, k) is not None:
            out[k] = getattr(args, k)
    return out


def main(args: argparse.Namespace) -> int:
    try:
        return run(args)
    except ValueError as e:
        print(f"adaserve bench: error: {e}", file=sys.stderr)
        return 2
