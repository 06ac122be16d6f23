"""The machine's speed while each server of a served sweep ran, from its iteration log.

On a shared VM one step can take 37 ms in one hour and 57 ms in another, so a sweep's
policies may have run on what was, in effect, different machines. Each server's median
step with one request verifying one token, no draft and no prefill (the plain decode step
every policy takes between requests) shows it; the bench page prints it beside the
results, with the share of steps that ran the draft and then verified only the roots: the
draft's time spent for nothing. Beside it, what the server's time went to: the share of its
decode steps that drafted at all (a policy may choose k = 0, and under load the served
policies mostly do) and the share of its busy seconds spent in iterations that prefilled
(on the dev CPU a prompt token costs ~3 ms of compute in a prefill chunk, so at a few
requests a second prefill holds a third of the machine and decides how long a step is).
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(slots=True)
class _Tally:
    """One pass over a server's iteration log: what both of the page's readings count."""

    plain: list[float] = field(default_factory=list)  # seconds of the plain steps
    decode: int = 0  # iterations that decoded and prefilled nothing
    drafted: int = 0  # of those, the ones that drafted (depth > 0)
    wasted: int = 0  # of those, the ones that drafted and verified only the roots
    busy: float = 0.0  # seconds of iterations that decoded or prefilled
    prefilling: float = 0.0  # of those, the seconds of the ones that prefilled


def _tally(log: Path) -> _Tally:
    t = _Tally()
    with log.open() as f:
        for line in f:
            r = json.loads(line)
            if not r.get("running") and not r.get("prefill_tokens"):
                continue  # idle
            t.busy += r["seconds"]
            if r.get("prefill_tokens"):
                t.prefilling += r["seconds"]
                continue
            t.decode += 1
            drafted = r.get("depth", 0) > 0
            t.drafted += drafted
            t.wasted += drafted and r.get("verify_tokens") == r["running"]
            if r["running"] == 1 and r.get("verify_tokens") == 1 and not drafted:
                t.plain.append(r["seconds"])
    return t


def _plain(t: _Tally) -> tuple[float | None, int, float | None]:
    return ((1e3 * statistics.median(t.plain) if len(t.plain) >= 5 else None), len(t.plain),
            t.wasted / t.decode if t.decode else None)


def _shares(t: _Tally) -> tuple[float | None, float | None]:
    return (t.drafted / t.decode if t.decode else None,
            t.prefilling / t.busy if t.busy else None)


def plain_step_ms(log: Path) -> tuple[float | None, int, float | None]:
    """(median ms, count) of the log's single-request, one-token steps without draft or
    prefill, None under 5 of them; and the share of its decode steps (no prefill) that
    drafted (depth > 0) and verified only the roots (None without decode steps)."""
    return _plain(_tally(log))


def work_shares(log: Path) -> tuple[float | None, float | None]:
    """(share of the log's decode steps, those without prefill, that drafted; share of its
    busy seconds in iterations that prefilled), each None where there is nothing to share."""
    return _shares(_tally(log))


def _pct(share: float | None) -> str:
    return "-" if share is None else f"{100 * share:.0f}%"


def speed_lines(raw: Path) -> list[str]:
    """The page's section: a row per server log, in the order the servers ran."""
    logs = sorted(raw.glob("serve-*.iterations.jsonl"), key=_started)
    if not logs:
        return []
    lines = ["## Machine speed while each server ran", "",
             "The median step with one request running, verifying one token, with no draft "
             "and no prefill (loadgen/speed.py): a check that the policies ran on the same "
             "machine; and the share of decode steps that ran the draft and then verified "
             "only the roots (the draft's time spent for nothing); then what the server's "
             "time went to: the share of its decode steps that drafted at all, and the share "
             "of its busy seconds in iterations that prefilled. Servers in the order "
             "they ran.", "",
             "| server log | plain step ms (steps) | drafted, verified roots only "
             "| decode steps drafted | busy time prefilling |",
             "|---|---|---|---|---|"]
    for log in logs:
        tally = _tally(log)  # one read of the log for both readings
        (ms, n, wasted), (drafted, prefilling) = _plain(tally), _shares(tally)
        lines.append(f"| {log.name.removesuffix('.iterations.jsonl')} | "
                     + ("-" if ms is None else f"{ms:.1f}") + f" ({n}) | {_pct(wasted)} | "
                     f"{_pct(drafted)} | {_pct(prefilling)} |")
    return [*lines, ""]


def _started(log: Path) -> float:
    with log.open() as f:
        first = f.readline()
    try:
        return float(json.loads(first).get("t", 0.0))
    except (ValueError, AttributeError):
        return 0.0
