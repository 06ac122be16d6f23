"""A request's life inside the engine, and what the engine tells its caller."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from adaserve.engine.sampling import SamplingParams
from adaserve.scheduler import SLO
from adaserve.scheduler.slo import objectives_met


class Phase(enum.Enum):
    WAITING = "waiting"
    PREFILL = "prefill"
    DECODE = "decode"
    DONE = "done"


@dataclass(frozen=True, slots=True)
class Output:
    """One update for a request's stream: the tokens committed this iteration."""

    request_id: str
    token_ids: tuple[int, ...]
    text: str  # the text those tokens add (held back while a stop string may be forming)
    finished: bool = False
    finish_reason: str | None = None  # "stop", "length", "abort", "error"
    stats: RequestStats | None = None  # on the final output
    error: str | None = None


@dataclass(frozen=True, slots=True)
class RequestStats:
    prompt_tokens: int
    output_tokens: int
    ttft_s: float | None
    tpot_s: float | None  # (t_last - t_first) / (output_tokens - 1)
    slo_tpot_s: float | None
    # every objective it had met: the TPOT within its SLO and, where it had one, the TTFT
    # within its TTFT SLO; None: it had neither (best effort)
    slo_attained: bool | None
    accepted_tokens_per_step: float  # tokens emitted per verification the request took part in
    steps: int
    slo_ttft_s: float | None = None
    ttft_attained: bool | None = None  # None: no TTFT SLO


@dataclass(eq=False)
class Request:
    id: str
    prompt_ids: list[int]
    params: SamplingParams
    slo: SLO
    seed: int
    t_submit: float = 0.0  # the engine clock's reading when the request was added
    phase: Phase = Phase.WAITING
    tokens: list[int] = field(default_factory=list)  # prompt + output
    slot: int = -1
    target_len: int = 0  # tokens whose K/V the target cache holds (committed)
    t_first: float | None = None
    t_last: float | None = None
    steps: int = 0
    text: str = ""  # output text released so far
    finish_reason: str | None = None

    def __post_init__(self) -> None:
        self.tokens = list(self.prompt_ids)

    @property
    def n_prompt(self) -> int:
        return len(self.prompt_ids)

    @property
    def output_ids(self) -> list[int]:
        return self.tokens[self.n_prompt:]

    @property
    def decoded(self) -> int:
        """Tokens decoded after the first (which the prefill emits); 0 before it."""
        return max(0, len(self.tokens) - self.n_prompt - 1)

    def stats(self) -> RequestStats:
        n_out = len(self.tokens) - self.n_prompt
        tpot = None
        if self.t_first is not None and self.t_last is not None and n_out > 1:
            tpot = (self.t_last - self.t_first) / (n_out - 1)
        ttft = None if self.t_first is None else self.t_first - self.t_submit
        _, ttft_met, met = objectives_met(tpot, self.slo.tpot_s, ttft, self.slo.ttft_s)
        return RequestStats(
            prompt_tokens=self.n_prompt, output_tokens=n_out, ttft_s=ttft,
            tpot_s=tpot, slo_tpot_s=self.slo.tpot_s, slo_attained=met,
            accepted_tokens_per_step=n_out / self.steps if self.steps else 0.0,
            steps=self.steps, slo_ttft_s=self.slo.ttft_s, ttft_attained=ttft_met)
