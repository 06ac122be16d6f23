"""The replay acceptance model: candidate trees from the real draft's distributions, accepted
exactly as the real target would (issue 17, "Acceptance models").

A `Recording` (made by adaserve.sim.record from the real pair) holds, per prompt, the
target's own continuation and, teacher-forced along it, the draft's top-K tokens and
log-probabilities at every position. A simulated request whose prompt was recorded
commits exactly that continuation: a node is on the target's path iff its parent is and it
carries the continuation's next token, and the target's token after an on-path node is
the continuation's next one. Off the path the draft's real distribution is unknown; the
on-path distribution of the same position stands in for it. Off-path nodes are never
accepted, so this changes only their f(v), which ranks them in selection and the beam.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from adaserve.engine.beam import TreeArrays, beam_step, layer_widths
from adaserve.engine.request import Request
from adaserve.scheduler import CandidateBatch, SpecPlan
from adaserve.sim.acceptance import AcceptanceModel, SimTrees

_OFF = -1  # what the target "says" after an off-path node: no child carries it
_PAST_END = -50.0  # log q past the recorded continuation: candidates no one selects


@dataclass(frozen=True, slots=True)
class Recording:
    """Per recorded prompt: ``tokens`` = prompt + the target's continuation; row j of
    ``top_ids`` / ``top_logp`` is the draft's top-K after tokens[:n_prompt + j], i.e. its
    guesses for tokens[n_prompt + j]."""

    meta: dict  # target, draft, top_k, temperature, source, date
    prompts: list[tuple[int, ...]]
    tokens: list[np.ndarray]  # [P_i + L_i] int64
    top_ids: list[np.ndarray]  # [L_i, K] int64
    top_logp: list[np.ndarray]  # [L_i, K] float32

    def save(self, path: Path) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        arrays = {"n_prompt": np.array([len(p) for p in self.prompts], np.int64),
                  "lengths": np.array([len(t) for t in self.tokens], np.int64),
                  "tokens": np.concatenate(self.tokens),
                  "top_ids": np.concatenate(self.top_ids),
                  "top_logp": np.concatenate(self.top_logp)}
        np.savez_compressed(path, meta=np.array(json.dumps(self.meta)), **arrays)

    @classmethod
    def load(cls, path: Path) -> Recording:
        with np.load(path) as z:
            meta = json.loads(str(z["meta"]))
            n_prompt, lengths = z["n_prompt"], z["lengths"]
            tokens = np.split(z["tokens"], np.cumsum(lengths)[:-1])
            cont = np.cumsum(lengths - n_prompt)[:-1]
            top_ids, top_logp = np.split(z["top_ids"], cont), np.split(z["top_logp"], cont)
        prompts = [tuple(t[:p].tolist()) for t, p in zip(tokens, n_prompt)]
        return cls(meta, prompts, tokens, top_ids, top_logp)


class ReplayAcceptance(AcceptanceModel):
    def __init__(self, recording: Recording) -> None:
        self.recording = recording
        self._by_prompt = {p: i for i, p in enumerate(recording.prompts)}

    def _sequence(self, r: Request) -> int:
        i = self._by_prompt.get(tuple(r.prompt_ids))
        if i is None:
            raise ValueError(f"request {r.id}: its prompt was not recorded (replay needs the "
                             "recorded prompts' token ids)")
        return i

    def _rows(self, seqs: list[int], pos: np.ndarray, width: int
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The draft's top-`width` guesses for the token at sequence position pos[i] of
        request i, and the target's token there (-1 past the recording)."""
        rec = self.recording
        n = len(seqs)
        ids = np.full((n, width), _OFF - 1, np.int64) - np.arange(width)  # distinct, unmatched
        logp = np.full((n, width), _PAST_END) - np.arange(width)
        says = np.full(n, _OFF, np.int64)
        for i, s in enumerate(seqs):
            j = int(pos[i]) - len(rec.prompts[s])
            if j < rec.top_ids[s].shape[0]:
                k = min(width, rec.top_ids[s].shape[1])
                ids[i, :k], logp[i, :k] = rec.top_ids[s][j, :k], rec.top_logp[s][j, :k]
                says[i] = rec.tokens[s][int(pos[i])]
        return ids, logp, says

    def trees(self, reqs: Sequence[Request], plan: SpecPlan) -> SimTrees:
        n = len(reqs)
        seqs = [self._sequence(r) for r in reqs]
        pos = np.array([len(r.tokens) for r in reqs], np.int64)  # the roots' children guess this
        for r, s, p in zip(reqs, seqs, pos):
            if p >= len(self.recording.tokens[s]):
                raise ValueError(f"request {r.id} runs past its recorded continuation "
                                 f"({len(self.recording.tokens[s]) - r.n_prompt} tokens): "
                                 "record with more --max-tokens")
        roots = [r.tokens[-1] for r in reqs]
        k = int(self.recording.meta["top_k"])
        if not plan.speculates:
            _, _, says = self._rows(seqs, pos, 1)
            return SimTrees(CandidateBatch.roots(roots), says[:, None])
        widths = layer_widths(plan, n)
        ranks = max(k, *widths)
        tree = TreeArrays(n, widths)
        on_path = np.zeros((n, tree.n_nodes), bool)
        on_path[:, 0] = True
        says = np.full((n, tree.n_nodes), _OFF, np.int64)
        for depth, w in enumerate(widths):
            ids, logp, target = self._rows(seqs, pos + depth, ranks)  # [n, ranks], [n]
            p_off, p_len = tree.prev
            says[:, p_off:p_off + p_len] = np.where(on_path[:, p_off:p_off + p_len],
                                                    target[:, None], _OFF)
            step = torch.from_numpy(logp).double()[:, None, :].expand(n, p_len, ranks)
            local_parent, idx, lp = beam_step(tree.log_prob[:, p_off:p_off + p_len],
                                              step.contiguous(), w, plan.expansion is not None)
            tok = np.take_along_axis(ids, idx.numpy(), 1)
            off, width = tree.add_layer(local_parent, torch.from_numpy(tok), lp)
            parent_on = np.take_along_axis(on_path[:, p_off:p_off + p_len],
                                           local_parent.numpy(), 1)
            on_path[:, off:off + width] = parent_on & (tok == target[:, None])
        _, _, target = self._rows(seqs, pos + len(widths), 1)
        p_off, p_len = tree.prev
        says[:, p_off:p_off + p_len] = np.where(on_path[:, p_off:p_off + p_len],
                                                target[:, None], _OFF)
        return SimTrees(tree.candidates(roots), says)
