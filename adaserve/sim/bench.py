"""`adaserve bench --backend sim`: the sweep's runs on the simulator instead of a server.

A run is the workload `adaserve loadgen` would send at that point and seed (arrival times,
classes and prompts from loadgen.arrivals.build_plan; or a paper trace with --trace),
through the simulated server, each request running to its max_tokens (ignore_eos). Its
records and summary are written as the load generator writes them, so the sweep's
bookkeeping (--extend) and its result page read a simulated run like a measured one.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from adaserve.loadgen.arrivals import build_plan
from adaserve.loadgen.points import Point, slo_classes
from adaserve.loadgen.records import summarize, summary_table
from adaserve.loadgen.workload import PromptSpec
from adaserve.server.options import add_args as add_serve_args
from adaserve.server.slo_classes import parse_classes
from adaserve.sim.acceptance import AcceptanceModel
from adaserve.sim.models import load_acceptance
from adaserve.sim.replay import ReplayAcceptance
from adaserve.sim.driver import SimSetup, write_run
from adaserve.sim.hardware import HardwareModel
from adaserve.sim.prompt_tokens import estimate, tokenizer_ids
from adaserve.sim.run import check_policies, run, shows_progress
from adaserve.sim.workload import SimRequest, at_rate, from_arrivals, read_paper_trace

# `adaserve serve` flags the simulator follows (--serve-args); the others are accepted and
# have no simulated counterpart: it refuses no request (queue and context fit the workload)
FOLLOWED = ("--budget", "--max-depth", "--max-width", "--eq8-depth", "--max-batch",
            "--prefill-mode", "--slo-classes", "--baseline-ms")


@dataclass(frozen=True, slots=True)
class SimBackend:
    """What every simulated server of one sweep shares."""

    args: argparse.Namespace  # the bench command's
    hardware: HardwareModel
    acceptance: AcceptanceModel
    serve: argparse.Namespace  # --serve-args, parsed as `adaserve serve` parses them
    baseline_ms: float
    # the prompts' token ids (--prompt-tokens tokenizer), else only their estimated count
    prompt_ids: Callable[[PromptSpec], tuple[int, ...]] | None

    @classmethod
    def from_args(cls, args: argparse.Namespace, policies: list[str]) -> SimBackend:
        """ValueError for anything the sweep could not run, before it starts."""
        hw = HardwareModel.load(args.hardware)
        serve = _serve_args(args.serve_args)
        baseline = next(b for b in (args.baseline_ms, serve.baseline_ms,
                                    hw.baseline_latency_ms) if b is not None)
        acceptance = load_acceptance(args.acceptance)
        if isinstance(acceptance, ReplayAcceptance) and (args.trace
                                                         or args.prompt_tokens != "tokenizer"):
            raise ValueError("a replay recording is keyed on the prompts' token ids: it needs "
                             "--prompt-tokens tokenizer and the load generator's prompts (no "
                             "--trace)")
        ids = tokenizer_ids() if args.prompt_tokens == "tokenizer" and not args.trace else None
        backend = cls(args, hw, acceptance, serve, baseline, ids)
        check_policies(backend.setup("adaserve"), policies)
        return backend

    def setup(self, policy: str) -> SimSetup:
        s = self.serve
        return SimSetup(self.hardware, self.acceptance, policy=policy,
                        prefill_mode=s.prefill_mode, budget=s.budget, max_batch=s.max_batch,
                        max_depth=s.max_depth, max_width=s.max_width,
                        cost_aware_depth=not s.eq8_depth)

    def start(self, policy: str, urgent_scale: float) -> SimServer:
        return SimServer(self, policy, urgent_scale)


class SimServer:
    """Where a sweep starts `adaserve serve` for a policy (one per point with slo-scale),
    this stands: the same SLO classes, and ``info`` as /server_info would say it."""

    def __init__(self, backend: SimBackend, policy: str, urgent_scale: float) -> None:
        self.backend, self.policy = backend, policy
        args, hw = backend.args, backend.hardware
        if args.trace:
            classes = {r.slo_class: r.slo_ms for r in self._trace()}
        else:
            spec = slo_classes(urgent_scale) if backend.serve.slo_classes is None \
                else backend.serve.slo_classes
            classes = {c.name: c.tpot_ms
                       for c in parse_classes(spec, backend.baseline_ms).values()}
        self.slo_ms = classes
        setup = backend.setup(policy)
        self.info = {"backend": "sim", "hardware": hw.name, "acceptance": str(args.acceptance),
                     "model": hw.target_model, "draft": hw.draft_model, "policy": policy,
                     "budget": setup.budget or hw.budget,
                     "baseline_latency_ms": backend.baseline_ms,
                     "slo_classes": [{"name": k, "tpot_ms": v} for k, v in classes.items()],
                     **{f.name: getattr(setup, f.name) for f in dataclasses.fields(setup)
                        if f.name not in ("hardware", "acceptance", "policy", "budget",
                                          "rules")},
                     "rules": dataclasses.asdict(setup.rules)}

    def workload(self, point: Point, seed: int) -> list[SimRequest]:
        """What `adaserve loadgen` would send at this point and seed; a trace at the
        point's rate."""
        args = self.backend.args
        if args.trace:
            return at_rate(self._trace(), point.rate)
        opts = argparse.Namespace(
            mix=args.mix, urgent=point.urgent, arrival=args.arrival, rate=point.rate,
            cv=args.cv, trace="", time_scale=1.0, requests=args.requests, seed=seed,
            prompts=args.prompts, max_tokens=args.max_tokens, mix_draw=args.mix_draw)
        plan, ids = build_plan(opts), self.backend.prompt_ids
        if ids is None:
            return from_arrivals(plan, self.slo_ms, estimate)
        reqs = from_arrivals(plan, self.slo_ms, lambda p: len(ids(p)))
        return [dataclasses.replace(r, prompt_ids=ids(a.prompt)) for r, a in zip(reqs, plan)]

    def run(self, point: Point, seed: int, out: Path) -> dict:
        """One run into ``out`` (records.jsonl, summary.json, summary.md); its summary."""
        args = self.backend.args
        reqs = self.workload(point, seed)
        res = run(self.backend.setup(self.policy), reqs, seed, progress=shows_progress(False),
                  label=f"{self.policy} {point.label} s{seed}")
        meta = {"server": self.info, "date": dt.datetime.now().isoformat(timespec="seconds"),
                "requests": len(reqs), "mix_draw": args.mix_draw, "seed": seed,
                "rate": point.rate, "iterations": res.iterations,
                "simulated_s": res.simulated_s, "wall_s": res.wall_s}
        summary = write_run(out, res.records, args.ttft_slo_ms, meta)
        (out / "summary.md").write_text("\n".join([
            "# Simulated run", "", f"- {res.headline()}",
            f"- hardware model {self.info['hardware']}, acceptance {self.info['acceptance']}",
            "", summary_table(summarize(res.records, args.ttft_slo_ms), args.ttft_slo_ms),
            ""]))
        return summary

    def stop(self) -> None:
        """Nothing runs between points: the counterpart of stopping a server."""

    def _trace(self) -> list[SimRequest]:
        args = self.backend.args
        return read_paper_trace(args.trace, self.backend.baseline_ms, limit=args.requests)


def _serve_args(text: str) -> argparse.Namespace:
    """--serve-args as `adaserve serve` would read them; flags it does not know are an
    error, as they would be for the server. Unset --slo-classes and --prefill-mode are
    None: the sweep's classes and the system's prefill mode."""
    p = argparse.ArgumentParser(prog="--serve-args", add_help=False, exit_on_error=False)
    add_serve_args(p)
    p.set_defaults(slo_classes=None, prefill_mode=None)
    try:
        ns, unknown = p.parse_known_args(shlex.split(text or ""))
    except argparse.ArgumentError as e:
        raise ValueError(f"--serve-args: {e}") from None
    if unknown:
        raise ValueError(f"--serve-args: the simulator takes no {' '.join(unknown)} (its "
                         f"model is --hardware; it follows {', '.join(FOLLOWED)})")
    return ns
