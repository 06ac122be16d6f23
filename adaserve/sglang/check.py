"""`adaserve sglang check`: is the installed SGLang the one the plugin was built against,
and does every place the plugin hooks into still exist there?

The plugin changes SGLang only through hooks (no source patches so far: everything it
needs, hooks can do), so the check is: the version, the entry point, and every hook
target and registry API resolving in the installed package. A mismatch is an error with
the reason, exit code 2 -- never a silent half-integration.
"""

from __future__ import annotations

import pkgutil
from importlib.metadata import PackageNotFoundError, entry_points, version

from adaserve.sglang.plugin import (
    GENERATE,
    HIDDEN,
    OPENAI,
    ORGANIZE,
    REPORT,
    SGLANG_VERSION,
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
    "response report": REPORT,
    "standalone hidden states": HIDDEN,
    "server-args resolution": "sglang.srt.speculative.spec_registry.CustomSpecAlgo"
                              ".handle_server_args",
    "draft eager path (cuda_graph_runner None)":
        "sglang.srt.speculative.eagle_worker_common.prepare_for_draft",
}


def check() -> list[tuple[str, bool, str]]:
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
    for what, target in TARGETS.items():
        try:
            pkgutil.resolve_name(target)
            rows.append((what, True, target))
        except (ImportError, AttributeError) as e:
            rows.append((what, False, f"{target}: {type(e).__name__}: {e}"))
    return rows


def main(args) -> int:
    rows = check()
    for what, ok, detail in rows:
        print(f"{'ok ' if ok else 'BAD'}  {what}: {detail}")
    if all(ok for _, ok, _ in rows):
        print("the ADASERVE plugin fits this sglang: no source patches are needed")
        return 0
    print("the ADASERVE plugin does not fit this sglang (see BAD above)")
    return 2
