"""An admitted request as the handlers see it. Its outputs arrive on an asyncio queue (the
engine thread puts them there with call_soon_threadsafe, so no handler blocks the event
loop); whatever ends its handler or stream before it finished aborts it, which frees its KV
at the next iteration; its finished output is recorded in the metrics and reported to the
client (DESIGN.md "HTTP contract": every response reports what happened)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

from fastapi import Request

from adaserve.engine.request import Output, RequestStats
from adaserve.server.errors import APIError
from adaserve.server.state import Server


@dataclass(slots=True)
class Job:
    server: Server
    rid: str
    slo_class: str
    prompt_tokens: int
    queue: asyncio.Queue
    done: bool = False  # its finished output was read

    async def next_output(self, request: Request) -> Output | None:
        """The job's next output; None once the client has gone."""
        while True:
            try:
                out = await asyncio.wait_for(self.queue.get(), timeout=0.25)
            except asyncio.TimeoutError:
                if await request.is_disconnected():
                    return None
                continue
            self.done = out.finished
            return out

    @contextlib.contextmanager
    def aborted_unless_done(self) -> Iterator[None]:
        """Whatever ends a handler or stream before the job finished (the client left, the
        server stops, an error), the engine aborts the job and frees its KV."""
        try:
            yield
        finally:
            if not self.done:
                self.server.engine.abort(self.rid)

    async def collect(self, request: Request) -> tuple[str, Output]:
        """The whole text and the finished output, for a non-streaming answer."""
        parts = []
        with self.aborted_unless_done():
            while True:
                out = await self.next_output(request)
                if out is None:  # the client left; nobody reads this answer
                    raise APIError(499, "client closed the request")
                parts.append(out.text)
                if out.finished:
                    if out.finish_reason == "error":
                        raise APIError(500, f"generation failed: {out.error}")
                    return "".join(parts), out

    def finished(self, out: Output) -> dict:
        """Record a finished request; its SLO report."""
        if out.stats is not None:
            self.server.metrics.on_finished(self.slo_class, out.stats)
        return slo_report(self.slo_class, out.stats)

    def usage(self, st: RequestStats | None) -> dict:
        n = st.output_tokens if st else 0
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": n,
                "total_tokens": self.prompt_tokens + n}


def slo_report(slo_class: str, st: RequestStats | None) -> dict:
    """The fields every response carries (docs/contract.md): the SLOs, what was measured
    against each, and ``slo_attained``, every objective met (TPOT, and TTFT where it had a
    TTFT SLO; None: best effort with no TTFT SLO)."""
    def ms(x):
        return None if x is None else round(x * 1e3, 3)

    if st is None:
        return {"slo_class": slo_class, "slo_tpot_ms": None, "slo_ttft_ms": None,
                "tpot_ms": None, "ttft_ms": None, "ttft_attained": None,
                "slo_attained": None, "accepted_tokens_per_step": None}
    return {"slo_class": slo_class, "slo_tpot_ms": ms(st.slo_tpot_s),
            "slo_ttft_ms": ms(st.slo_ttft_s), "tpot_ms": ms(st.tpot_s), "ttft_ms": ms(st.ttft_s),
            "ttft_attained": st.ttft_attained, "slo_attained": st.slo_attained,
            "accepted_tokens_per_step": round(st.accepted_tokens_per_step, 4)}
