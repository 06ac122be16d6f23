"""The soak's page and plot (benchmarks/serving/soak.py measures): results/soak/summary.md
and rss.png from summary.json and the load generator's records, for a run just measured
and for a kept one re-rendered (--render) alike."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from benchmarks.serving.soak_checks import total

from adaserve.loadgen.records import Record, summarize, summary_table

PROBE_QUEUE = 8  # requests queued beyond the slots, so a freed slot is refilled at once
SHARED_CORES = 0.25  # others' load beyond which the page says the machine was shared
TTFT_SLO_MS = 5000.0  # the loadgen's default, for its per-class table


def settings(res: dict) -> SimpleNamespace:
    """What the run was asked for (soak.py's flags), as its page and plot read them."""
    return SimpleNamespace(**res["settings"])


def plot(res: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    args = settings(res)
    s = res["samples"]
    t = [x["t"] / 60 for x in s]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    ax.plot(t, [x["rss_mib"] for x in s], color="tab:blue", label="server RSS")
    if sl := res["slope"]:
        a, b = sl["window_s"]
        ax.plot([a / 60, b / 60], [sl["intercept_mib"] + sl["mib_per_min"] * x / 60
                                   for x in (a, b)],
                color="black", ls="--", label=f"fit {sl['mib_per_min']:+.2f} MiB/min")
    lo, hi = min(x["rss_mib"] for x in s), max(x["rss_mib"] for x in s)
    mid = (lo + hi) / 2  # at least 20 MiB tall, so a flat line looks flat
    ax.set_ylim(min(lo, mid - 10) - 1, max(hi, mid + 10) + 1)
    ax.ticklabel_format(axis="y", useOffset=False, style="plain")
    ax.set_xlabel("minutes since the load generator started")
    ax.set_ylabel("resident memory (MiB)")
    ax2 = ax.twinx()
    for key, color in (("running", "tab:orange"), ("waiting", "tab:red")):
        ax2.step(t, [x[key] if x[key] is not None else float("nan") for x in s], where="post",
                 color=color, alpha=0.7, label=f"{key} requests")
    ax2.set_ylabel("requests in the server")
    ax.axvline(args.minutes, color="grey", lw=0.8)
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, loc="lower right", fontsize=8)
    ax.set_title(f"Soak at {res['rate_rps']:.2f} req/s ({args.load:g} x capacity)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def page(res: dict, records: list[Record]) -> str:
    """The page from a run's data (measured now, or kept: --render) and its records."""
    args = settings(res)
    info, probe, th = res["server"], res["probe"], res["threshold"]
    rss = [x["rss_mib"] for x in res["samples"]]
    ms, me = res["metrics_start"] or {}, res["metrics_end"] or {}
    fin = total(me, "adaserve_requests_total") - total(ms, "adaserve_requests_total")
    if probe:
        cap = (f"measured: {probe['clients']} closed-loop clients (max_batch "
               f"{info['max_batch']} + {PROBE_QUEUE} queued) each sending its next request "
               f"as soon as the last finished, the soak's prompts (`{args.prompts}`, their own "
               f"output lengths) and class mix; {probe['completed_in_window']} requests "
               f"finished in the {probe['window_s']:g} s after a {probe['warmup_s']:g} s "
               f"warm-up = **{probe['capacity_rps']:.3f} requests/s**; non-200 answers: "
               f"{len(probe['non_200'])}. Cross-check: the server emitted "
               f"{probe['server_tok_s']:.1f} tokens/s over the window (/dashboard/data), / "
               f"{probe['mean_output_tokens']:.1f} output tokens per probe request = "
               f"{probe['capacity_from_tokens_rps']:.3f} requests/s")
    else:
        cap = f"given with --capacity: **{res['capacity_rps']:.3f} requests/s**"
    f = res["failures"]
    others = [res["others_cores_load"]] + ([probe["others_cores"]] if probe else [])
    shared = (f"{probe['others_cores']:.2f} cores during the probe, " if probe else "") + \
        f"{res['others_cores_load']:.2f} cores during the load"
    lines = [
        "# Soak: 0.8x capacity, mixed SLO classes", "",
        f"- command: `{res['command']}`", f"- machine: {res['machine']}",
        f"- date: {res['date']}, commit {res['commit']}",
        f"- server: `adaserve serve` defaults{' + ' + args.serve_args if args.serve_args else ''}"
        f": {info['model']} + {info['draft']}, policy {info['policy']}, B = {info['budget']}, "
        f"{info['max_batch']} KV slots, max waiting {info['max_waiting']}; classes "
        + ", ".join(f"{c['name']} {c['tpot_ms']:.1f} ms" if c["tpot_ms"] else c["name"]
                    for c in info["slo_classes"]),
        f"- capacity: {cap}",
        f"- load: `{res['loadgen_command']}`: {res['requests']} requests, Poisson at "
        f"{res['rate_rps']:.3f}/s = {args.load:g} x capacity over {args.minutes:g} minute(s), "
        f"class mix {args.mix} (i.i.d. draws), prompt set {args.prompts}; the last "
        f"request finished {res['load_s']:.0f} s after the load started",
        f"- other processes' CPU load, on average: {shared} (of {res['cores']} cores; "
        "the machine's busy time less this script's, the server's and the loadgen's)"
        + (": **the machine was shared, so the capacity and the timings are low**"
           if max(others) > SHARED_CORES else ""), "",
        "Capacity is the request throughput the server sustains when it is never short of "
        "work, measured with the soak's own workload, so 0.8x keeps the server busy with a "
        "stable queue. The rate sweeps in results/rate/ are not used: they ran with "
        "`--budget 4` and short prompts, and where their attainment falls is an SLO limit "
        "(urgent attainment is under 50% at their lowest rate), not a throughput limit.", "",
        "## Checks", "", "| check | reads | value | pass |", "|---|---|---|---|",
        *(f"| {c['check']} | {c['reads']} | {c['value']} | "
          f"{'yes' if c['passed'] else '**NO**'} |" for c in res["checks"]), "",
        f"Memory limit: {th['mib_per_min']:g} MiB/min, at this run's "
        f"{60 * res['rate_rps']:.0f} requests/min {th['kib_per_request']:.0f} KiB per "
        "request. Weights and the KV pool are allocated at start-up; what a request could "
        "leak is host objects: its token ids as a Python list take ~36 B a token, ~20 KiB "
        "for a 500-token prompt, and a leaked per-step tensor (logits over the 49k "
        "vocabulary: 192 KiB) far more. A slower leak passes: a "
        f"{args.minutes:g}-minute run cannot tell it from noise, and the limit is still "
        f"{th['mib_per_min'] * 60 * 24 / 1024:.1f} GiB a day.", "",
        "## Memory (server RSS, MiB)", "", "| when | RSS |", "|---|---|",
        f"| idle after start-up | {res['rss_idle_mib']:.0f} |",
        f"| load start (after the probe) | {rss[0]:.0f} |",
        f"| peak during the load | {max(rss):.0f} |",
        f"| end (drained) | {rss[-1]:.0f} |",
        f"| after the slot fill | {res['rss_after_fill_mib']:.0f} |", "",
        "![RSS and requests in the server over the run](rss.png)", "",
        "## Server counters (/metrics)", "", "| | load start | end | change |",
        "|---|---|---|---|",
        *(f"| {name} | {total(ms, key):g} | {total(me, key):g} | "
          f"{total(me, key) - total(ms, key):+g} |" for name, key in (
              ("running requests", "adaserve_running_requests"),
              ("waiting requests", "adaserve_waiting_requests"),
              ("finished requests (adaserve_requests_total)", "adaserve_requests_total"),
              ("rejected (adaserve_rejected_requests_total)",
               "adaserve_rejected_requests_total"),
              ("output tokens", "adaserve_output_tokens_total"))), "",
        f"The server counted {fin:g} requests finished during the load; the client "
        f"recorded {f['ok']} ok of {f['sent']}.", "",
        "## Per class (client-measured; attainment is reported, not a soak criterion)", "",
        summary_table(summarize(records, TTFT_SLO_MS), TTFT_SLO_MS), ""]
    return "\n".join(lines)
