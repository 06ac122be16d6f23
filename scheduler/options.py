"""AdaServe's options, and the policy specs that name them (docs/scheduler.md "One AdaServe").

AdaServe is one policy. What we added to the authors' scheduler is a set of options on it,
each ablated on its own (results/sim/ablation.md), not a family of names:

| option | values | what it does |
| --- | --- | --- |
| ``pace`` | a fraction in (0, 1], or ``off`` | each request verifies no more than keeps it at that fraction of its SLO (``pacing.pace_cap``) |
| ``triage`` | ``on``/``off`` | a request no SLO phase can save any more is served best-effort (``triage.unreachable``) |
| ``depth`` | ``eq8``/``measured`` | draft at Eq. 8's depth, or at the depth measured to give tight requests the most tokens per second (``depth.MeasuredDepth``) |
| ``floor`` | ``on``/``off`` | the measured depth never drops below the median tight request's need per step (``depth.need_floor``); no effect at ``depth=eq8`` |
| ``calibrate`` | ``on``/``off`` | the SLO phase counts each node as the request's accepted/predicted ratio x f(v) |
| ``admit`` | ``fifo``/``deadline`` | which waiting request the engine admits next: the oldest, or the earliest TTFT deadline still ahead, the late ones deferred (``admission.deadline_order``) |
| ``budget`` | ``profile``/``goodput``/``kept`` | verify the profile's B every iteration, or, with the cost-aware planning, the count among B and n x (d + 1) predicted to give the most tokens per second (``budget.goodput_budget``); ``kept``: the same, counting only the tokens pacing lets each request keep |
| ``lost`` | ``serve``/``roots`` | what becomes of a request triage gave up: it still competes for the throughput phase's nodes (the authors' way), or it verifies its root alone and counts in no choice of depth, so its tokens stop lengthening everyone's iteration; acts where planning is cost-aware |
| ``refuse`` | ``on``/``off`` | a request predicted to miss its TTFT SLO on arrival is refused, 503 with Retry-After (``admission.predicted_ttft``); a refusal counts as a miss |
| ``refuse_tpot`` | ``off``/``pace`` (``on``)/``missed``/``both``/``latest``/``probe`` | the TPOT door, 503 with Retry-After, a refusal a miss: ``pace`` refuses a request whose TPOT SLO is shorter than the time a token has taken the running requests at least as tight as it (``admission.tpot_refusal``); ``missed``, one where more of the last finished requests at least as tight missed its SLO than kept it, while one that tight is held (``admission.missed_refusal``); ``both``, one both would refuse; ``latest``, one ``missed`` refuses where the latest finished request at least as tight missed too (``FlowMeter.latest_missed``); ``probe``, one ``latest`` refuses or ``missed`` refuses after one at least as tight was admitted since the latest such finish (``FlowMeter.probed``) |
| ``gate`` | ``on``/``off`` | the planned draft runs only if it keeps more requests at pace than the plain step does (``gate.drafting_pays``), else the iteration drafts nothing; acts where planning is cost-aware |
| ``prefill`` | ``chunk``/``yield``/``recover`` | the engine prefills a chunk every iteration beside the decodes, or the chunk waits where a step with it would push more decoding requests off their SLO (that a plain step keeps on it) than waiting pushes prompts past their TTFT SLO (``prefill_yield.chunk_waits``); ``recover``: as ``yield``, counting only the decoders that the plain steps after it cannot bring back within the tokens the recently finished outputs say they have left (``lengths.OutputLengths``) |
| ``cap`` | ``on``/``off`` | the engine admits no request whose joining would make the predicted decode step longer than the tightest TPOT SLO among the requests it holds and the one it admits (``admission.past_step_cap``); off: it admits while it has slots |

A spec is a preset's name, optionally with options after a colon:
``adaserve``, ``adaserve-authors:pace=0.7,triage=on``, ``adaserve:depth=eq8``. The presets:
``adaserve`` is the best configuration by the honest numbers (the served default);
``adaserve-authors`` is the authors' scheduler with every option off, which the paper
comparisons run.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

DEPTHS = ("eq8", "measured")
ADMITS = ("fifo", "deadline")
BUDGETS = ("profile", "goodput", "kept")
LOSTS = ("serve", "roots")
PREFILLS = ("chunk", "yield", "recover")
# the options that are on or off
SWITCHES = ("triage", "floor", "calibrate", "refuse", "gate", "cap")
TPOT_DOORS = ("off", "pace", "missed", "both", "latest", "probe")  # = admission.TPOT_DOORS (options imports nothing)
_ON = {"on": True, "true": True, "1": True, "off": False, "false": False, "0": False}


@dataclass(frozen=True, slots=True)
class AdaServeOptions:
    """The options of one AdaServe policy (module docstring); the defaults are all off, the
    authors' scheduler."""

    pace: float | None = None  # None: not paced
    triage: bool = False
    depth: Literal["eq8", "measured"] = "eq8"
    floor: bool = False
    calibrate: bool = False
    admit: Literal["fifo", "deadline"] = "fifo"
    refuse: bool = False
    refuse_tpot: Literal["off", "pace", "missed", "both", "latest", "probe"] = "off"
    budget: Literal["profile", "goodput", "kept"] = "profile"
    lost: Literal["serve", "roots"] = "serve"
    gate: bool = False
    prefill: Literal["chunk", "yield", "recover"] = "chunk"
    cap: bool = False

    def __post_init__(self) -> None:
        if self.pace is not None and (isinstance(self.pace, bool)
                                      or not isinstance(self.pace, (int, float))
                                      or not 0 < self.pace <= 1):
            raise ValueError(f"pace must be off or a fraction in (0, 1], got {self.pace!r}")
        if self.depth not in DEPTHS:
            raise ValueError(f"depth must be one of {', '.join(DEPTHS)}, got {self.depth!r}")
        if self.budget not in BUDGETS:
            raise ValueError(f"budget must be one of {', '.join(BUDGETS)}, got {self.budget!r}")
        if self.lost not in LOSTS:
            raise ValueError(f"lost must be one of {', '.join(LOSTS)}, got {self.lost!r}")
        if self.prefill not in PREFILLS:
            raise ValueError(f"prefill must be one of {', '.join(PREFILLS)}, "
                             f"got {self.prefill!r}")
        if self.refuse_tpot not in TPOT_DOORS:
            raise ValueError(f"refuse_tpot must be one of {', '.join(TPOT_DOORS)}, "
                             f"got {self.refuse_tpot!r}")
        if self.admit not in ADMITS:
            raise ValueError(f"admit must be one of {', '.join(ADMITS)}, got {self.admit!r}")
        for name in SWITCHES:
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be on or off, got {getattr(self, name)!r}")

    def with_text(self, text: str) -> AdaServeOptions:
        """These options with ``key=value,...`` applied (the part of a spec after its colon);
        ValueError naming the key or value for anything else."""
        changes: dict[str, object] = {}
        for item in filter(None, (s.strip() for s in text.split(","))):
            key, sep, value = item.partition("=")
            key, value = key.strip(), value.strip().lower()
            if not sep or not value:
                raise ValueError(f"option {item!r} needs the form key=value")
            if key == "pace":
                changes[key] = None if value == "off" else _fraction(value)
            elif key in ("depth", "admit", "budget", "lost", "prefill"):
                changes[key] = value
            elif key == "refuse_tpot":
                # on/off: the spelling of the days the door had one form, the pace
                changes[key] = {"on": "pace", "true": "pace", "1": "pace", "false": "off",
                                "0": "off"}.get(value, value)
            elif key in SWITCHES:
                if value not in _ON:
                    raise ValueError(f"option {key} takes on or off, got {value!r}")
                changes[key] = _ON[value]
            else:
                raise ValueError(f"unknown option {key!r}; the options are pace, triage, "
                                 f"depth, floor, calibrate, admit, refuse, refuse_tpot, "
                                 f"budget, lost, gate, prefill, cap")
        return dataclasses.replace(self, **changes)

    def text(self) -> str:
        """The options as a spec writes them, every one named."""
        on = {True: "on", False: "off"}
        pace = "off" if self.pace is None else f"{self.pace:g}"
        return (f"pace={pace},triage={on[self.triage]},depth={self.depth},"
                f"floor={on[self.floor]},calibrate={on[self.calibrate]},admit={self.admit}"
                f",refuse={on[self.refuse]},refuse_tpot={self.refuse_tpot}"
                f",budget={self.budget},lost={self.lost}"
                f",gate={on[self.gate]},prefill={self.prefill},cap={on[self.cap]}")


def _fraction(value: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise ValueError(f"pace takes off or a fraction in (0, 1], got {value!r}") from None


# The presets. ``adaserve``: every option that the development set showed to help
# (docs/scheduler.md "One AdaServe" has the ablation; budget=goodput acts only where the
# planning is cost-aware, the served engine, and was chosen on the served development set,
# results/dev-served-overload; prefill=yield with admit=deadline on the simulated
# development set, results/sim/dev-options.md, and the served one, results/dev-served-yield-
# recover; refuse_tpot=missed never acted on the simulated development set,
# results/sim/dev-options-refuse-missed.md, and led the baselines at every point of the
# served one on the Intel CPU, results/dev-served-intel-refuse-missed; since 2026-11-29
# refuse_tpot=latest, which refuses where missed would and the latest tight finish missed
# too: on the served development set it refused 61 of 720 requests where missed refused
# 74, and led missed at 1.5 and 2.0 req/s, results/dev-served-intel-latest);
# ``adaserve-authors``: none of them.
PRESETS: dict[str, AdaServeOptions] = {
    "adaserve": AdaServeOptions(pace=0.7, triage=True, depth="measured", floor=True,
                                admit="deadline", budget="goodput", prefill="yield",
                                refuse_tpot="latest"),
    "adaserve-authors": AdaServeOptions(),
}


def split_spec(spec: str) -> tuple[str, str]:
    """``name:options`` -> (name, options text); no colon -> (spec, "")."""
    name, _, text = spec.partition(":")
    return name.strip(), text


def split_specs(text: str) -> list[str]:
    """A comma-separated list of policy specs, where a spec's options are comma-separated
    too: ``turbospec,adaserve:pace=off,calibrate=on,incremental`` -> three specs. An item
    holding ``=`` continues the spec before it (a policy name never holds one); ValueError
    where such an item has no spec with options to continue."""
    specs: list[str] = []
    for item in filter(None, (s.strip() for s in text.split(","))):
        if "=" in item and ":" not in item:
            if not specs or ":" not in specs[-1]:
                raise ValueError(f"{item!r} is an option with no policy before it; write "
                                 f"name:{item}")
            specs[-1] += "," + item
        else:
            specs.append(item)
    return specs
