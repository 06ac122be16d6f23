"""results/<name>.md (sglang_admission, sglang_prefill) from benchmarks/sglang/admission.py's
data (a run just measured, or results/<name>.json with --render). Needs nothing of
SGLang's."""

from __future__ import annotations

import statistics
from types import SimpleNamespace

from benchmarks.shared.page import table

CLASSES = ("urgent", "moderate", "relaxed", "overall")
DEFAULT_NAME = "sglang_admission"

# what each policy the runs compare does in SGLang, for the page's set-up paragraph
DOES = {
    "adaserve": "the preset: SGLang's waiting queue in `deadline_order` "
                "(adaserve/sglang/admission.py), and a prefill round deferred where it would "
                "push more decoding requests off their SLO than waiting pushes prompts past "
                "their TTFT SLO (adaserve/sglang/prefill_yield.py); since 2026-11-28 21:25 "
                "UTC also its TPOT door, `refuse_tpot=missed`: a request refused at the door, "
                "503 with Retry-After, where most of the last finished requests at least as "
                "tight missed its TPOT SLO while one that tight is held (a refusal a miss), "
                "and since 2026-11-29 12:33 UTC its `latest` form: only where the latest of "
                "them missed too",
    "adaserve:refuse_tpot=off": "the preset without its TPOT door",
    "adaserve:cap=on": "the preset, and a prefill round takes only the waiting requests "
                       "whose decode round, predicted from SGLang's own rounds by batch "
                       "size, stays within the tightest TPOT SLO among the requests held and "
                       "them (adaserve/sglang/step_cap.py)",
    "adaserve:admit=fifo": "SGLang's first come, first served admission",
    "adaserve:prefill=chunk": "the preset's admission, with SGLang's own prefill-first "
                              "rounds (a prefill round whenever one can be built)",
    "adaserve:refuse=on": "the preset, and a request predicted on arrival to get its first "
                          "token past its TTFT SLO refused at the door, 503 with Retry-After "
                          "(adaserve/sglang/refusal.py); a refusal counts as a miss in every "
                          "reading",
}


def command(args) -> str:
    """The run's command as the page names it: every setting, defaults included."""
    name = getattr(args, "name", DEFAULT_NAME)
    named = "" if name == DEFAULT_NAME else f" --name {name}"
    prompts = getattr(args, "prompts", "short")
    named += "" if prompts == "short" else f" --prompts {prompts}"
    return (f".venv/bin/python -m benchmarks.sglang.admission{named} --policies {args.policies} "
            f"--seed {args.seed} --seeds {args.seeds} --rate {args.rate:g} --requests "
            f"{args.requests} --tokens {args.tokens} --max-running {args.max_running} "
            f"--chunk {args.chunk} --baseline-ms {args.baseline_ms:g} --prefill-chunk-ms "
            f"{args.prefill_chunk_ms:g}")


# the admission page's pair: its runs predate the prefill seam, so it keeps its own words
ADMISSION = ["adaserve", "adaserve:admit=fifo"]


def _title(policies: list[str]) -> str:
    if policies == ADMISSION:
        return "# SGLang + ADASERVE: admitting by TTFT deadline against first come, first served"
    return "# SGLang + ADASERVE: " + " against ".join(f"`{p}`" for p in policies)


def _does(policies: list[str]) -> str:
    """What each compared policy does in SGLang."""
    if policies == ADMISSION:
        return (f"`{policies[0]}` orders SGLang's waiting queue by `deadline_order` "
                "(adaserve/sglang/admission.py); the other leaves SGLang's first come, first "
                "served.")
    return " ".join(f"`{p}`: {DOES.get(p, 'as its options say (scheduler/options.py)')}."
                    for p in policies)


def _prompts(args) -> str:
    return {"short": "short prompts", "long": "long prompts (articles to summarize)",
            "mixed": "prompts, short and long in turn"}[getattr(args, "prompts", "short")]


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def _mean(xs) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.fmean(xs) if xs else None


def page(data: dict) -> list[str]:
    args = SimpleNamespace(**data["args"])
    runs = data["runs"]
    policies = list(dict.fromkeys(r["policy"] for r in runs))
    seeds = sorted({r["seed"] for r in runs})
    got = {(r["policy"], r["seed"]): r["classes"] for r in runs}

    def cell(p: str, s: int, c: str, key: str):
        row = got[(p, s)].get(c)
        return None if row is None else row[key]

    lines = [_title(policies), "",
        f"`{data['command']}`; {data['stamp']}; commit {data['commit']}; {data['machine']}; "
        "alone on the machine.", "",
        "SGLang 0.5.23 through `adaserve sglang serve-cpu` (stubbed kernels, torch attention, "
        f"fp32; tree D=3 W=2 N=4), {args.max_running} requests running at most, chunked "
        f"prefill {args.chunk} tokens. {_does(policies)} Load: `adaserve loadgen`, "
        f"{args.requests} {_prompts(args)}, {args.tokens} output tokens, Poisson at "
        f"{args.rate:g} req/s, classes urgent / moderate / relaxed = x1 / x2.4 / x8 of "
        f"{args.baseline_ms:g} ms (60% urgent), each request's TTFT SLO its class's default "
        f"(x the class's multiple of 2 x ({args.prefill_chunk_ms:g} ms + its prompt's share "
        f"of a {args.chunk}-token chunk): docs/contract.md). Paper: TPOT within its SLO, as "
        "the authors count; end to end: TTFT within its SLO too. Seeds vary the arrivals, "
        "prompts and classes; each seed runs every policy, one server after the other.", "",
        "## Overall, per seed", ""]
    head = ["seed"] + [f"`{p}` paper / end to end / TTFT p50 s" for p in policies]
    rows = []
    for s in seeds:
        rows.append([str(s)] + [
            f"{_pct(cell(p, s, 'overall', 'attainment_paper'))} / "
            f"{_pct(cell(p, s, 'overall', 'attainment_ttft'))} / "
            f"{cell(p, s, 'overall', 'ttft_ms')['p50'] / 1e3:.1f}" for p in policies])
    rows.append(["mean"] + [
        f"{_pct(_mean(cell(p, s, 'overall', 'attainment_paper') for s in seeds))} / "
        f"{_pct(_mean(cell(p, s, 'overall', 'attainment_ttft') for s in seeds))} / "
        f"{_mean(cell(p, s, 'overall', 'ttft_ms')['p50'] for s in seeds) / 1e3:.1f}"
        for p in policies])
    lines += table(head, rows) + ["", "## Per class, mean over the seeds", ""]
    head = ["class"] + [f"`{p}` paper / end to end / TTFT p50 s" for p in policies]
    rows = []
    for c in CLASSES:
        row = [c]
        for p in policies:
            ttft = _mean(cell(p, s, c, "ttft_ms")["p50"] for s in seeds
                         if got[(p, s)].get(c) is not None)
            row.append(f"{_pct(_mean(cell(p, s, c, 'attainment_paper') for s in seeds))} / "
                       f"{_pct(_mean(cell(p, s, c, 'attainment_ttft') for s in seeds))} / "
                       f"{'-' if ttft is None else f'{ttft / 1e3:.1f}'}")
        rows.append(row)
    lines += table(head, rows) + [""] + _refused(policies, seeds, got) + [
        "Each run's load command (its host a fresh server's): "
        f"`{runs[0]['command']}`, with the seed of its row.", ""]
    return lines


def _refused(policies: list[str], seeds: list[int], got: dict) -> list[str]:
    """The requests refused at the door (503), per seed, where any run refused one."""
    def n(p: str, s: int, key: str) -> int:
        return int(got[(p, s)]["overall"].get(key) or 0)

    if not any(n(p, s, "rejected") for p in policies for s in seeds):
        return []
    head = ["seed"] + [f"`{p}` refused / sent" for p in policies]
    rows = [[str(s)] + [f"{n(p, s, 'rejected')} / {n(p, s, 'sent')}" for p in policies]
            for s in seeds]
    return ["## Refused at the door (503), per seed", ""] + table(head, rows) + [""]
