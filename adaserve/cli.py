"""AdaServe serves one LLM to many applications at once, each request with its own latency
SLO (time per output token), and spends every iteration's token budget where it keeps the
most requests on their SLO (fine-grained speculative decoding).

common commands:
  adaserve serve                    serve the model over HTTP (OpenAI-compatible API,
                                    per-request SLOs, /metrics, /dashboard)
  adaserve generate "Say hi"        run prompts through the embedded engine and print
  adaserve loadgen --rate 1         send mixed-SLO traffic to a server, report attainment
  adaserve bench                    compare the scheduling policies under the same load
  adaserve simulate --trace T.csv   the same comparison on a simulated GPU (no model loaded)
  adaserve policies                 list the scheduling policies

`adaserve COMMAND --help` describes a command and its options. The manual is docs/ in the
source repository (the README is its front page).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from adaserve import __version__


class _HelpFormatter(argparse.RawDescriptionHelpFormatter,
                     argparse.ArgumentDefaultsHelpFormatter):
    """Descriptions keep their line breaks (they end in examples); an option that takes a
    value shows its default, unless that is None or empty: then its help says what stands
    in (a flag's default, off, goes without saying)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.nargs == 0 or action.default is None or action.default == "":
            return action.help
        return super()._get_help_string(action)


def build_parser() -> argparse.ArgumentParser:
    # each component declares its own options (add_args next to its code); this file only
    # names the sub-commands and dispatches to them
    parser = argparse.ArgumentParser(prog="adaserve", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"adaserve {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    policies = sub.add_parser("policies", help="list the scheduling policies")
    policies.set_defaults(func=_list_policies)

    prof = sub.add_parser("profile", help="measure this machine: budget B, latency models, "
                                          "baseline latency; writes the profile the engine loads",
                          formatter_class=_HelpFormatter)
    _model_args(prof)
    prof.add_argument("--out", type=Path, default=None,
                      help="where to write the profile (default: the cache path the engine reads)")
    prof.add_argument("--repeats", type=int, default=5, help="timed repetitions per point")
    prof.add_argument("--curves", type=int, default=5,
                      help="budget curves; B is their median, and their spread is shown")
    prof.add_argument("--quick", action="store_true",
                      help="a smaller latency grid, and a budget curve that stops past 2x a "
                           "one-token forward (what `adaserve serve` measures at start-up "
                           "when no profile is saved)")
    prof.add_argument("--max-context", type=int, default=None,
                      help="the context table's longest context per request (default: the "
                           "model's own context, 8192 for smollm2-135m)")
    prof.add_argument("--draft-window", type=int, default=None,
                      help="time the draft with the bounded KV `adaserve serve --draft-window` "
                           "runs: --draft-sinks + this many recent tokens per request")
    prof.add_argument("--draft-sinks", type=int, default=4,
                      help="attention-sink tokens of the bounded draft KV (default 4)")
    prof.set_defaults(func=_profile)

    gen = sub.add_parser("generate", help="run prompts through the embedded engine and print",
                         formatter_class=_HelpFormatter)
    _model_args(gen)
    gen.add_argument("prompts", nargs="+", help="one or more prompts, batched together")
    gen.add_argument("--policy", default=None,
                     help="scheduling policy (default: adaserve with a draft, else incremental)")
    gen.add_argument("--max-tokens", type=int, default=64, help="output tokens per prompt")
    gen.add_argument("--temperature", type=float, default=0.0, help="0: greedy")
    gen.add_argument("--chat", action="store_true", help="wrap each prompt in the chat template")
    gen.set_defaults(func=_generate)

    serve = sub.add_parser("serve", help="serve the embedded engine over HTTP (OpenAI-compatible, "
                                         "per-request SLOs, /metrics, /dashboard)")
    _model_args(serve)
    from adaserve.server.options import add_args as _serve_args

    _serve_args(serve)
    serve.set_defaults(func=_serve)

    from adaserve.loadgen.run import DESCRIPTION as _loadgen_doc, add_args as _loadgen_args

    lg = sub.add_parser("loadgen", help="open-loop mixed-SLO traffic against a server (Locust, "
                                        "headless), then per-class attainment tables",
                        description=_loadgen_doc, formatter_class=_HelpFormatter)

    _loadgen_args(lg)
    lg.set_defaults(func=_loadgen)

    from adaserve.loadgen.bench import DESCRIPTION as _bench_doc, add_args as _bench_args

    bench = sub.add_parser("bench", help="policy sweeps: a server per policy, the same load "
                                         "points for each; writes results/<experiment>/",
                           description=_bench_doc, formatter_class=_HelpFormatter)

    _bench_args(bench)
    bench.set_defaults(func=_bench)
    pages = bench.add_subparsers(dest="bench_command", metavar="{page,pages}",
                                 help="page NAME: remake one results page from what it keeps; "
                                      "pages: list the pages (both in a source checkout: "
                                      "python -m benchmarks)")
    page = pages.add_parser("page", help="remake results/NAME.md from its kept runs or data",
                            formatter_class=_HelpFormatter)
    page.add_argument("name", help="the page's path under results/ without .md: engine, "
                                   "sim/fig8, rate-default-v2/summary")
    page.add_argument("--print", action="store_true", dest="dry",
                      help="print the command that remakes it, run nothing")
    page.add_argument("--measure", action="store_true",
                      help="also remake a page that can only be remade by measuring again")
    page.set_defaults(func=_bench_pages)
    pages.add_parser("pages", help="every results page, the module that makes it, whether it "
                                   "is current").set_defaults(func=_bench_pages, name=None)

    from adaserve.sim.cli import DESCRIPTION as _sim_doc, add_args as _sim_args

    simulate = sub.add_parser("simulate", help="a workload through the scheduling loop on a "
                                               "simulated executor (hardware latency and "
                                               "acceptance models), per policy",
                              description=_sim_doc, formatter_class=_HelpFormatter)
    _sim_args(simulate)
    simulate.set_defaults(func=_simulate)

    sim = sub.add_parser("sim", help="simulator tools: `adaserve sim record` records the real "
                                     "pair for replay acceptance")
    sim_sub = sim.add_subparsers(dest="sim_command", required=True, metavar="{record}",
                                 help="record: a replay recording of the real pair")
    rec = sim_sub.add_parser("record", help="the real pair over the load generator's prompts: "
                                            "the target's greedy continuation and the draft's "
                                            "top-K guesses at every position (.npz)",
                             formatter_class=_HelpFormatter)
    _model_args(rec)
    from adaserve.sim.record_cli import add_args as _record_args
    _record_args(rec)
    rec.set_defaults(func=_sim_record)

    sgl = sub.add_parser("sglang", help="the SGLang plugin: `adaserve sglang check` checks the "
                                        "installed sglang against it; `adaserve sglang "
                                        "serve-cpu` runs SGLang with it on a CPU")
    sgl_sub = sgl.add_subparsers(dest="sglang_command", required=True,
                                 metavar="{check,serve-cpu,fleet-cpu}",
                                 help="check: does the plugin fit the installed sglang; "
                                      "serve-cpu: SGLang with the plugin on a CPU; "
                                      "fleet-cpu: N serve-cpu replicas behind SGLang's router")
    sgl_sub.add_parser("check", help="is the installed sglang the version the plugin was built "
                                     "against, and does every hook target exist in it")
    serve_cpu = sgl_sub.add_parser(
        "serve-cpu", help="SGLang's server with the ADASERVE plugin on a CPU (a test vehicle: "
                          "stubbed kernels, torch attention)", formatter_class=_HelpFormatter)
    from adaserve.sglang.cpu.launch import add_args as _serve_cpu_args
    _serve_cpu_args(serve_cpu)
    fleet_cpu = sgl_sub.add_parser(
        "fleet-cpu", help="N `serve-cpu` replicas behind SGLang's router (sglang-router), "
                          "started and stopped together", formatter_class=_HelpFormatter)
    from adaserve.sglang.cpu.fleet import add_args as _fleet_cpu_args
    _fleet_cpu_args(fleet_cpu)
    sgl.set_defaults(func=_sglang)

    dist = sub.add_parser("distill-draft", help="distil the draft for the default target from the "
                                                "target's own outputs (writes a draft directory)",
                          formatter_class=_HelpFormatter)
    dist.add_argument("--out", type=Path, default=None,
                      help="the draft directory to write (default: <cache>/drafts/<name>)")
    dist.add_argument("--work", type=Path, default=None,
                      help="teacher data and checkpoints; a run resumes from here "
                           "(default: <cache>/distill)")
    dist.add_argument("--prompts", type=int, default=None, help="phase-1 prompts (default 1200)")
    dist.add_argument("--layers", type=int, default=None, help="decoder layers (default 3)")
    dist.add_argument("--head-tokens", type=int, default=None, help="head vocabulary (default 8192)")
    dist.add_argument("--epochs", type=float, default=None, help="training epochs (default 8)")
    dist.add_argument("--no-progress", action="store_true", help="no progress bar")
    dist.set_defaults(func=_distill)
    return parser


def _sglang(args: argparse.Namespace) -> int:
    if args.sglang_command == "serve-cpu":
        from adaserve.sglang.cpu.launch import main as serve_cpu_main

        return serve_cpu_main(args)
    if args.sglang_command == "fleet-cpu":
        from adaserve.sglang.cpu.fleet import main as fleet_cpu_main

        return fleet_cpu_main(args)
    from adaserve.sglang.check import main as check_main

    return check_main(args)


def _model_args(p: argparse.ArgumentParser) -> None:
    from adaserve.engine.weights import DEFAULT_MODEL

    p.add_argument("--model", default=DEFAULT_MODEL,
                   help=f"{DEFAULT_MODEL} (packaged) or a local Hugging Face directory")
    p.add_argument("--draft", default="auto", type=lambda s: None if s == "none" else s,
                   help="auto (the packaged distilled draft with the default model), none, "
                        "'target', 'layers:N' or a local draft directory")
    p.add_argument("--device", default="auto", help="auto, cpu or cuda[:i]")


def _bench(args: argparse.Namespace) -> int:
    from adaserve.loadgen.bench import main as bench_main

    return bench_main(args)


def _bench_pages(args: argparse.Namespace) -> int:
    """``python -m benchmarks`` of the source checkout this package is installed from
    (editable), else of the working directory: benchmarks/ and results/ are not installed."""
    import subprocess

    root = next((d for d in (Path(__file__).resolve().parents[1], Path.cwd())
                 if (d / "benchmarks" / "__main__.py").is_file()), None)
    if root is None:
        print("adaserve bench page(s) needs the source repository (benchmarks/, results/): run "
              "it there, or `python -m benchmarks` in it", file=sys.stderr)
        return 2
    argv = [] if args.name is None else \
        [args.name, *([] if args.dry else ["--run"]), *(["--measure"] if args.measure else [])]
    return subprocess.run([sys.executable, "-m", "benchmarks", *argv], cwd=root).returncode


def _simulate(args: argparse.Namespace) -> int:
    from adaserve.sim.cli import main as simulate_main

    return simulate_main(args)


def _sim_record(args: argparse.Namespace) -> int:
    from adaserve.sim.record_cli import main as record_main

    return record_main(args)


def _loadgen(args: argparse.Namespace) -> int:
    from adaserve.loadgen.run import main as loadgen_main

    return loadgen_main(args)


def _serve(args: argparse.Namespace) -> int:
    from adaserve.server.listen import bind, explain

    try:  # before torch is even imported: a taken port is refused at once
        sock = bind(args.host, args.port)
    except OSError as e:
        print(explain(args.host, args.port, e), file=sys.stderr)
        return 1
    from adaserve.server.main import main as serve_main

    return serve_main(args, sock)


def _profile(args: argparse.Namespace) -> int:
    from adaserve.engine.profiler import main as profile_main

    return profile_main(args)


def _generate(args: argparse.Namespace) -> int:
    from adaserve.engine import Engine, EngineConfig, SamplingParams
    from adaserve.engine.config import names_a_draft

    policy = args.policy or ("adaserve" if names_a_draft(args.model, args.draft) else "incremental")
    cfg = EngineConfig(model=args.model, draft=args.draft, policy=policy, device=args.device)
    params = SamplingParams(max_tokens=args.max_tokens, temperature=args.temperature)
    try:
        eng = Engine(cfg)
    except ValueError as e:  # a policy that cannot run here (turbospec without a profile)
        print(f"adaserve generate: error: {e}", file=sys.stderr)
        return 2
    with eng:
        ids = [eng.submit(messages=[{"role": "user", "content": p}], params=params)
               if args.chat else eng.submit(p, params) for p in args.prompts]
        for rid in ids:
            c = eng.result(rid)
            st = c.stats
            print(c.text)
            print(f"-- {st.output_tokens} tokens, {c.finish_reason}, "
                  f"{st.accepted_tokens_per_step:.2f} tokens/step, "
                  f"TPOT {1e3 * (st.tpot_s or 0):.1f} ms")
    return 0


def _distill(args: argparse.Namespace) -> int:
    import dataclasses

    from adaserve.distill.pipeline import DistillConfig, distill
    from adaserve.distill.train import TrainConfig
    from adaserve.engine.weights import DEFAULT_DRAFT, cache_root

    cfg = DistillConfig()
    given = {k: v for k, v in (("prompts", args.prompts), ("layers", args.layers),
                               ("head_tokens", args.head_tokens)) if v is not None}
    train = TrainConfig() if args.epochs is None else TrainConfig(epochs=args.epochs)
    cfg = dataclasses.replace(cfg, train=train, **given)
    out = args.out or cache_root() / "drafts" / DEFAULT_DRAFT
    work = args.work or cache_root() / "distill"
    distill(cfg, out, work, progress=not args.no_progress)
    print(out)
    return 0


def _list_policies(_: argparse.Namespace) -> int:
    from adaserve.scheduler import PRESETS, SUMMARIES

    width = max(map(len, SUMMARIES))
    for name, summary in SUMMARIES.items():
        print(f"{name:{width}s} {summary}")
    print("\nadaserve and adaserve-authors take options after a colon, e.g. "
          "adaserve:pace=off,depth=eq8")
    for name, opts in PRESETS.items():
        print(f"  {name:{width - 2}s} = {name}:{opts.text()}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
