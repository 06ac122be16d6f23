"""The public engine: `EngineCore` on its own thread, with submit / stream / abort / generate.

Callers never touch the core: requests and aborts go through an inbox the loop drains at
the start of each iteration, and outputs come back through a per-request queue or callback
(the HTTP server's event loop hands in a callback that re-enters the loop thread-safely).
"""

from __future__ import annotations

import logging
import queue
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from adaserve.engine.config import EngineConfig
from adaserve.engine.core import EngineCore, QueueFull
from adaserve.engine.loader import Models, load_models
from adaserve.engine.profile_data import Profile, default_profile_path
from adaserve.engine.request import Output, RequestStats
from adaserve.engine.sampling import SamplingParams
from adaserve.scheduler import SLO

log = logging.getLogger(__name__)

__all__ = ["Completion", "Engine", "QueueFull"]


def encode_chat(tokenizer, messages: Sequence[dict]) -> list[int]:
    """Token ids of a chat through the model's own chat template, assistant turn open."""
    ids = tokenizer.apply_chat_template(list(messages), add_generation_prompt=True,
                                        tokenize=True)
    # transformers 5 returns a BatchEncoding here, older versions a plain list
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids)


def load_profile(config: EngineConfig) -> Profile | None:
    """The profile the config names, else the default one for its model pair if present."""
    path = config.profile or default_profile_path(config.model, config.draft)
    if path.is_file():
        profile = Profile.load(path)
        if not profile.budget_trusted:
            log.warning("%s was saved before the budget rule (B = the largest token count "
                        "whose forward costs <= 1.15x a one-token one): its B is ignored; run "
                        "`adaserve profile` again", path)
        return profile
    if config.profile is not None:
        raise FileNotFoundError(f"profile {path} does not exist; run `adaserve profile`")
    return None


@dataclass(frozen=True, slots=True)
class Completion:
    request_id: str
    text: str
    token_ids: tuple[int, ...]
    finish_reason: str
    stats: RequestStats | None


class Engine:
    """A running engine. ``Engine(EngineConfig(...))`` loads the models and starts the loop;
    ``close()`` (or a with-block) stops it."""

    def __init__(self, config: EngineConfig | None = None, *, models: Models | None = None,
                 profile: Profile | None = None, start: bool = True) -> None:
        self.config = config or EngineConfig()
        self.models = models or load_models(self.config)
        self.profile = profile if profile is not None else load_profile(self.config)
        self.core = EngineCore(self.config, self.models, self.profile)
        # online draft adaptation (online_draft.py): buffers on verify, swaps between steps
        self.online = None
        if self.config.online_draft is not None:
            from adaserve.engine.online_draft import OnlineDraft

            self.online = OnlineDraft.start(self.config.online_draft, self.config, self.models,
                                            self.core.executor)
        self.tokenizer = self.models.tokenizer
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._inbox: list[tuple] = []
        self._sinks: dict[str, Callable[[Output], None]] = {}
        self._queues: dict[str, queue.Queue] = {}
        self._pending = 0  # submitted, not yet taken by the loop
        self._closed = False
        self._running = False
        self._thread: threading.Thread | None = None
        if start:
            self._thread = threading.Thread(target=self.run, name="adaserve-engine", daemon=True)
            self._thread.start()

    # ---- input -------------------------------------------------------------------------

    def encode(self, prompt: str) -> list[int]:
        return list(self.tokenizer.encode(prompt, add_special_tokens=False))

    def encode_chat(self, messages: Sequence[dict]) -> list[int]:
        return encode_chat(self.tokenizer, messages)

    def submit(self, prompt: str | Sequence[int] | None = None, params: SamplingParams | None = None,
               *, messages: Sequence[dict] | None = None, slo: SLO | None = None,
               request_id: str | None = None,
               on_output: Callable[[Output], None] | None = None) -> str:
        """Queue a request and return its id. Exactly one of ``prompt`` (text or token ids)
        and ``messages`` (chat). ValueError for bad input, QueueFull when the queue is full.
        Outputs go to ``on_output`` (called on the engine thread) or to ``stream(id)``."""
        if (prompt is None) == (messages is None):
            raise ValueError("give exactly one of prompt and messages")
        params = params or SamplingParams()
        if messages is not None:
            ids = self.encode_chat(messages)
        elif isinstance(prompt, str):
            ids = self.encode(prompt)
        else:
            ids = [int(t) for t in prompt]
        rid = request_id or uuid.uuid4().hex
        with self._lock:
            if self._closed:
                raise RuntimeError("the engine is closed")
            if rid in self._sinks:
                raise ValueError(f"request id {rid!r} is already in use")
            self.core.check(ids, params, waiting=len(self.core.waiting) + self._pending, slo=slo)
            if on_output is None:
                q: queue.Queue = queue.Queue()
                self._queues[rid] = q
                on_output = q.put
            self._sinks[rid] = on_output
            self._inbox.append(("add", rid, ids, params, slo))
            self._pending += 1
        self._wake.set()
        return rid

    def abort(self, request_id: str) -> None:
        """Stop a request; its stream ends with finish_reason "abort". Unknown ids are ignored."""
        with self._lock:
            self._inbox.append(("abort", request_id))
        self._wake.set()

    # ---- output ------------------------------------------------------------------------

    def stream(self, request_id: str, timeout: float | None = None) -> Iterator[Output]:
        """Outputs of a request submitted without on_output, until the finished one."""
        q = self._queues[request_id]
        try:
            while True:
                out = q.get(timeout=timeout)
                yield out
                if out.finished:
                    return
        finally:
            self._queues.pop(request_id, None)

    def generate(self, prompts: Sequence[str | Sequence[int]], params: SamplingParams | None = None,
                 *, slo: SLO | None = None) -> list[Completion]:
        """Blocking: run every prompt to completion, in one continuous batch."""
        ids = [self.submit(p, params, slo=slo) for p in prompts]
        return [self.result(rid) for rid in ids]

    def result(self, request_id: str) -> Completion:
        text, toks, last = [], [], None
        for out in self.stream(request_id):
            text.append(out.text)
            toks.extend(out.token_ids)
            last = out
        if last.finish_reason == "error":
            raise RuntimeError(f"request {request_id} failed: {last.error}")
        return Completion(request_id, "".join(text), tuple(toks), last.finish_reason, last.stats)

    # ---- the loop ----------------------------------------------------------------------

    def run(self) -> None:
        """The engine loop, in the calling thread, until ``close()``. ``Engine(start=False)``
        leaves it to the caller: a server runs it on the main thread, because torch's
        OpenMP/MKL ops issued from any other thread run ~2x slower on this CPU (a decode
        step 63 ms on the main thread vs 108-133 ms on a second one, 2 cores, torch 2.13)."""
        self._running = True
        try:
            self._loop()
        finally:
            self._running = False

    def _loop(self) -> None:
        while True:
            with self._lock:
                inbox, self._inbox = self._inbox, []
                closed = self._closed
            if closed:
                break
            for op in inbox:
                self._apply(op)
            if not self.core.has_work:
                if self.online is not None:  # idle: a finished update still gets swapped in
                    self.online.after_step((), 0, self.core.slots)
                self._wake.wait(0.5)
                self._wake.clear()
                continue
            try:
                outputs = self.core.step()
            except Exception as e:  # a bug must not take the server down: fail this batch
                log.exception("engine iteration failed")
                outputs = self.core.fail_all(f"{type(e).__name__}: {e}")
            if self.online is not None:
                self.online.after_step(outputs, len(self.core.waiting), self.core.slots)
            for out in outputs:
                self._deliver(out)
        if self.online is not None:
            self.online.close()
        for out in self.core.fail_all("engine closed"):
            self._deliver(out)

    def _apply(self, op: tuple) -> None:
        if op[0] == "add":
            _, rid, ids, params, slo = op
            with self._lock:
                self._pending -= 1
            try:
                self.core.add(rid, ids, params, slo, refuse=False)  # submit's door decided
            except (ValueError, QueueFull) as e:  # raced past submit's check
                self._deliver(Output(rid, (), "", True, "error", None, str(e)))
        else:
            out = self.core.abort(op[1])
            if out is not None:
                self._deliver(out)

    def _deliver(self, out: Output) -> None:
        sink = self._sinks.get(out.request_id)
        if sink is None:
            return
        if out.finished:
            self._sinks.pop(out.request_id, None)
        try:
            sink(out)
        except Exception:  # a broken consumer must not stop the engine
            log.exception("output callback for %s failed", out.request_id)

    @property
    def alive(self) -> bool:
        """Whether the loop is running (and not closed)."""
        running = self._running if self._thread is None else self._thread.is_alive()
        return running and not self._closed

    def close(self) -> None:
        """Stop the loop, from any thread (not from a signal handler: it takes the lock the
        loop holds); waits for the engine's own thread, if it has one."""
        with self._lock:
            self._closed = True
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=60)

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
