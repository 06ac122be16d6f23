"""What the load generator sends: prompt sets and the SLO class mix (seed 002 §6.2).

Two prompt sets, mixed like the paper's two data sets: short instruction/chat prompts and
long "summarize this text" prompts. Both are ours and deterministic: the short ones come
from the prompt generators the draft was distilled with (adaserve.distill.prompts), drawn
with another seed so the texts differ from its training data; the long ones are articles
assembled here from a sentence bank, 250-450 words each.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass

from adaserve.distill.prompts import TOPICS, phase1
from adaserve.loadgen import corpus
from adaserve.loadgen.tokens import line_cutter

DEFAULT_MIX = "urgent=0.6,moderate=0.2,relaxed=0.2"
PROMPT_SETS = ("short", "long", "mixed", "longctx", "shift")
PROMPT_SETS_HELP = ("prompt set: short, long, mixed (the two alternating), longctx (2-8k-token "
                    "documents with a question) or shift (the draft's own domain moving to "
                    "code); docs/loadgen.md")
# sets whose order is the workload (a stream that changes over the run): every request
# gets its own prompt, none is reused
ORDERED_SETS = ("shift",)
# the domain-shift stream: the code share ramps 0 -> 1 between these fractions of the run
SHIFT_RAMP = (0.2, 0.6)
LONGCTX_TOKENS = (2048, 8192)  # document sizes of the longctx set, drawn uniformly
LONGCTX_CONTEXT = 8192  # the target's context (SmolLM2-135M): prompt and output fit in it
# what a longctx prompt holds beside its document, in tokens: the chat template (30), the
# code fences and the question; measured 50-60 (seeds 0-199, 2026-11-26)
LONGCTX_ROOM = 80
# how requests get their classes (ClassMix.assign), and how result pages say it
MIX_DRAWS = {"exact": "exact class counts (share x requests, largest remainder), shuffled by "
                      "the seed",
             "iid": "classes drawn i.i.d. per request (the shares vary with the seed)"}

# Words to tokens, fitted to SmolLM2's tokenizer over the prompt sets (prompt_set "short"
# x 300 and "long" x 512, seeds 0-2): the chat template adds 30 tokens (SmolLM2's default
# system prompt and the turn markers; an empty message is 30), the text 1.2 per
# whitespace-separated word. Long prompts land within -5% .. +4% of the tokenizer's count,
# short ones within -27% .. +6% (at most 19 tokens off), median 0%. The simulator counts
# prompts so without a tokenizer (adaserve.sim.prompt_tokens.estimate); sized_prompt
# inverts it.
TEMPLATE_TOKENS = 30
TOKENS_PER_WORD = 1.2


@dataclass(frozen=True, slots=True)
class PromptSpec:
    """One prompt: chat messages and the output length to ask for."""

    kind: str  # "short" or "long"
    messages: tuple[tuple[str, str], ...]  # (role, content)
    max_tokens: int

    def as_messages(self) -> list[dict]:
        return [{"role": r, "content": c} for r, c in self.messages]


class ClassMix:
    """SLO class weights, normalised; ``with_urgent(p)`` sets the urgent share to p and
    splits the rest over the other classes in their configured proportions."""

    def __init__(self, weights: dict[str, float]) -> None:
        if not weights or any(not (math.isfinite(w) and w >= 0) for w in weights.values()):
            raise ValueError(f"class weights must be finite and >= 0, got {weights!r}")
        total = sum(weights.values())
        if total <= 0:
            raise ValueError("class weights must not all be 0")
        self.weights = {k: w / total for k, w in weights.items()}

    @classmethod
    def parse(cls, spec: str) -> ClassMix:
        """``urgent=0.6,moderate=0.2,relaxed=0.2`` (weights need not sum to 1)."""
        weights = {}
        for item in (p.strip() for p in spec.split(",") if p.strip()):
            name, _, w = item.partition("=")
            try:
                weights[name.strip()] = float(w)
            except ValueError:
                raise ValueError(f"class mix item {item!r} is not name=weight") from None
        return cls(weights)

    def with_urgent(self, p: float, urgent: str = "urgent") -> ClassMix:
        if not 0 <= p <= 1:
            raise ValueError(f"urgent proportion must be in [0, 1], got {p!r}")
        rest = {k: w for k, w in self.weights.items() if k != urgent}
        total = sum(rest.values())
        if total == 0 and p < 1:
            raise ValueError("no other class to give the non-urgent share to")
        out = {k: (1 - p) * w / total for k, w in rest.items()} if total else {}
        out[urgent] = p
        return ClassMix(out)

    def draw(self, n: int, rng: random.Random) -> list[str]:
        """n classes drawn i.i.d.: the realized shares vary with the seed (14 to 20 of 30
        urgent at 0.6 for seeds 0-2). Kept draw for draw as it was, so committed sweeps
        re-run with the same seed get the same classes."""
        names = list(self.weights)
        return rng.choices(names, weights=[self.weights[k] for k in names], k=n)

    def counts(self, n: int) -> dict[str, int]:
        """Exact counts for n requests: share x n, rounded by largest remainder (the floors
        first, then one more each to the largest fractions, ties to the class listed first)."""
        # rounded so that 0.6 x 30 = 17.999999999999996 counts as the whole 18 it means
        quota = {k: round(w * n, 9) for k, w in self.weights.items()}
        out = {k: math.floor(q) for k, q in quota.items()}
        by_fraction = sorted(quota, key=lambda k: out[k] - quota[k])  # stable: mix order
        for k in by_fraction[:n - sum(out.values())]:
            out[k] += 1
        return out

    def exact(self, n: int, rng: random.Random) -> list[str]:
        """n classes in exactly ``counts(n)``, in an order shuffled by ``rng``."""
        out = [k for k, c in self.counts(n).items() for _ in range(c)]
        rng.shuffle(out)
        return out

    def assign(self, n: int, rng: random.Random, how: str) -> list[str]:
        """n classes, ``how`` one of MIX_DRAWS: "exact" or "iid"."""
        if how not in MIX_DRAWS:
            raise ValueError(f"class assignment must be one of {list(MIX_DRAWS)}, got {how!r}")
        return self.exact(n, rng) if how == "exact" else self.draw(n, rng)

    def spec(self) -> str:
        return ",".join(f"{k}={w:.4g}" for k, w in self.weights.items())


_OPENERS = ["In recent years, {t} has drawn more attention than ever.",
            "Few subjects divide opinion as sharply as {t}.",
            "The story of {t} is older than most people think.",
            "Anyone who studies {t} soon meets a surprising fact."]
_BODY = ["Researchers at several universities have collected data for more than a decade.",
         "Their findings suggest that small changes add up over time.",
         "Critics argue that the evidence is still incomplete and that more work is needed.",
         "Local communities have tried different approaches with mixed results.",
         "One town reported a clear improvement within two years.",
         "Another saw no change at all, which puzzled the experts.",
         "Costs remain a concern, especially for smaller organisations.",
         "Supporters point out that the long-term savings outweigh the initial spending.",
         "New tools have made it easier to measure what actually happens.",
         "Public interest rises and falls with the news cycle.",
         "Teachers have started to include the topic in their lessons.",
         "Some companies see it as an opportunity, others as a risk.",
         "Governments have passed rules, but enforcement varies widely.",
         "Historical records show similar debates a century ago.",
         "The most careful studies compare groups over many years.",
         "Young people tend to be more optimistic than their parents.",
         "A recent survey found that most people know little about the details.",
         "Experts recommend starting with simple, well-tested steps."]
_CLOSERS = ["What happens next will depend on choices made in the coming years.",
            "For now, the debate about {t} is far from over.",
            "Either way, {t} is unlikely to disappear from public life soon."]


def article(topic: str, rng: random.Random, words: tuple[int, int] = (250, 450)) -> str:
    """A deterministic article of roughly ``words`` words, in paragraphs."""
    target = rng.randint(*words)
    sents = [rng.choice(_OPENERS).format(t=topic)]
    n = len(sents[0].split())
    while n < target:
        s = rng.choice(_BODY)
        sents.append(s)
        n += len(s.split())
    sents.append(rng.choice(_CLOSERS).format(t=topic))
    paras = [" ".join(sents[i:i + 5]) for i in range(0, len(sents), 5)]
    return "\n\n".join(paras)


def prompt_set(kind: str, n: int, seed: int = 0, short_tokens: int = 64,
               long_tokens: int = 96) -> list[PromptSpec]:
    """n prompts of one set: "short", "long", "mixed" (alternating, half each),
    "longctx" (long_context_set) or "shift" (domain_shift_set)."""
    if kind not in PROMPT_SETS:
        raise ValueError(f"prompt set must be one of {PROMPT_SETS}, got {kind!r}")
    if kind == "longctx":
        return long_context_set(n, seed, long_tokens)
    if kind == "shift":
        return domain_shift_set(n, seed, short_tokens)
    rng = random.Random(seed)
    if kind == "mixed":
        a = prompt_set("short", (n + 1) // 2, seed, short_tokens, long_tokens)
        b = prompt_set("long", n // 2, seed, short_tokens, long_tokens)
        out = [p for pair in zip(a, b) for p in pair] + a[len(b):]
        return out[:n]
    if kind == "short":
        # templates with few fills repeat: keep distinct texts only
        pool = list(dict.fromkeys(p.messages for p in phase1(max(n, 64) * 3, seed=1000 + seed)
                                  if p.kind != "article"))
        rng.shuffle(pool)
        return [PromptSpec("short", m, short_tokens) for m in pool[:n]]
    out = []
    for _ in range(n):
        text = article(rng.choice(TOPICS), rng)
        ask = rng.choice(["Summarize the following text in a few sentences.",
                          "Write a short summary of this article.",
                          "What are the main points of the text below?"])
        out.append(PromptSpec("long", (("user", f"{ask}\n\n{text}"),), long_tokens))
    return out


def sized_prompt(tokens: int, max_tokens: int, seed: int = 0) -> PromptSpec:
    """A "summarize this text" prompt of about ``tokens`` tokens (a paper trace's
    input_length): (tokens - 30) / 1.2 words, rounded down, of articles from the long set's
    sentence bank, cut at that word; a length under 32 gets one word (31 tokens or so)."""
    words = max(1, math.floor((tokens - TEMPLATE_TOKENS) / TOKENS_PER_WORD))
    rng = random.Random(seed)
    text = ["Summarize", "the", "following", "text."]
    while len(text) < words:
        text += article(rng.choice(TOPICS), rng).split()
    return PromptSpec("sized", (("user", " ".join(text[:words])),), max_tokens)


def long_context_set(n: int, seed: int = 0, max_tokens: int = 96,
                     tokens: tuple[int, int] = LONGCTX_TOKENS,
                     cut: Callable[[str, int], str | None] | None = None
                     ) -> list[PromptSpec]:
    """n long-context prompts: a document (Python standard-library source,
    loadgen/corpus.py) of a token count drawn uniformly from ``tokens``, and a question
    about it. Sized by ``cut`` (default: the target's tokenizer, tokens.line_cutter), and
    no larger than leaves the whole request, prompt and ``max_tokens``, within
    LONGCTX_CONTEXT."""
    cut = cut or line_cutter()
    cap = LONGCTX_CONTEXT - max_tokens - LONGCTX_ROOM
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        _, doc = corpus.document(rng, min(rng.randint(*tokens), cap), cut)
        q = corpus.question(rng, doc)
        out.append(PromptSpec("longctx", (("user", f"```python\n{doc}\n```\n\n{q}"),),
                              max_tokens))
    return out


def code_share(i: int, n: int, ramp: tuple[float, float] = SHIFT_RAMP) -> float:
    """The probability that request i of n is code: 0 before ramp[0] x n, 1 after
    ramp[1] x n, linear between."""
    a, b = ramp
    x = i / max(1, n - 1)
    return min(1.0, max(0.0, (x - a) / (b - a)))


def domain_shift_set(n: int, seed: int = 0, max_tokens: int = 64,
                     ramp: tuple[float, float] = SHIFT_RAMP) -> list[PromptSpec]:
    """A stream of n prompts, in order, moving from the draft's own domain (the "short"
    set: the distillation's prompt generators) to Python code continuation (standard
    library snippets): request i is code with probability code_share(i, n)."""
    rng = random.Random(seed)
    own = iter(prompt_set("short", n, seed, max_tokens))
    out = []
    for i in range(n):
        if rng.random() < code_share(i, n, ramp):
            out.append(PromptSpec("code", (("user", corpus.code_prompt(rng)),), max_tokens))
        else:
            out.append(next(own))
    return out
