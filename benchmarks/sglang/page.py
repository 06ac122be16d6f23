"""results/sglang_cpu.md from benchmarks/sglang/cpu.py's data: the page of a run just
measured and the page re-rendered from results/sglang_cpu.json (--render) alike. Needs
nothing of SGLang's."""

from __future__ import annotations

from types import SimpleNamespace


def _f(v, fmt: str = ".1f") -> str:
    return "-" if v is None else format(v, fmt)


def same(row: dict, ref: dict | None, key: str) -> bool | None:
    """Whether a row's greedy ids (``key``) are the reference's; None where not compared."""
    if ref is None or key not in row:
        return None
    return row[key] == ref[key]


def _yes(v: bool | None) -> str:
    return "-" if v is None else "yes" if v else "NO"


def command(args) -> str:
    """The run's command as the page names it: every setting, defaults included."""
    return (f".venv/bin/python -m benchmarks.sglang.cpu --requests {args.requests} --tokens "
            f"{args.tokens} --concurrency {args.concurrency} --systems {args.systems} "
            f"--loadgen-requests {args.loadgen_requests} --loadgen-rate {args.loadgen_rate}"
            f"{' --cache ' + args.cache if args.cache else ''}")


def page(data: dict) -> list[str]:
    rows, baseline_ms, shape = data["rows"], data["baseline_ms"], data["shape"]
    args = SimpleNamespace(**data["args"])
    n = args.concurrency
    ada = [r for r in rows if r["system"].startswith("adaserve")]
    lines = [
        "# SGLang + ADASERVE on this CPU: ragged verify, the real draft, one contract", "",
        f"`{data['command']}`; {data['stamp']}; commit {data['commit']}; {data['machine']}.",
        "",
        f"SGLang 0.5.23 through `adaserve sglang serve-cpu` (stubbed kernels, torch attention, "
        f"fp32): target SmolLM2-135M, draft our distilled draft with a full-vocabulary head "
        f"(`smollm2-135m-distilled-full`), tree D={shape['steps']} W={shape['topk']} "
        f"N={shape['draft_tokens']}, {n} requests at most. `adaserve-<verify>:<B>`: "
        f"ADASERVE_VERIFY and ADASERVE_BUDGET, B = layout (N x {n} = "
        f"{shape['draft_tokens'] * n}), 2n = {2 * n}, 3n = {3 * n}. Workload: {args.requests} "
        f"short prompts (the load generator's), {args.tokens} output tokens each (greedy, "
        f"ignore_eos), classes {' / '.join(['urgent', 'moderate', 'relaxed'])} in turn, {n} "
        f"in flight, streamed. Classes x1 / x2.4 / x8 of sglang-none's median TPOT at one "
        f"request: {_f(baseline_ms)} ms (the embedded server: of its own profiled baseline). "
        f"Start s: launch to a first answer, the first server on "
        f"{'the model cache given' if args.cache else 'an empty model cache (a first launch)'}.",
        "", "## Verify under a budget", "",
        "Iteration = one decoding step of the worker (draft, verify, draft extend), from its "
        "iteration log over the workload; verified = tokens the target's verify forward "
        "computed, layout = what SGLang's uniform [batch, N] verify computes; accepted/step = "
        "tokens emitted per request per iteration; medians of times, means of counts.", "",
        "| system | B | iteration ms | verified / iter | layout / iter | accepted / step | "
        "tokens/s | draft ms | verify ms | draft extend ms | start s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        halves = ([("ragged", r.get("iterations")), ("uniform", r.get("iterations_uniform"))]
                  if r.get("verify") == "alternate" else [("", r.get("iterations"))])
        for label, it in halves:
            it = it or {}
            name = f"{r['system']} {label}".strip()
            lines.append(
                f"| {name} | {r.get('budget', '-')} | {_f(it.get('iteration_ms'))} | "
                f"{_f(it.get('verify_tokens'))} | {_f(it.get('layout_tokens'))} | "
                f"{_f(it.get('accepted_per_step'), '.2f')} | {r['tokens_per_s']:.2f} | "
                f"{_f(it.get('draft_ms'))} | {_f(it.get('verify_ms'))} | "
                f"{_f(it.get('extend_ms'))} | {r['start_s']:.0f} |")
    pairs = []
    for r in ada:  # the same server, iteration by iteration
        a, b = r.get("iterations"), r.get("iterations_uniform")
        if r["verify"] == "alternate" and a and b:
            pairs.append(
                f"| {r['budget_spec']} ({r['budget']}) | one server, alternating | "
                f"{a['verify_tokens'] / b['verify_tokens']:.2f} | "
                f"{a['iteration_ms'] / b['iteration_ms']:.2f} | "
                f"{a['verify_ms'] / b['verify_ms']:.2f} | "
                f"{a['emitted_per_s'] / b['emitted_per_s']:.2f} | {a['accepted_per_step']:.2f} "
                f"vs {b['accepted_per_step']:.2f} | {a['over_budget']} |")
    for r in ada:  # two servers, one after the other
        u = next((x for x in ada if x["verify"] == "uniform" and x["budget"] == r["budget"]
                  and x.get("head") == r.get("head")), None)
        if r["verify"] == "ragged" and u and r.get("iterations") and u.get("iterations"):
            a, b = r["iterations"], u["iterations"]
            pairs.append(
                f"| {r['budget_spec']} ({r['budget']}) | two servers | "
                f"{a['verify_tokens'] / b['verify_tokens']:.2f} | "
                f"{a['iteration_ms'] / b['iteration_ms']:.2f} | "
                f"{a['verify_ms'] / b['verify_ms']:.2f} | "
                f"{r['tokens_per_s'] / u['tokens_per_s']:.2f} (client) | "
                f"{a['accepted_per_step']:.2f} vs {b['accepted_per_step']:.2f} | "
                f"{a['over_budget']} |")
    if pairs:
        lines += ["", "Ragged against uniform at the same B (ragged / uniform; tokens/s: "
                  "emitted tokens per second of iteration time, or the client's):", "",
                  "| B | measured | verified tokens | iteration time | verify forward | "
                  "tokens/s | accepted / step (ragged vs uniform) | ragged iterations over "
                  "max(B, n) |", "|---|---|---:|---:|---:|---:|---|---:|", *pairs]
    steps = [r for r in ada if r.get("iterations")
             and r["iterations"].get("draft_to_target") is not None]
    if steps:
        lines += ["", "## The draft's step against the target's", "",
                  "Per iteration of one run: a draft step (one draft forward over the n x w "
                  "beam tokens, and its top-k; SGLang's draft loop timed without AdaServe's "
                  "selection, divided by its d - 1 forwards) against the target's verify "
                  "forward in the same iteration; medians. `hot` / `full`: the draft's head "
                  "cut to its 8,192 trained tokens (SGLang's --speculative-token-map, the "
                  "default) or whole.", "",
                  "| run | draft head | draft step ms | tokens / request | verify forward ms "
                  "| tokens / request | draft / target |",
                  "|---|---|---:|---:|---:|---:|---:|"]
        for r in steps:
            it = r["iterations"]
            lines.append(f"| {r['system']} | {r.get('head', 'hot')} | {it['draft_step_ms']:.1f} | "
                         f"{it['draft_step_tokens']:.1f} | {it['verify_ms']:.1f} | "
                         f"{it['verify_tokens_per_request']:.1f} | {it['draft_to_target']:.3f} |")
    lines += ["", "## Per class", "",
              "| system | class | accepted / step | TPOT ms (median) | TTFT ms (median) | "
              "SLO ms | attained |", "|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        for i, (c, v) in enumerate(r["classes"].items()):
            lines.append(f"| {r['system'] if i == 0 else ''} | {c} | "
                         f"{_f(v['accepted_per_step'], '.2f')} | {_f(v['tpot_ms'], '.0f')} | "
                         f"{v['ttft_ms']:.0f} | {v['slo_ms']:.0f} | {100 * v['attained']:.0f}% |")
    lines += ["", "## Greedy output against SGLang without speculation", "",
              "| system | the tier's prompts (tests/sglang_tier, 24 tokens) | the workload |",
              "|---|---|---|",
              *[f"| {r['system']} | {_yes(r.get('tier_same'))} | "
                f"{_yes(r.get('workload_same'))} |" for r in ada]]
    runs = [(r["system"], r["loadgen"]) for r in rows if r.get("loadgen")]
    if len(runs) == 2:
        (na, a), (nb, b) = runs
        lines += ["", "## One mixed-SLO workload against both backends", "",
                  f"`{a['command']}` against each (its SLOs: the backend's own baseline "
                  "multiples, as above).", "",
                  f"| class | attainment {na} | attainment {nb} | goodput tok/s {na} | "
                  f"goodput tok/s {nb} | TPOT p50 ms {na} | TPOT p50 ms {nb} |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        for c in a["rows"]:
            x, y = a["rows"][c], b["rows"].get(c)
            if y is None:
                continue
            att = [_f(None if z["attainment"] is None else 100 * z["attainment"], ".0f")
                   for z in (x, y)]
            lines.append(f"| {c} | {att[0]}% | {att[1]}% | {x['goodput_tok_s']:.2f} | "
                         f"{y['goodput_tok_s']:.2f} | {_f(x['tpot_ms']['p50'], '.0f')} | "
                         f"{_f(y['tpot_ms']['p50'], '.0f')} |")
    lines += ["", "SGLang here runs stubbed kernels, torch attention and Triton's interpreter "
              "for its index kernels: a test vehicle for the plugin, not a fast path.", ""]
    return lines
