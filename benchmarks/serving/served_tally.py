"""results/served_tally.md: the served default against its baselines over every served test
point, read from the kept sweep pages (nothing is run), a section for each machine and
preset (the default changed under the sweeps: its TPOT door came on 2026-11-28).

Issue 38's served goal is read per point (loadgen/report.py's goals: where the best
baseline is below 60% on the paper's reading). One point's ratio rests on two or three
seeds, and the same seeds and code give a different end-to-end reading from one run to the
next (docs/scheduler.md), so this page pools them too: per reading, the per-seed
difference against the best baseline at each point (paired: each seed sends the same
requests to every policy), its mean and standard error over every seed of every point.

    python -m benchmarks.serving.served_tally
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np
from benchmarks.shared.common import RESULTS
from benchmarks.shared.page import Made, table

from adaserve.loadgen.report import best_baseline, cells, mean_of, seed_differences

# The served test sweeps of the short-prompt workload, by the machine and the preset they
# ran, with the preset's spec on each page: the runs before 2026-11-27 13:00 UTC ran it by
# its options' name, and a page that ran an earlier preset beside the one of its day names
# it by its options too. Development sweeps are not here.
SWEEPS = (("test-served-yield-deadline", "adaserve:prefill=yield,admit=deadline"),
          ("test-served-default", "adaserve"),
          ("test-served-steady", "adaserve"),
          ("test-served-cap", "adaserve"),
          ("test-served-138", "adaserve"))
# the Intel Xeon (2026-11-28/29, rates for that slower machine): the preset without a TPOT
# door, with refuse_tpot=missed (2026-11-28 21:25 to 2026-11-29 12:33 UTC), with latest
INTEL_OFF = (("test-served-intel", "adaserve"), ("test-served-intel-more", "adaserve"),
             ("test-served-intel-settled", "adaserve"),
             ("test-served-intel-refuse-tpot", "adaserve"),
             ("test-served-intel-refuse-tpot-b", "adaserve"),
             ("test-served-intel-missed", "adaserve:refuse_tpot=off"),
             ("test-served-intel-missed-157", "adaserve:refuse_tpot=off"))
INTEL_MISSED = (("test-served-intel-missed", "adaserve"),
                ("test-served-intel-missed-157", "adaserve"),
                ("test-served-intel-missed-160", "adaserve"),
                ("test-served-intel-warm-163", "adaserve"),
                ("test-served-intel-latest", "adaserve:refuse_tpot=missed"))
INTEL_LATEST = (("test-served-intel-latest", "adaserve"),)
# ... and on the engine's AVX-512 kernels (2026-11-29 from 19:00 UTC), which changed every
# policy's step cost, so they are a section of their own
INTEL_WIDE = (("test-served-intel-avx512", "adaserve"),)
BASELINES = ("incremental", "turbospec")
# the long-context workload's test sweeps (2-8k-token documents), with the static chain
LONG_SWEEPS = (("test-longctx-yield-deadline", "adaserve:prefill=yield,admit=deadline"),
               ("test-longctx-default", "adaserve"),
               ("test-longctx-kernel", "adaserve"))
LONG_BASELINES = ("incremental", "turbospec", "chain-4")
# the page's sections: (heading, sweeps, baselines)
SECTIONS = (
    ("Short prompts, AMD EPYC: the preset of 2026-11-27 (no TPOT door)", SWEEPS, BASELINES),
    ("Short prompts, Intel Xeon: the preset without a TPOT door", INTEL_OFF, BASELINES),
    ("Short prompts, Intel Xeon: the preset with `refuse_tpot=missed` "
     "(2026-11-28 21:25 to 2026-11-29 12:33 UTC)", INTEL_MISSED, BASELINES),
    ("Short prompts, Intel Xeon: today's preset (`refuse_tpot=latest`, since 2026-11-29 "
     "12:33 UTC)", INTEL_LATEST, BASELINES),
    ("Short prompts, Intel Xeon: today's preset on the AVX-512 kernels (since 2026-11-29 "
     "19:00 UTC)", INTEL_WIDE, BASELINES),
    ("Long contexts (2-8k-token documents), AMD EPYC: the preset of 2026-11-27",
     LONG_SWEEPS, LONG_BASELINES))
# (the reading's field in loadgen/report.py's Cell, the page's name for it)
READINGS = (("paper", "the paper's reading"), ("e2e", "end to end"), ("attainment", "TPOT"))


def points(sweep: dict, ours: str, baselines: tuple[str, ...] = BASELINES) -> list[dict]:
    """Per rate where the best baseline (on the paper's reading) is below 60%: per reading,
    the preset's mean, the best baseline's (the best on that reading) and the per-seed
    differences in points, as the sweep page's goals read them (loadgen/report.py)."""
    t = cells(sweep["runs"])
    missing = [p for p in (ours, *baselines) if p not in t]
    if missing:  # a policy the sweep never ran is a wrong list, not a NaN
        raise KeyError(f"the sweep ran no {', '.join(missing)}")
    seeds = sorted({r["seed"] for r in sweep["runs"]})
    out = []
    for rate in t[ours]:
        if best_baseline(t, list(baselines), rate, "paper")[1] >= 0.60:
            continue
        row = {"rate": rate, "seeds": seeds}
        for key, _ in READINGS:
            best, best_mean = best_baseline(t, list(baselines), rate, key)
            row[key] = {"ours": mean_of(t[ours][rate], key), "best": best_mean,
                        "baseline": best,
                        "diffs": seed_differences(t[ours][rate], t[best][rate], key)}
        out.append(row)
    return out


def tally(results: Path = RESULTS, sweeps: tuple = SWEEPS,
          baselines: tuple[str, ...] = BASELINES) -> dict:
    rows = []
    for name, ours in sweeps:
        sweep = json.loads((results / name / "summary.json").read_text())
        for p in points(sweep, ours, baselines):
            rows.append({"page": name, "commit": sweep.get("commit"), "spec": ours, **p})
    pooled = {}
    for key, _ in READINGS:
        d = np.array([x for r in rows for x in r[key]["diffs"]])
        pooled[key] = {"pairs": int(d.size), "mean": float(d.mean()) if d.size else math.nan,
                       "se": (float(d.std(ddof=1) / math.sqrt(d.size)) if d.size > 1
                              else math.nan),
                       "points_met": sum(r[key]["ours"] >= r[key]["best"] - 1e-9 for r in rows),
                       "seeds_behind": int((d < 0).sum())}
    return {"rows": rows, "pooled": pooled, "baselines": list(baselines)}


def section(data: dict) -> list[str]:
    """One workload's table of points and its pooled differences."""
    rows, pooled = data["rows"], data["pooled"]
    base = ", ".join(f"`{b}`" for b in data["baselines"])
    if not rows:
        return [f"No point of these sweeps has the best baseline ({base}) below 60% on the "
                "paper's reading: none is a goal point."]
    lines = [f"Where the best baseline ({base}) is below 60% on the paper's reading, the "
             "default's attainment over the best baseline's, per reading (the best baseline "
             "taken on that reading), from each sweep page's own runs (their command, "
             "machine, date and commit are on the page). Test seeds only: no fit touched "
             "them.", ""]
    head = ["page (commit)", "req/s", "seeds"] + [f"{n}: ours / best = ratio (per seed)"
                                                  for _, n in READINGS]

    def cell(r: dict, key: str) -> str:
        c = r[key]
        ratio = c["ours"] / c["best"] if c["best"] > 0 else math.inf
        diffs = ", ".join(f"{d:+.1f}" for d in c["diffs"])
        return f"{100 * c['ours']:.1f} / {100 * c['best']:.1f}% = {ratio:.2f}x ({diffs})"
    lines += table(head, [[f"[{r['page']}](../results/{r['page']}/summary.md) "
                           f"({r['commit']})", r["rate"],
                           "-".join(str(s) for s in (r["seeds"][0], r["seeds"][-1])),
                           *(cell(r, k) for k, _ in READINGS)] for r in rows])
    lines += ["", "Pooled over every seed of every point:", ""]
    lines += table(["reading", "points at >= 1.0x", "seed-points", "mean difference, points",
                    "standard error", "seed-points behind"],
                   [[n, f"{pooled[k]['points_met']} of {len(rows)}", pooled[k]["pairs"],
                     f"{pooled[k]['mean']:+.1f}", f"{pooled[k]['se']:.1f}",
                     pooled[k]["seeds_behind"]] for k, n in READINGS])
    for key, name in READINGS[:2]:
        e = pooled[key]
        z = e["mean"] / e["se"] if e["se"] > 0 else math.inf
        lines += ["", f"{name[0].upper() + name[1:]}: the default is {e['mean']:+.1f} points a "
                  f"seed-point against the best baseline ({z:.1f} standard errors: "
                  f"{'beyond' if abs(z) >= 2 else 'within'} two of a tie), behind on "
                  f"{e['seeds_behind']} of {e['pairs']} seed-points."]
    return lines


def page(sections: list[tuple[str, dict]], made: Made) -> list[str]:
    """The page: one section (``section``) per (heading, ``tally``'s answer)."""
    lines = made.header("The served default against its baselines, every served test point",
                        " (reads the kept sweep pages; runs nothing)")
    for heading, data in sections:
        lines += ["", f"## {heading}", "", *section(data)]
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    sections = [(heading, tally(args.out, sweeps, baselines))
                for heading, sweeps, baselines in SECTIONS]
    made = Made.now("benchmarks.serving.served_tally")
    (args.out / "served_tally.json").write_text(json.dumps(
        {"sections": [{"heading": h, **d} for h, d in sections], **made.to_dict()}, indent=1))
    text = "\n".join(page(sections, made)) + "\n"
    (args.out / "served_tally.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
