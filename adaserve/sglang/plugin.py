"""The SGLang plugin: ``--speculative-algorithm ADASERVE`` with a separate draft model.

SGLang calls ``register()`` in every process it spawns (entry point group
``sglang.srt.plugins``, see pyproject.toml). It registers ADASERVE in SGLang's
speculative-algorithm registry as a standalone-draft algorithm whose worker is SGLang's
``StandaloneWorkerV2`` with AdaServe's selection in the draft worker.

Status (see docs/sglang.md): it serves inside SGLang 0.5.23's own server on a CPU, through
the CPU runtime ``adaserve.sglang.cpu`` (tests/sglang_tier/test_serve_cpu.py); it has
never run on a GPU.
"""

from __future__ import annotations

import logging

log = logging.getLogger("adaserve.sglang")

from adaserve.sglang.names import (
    ALGORITHM,
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
    SERVE,
    SERVER_INFO,
    SGLANG_VERSION,
    TRITON_METADATA,
    WARMUP,
)

_registered = False


def register() -> None:
    """Entry point: make ADASERVE resolvable by ``SpeculativeAlgorithm.from_string``.
    Idempotent (SGLang may load plugins more than once per process)."""
    global _registered
    if _registered:
        return
    from importlib.metadata import version

    installed = version("sglang")
    if installed != SGLANG_VERSION:
        # a silent half-integration is worse than none: say so and stay out
        log.error("adaserve's SGLang plugin targets sglang %s, found %s: ADASERVE not "
                  "registered", SGLANG_VERSION, installed)
        return
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    from adaserve.sglang.admission import calc_priority_hook
    from adaserve.sglang.http import (generate_hook, openai_hook, serve_hook, server_info_hook,
                                      warmup_hook)
    from adaserve.sglang.prefill_yield import should_defer_prefill_hook
    from adaserve.sglang.ragged import triton_metadata_hook
    from adaserve.sglang.refusal import abort_on_queued_limit_hook
    from adaserve.sglang.report import openai_response_hook, report_hook, stream_report_hook
    from adaserve.sglang.server_args import need_hidden_states_hook
    from adaserve.sglang.spec import AdaServeSpec, worker_class
    from adaserve.sglang.step_cap import num_allocatable_reqs_hook
    from adaserve.sglang.worker import organize_hook  # imports SGLang's EAGLE workers

    SpeculativeAlgorithm.register(ALGORITHM, supports_overlap=True,
                                  spec_class=AdaServeSpec)(worker_class)
    # applied by load_plugins() after every plugin ran, also to the workers' own
    # `from eagle_utils import organize_draft_results` bindings
    HookRegistry.register(ORGANIZE, organize_hook, HookType.AROUND)
    HookRegistry.register(GENERATE, generate_hook, HookType.AROUND)
    HookRegistry.register(OPENAI, openai_hook, HookType.AROUND)
    HookRegistry.register(SERVE, serve_hook, HookType.AROUND)
    HookRegistry.register(WARMUP, warmup_hook, HookType.AROUND)
    HookRegistry.register(SERVER_INFO, server_info_hook, HookType.AROUND)
    HookRegistry.register(REPORT, report_hook, HookType.AROUND)
    HookRegistry.register(CHAT_RESPONSE, openai_response_hook, HookType.AROUND)
    HookRegistry.register(COMPLETION_RESPONSE, openai_response_hook, HookType.AROUND)
    HookRegistry.register(CHAT_STREAM, stream_report_hook, HookType.AROUND)
    HookRegistry.register(COMPLETION_STREAM, stream_report_hook, HookType.AROUND)
    HookRegistry.register(HIDDEN, need_hidden_states_hook, HookType.AROUND)
    # the policy's admit=deadline: the waiting queue in deadline order (admission.py)
    HookRegistry.register(CALC_PRIORITY, calc_priority_hook, HookType.AROUND)
    # the policy's prefill=yield: a prefill round waits for the decodes (prefill_yield.py)
    HookRegistry.register(DEFER_PREFILL, should_defer_prefill_hook, HookType.AROUND)
    # the policy's refuse=on: a request predicted late for its first token gets 503 (refusal.py)
    HookRegistry.register(QUEUED_LIMIT, abort_on_queued_limit_hook, HookType.AROUND)
    # the policy's cap: a prefill round takes only the requests the step can carry (step_cap.py)
    HookRegistry.register(ALLOCATABLE, num_allocatable_reqs_hook, HookType.AROUND)
    # passes every forward through but ADASERVE's ragged verify (ragged.py)
    HookRegistry.register(TRITON_METADATA, triton_metadata_hook, HookType.AROUND)
    from adaserve.sglang.cpu import hooks as cpu

    if cpu.enabled():  # SGLang on a CPU (adaserve sglang serve-cpu): torch kernels
        cpu.register()
    _registered = True
