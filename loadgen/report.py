"""The result page of one `adaserve bench` experiment: tables, PNG plots and the goals of
the load-generator issue evaluated from the data (never asserted)."""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import NamedTuple

import numpy as np

from adaserve.loadgen.records import read_jsonl
from adaserve.loadgen.speed import speed_lines
from adaserve.loadgen.workload import MIX_DRAWS

# AdaServe and its presets and option specs (adaserve-authors, adaserve:pace=off, the
# text's reading) are not baselines: the goal compares the default with the others
OURS = "adaserve"
X_LABEL = {"rate": "request rate (requests/s)", "urgent": "urgent proportion",
           "slo-scale": "urgent TPOT SLO / baseline latency"}


def _row(summary: dict, cls: str) -> dict | None:
    return next((r for r in summary["rows"] if r["slo_class"] == cls), None)


class Cell(NamedTuple):
    """One run of one policy at one point, as the page's tables read it."""

    attainment: float | None  # TPOT within its SLO, over requests sent with an SLO
    goodput: float
    per_class: dict  # class -> TPOT attainment
    e2e: float | None = None  # end to end: TPOT within its SLO and TTFT within the TTFT SLO
    e2e_per_class: dict | None = None  # class -> end-to-end attainment
    ttft_ms: dict | None = None  # class -> (p50, p99) ms over completed requests
    seed: int | None = None  # the arrivals, prompts and classes it ran (the same per policy)
    # the paper's reading, the authors' test (records.Record.attained_paper); None in a run
    # summarized before it was recorded
    paper: float | None = None
    paper_per_class: dict | None = None  # class -> the paper's reading

    @property
    def headline(self) -> float | None:
        """The reading the goal is stated on: the paper's, else (an older run) TPOT's."""
        return self.attainment if self.paper is None else self.paper


def is_baseline(policy: str) -> bool:
    return not policy.split(":")[0].startswith(OURS)


def cells(runs: list[dict]) -> dict:
    """policy -> point -> list over repeats of Cell."""
    t: dict = defaultdict(lambda: defaultdict(list))
    for r in runs:
        rows = r["summary"]["rows"]
        o = _row(r["summary"], "overall")
        classes = [row for row in rows if row["slo_class"] != "overall"]
        ttft = {row["slo_class"]: (row["ttft_ms"].get("p50"), row["ttft_ms"].get("p99"))
                for row in rows if row.get("ttft_ms")}
        t[r["policy"]][r["point"]].append(Cell(
            o["attainment"], o["goodput_tok_s"],
            {row["slo_class"]: row["attainment"] for row in classes},
            o.get("attainment_ttft"),
            {row["slo_class"]: row.get("attainment_ttft") for row in classes}, ttft,
            r.get("seed"), o.get("attainment_paper"),
            {row["slo_class"]: row.get("attainment_paper") for row in classes}))
    return t


def drain(records_path: Path) -> tuple[float, float] | None:
    """(span of the sends, time from the last send to the last finish) in seconds: a server
    that keeps up drains in about one request's service time, one that falls behind in
    much longer."""
    recs = read_jsonl(records_path) if records_path.is_file() else []
    ends = [r.finished_s for r in recs if r.finished_s is not None]
    if not recs or not ends:
        return None
    sends = [r.scheduled_s for r in recs]
    return max(sends) - min(sends), max(ends) - max(sends)


def _fmt(vals: list[float], pct: bool) -> str:
    vals = [v for v in vals if v is not None]
    if not vals:
        return "–"
    f = (lambda x: f"{100 * x:.1f}%") if pct else (lambda x: f"{x:.2f}")
    if len(vals) == 1:
        return f(vals[0])
    return f"{f(float(np.mean(vals)))} ({f(min(vals))}-{f(max(vals))})"


def write_report(out: Path, meta: dict, runs: list[dict]) -> None:
    exp = meta["experiment"]
    t = cells(runs)
    policies = list(dict.fromkeys(r["policy"] for r in runs))
    pts = list(dict.fromkeys(r["point"] for r in runs))
    lines = [f"# Experiment: {exp}", "",
             f"- command: `{meta['command']}`", f"- machine: {meta['machine']}",
             f"- date: {meta['date']} ({meta['wall_minutes']:.0f} minutes)"
             + (f", commit {meta['commit']}" if meta.get("commit") else ""),
             *(f"- extended by `{e['command']}` on {e['date']} ({e['wall_minutes']:.0f} minutes, "
               f"{e['machine']}): added the runs the first command did not have"
               for e in meta.get("extensions", [])),
             f"- {meta['requests_per_point']} requests per point, {meta['repeats']} run(s) per "
             f"point (with several runs: mean (min-max)), prompt set {meta['prompts']}, class "
             f"mix {meta['mix']}, {MIX_DRAWS[meta.get('mix_draw', 'iid')]}; every policy gets "
             "the same prompts, arrival times and classes",
             f"- arrivals: {_arrivals(meta)}",
             *(f"- note: {n}" for n in meta.get("notes", [])),
             *([f"- simulated (`--backend sim`), no server ran: hardware model "
                f"`{meta.get('hardware')}`, acceptance model `{meta.get('acceptance')}`"
                + (f", prompt tokens counted by the {meta['prompt_tokens']}"
                   if meta.get("prompt_tokens") else "")
                + "; every request runs to its max_tokens and none is refused "
                  "(docs/sim-models.md, Not modelled)"]
               if meta.get("backend") == "sim" else []),
             f"- server: {_server(runs)}",
             *(f"- arm `{a.partition('=')[0].strip()}`: `adaserve serve --policy "
               f"{a.partition('=')[2].strip()}`" + (f" (with every server's `{meta['serve_args']}`)"
                                                  if meta.get("serve_args") else "")
               for a in meta.get("arms") or []), "",
             "Three readings of attainment. The paper's: the authors' test, a request's "
             "decode time (first token to finish) within its TPOT SLO x its tokens, over "
             "completed requests, a refusal a miss (docs/sim-validation.md, \"The readings "
             "of attainment\"); TPOT: its mean time between tokens within its SLO, over "
             "requests sent with an SLO; end to end: TPOT and its first token within its "
             "TTFT SLO, so a request that waited long for its first token is not counted as "
             "served. Goodput: output tokens per second of requests that met their TPOT SLO "
             "(seed 002 §6). The goals are read on the paper's reading and end to end. "
             "Raw per-request records: raw/<policy>-<point>-s<seed>/records.jsonl.",
             ""]

    def by_point(title: str, cell) -> None:
        """A table of a row per point, a column per policy: ``cell(policy, point)``."""
        lines.extend([f"## {title}", "", "| " + X_LABEL[exp] + " | " + " | ".join(policies)
                      + " |", "|---" * (len(policies) + 1) + "|"])
        lines.extend(f"| {p} | " + " | ".join(cell(pol, p) for pol in policies) + " |"
                     for p in pts)
        lines.append("")

    def by_class(title: str, cell) -> None:
        """A table of a row per policy and point, a column per class: ``cell(runs, class)``."""
        lines.extend([f"## {title}", "", "| policy | " + X_LABEL[exp] + " | "
                      + " | ".join(classes) + " |", "|---" * (len(classes) + 2) + "|"])
        lines.extend(f"| {pol} | {p} | " + " | ".join(cell(t[pol][p], c) for c in classes)
                     + " |" for pol in policies for p in pts)
        lines.append("")

    has_paper = any(v.paper is not None for pol in policies for p in pts for v in t[pol][p])
    if has_paper:
        by_point(f"Overall SLO attainment, the paper's reading, against {X_LABEL[exp]}",
                 lambda pol, p: _fmt([v.paper for v in t[pol][p]], True))
    else:
        lines.extend(["These runs were summarized before the paper's reading was recorded: "
                      "the goals below read TPOT's.", ""])
    by_point("Overall SLO attainment, TPOT within its SLO",
             lambda pol, p: _fmt([v.attainment for v in t[pol][p]], True))
    by_point("Goodput (tokens/s of requests that met their SLO)",
             lambda pol, p: _fmt([v.goodput for v in t[pol][p]], False))
    ttft_slo = runs[0]["summary"].get("ttft_slo_ms") if runs else None
    # a row held to another TTFT SLO: the server reported its own (records.Record.ttft_slo_held)
    one = all(row.get("ttft_slo_ms", ttft_slo) == ttft_slo
              for r in runs for row in r["summary"]["rows"])
    held = (f"TTFT <= {ttft_slo:g} ms" if isinstance(ttft_slo, (int, float)) and one
            else "TTFT within its SLO")
    by_point(f"End-to-end attainment (TPOT within its SLO and {held})",
             lambda pol, p: _fmt([v.e2e for v in t[pol][p]], True))
    classes = list(dict.fromkeys(c for r in runs for c in
                                 (row["slo_class"] for row in r["summary"]["rows"])
                                 if c != "overall"))
    by_class("Attainment per class (" + ("the paper's reading / " if has_paper else "")
             + "TPOT / end to end)",
             lambda vs, c: (_fmt([(v.paper_per_class or {}).get(c) for v in vs], True) + " / "
                            if has_paper else "")
             + _fmt([v.per_class.get(c) for v in vs], True) + " / "
             + _fmt([(v.e2e_per_class or {}).get(c) for v in vs], True))
    by_class("TTFT per class, p50 / p99 ms (mean over runs)",
             lambda vs, c: _ttft([(v.ttft_ms or {}).get(c) for v in vs]))
    spans = defaultdict(list)
    for r in runs:
        d = drain(out / "raw" / r["dir"] / "records.jsonl")
        if d is not None:
            spans[(r["policy"], r["point"])].append(d)
    by_point("Drain: the sends' span and the time from the last send to the last finish, s "
             "(mean over runs)", lambda pol, p: _drain_cell(spans[(pol, p)]))
    lines += speed_lines(out / "raw")
    lines += online_lines(runs)
    lines += ["## Goals", ""] + goals(exp, t, policies, pts) + [""]
    lines += ["## Plots", ""] + [f"![{n}]({n})" for n in plots(out, exp, runs, t, policies, pts)]
    (out / "summary.md").write_text("\n".join(lines) + "\n")


def online_lines(runs: list[dict]) -> list[str]:
    """Per run of a server adapting its draft online (bench's ``online_draft``): updates
    swapped in and rolled back during the run, so a page shows that the trainer ran."""
    rows = [r for r in runs if "online_draft" in r]
    if not rows:
        return []
    lines = ["## Online draft updates", "",
             "Per run: updates swapped in / rolled back during it (from the server's "
             "/metrics before and after), and whether one was still training at its end.", "",
             "| policy | point | seed | swapped in | rolled back | training at the end |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {r['policy']} | {r['point']} | {r['seed']} | {o['updates']:.0f} | "
              f"{o['rollbacks']:.0f} | {'yes' if o['training_at_end'] else 'no'} |"
              for r in rows for o in (r["online_draft"],)]
    return lines + [""]


def _ttft(vals: list) -> str:
    vals = [v for v in vals if v is not None and v[0] is not None]
    if not vals:
        return "–"
    return f"{np.mean([v[0] for v in vals]):.0f} / {np.mean([v[1] for v in vals]):.0f}"


def _drain_cell(vals: list[tuple[float, float]]) -> str:
    if not vals:
        return "–"
    return f"{np.mean([v[0] for v in vals]):.1f} + {np.mean([v[1] for v in vals]):.1f}"


def _arrivals(meta: dict) -> str:
    if meta.get("trace"):
        return (f"the paper trace `{meta['trace']}` (its first requests, classes and lengths; "
                "the gaps scaled to each rate)")
    if meta.get("arrival") == "gamma":
        return f"gamma gaps, CV {meta['cv']:g} (bursty), at each point's rate"
    return "Poisson at each point's rate"


def _server(runs: list[dict]) -> str:
    info = runs[0]["server"] if runs else {}
    return (f"{info.get('model')} + {info.get('draft')}, B = {info.get('budget')}, baseline "
            f"latency {info.get('baseline_latency_ms', 0):.1f} ms, classes "
            + ", ".join(f"{c['name']} {c['tpot_ms']:.1f} ms" if c["tpot_ms"] else c["name"]
                        for c in info.get("slo_classes", [])) + " (urgent as run)")


def _mean(xs: list) -> float:
    """The mean of the values that are not None; NaN when there is none."""
    xs = [x for x in xs if x is not None]
    return float(np.mean(xs)) if xs else math.nan


def goals(exp: str, t: dict, policies: list[str], pts: list[str]) -> list[str]:
    """The issue's goals, computed from the tables; says so where they are not met."""
    if exp == "rate":
        return rate_goals(t, policies, pts)
    if exp == "slo-scale":
        if "0.8" not in pts or OURS not in policies:
            return ["- needs the 0.8 point and adaserve"]
        a = _mean([v.attainment for v in t[OURS]["0.8"]])
        u = _mean([v.per_class.get("urgent") for v in t[OURS]["0.8"]])
        return [f"- adaserve with the urgent SLO at 0.8x baseline latency: {100 * a:.1f}% "
                f"overall, {100 * u:.1f}% for urgent requests (goal >= 95%: "
                f"{'met' if a >= 0.95 else 'NOT met'})."]
    return ["- (no goal is stated for this experiment; see the tables)"]


def plots(out: Path, exp: str, runs: list[dict], t: dict, policies: list[str],
          pts: list[str]) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = []
    x = [float(p) for p in pts]
    specs = [("attainment", "headline", "SLO attainment, the paper's reading", True)]
    if exp == "rate":
        specs.append(("goodput", "goodput", "goodput (tokens/s)", False))
    for fname, k, ylabel, pct in specs:
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        for pol in policies:
            ys = [np.mean([getattr(v, k) for v in t[pol][p] if getattr(v, k) is not None]
                          or [np.nan]) for p in pts]
            ax.plot(x, [100 * y for y in ys] if pct else ys, marker="o", label=pol,
                    linewidth=2.4 if pol == OURS else 1.4)
        ax.set_xlabel(X_LABEL[exp])
        ax.set_ylabel(ylabel + (" (%)" if pct else ""))
        if pct:
            ax.set_ylim(0, 105)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        name = f"{fname}_vs_{exp.replace('-', '_')}.png"
        fig.savefig(out / name, dpi=110)
        plt.close(fig)
        names.append(name)
    # TPOT CDF per class with the SLO lines, at the heaviest point, one panel per policy
    pt = pts[-1] if exp == "rate" else pts[len(pts) // 2]
    fig, axes = plt.subplots(1, len(policies), figsize=(3.2 * len(policies), 3.2), sharey=True,
                             squeeze=False)
    for ax, pol in zip(axes[0], policies):
        run = next((r for r in runs if r["policy"] == pol and r["point"] == pt), None)
        if run is None:
            continue
        recs = read_jsonl(out / "raw" / run["dir"] / "records.jsonl")
        by = defaultdict(list)
        for r in recs:
            if r.tpot_ms is not None:
                by[r.slo_class].append((r.tpot_ms, r.slo_ms))
        for i, (cls, vals) in enumerate(sorted(by.items())):
            v = np.sort([a for a, _ in vals])
            color = f"C{i}"
            ax.step(v, np.arange(1, v.size + 1) / v.size, where="post", color=color, label=cls)
            if vals[0][1] is not None:
                ax.axvline(vals[0][1], color=color, linestyle="--", linewidth=1)
        ax.set_title(pol, fontsize=9)
        ax.set_xlabel("TPOT (ms)")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("CDF")
    axes[0][0].legend(fontsize=7)
    fig.suptitle(f"TPOT per class at {X_LABEL[exp]} = {pt} (dashed: the class SLO)", fontsize=9)
    fig.tight_layout()
    name = f"tpot_cdf_{exp.replace('-', '_')}.png"
    fig.savefig(out / name, dpi=110)
    plt.close(fig)
    names.append(name)
    return names


def rate_goals(t: dict, policies: list[str], pts: list[str]) -> list[str]:
    """Issue 38's served goal at every rate where the best baseline (by the paper's reading,
    ``Cell.headline``) falls below 60%: each AdaServe entry against it, on the paper's
    reading and end to end, with TPOT's reading beside. Each seed runs the same arrivals,
    prompts and classes under every policy, so the per-seed difference is paired; its mean
    and standard error say whether a ratio is more than the seeds' spread."""
    base = [p for p in policies if is_baseline(p)]
    ours = [p for p in policies if not is_baseline(p)]
    if not ours or not base:  # any AdaServe entry counts: an option (adaserve:prefill=yield) too
        return ["- needs an AdaServe entry and at least one baseline (a policy that is not "
                "AdaServe)"]
    att = lambda pol, pt, key="headline": mean_of(t[pol][pt], key)  # noqa: E731
    ratio = lambda a, b: a / b if b > 0 else math.inf  # noqa: E731
    # a tie is met: means of the same fractions can differ in the last bit
    verdict = lambda r: "met" if r >= 1.0 - 1e-9 else "NOT met"  # noqa: E731
    lines = []
    for pt in pts:
        best, best_att = best_baseline(t, base, pt)
        if not best_att < 0.60:
            continue
        best_tpot = best_baseline(t, base, pt, "attainment")[1]
        best_e2e_policy, best_e2e = best_baseline(t, base, pt, "e2e")
        best_good = best_baseline(t, base, pt, "goodput")[1]
        lines.append(f"- Rate {pt}: the best baseline (of {', '.join(base)}) is {best} with "
                     f"{100 * best_att:.1f}% attainment, below 60%.")
        for pol in ours:
            a, e, g = att(pol, pt), att(pol, pt, "e2e"), att(pol, pt, "goodput")
            tp = att(pol, pt, "attainment")
            ra, re = ratio(a, best_att), ratio(e, best_e2e)
            lines.append(f"  - {pol}: {100 * a:.1f}% = **{ra:.2f}x** (goal >= 1.0x: "
                         f"{verdict(ra)}){_paired(t[pol][pt], t[best][pt])}; end to end "
                         f"{100 * e:.1f}% = **{re:.2f}x** the best baseline's "
                         f"{100 * best_e2e:.1f}% ({verdict(re)})"
                         f"{_paired(t[pol][pt], t[best_e2e_policy][pt], 'e2e')}; "
                         f"TPOT {100 * tp:.1f}% = "
                         f"{ratio(tp, best_tpot):.2f}x the best baseline's "
                         f"{100 * best_tpot:.1f}%; goodput {g:.2f} tok/s = "
                         f"{ratio(g, best_good):.2f}x the best baseline's {best_good:.2f}.")
    if not lines:
        return ["- No baseline fell below 60% attainment at these rates: the sweep does not "
                "reach the load the goal is stated at."]
    return lines + ["- A ratio inside the paired difference's two standard errors of 1.0x "
                    "is the seeds' spread, not a win or a loss."]


def mean_of(runs: list[Cell], key: str = "headline") -> float:
    """The mean over runs of the reading ``key`` (a Cell field); NaN where none has it."""
    return _mean([getattr(v, key) for v in runs])


def best_baseline(t: dict, baselines: list[str], pt: str, key: str = "headline"
                  ) -> tuple[str, float]:
    """The baseline with the highest mean reading ``key`` at point ``pt``, and that mean."""
    best = max(baselines, key=lambda b: mean_of(t[b][pt], key))
    return best, mean_of(t[best][pt], key)


def seed_differences(ours: list[Cell], best: list[Cell], key: str = "headline") -> list[float]:
    """Per seed both ran, ours minus best in the reading ``key`` (a Cell field), in points:
    each seed sends the same requests to every policy, so the difference is paired."""
    theirs = {c.seed: getattr(c, key) for c in best if c.seed is not None}
    return [100 * (getattr(c, key) - theirs[c.seed]) for c in ours
            if c.seed in theirs and getattr(c, key) is not None and theirs[c.seed] is not None]


def _paired(ours: list[Cell], best: list[Cell], key: str = "headline") -> str:
    """" (per seed +2.1 points, SE 1.3, 8 seeds)": the mean of ``seed_differences``; ""
    with fewer than 2 such seeds."""
    d = seed_differences(ours, best, key)
    if len(d) < 2:
        return ""
    se = float(np.std(d, ddof=1)) / math.sqrt(len(d))
    return f" (per seed {float(np.mean(d)):+.1f} points, SE {se:.1f}, {len(d)} seeds)"
