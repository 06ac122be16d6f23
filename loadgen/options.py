"""The traffic options, declared once: `adaserve loadgen` parses them and hands them on to
the Locust file, which declares the same table to Locust (and its web UI)."""

from __future__ import annotations

import argparse

from adaserve.loadgen.workload import DEFAULT_MIX, MIX_DRAWS, PROMPT_SETS, PROMPT_SETS_HELP

TRAFFIC: tuple[tuple[str, dict], ...] = (
    ("--arrival", dict(choices=["poisson", "gamma", "trace", "paper"], default="poisson",
                       help="arrival process (trace: an Azure trace's times and output "
                            "lengths; paper: a paper trace's times, prompt and output lengths "
                            "and SLOs)")),
    ("--rate", dict(type=float, default=1.0,
                    help="requests per second (poisson, gamma; paper: the trace's gaps scaled "
                         "to this mean rate, 0: its own times x --time-scale)")),
    ("--cv", dict(type=float, default=2.0,
                  help="coefficient of variation of gamma gaps (> 1: bursty)")),
    ("--trace", dict(default="",
                     help="the trace CSV: --arrival trace takes the Azure LLM trace schema "
                          "(TIMESTAMP, ContextTokens, GeneratedTokens), --arrival paper a "
                          "paper trace (emission_time_ms, input_length, output_length, "
                          "slo_ratio), of which the first --requests rows")),
    ("--time-scale", dict(type=float, default=1.0,
                          help="multiplies trace gaps (0.5: twice as fast)")),
    ("--baseline-ms", dict(type=float, default=0.0,
                           help="--arrival paper: the baseline latency a slo_ratio > 0 "
                                "multiplies (0: the server's, from /server_info)")),
    ("--requests", dict(type=int, default=50, help="requests in the run")),
    ("--mix", dict(default=DEFAULT_MIX, help="SLO class weights, name=weight,...")),
    ("--urgent", dict(type=float, default=-1.0,
                      help="urgent proportion in [0, 1] (overrides the mix's; -1: keep it)")),
    ("--prompts", dict(choices=list(PROMPT_SETS), default="mixed",
                       help=PROMPT_SETS_HELP)),
    ("--max-tokens", dict(type=int, default=0,
                          help="output tokens per request (0: the prompt set's, or the "
                               "trace's)")),
    ("--seed", dict(type=int, default=0,
                    help="seeds the arrival times, the prompts and the class assignment")),
)

MIX_DRAW_HELP = {
    "exact": "give each class exactly its share of the requests (share x requests, "
             "largest-remainder rounding), in an order shuffled by --seed",
    "iid": "draw each request's class independently from the mix, so the shares vary with "
           "the seed (every run made before --mix-exact existed was drawn so)",
}


def add_traffic_args(parser, **extra) -> None:
    """Declare the table on an argparse (or Locust) parser; ``extra`` goes to every flag."""
    for flag, kw in TRAFFIC:
        parser.add_argument(flag, **kw, **extra)


def add_mix_draw_args(parser, default: str | None, notes: dict[str, str] | None = None,
                      **extra) -> None:
    """--mix-exact and --mix-iid, which set ``mix_draw`` (see ClassMix.assign); ``notes``
    adds to a flag's help, ``extra`` goes to both. Pass a mutually exclusive group as
    ``parser`` where the parser allows it (Locust's knows its extra keywords only itself)."""
    for how in MIX_DRAWS:
        parser.add_argument(f"--mix-{how}", dest="mix_draw", action="store_const", const=how,
                            default=default, help=MIX_DRAW_HELP[how] + (notes or {}).get(how, ""),
                            **extra)


def traffic_argv(args: argparse.Namespace) -> list[str]:
    """The parsed values as command-line flags again, for the Locust process."""
    out = []
    for flag, _ in TRAFFIC:
        out += [flag, str(getattr(args, flag[2:].replace("-", "_")))]
    return out + [f"--mix-{args.mix_draw}"]
