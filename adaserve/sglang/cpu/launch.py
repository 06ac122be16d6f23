"""`adaserve sglang serve-cpu`: SGLang with the ADASERVE plugin on a machine without a GPU.

One command sets up what SGLang 0.5.23 needs on a CPU and starts its own server
(``python -m sglang.launch_server``) with the plugin:

- ADASERVE_SGLANG_CPU=1 and this package's ``boot`` directory first on PYTHONPATH: every
  process SGLang spawns installs the sgl_kernel stand-in at start-up (``stub``), and the
  plugin registers the CPU hooks (``hooks``);
- SGLANG_USE_CPU_ENGINE=1: SGLang's ``is_cpu()`` (its CPU code paths) needs it beside
  ``--device cpu``;
- TRITON_INTERPRET=1: the few Triton kernels left on the speculative path (tree build,
  greedy verify, commit bookkeeping) run in Triton's interpreter: small index work per
  request, not model compute;
- ``--attention-backend triton`` with its kernels replaced by torch (``attention``): the
  backend SGLang's speculative decoding accepts;
- fp32 (this CPU's fast path) and a KV pool sized for a small machine;
- ``--sleep-on-idle``: SGLang's scheduler otherwise polls for work in a busy loop, a
  whole core of two while the server waits (measured: 107% CPU on an idle server).

A test vehicle for the plugin (tests/sglang_tier/test_serve_cpu.py, results/sglang_cpu.md),
not a fast path: see docs/sglang-cpu.md.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from adaserve.engine.full_vocab import HOT_TOKENS
from adaserve.engine.weights import FULL_VOCAB_DRAFT

BOOT = Path(__file__).resolve().parent / "boot"
ALGORITHMS = ("ADASERVE", "STANDALONE", "none")


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="smollm2-135m",
                   help="the target: smollm2-135m (converted from the packaged GGUF on first "
                        "use) or a local Hugging Face directory")
    p.add_argument("--draft", default=FULL_VOCAB_DRAFT,
                   help=f"the draft SGLang loads as a standalone model: {FULL_VOCAB_DRAFT} "
                        "(our distilled draft with a full-vocabulary head, exported into the "
                        "cache on first use), 'target' (the target drafts for itself) or a "
                        "local Hugging Face directory")
    p.add_argument("--draft-head", choices=("hot", "full"), default="hot",
                   help="hot (default): the draft proposes only the tokens of its "
                        "hot_tokens.pt (SGLang's --speculative-token-map; our distilled "
                        "draft's 8,192 trained tokens, its head cut to them); full: its "
                        "whole-vocabulary head")
    p.add_argument("--algorithm", choices=ALGORITHMS, default="ADASERVE",
                   help="ADASERVE (the plugin), STANDALONE (SGLang's own tree speculation "
                        "with the same draft) or none (no speculation), for comparisons")
    p.add_argument("--steps", type=int, default=3, help="draft steps: the deepest tree (D)")
    p.add_argument("--topk", type=int, default=2, help="beam width per step (W)")
    p.add_argument("--draft-tokens", type=int, default=4,
                   help="verify positions per request, the root included (N)")
    p.add_argument("--budget", type=int, default=None,
                   help="ADASERVE_BUDGET: tokens verified per iteration over the batch "
                        "(default: the whole verify layout, N x max running requests)")
    p.add_argument("--verify", choices=("ragged", "uniform", "alternate"), default=None,
                   help="ADASERVE_VERIFY: ragged (default here: the target computes only "
                        "the positions AdaServe selects), uniform (SGLang's [batch, N] "
                        "layout, the positions not selected unlinked) or alternate (one "
                        "iteration each, to compare them under one load)")
    p.add_argument("--iteration-log", default=None, metavar="FILE",
                   help="ADASERVE_ITERATION_LOG: one JSON line per decoding iteration")
    p.add_argument("--policy", default=None, help="ADASERVE_POLICY (default adaserve)")
    p.add_argument("--slo-classes", default=None,
                   help="ADASERVE_SLO_CLASSES, as `adaserve serve --slo-classes`")
    p.add_argument("--baseline-ms", type=float, default=None,
                   help="ADASERVE_BASELINE_MS: the plain decode step the x-multiple classes "
                        "scale (SGLang on this CPU: see docs/sglang-cpu.md); required by the "
                        "default classes")
    p.add_argument("--prefill-chunk-ms", type=float, default=None,
                   help="ADASERVE_PREFILL_CHUNK_MS: ms of one target forward that prefills a "
                        "chunk of SGLang's --chunked-prefill-size tokens, the prefill rate a "
                        "class's default TTFT SLO is reasoned from (with --baseline-ms); "
                        "unset: no default TTFT SLO (docs/contract.md)")
    p.add_argument("--default-class", default=None, help="ADASERVE_DEFAULT_CLASS")
    p.add_argument("--host", default="127.0.0.1", help="address SGLang listens on")
    p.add_argument("--port", type=int, default=30000, help="port SGLang listens on")
    p.add_argument("--max-running-requests", type=int, default=16,
                   help="requests decoding at once (SGLang's flag)")
    p.add_argument("--max-total-tokens", type=int, default=32768,
                   help="KV pool size in tokens (SGLang would take most of the RAM)")
    p.add_argument("--enable-metrics", action="store_true",
                   help="SGLang's /metrics, with the per-class SLO metrics")
    p.add_argument("sglang_args", nargs=argparse.REMAINDER,
                   help="after --: more arguments for sglang.launch_server")


def sglang_model_dir(model: str) -> str:
    from adaserve.engine.weights import resolve_model

    return str(resolve_model(model))


def sglang_draft_dir(draft: str) -> str:
    from adaserve.engine.full_vocab import resolve_draft

    return str(resolve_draft(draft))


def command(args: argparse.Namespace) -> tuple[list[str], dict[str, str]]:
    """(argv, environment) of the SGLang launch: pure, so it is tested without starting."""
    target = sglang_model_dir(args.model)
    argv = [sys.executable, "-m", "sglang.launch_server", "--model-path", target,
            "--device", "cpu", "--attention-backend", "triton", "--dtype", "float32",
            "--host", args.host, "--port", str(args.port),
            "--max-running-requests", str(args.max_running_requests),
            "--max-total-tokens", str(args.max_total_tokens), "--sleep-on-idle"]
    if args.algorithm != "none":
        draft = target if args.draft == "target" else sglang_draft_dir(args.draft)
        hot = Path(draft) / HOT_TOKENS
        if args.draft_head == "hot" and args.algorithm == "ADASERVE" and hot.is_file():
            argv += ["--speculative-token-map", str(hot)]
        argv += ["--speculative-algorithm", args.algorithm,
                 "--speculative-draft-model-path", draft,
                 "--speculative-num-steps", str(args.steps),
                 "--speculative-eagle-topk", str(args.topk),
                 "--speculative-num-draft-tokens", str(args.draft_tokens)]
    if args.enable_metrics:
        argv.append("--enable-metrics")
    extra = list(args.sglang_args or [])
    if extra[:1] == ["--"]:
        extra = extra[1:]
    argv += extra
    env = dict(os.environ)
    env.update(ADASERVE_SGLANG_CPU="1", SGLANG_USE_CPU_ENGINE="1", TRITON_INTERPRET="1")
    env["PYTHONPATH"] = os.pathsep.join([str(BOOT), *filter(None, [env.get("PYTHONPATH")])])
    for flag, var in (("budget", "ADASERVE_BUDGET"), ("policy", "ADASERVE_POLICY"),
                      ("verify", "ADASERVE_VERIFY"), ("iteration_log", "ADASERVE_ITERATION_LOG"),
                      ("slo_classes", "ADASERVE_SLO_CLASSES"),
                      ("baseline_ms", "ADASERVE_BASELINE_MS"),
                      ("prefill_chunk_ms", "ADASERVE_PREFILL_CHUNK_MS"),
                      ("default_class", "ADASERVE_DEFAULT_CLASS")):
        value = getattr(args, flag)
        if value is not None:
            env[var] = str(value)
    return argv, env


def main(args: argparse.Namespace) -> int:
    import importlib.util

    if importlib.util.find_spec("sglang") is None:
        print("adaserve sglang serve-cpu: sglang is not installed in this Python "
              f"({sys.executable}); run it from SGLang's environment, e.g. "
              ".venv-sglang/bin/adaserve (docs/sglang.md)", file=sys.stderr)
        return 2
    argv, env = command(args)
    if args.algorithm == "ADASERVE":
        # the same check SGLang's launch makes, before minutes of start-up, in our words
        os.environ.update({k: v for k, v in env.items() if k.startswith("ADASERVE_")})
        from adaserve.sglang.slo import configured_classes, configured_prefill

        try:
            configured_classes()
            configured_prefill()
        except ValueError as e:
            print(f"adaserve sglang serve-cpu: {e}", file=sys.stderr)
            return 2
    print(" ".join(argv), file=sys.stderr, flush=True)
    os.execve(argv[0], argv, env)
    return 0  # not reached
