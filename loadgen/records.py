"""One record per request as the client measured it, and the arithmetic of the result
tables (DESIGN.md "Definitions")."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

OVERALL = "overall"
# End to end, a request is served well only if its first token came in time too: within
# the TTFT SLO the server reported for it (slo_ttft_ms, the embedded server's per-request
# SLO), else within the one a page or run names, for every class or per class: by default
# 5 s (an interactive client gives up well before a minute).
DEFAULT_TTFT_SLO_MS = 5000.0
TTFTSLO = float | Mapping[str, float]  # one for all classes, or per class (others: default)


def ttft_slo_of(ttft_slo_ms: TTFTSLO, slo_class: str) -> float:
    """The TTFT SLO in ms that ``slo_class`` is held to."""
    if isinstance(ttft_slo_ms, Mapping):
        return float(ttft_slo_ms.get(slo_class, DEFAULT_TTFT_SLO_MS))
    return float(ttft_slo_ms)


@dataclass(slots=True)
class Record:
    """What the client saw of one request (times in seconds after the run's start)."""

    index: int
    slo_class: str
    slo_ms: float | None  # None: best effort
    scheduled_s: float
    sent_s: float
    status: str = "pending"  # ok | rejected (503) | error | pending
    first_token_s: float | None = None
    last_token_s: float | None = None
    finished_s: float | None = None
    output_tokens: int = 0
    prompt_tokens: int = 0
    error: str | None = None
    server: dict = field(default_factory=dict)  # the SLO report of the final chunk

    @property
    def request_id(self) -> str:
        """What the load generator sends as the request's ``X-Request-Id``."""
        return f"loadgen-{self.index}"

    @property
    def ttft_ms(self) -> float | None:
        if self.first_token_s is None:
            return None
        return 1e3 * (self.first_token_s - self.sent_s)

    @property
    def tpot_ms(self) -> float | None:
        """(last token - first token) / (output tokens - 1), from stream arrival times."""
        if self.output_tokens < 2 or self.first_token_s is None or self.last_token_s is None:
            return None
        return 1e3 * (self.last_token_s - self.first_token_s) / (self.output_tokens - 1)

    @property
    def attained(self) -> bool | None:
        """Seed 002: TPOT within the SLO. None for best effort. A request that was refused
        or failed did not get its SLO (False); one with a single token had no gap to miss."""
        if self.slo_ms is None:
            return None
        if self.status != "ok":
            return False
        tpot = self.tpot_ms
        return tpot is None or tpot <= self.slo_ms

    @property
    def attained_paper(self) -> bool | None:
        """The AdaServe authors' test (FlexFlow Serve's request_manager.cc,
        get_request_expected_latency): decode latency, from the first token to the finish,
        within SLO x the tokens generated (n tokens, not the n - 1 gaps of TPOT). None for
        best effort and for a request that did not complete: their attainment is attained /
        completed requests (docs/sim-validation.md, "The readings of attainment"). A request
        refused at the door (503) is a miss here too (False): FlexFlow never refuses one, so
        its reading is unchanged, and a policy that refuses cannot shrink its denominator by
        refusing."""
        if self.slo_ms is not None and self.status == "rejected":
            return False
        if self.slo_ms is None or self.status != "ok" or self.first_token_s is None:
            return None
        end = self.finished_s if self.finished_s is not None else self.last_token_s
        return 1e3 * (end - self.first_token_s) <= self.slo_ms * self.output_tokens

    def ttft_slo_held(self, ttft_slo_ms: float) -> float:
        """The TTFT SLO in ms the end-to-end reading holds this request to: the one the
        server reported for it (``slo_ttft_ms``), else ``ttft_slo_ms``."""
        reported = (self.server or {}).get("slo_ttft_ms")
        return float(ttft_slo_ms) if reported is None else float(reported)

    def attained_with_ttft(self, ttft_slo_ms: float) -> bool | None:
        """End to end (the vLLM-style variant): the TPOT SLO and TTFT within its TTFT SLO,
        the server's where it reported one, else ``ttft_slo_ms`` (``ttft_slo_held``). The
        TTFT is the client's reading either way."""
        a = self.attained
        if a is None:
            return None
        return a and self.ttft_ms is not None and self.ttft_ms <= self.ttft_slo_held(ttft_slo_ms)

    def to_json(self) -> dict:
        d = asdict(self)
        d.update(ttft_ms=self.ttft_ms, tpot_ms=self.tpot_ms, attained=self.attained)
        return d

    @classmethod
    def from_json(cls, d: dict) -> Record:
        names = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in d.items() if k in names})


def write_jsonl(records: Iterable[Record], path: Path) -> None:
    """Write atomically (a temporary file, then a rename): a reader, or a run stopped
    mid-write, sees the previous complete file or this one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        for r in records:
            f.write(json.dumps(r.to_json()) + "\n")
    os.replace(tmp, path)


def read_jsonl(path: Path) -> list[Record]:
    return [Record.from_json(json.loads(line)) for line in open(path) if line.strip()]


@dataclass(frozen=True, slots=True)
class ClassSummary:
    slo_class: str
    slo_ms: float | None
    sent: int
    ok: int
    rejected: int
    errors: int
    attainment: float | None  # attained / sent with an SLO; None: no request had one
    attainment_ttft: float | None  # end to end: the TTFT SLO met too
    attainment_paper: float | None  # the authors' test over completed requests (attained_paper)
    ttft_slo_ms: float | None  # what attainment_ttft held the class to (None: mixed)
    goodput_tok_s: float  # output tokens of attained (or best-effort ok) requests / wall time
    goodput_paper_tok_s: float  # the same with the authors' test (attained_paper)
    throughput_tok_s: float  # all output tokens / wall time
    tpot_ms: dict[str, float | None]  # p50, p90, p99 over ok requests
    ttft_ms: dict[str, float | None]


def _pct(xs: list[float]) -> dict[str, float | None]:
    if not xs:
        return {"p50": None, "p90": None, "p99": None}
    a = np.asarray(xs, dtype=float)
    return {f"p{q}": float(np.percentile(a, q)) for q in (50, 90, 99)}


def summarize(records: list[Record], ttft_slo_ms: TTFTSLO, wall_s: float | None = None
              ) -> list[ClassSummary]:
    """A row per class (in order of first appearance), then the overall row. Wall time:
    from the first scheduled send to the last finish, unless given. ``ttft_slo_ms``: one
    TTFT SLO, or one per class (a class not named gets DEFAULT_TTFT_SLO_MS)."""
    if wall_s is None:
        ends = [r.finished_s for r in records if r.finished_s is not None]
        starts = [r.scheduled_s for r in records]
        wall_s = (max(ends) - min(starts)) if ends and starts else 0.0
    classes = list(dict.fromkeys(r.slo_class for r in records))
    rows = [_summary(c, [r for r in records if r.slo_class == c], ttft_slo_ms, wall_s)
            for c in classes]
    rows.append(_summary(OVERALL, records, ttft_slo_ms, wall_s))
    return rows


def _summary(name: str, rs: list[Record], ttft_slo_ms: TTFTSLO, wall_s: float) -> ClassSummary:
    slo = {r.slo_ms for r in rs}
    with_slo = [r for r in rs if r.slo_ms is not None]
    att = [bool(r.attained) for r in with_slo]
    att_ttft = [bool(r.attained_with_ttft(ttft_slo_of(ttft_slo_ms, r.slo_class)))
                for r in with_slo]
    held = {r.ttft_slo_held(ttft_slo_of(ttft_slo_ms, r.slo_class)) for r in rs}
    paper = [r.attained_paper for r in with_slo if r.attained_paper is not None]
    ok = [r for r in rs if r.status == "ok"]
    good = sum(r.output_tokens for r in ok if r.attained is not False)
    good_paper = sum(r.output_tokens for r in ok if r.attained_paper is not False)
    total = sum(r.output_tokens for r in ok)
    per_s = (lambda x: x / wall_s) if wall_s > 0 else (lambda x: math.nan)
    return ClassSummary(
        slo_class=name, slo_ms=slo.pop() if len(slo) == 1 else None, sent=len(rs), ok=len(ok),
        rejected=sum(r.status == "rejected" for r in rs),
        errors=sum(r.status == "error" for r in rs),
        attainment=sum(att) / len(att) if att else None,
        attainment_ttft=sum(att_ttft) / len(att_ttft) if att_ttft else None,
        ttft_slo_ms=held.pop() if len(held) == 1 else None,
        attainment_paper=sum(paper) / len(paper) if paper else None,
        goodput_tok_s=per_s(good), goodput_paper_tok_s=per_s(good_paper),
        throughput_tok_s=per_s(total),
        tpot_ms=_pct([r.tpot_ms for r in ok if r.tpot_ms is not None]),
        ttft_ms=_pct([r.ttft_ms for r in ok if r.ttft_ms is not None]))


def summary_table(rows: list[ClassSummary], ttft_slo_ms: TTFTSLO) -> str:
    """Markdown: a row per class and the overall row; the end-to-end column's heading says
    which TTFT SLO it held requests to."""
    def f(x, d=1, pct=False):
        if x is None or (isinstance(x, float) and math.isnan(x)):
            return "–"
        return f"{100 * x:.{d}f}%" if pct else f"{x:.{d}f}"

    if isinstance(ttft_slo_ms, Mapping):
        held = "per class"
    elif all(r.ttft_slo_ms == ttft_slo_ms for r in rows):
        held = f"<= {ttft_slo_ms:g} ms"
    else:  # the server reported TTFT SLOs of its own (Record.ttft_slo_held)
        held = f"the server's SLO, else <= {ttft_slo_ms:g} ms"
    lines = [f"| class | TPOT SLO ms | sent | ok | 503 | errors | attainment (TPOT) | "
             f"end to end (+TTFT {held}) | goodput tok/s | tok/s | TPOT p50 / p99 ms | "
             "TTFT p50 / p99 ms |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r.slo_class} | {f(r.slo_ms)} | {r.sent} | {r.ok} | {r.rejected} | {r.errors} | "
            f"{f(r.attainment, pct=True)} | {f(r.attainment_ttft, pct=True)} | "
            f"{f(r.goodput_tok_s, 2)} | {f(r.throughput_tok_s, 2)} | "
            f"{f(r.tpot_ms['p50'])} / {f(r.tpot_ms['p99'])} | "
            f"{f(r.ttft_ms['p50'])} / {f(r.ttft_ms['p99'])} |")
    return "\n".join(lines)
