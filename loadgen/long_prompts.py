"""Long prompts made offline: the long descriptions of the installed Python packages
(their METADATA files, mostly README prose with some code), cut to an exact token count.

Nothing is downloaded. A seed picks the order of the packages, so prompts are the same
from run to run on the same environment (the page that uses them names the environment).
"""

from __future__ import annotations

import random
from importlib import metadata

# a package description shorter than this many characters adds little but its headers
MIN_CHARS = 2000


def _descriptions() -> list[tuple[str, str]]:
    """(name, long description) of every installed distribution with one, by name."""
    out = {}
    for dist in metadata.distributions():
        name = dist.metadata.get("Name") or ""
        body = dist.metadata.get_payload() or dist.metadata.get("Description") or ""
        # our own README changes with the code: it would move the prompts between commits
        if name and name.lower() != "adaserve" and len(body) >= MIN_CHARS:
            out[name.lower()] = body
    return sorted(out.items())


def long_prompts(tokenizer, n_tokens: int, count: int, seed: int = 0) -> list[list[int]]:
    """``count`` prompts of exactly ``n_tokens`` token ids each. Prompt i reads package
    descriptions in the order seed + i shuffles them to, joined until it is long enough."""
    docs = _descriptions()
    if not docs:
        raise RuntimeError("no installed package carries a long description")
    prompts = []
    for i in range(count):
        order = list(range(len(docs)))
        random.Random(seed + i).shuffle(order)
        ids: list[int] = []
        for k in range(len(order) * 4):  # cycle through them again if one pass is short
            ids += tokenizer.encode(docs[order[k % len(order)]][1] + "\n\n",
                                    add_special_tokens=False)
            if len(ids) >= n_tokens:
                break
        prompts.append(ids[:n_tokens])
    return prompts
