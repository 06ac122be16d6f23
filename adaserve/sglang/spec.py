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

    def handle_server_args(self, server_args) -> None:
        from adaserve.sglang.server_args import handle_server_args

        handle_server_args(server_args)


def worker_class(server_args):
    """The factory SGLang's registry calls with the server args: our worker class."""
    from adaserve.sglang.worker import AdaServeWorker

    return AdaServeWorker
