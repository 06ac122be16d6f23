"""ADASERVE as SGLang sees it: the algorithm's predicates and its worker class.

Imported only from ``plugin.register`` (it imports sglang)."""

from __future__ import annotations

from sglang.srt.speculative.spec_registry import CustomSpecAlgo


class AdaServeSpec(CustomSpecAlgo):
    """A standalone-draft (separate draft model) EAGLE-family algorithm: SGLang's branches
    that set up a standalone draft (its own weights, KV pool, tree verification) apply."""

    def is_standalone(self) -> bool:
        return True

    def supports_mixed_chunk(self) -> bool:
        return False

    # What SGLang's scheduler calls on its own SpeculativeAlgorithm values and
    # CustomSpecAlgo lacks (0.5.23: init_disaggregation, init_overlap, the worker
    # factory); `adaserve sglang check` compares the two interfaces, so a method a new
    # SGLang adds is a BAD row, not a crash at start-up.
    def carries_draft_hidden_states(self) -> bool:
        return False  # a standalone draft is a vanilla LM: no target hidden states

    def need_topk(self) -> bool:
        return True  # trees: --speculative-eagle-topk is the beam width

    def get_platform_worker_cls(self):
        return None  # the in-tree worker (ours) on every platform

    def create_future_map(self, device, req_to_token_pool, needs_cpu_seq_lens: bool = True,
                          needs_confidence_relay: bool = False):
        from sglang.srt.managers.overlap_utils import FutureMap

        return FutureMap(device, self, req_to_token_pool, needs_cpu_seq_lens,
                         needs_confidence_relay)

    def handle_server_args(self, server_args) -> None:
        from adaserve.sglang.server_args import handle_server_args

        handle_server_args(server_args)


def worker_class(server_args):
    """The factory SGLang's registry calls with the server args: our worker class."""
    from adaserve.sglang.worker import AdaServeWorker

    return AdaServeWorker
