"""`adaserve sglang check`: is the installed SGLang the one the plugin was built against,
and does every place the plugin hooks into still exist there?

The plugin changes SGLang only through hooks (no source patches so far: everything it
needs, hooks can do), so the check is: the version, the entry point, every hook target
and registry API resolving in the installed package, and ADASERVE answering every method
SGLang calls on an algorithm. The CPU runtime (``adaserve.sglang.cpu``) adds its REPLACE
targets and the ``sgl_kernel`` ops its stub serves, each still imported by name somewhere
in SGLang. A mismatch is an error with the reason, exit code 2 -- never a silent
half-integration.
"""

from __future__ import annotations

import importlib.util
import pkgutil
import re
from importlib.metadata import PackageNotFoundError, entry_points, version
from pathlib import Path
from types import FunctionType

from adaserve.sglang.names import (
    ALLOCATABLE,
    CALC_PRIORITY,
    CHAT_RESPONSE,
    CHAT_STREAM,
    COMPLETION_RESPONSE,
    COMPLETION_STREAM,
    DEFER_PREFILL,
    GENERATE,
    HIDDEN,
    OPENAI,
    ORGANIZE,
    QUEUED_LIMIT,
    REPORT,
    RESOLVED,
    SERVE,
    SERVER_INFO,
    SGLANG_VERSION,
    TRITON_METADATA,
    WARMUP,
)

TARGETS = {
    "speculative registry": "sglang.srt.speculative.spec_info.SpeculativeAlgorithm.register",
    "standalone worker": "sglang.srt.speculative.standalone_worker_v2.StandaloneWorkerV2",
    "standalone draft worker":
        "sglang.srt.speculative.standalone_worker_v2.StandaloneDraftWorker.draft",
    "hook registry": "sglang.srt.plugins.hook_registry.HookRegistry.register",
    "organize seam": ORGANIZE,
    "/generate route": GENERATE,
    "OpenAI routes": OPENAI,
    "HTTP app set-up (the contract gate)": SERVE,
    "/server_info (SLO classes)": SERVER_INFO,
    "start-up warm-up (left out of the metrics)": WARMUP,
    "response report": REPORT,
    "resolved server arguments (the default TTFT's chunk)": RESOLVED,
    "chat response report": CHAT_RESPONSE,
    "completion response report": COMPLETION_RESPONSE,
    "chat stream report": CHAT_STREAM,
    "completion stream report": COMPLETION_STREAM,
    "standalone hidden states": HIDDEN,
    "admission by TTFT deadline (the waiting queue's order)": CALC_PRIORITY,
    "prefill=yield/recover (a prefill round defers to the decodes)": DEFER_PREFILL,
    "refuse=on, refuse_tpot=pace/missed/both/latest/probe (the doors: 503 for a first token predicted late, "
    "or a TPOT SLO its peers are missing)": QUEUED_LIMIT,
    "cap (a prefill round takes only the requests the step can carry)": ALLOCATABLE,
    "ragged verify: triton target-verify metadata": TRITON_METADATA,
    "ragged verify: SGLang's verify step": "sglang.srt.speculative.eagle_worker_common"
                                           ".run_eagle_verify",
    "ragged verify: SGLang's ragged layout": "sglang.srt.speculative.ragged_verify"
                                             ".RaggedVerifyLayout.from_verify_lens",
    "server-args resolution": "sglang.srt.speculative.spec_registry.CustomSpecAlgo"
                              ".handle_server_args",
    "draft eager path (cuda_graph_runner None)":
        "sglang.srt.speculative.eagle_worker_common.prepare_for_draft",
}


Row = tuple[str, bool, str]

# `from sgl_kernel import a, b as c` or a parenthesised list over several lines
_SGL_KERNEL_IMPORT = re.compile(r"^[ \t]*from[ \t]+sgl_kernel[ \t]+import[ \t]+(\([^)]*\)|.*)",
                                re.MULTILINE)


def check() -> list[Row]:
    """(what, ok, detail) rows; the first is the version."""
    try:
        found = version("sglang")
    except PackageNotFoundError:
        return [("sglang", False, f"not installed (the plugin targets sglang=={SGLANG_VERSION})")]
    rows = [("sglang version", found == SGLANG_VERSION,
             f"{found} (the plugin targets {SGLANG_VERSION})")]
    eps = {ep.name: ep.value for ep in entry_points(group="sglang.srt.plugins")}
    rows.append(("entry point sglang.srt.plugins:adaserve", "adaserve" in eps,
                 eps.get("adaserve", "missing: reinstall adaserve")))
    if found != SGLANG_VERSION:
        return rows  # resolving targets in another version would only add noise
    rows += [_resolves(what, target) for what, target in TARGETS.items()]
    rows.append(algorithm_interface())
    rows += cpu_runtime()
    return rows


def _resolves(what: str, target: str) -> Row:
    try:
        pkgutil.resolve_name(target)
        return what, True, target
    except (ImportError, AttributeError) as e:
        return what, False, f"{target}: {type(e).__name__}: {e}"


def algorithm_interface() -> Row:
    """SGLang's scheduler calls its algorithm methods on whatever ``from_string`` returns,
    our AdaServeSpec included, and CustomSpecAlgo does not have them all (0.5.23 lacked
    four, each an AttributeError at start-up). The interface is the enum's own functions;
    its classmethods (``from_string``, ``register``) are called on the class, never on an
    algorithm."""
    what = "algorithm interface"
    try:
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

        from adaserve.sglang.spec import AdaServeSpec
    except (ImportError, AttributeError) as e:
        return what, False, f"{type(e).__name__}: {e}"
    methods = sorted(name for name, value in vars(SpeculativeAlgorithm).items()
                     if isinstance(value, FunctionType) and not name.startswith("_"))
    missing = [m for m in methods if not callable(getattr(AdaServeSpec, m, None))]
    if missing:
        return what, False, (f"AdaServeSpec (adaserve/sglang/spec.py) lacks "
                             f"SpeculativeAlgorithm.{', '.join(missing)}")
    return what, True, f"AdaServeSpec has all {len(methods)} methods of SpeculativeAlgorithm"


def cpu_runtime() -> list[Row]:
    """The CPU runtime's REPLACE targets resolve, and each sgl_kernel op its stub serves is
    still imported by some SGLang module: an op SGLang renamed would leave its CPU branch
    calling a Missing placeholder."""
    from adaserve.sglang.cpu.hooks import replacements
    from adaserve.sglang.cpu.kernels import OPS

    rows = [_resolves(f"CPU hook {target.rsplit('.', 1)[-1]}", target)
            for target in replacements()]
    spec = importlib.util.find_spec("sglang")
    users = sgl_kernel_imports(Path(next(iter(spec.submodule_search_locations))))
    for op in OPS:
        where = users.get(op)
        rows.append((f"CPU op {op}", bool(where),
                     f"imported from sgl_kernel by {', '.join(where)}" if where else
                     "no sglang module imports it from sgl_kernel (renamed or dropped): "
                     "the stub's torch version would never be called"))
    return rows


def sgl_kernel_imports(root: Path) -> dict[str, list[str]]:
    """{name: modules under ``root`` that import it with ``from sgl_kernel import``},
    modules as paths relative to ``root``'s parent."""
    users: dict[str, list[str]] = {}
    for path in sorted(root.rglob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        if "sgl_kernel" not in text:
            continue
        for m in _SGL_KERNEL_IMPORT.finditer(text):
            body = re.sub(r"#[^\n]*", "", m.group(1)).strip("()")
            for item in body.split(","):  # "name" or "name as alias"
                words = item.split()
                if words and words[0].isidentifier():
                    users.setdefault(words[0], []).append(str(path.relative_to(root.parent)))
    return users


def main(args) -> int:
    rows = check()
    for what, ok, detail in rows:
        print(f"{'ok ' if ok else 'BAD'}  {what}: {detail}")
    if all(ok for _, ok, _ in rows):
        print("the ADASERVE plugin fits this sglang: no source patches are needed")
        return 0
    print("the ADASERVE plugin does not fit this sglang (see BAD above)")
    return 2
