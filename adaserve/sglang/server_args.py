"""SGLang's server arguments for ``--speculative-algorithm ADASERVE``.

SGLang resolves the speculative arguments of its own algorithms in
``arg_groups/speculative_hook.py`` (``_handle_eagle_family`` for STANDALONE); a registered
algorithm gets none of that, and its ``handle_server_args`` runs instead, on a stand-in
whose attribute writes SGLang records as the resolution. Without this, steps, top-k and
draft tokens stay None and the draft worker fails at start-up (checked on the CPU with
SGLang's own ``ServerArgs.resolve_once``: tests/sglang_tier/test_server_args.py).

What STANDALONE gets and ADASERVE needs alike is done here, by the same rules; SGLang's
auto-chosen tree shape for Llama EAGLE (5 steps, top-4, 8 draft tokens) is the default
maximum, within which AdaServe picks each iteration's depth and width (Eq. 8-9).
"""

from __future__ import annotations

import logging
import os

from adaserve.sglang.names import ALGORITHM

log = logging.getLogger("adaserve.sglang")

VERIFY_ENV = "ADASERVE_VERIFY"
VERIFY_MODES = ("ragged", "uniform", "alternate")

DEFAULT_SHAPE = (5, 4, 8)  # steps, top-k, draft tokens per request (SGLang's Llama EAGLE)
MAX_RUNNING = 48  # what SGLang sets for speculative decoding when unset
PAGE_TREE_BACKENDS = ("flashinfer", "fa3", "triton")  # SGLang: top-k > 1 with pages > 1


def handle_server_args(args) -> None:
    """Resolve ADASERVE's arguments in place (``args``: SGLang's recording stand-in).
    ValueError, with the flag to change, where SGLang could not run it."""
    if args.speculative_draft_model_path is None:
        raise ValueError("--speculative-algorithm ADASERVE drafts with a separate model: "
                         "give it with --speculative-draft-model-path")
    from adaserve.sglang.slo import configured_classes, configured_prefill

    configured_classes.cache_clear()
    configured_classes()  # a bad or missing SLO setting stops the launch, naming the variable
    configured_prefill.cache_clear()
    configured_prefill()  # so does a bad ADASERVE_PREFILL_CHUNK_MS
    asked_verify()  # so does a misspelt ADASERVE_VERIFY
    # --speculative-adaptive: SGLang already turns it off, with a warning, for every
    # algorithm but EAGLE/EAGLE3; ADASERVE adapts depth and width itself (Eq. 8-9)
    if getattr(args, "speculative_use_rejection_sampling", False):
        raise ValueError("--speculative-use-rejection-sampling is EAGLE/EAGLE3 only in "
                         "SGLang; ADASERVE verifies its trees greedily or by SGLang's "
                         "tree sampling")
    from sglang.srt.runtime_context import attn_dp_enabled_of

    if attn_dp_enabled_of(args):  # SGLang refuses it for STANDALONE by name
        raise ValueError("DP attention (--dp-size with --enable-dp-attention): SGLang's "
                         "standalone draft worker, which ADASERVE's is, does not support it")
    if args.max_running_requests is None:
        args.max_running_requests = MAX_RUNNING
        log.warning("ADASERVE: --max-running-requests set to %d, as SGLang does for "
                    "speculative decoding", MAX_RUNNING)
    args.enable_mixed_chunk = False  # a mixed step decodes running requests 1 token each
    if getattr(args, "device", None) == "cpu" and not args.disable_overlap_schedule:
        # SGLang does this for its own algorithms only: its CPU path has no overlap
        # scheduling for speculative decoding
        args.disable_overlap_schedule = True
        log.warning("ADASERVE: overlap scheduling is off: SGLang does not implement it for "
                    "speculative decoding on CPU")
    steps, topk, tokens = (args.speculative_num_steps, args.speculative_eagle_topk,
                           args.speculative_num_draft_tokens)
    if steps is None:
        steps = args.speculative_num_steps = DEFAULT_SHAPE[0]
    if topk is None:
        topk = args.speculative_eagle_topk = DEFAULT_SHAPE[1]
    if tokens is None:
        tokens = args.speculative_num_draft_tokens = min(DEFAULT_SHAPE[2], _most(steps, topk))
    if topk == 1 and tokens != steps + 1:  # a chain: SGLang's rule
        tokens = args.speculative_num_draft_tokens = steps + 1
    if topk > 1 and tokens < steps + 1:  # SGLang starts, then its first verify fails
        raise ValueError(f"--speculative-num-draft-tokens {tokens}: a tree of {steps} steps "
                         f"needs at least {steps + 1} verify positions (an accepted path "
                         f"is up to {steps + 1} tokens)")
    if not 2 <= tokens <= _most(steps, topk):
        raise ValueError(f"--speculative-num-draft-tokens {tokens}: a tree of "
                         f"{steps} steps and top-{topk} has 2 to {_most(steps, topk)} "
                         f"verify positions (the root and its candidates)")
    page = getattr(args, "page_size", None) or 1
    backend = getattr(args, "attention_backend", None)
    if topk > 1 and page > 1 and backend is not None and backend not in PAGE_TREE_BACKENDS:
        raise ValueError(f"top-k {topk} with --page-size {page} needs attention backend "
                         f"{' / '.join(PAGE_TREE_BACKENDS)} in SGLang, not {backend!r}")


def _most(steps: int, topk: int) -> int:
    """Verify positions SGLang's draft can fill: the root, top-k at the first step, then
    SGLang keeps top-k of top-k*top-k candidates per further step."""
    return 1 + topk + (steps - 1) * topk * topk


def need_hidden_states_hook(original):
    """AROUND hook on ``spec_utils.spec_need_hidden_states``: SGLang answers no for a
    STANDALONE draft by the algorithm's name ("a vanilla LLM does not consume the target's
    hidden states"); ADASERVE's draft is a standalone one."""
    from sglang.srt.speculative.spec_utils import get_spec

    if get_spec().speculative_algorithm == ALGORITHM:
        return False
    return original()


def asked_verify() -> str:
    """ADASERVE_VERIFY as given: "ragged", "uniform" or "" (not set). ValueError otherwise."""
    asked = os.environ.get(VERIFY_ENV, "").strip().lower()
    if asked not in ("", *VERIFY_MODES):
        raise ValueError(f"{VERIFY_ENV}={asked!r}: give ragged (verify only the positions "
                         "AdaServe selects), uniform (SGLang's [batch, N] layout) or "
                         "alternate (one, then the other, to compare them in one run)")
    return asked


def verify_mode(*, triton_backend: bool, verify_graphs: bool) -> tuple[str, str]:
    """(ragged, uniform or alternate; why), decided once per server from what its target
    runs. ``alternate`` verifies ragged and uniform in turn, iteration by iteration, so a
    benchmark compares them under the same load and requests. Ragged verify
    needs the triton attention backend (the one whose target-verify metadata the plugin
    makes ragged: adaserve/sglang/ragged.py) and a target verifying without CUDA graphs
    (its graphs are captured for [batch, N]; graphs per token bucket are designed in
    docs/sglang-internals.md, not built). Asked for where it cannot run: ValueError."""
    asked = asked_verify()
    blocker = ("the target's attention backend is not triton" if not triton_backend else
               "the target verifies with CUDA graphs, captured for the uniform layout "
               "(--disable-cuda-graph turns them off)" if verify_graphs else None)
    if asked in ("ragged", "alternate") and blocker:
        raise ValueError(f"{VERIFY_ENV}={asked} cannot run here: {blocker}")
    if asked == "uniform":
        return "uniform", f"{VERIFY_ENV}=uniform"
    if blocker:
        return "uniform", blocker
    return asked or "ragged", f"{VERIFY_ENV}={asked or 'ragged (the default)'}"
