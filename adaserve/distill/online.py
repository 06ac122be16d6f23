"""Online draft adaptation, the trainer's side (seed 004 §4.2): distil the served draft on
the target distributions the engine buffered where the draft disagreed, with a replay
sample against forgetting, and keep the result only when it does not lower greedy
agreement on a held-back slice of served requests.

`OnlineTrainer` is the update itself (in any process; tests drive it directly).
`TrainerClient` runs one in a child process at low priority, so training takes only the
CPU the engine leaves (niceness, a thread cap, and SIGSTOP while the queue is long:
adaserve/engine/online_draft.py decides when).
"""

from __future__ import annotations

import copy
import math
import os
import random
import signal
import socket
import subprocess
import sys
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

from adaserve.distill.online_data import agreement, collate
from adaserve.distill.student import Student
from adaserve.distill.train import head_index, kl_loss
from adaserve.engine.model import Llama, ModelConfig
from adaserve.engine.online_config import OnlineDraftConfig
from adaserve.engine.online_records import ServedRecord, UpdateReport
from adaserve.engine.weights import TOKEN_IDS_KEY, load_config, load_state

_EMBED = "model.embed_tokens.weight"


def student_from_draft(draft_dir: Path, embed: torch.Tensor) -> Student:
    """The training form of one of our drafts (adaserve distill-draft's output): its
    layers, norm and subset head, over the target's frozen input embeddings."""
    hf = load_config(draft_dir)
    if not (hf.get("adaserve_draft") or {}).get("shared_embeddings"):
        raise ValueError(f"online draft adaptation trains drafts made by `adaserve "
                         f"distill-draft`; {draft_dir} is not one")
    dstate = load_state(draft_dir)
    head = dstate.pop("lm_head.weight")
    head_ids = dstate.pop(TOKEN_IDS_KEY)
    st = Student(ModelConfig.from_hf(hf), {**dstate, _EMBED: embed}, hf["num_hidden_layers"],
                 head_ids)
    with torch.no_grad():
        st.head.copy_(head.float())
    return st


class NewDraft(NamedTuple):
    """An accepted update as the engine installs it: the model, and the target ids its
    head rows stand for (they change when the head follows the traffic)."""

    model: Llama
    token_ids: torch.Tensor  # [head rows] int64


def to_llama(state: dict, cfg: ModelConfig, embed: torch.Tensor, skinny: bool) -> NewDraft:
    """The engine's draft from exported student weights (fp32, the engine's CPU dtype)."""
    state = {k: torch.as_tensor(v) for k, v in state.items()}
    ids = state.pop(TOKEN_IDS_KEY).to(torch.int64)
    return NewDraft(Llama(cfg, {**state, _EMBED: embed}, skinny=skinny), ids)


class OnlineTrainer:
    """Seed 004 Algorithm 1 line 20, with a replay reservoir and a held-back check."""

    def __init__(self, cfg: OnlineDraftConfig, student: Student) -> None:
        self.cfg, self.student = cfg, student
        self.hidx = head_index(student.head_ids, student.embed.shape[0])
        self.params = [p for p in student.parameters() if p.requires_grad]
        self.opt = torch.optim.AdamW(self.params, lr=cfg.lr, weight_decay=0.0,
                                     betas=(0.9, 0.98))
        self.replay: list[ServedRecord] = []
        self.seen = 0  # training requests offered to the reservoir
        self.rng = random.Random(cfg.seed)
        self.updates = 0
        # how often each target id was served (outputs of training requests): which head
        # rows the traffic uses, and which tokens outside the head it asks for
        self.served_tokens = np.zeros(student.embed.shape[0], np.int64)
        # new rows start as the target's tied head row (its input embedding) at the draft
        # head's typical scale: the draft's final hidden states are not the target's
        with torch.no_grad():
            ratio = student.head.norm(dim=-1) / student.embed[student.head_ids].norm(dim=-1)
        self.row_scale = float(ratio.median())

    def update(self, fresh: list[ServedRecord],
               held: list[ServedRecord]) -> tuple[UpdateReport, dict | None]:
        """Train on ``fresh`` plus a replay sample; the exported weights when held-back
        agreement did not fall (by min_gain), else None with the weights rolled back."""
        t0 = time.perf_counter()
        cfg = self.cfg
        before = agreement(self.student, held, cfg.max_len)
        saved = (copy.deepcopy(self.student.state_dict()), copy.deepcopy(self.opt.state_dict()))
        moved = self._follow_traffic(fresh)  # judged with the training, rolled back with it
        n_replay = min(len(self.replay), round(len(fresh) * cfg.replay_share
                                               / (1 - cfg.replay_share)))
        data = fresh + self.rng.sample(self.replay, n_replay)
        losses = []
        for batch in self._batches(data):
            loss, _ = kl_loss(self.student, *collate([data[i] for i in batch], cfg.max_len,
                                                     self.hidx, cfg.anchor_weight))
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.params, 1.0)
            self.opt.step()
            losses.append(loss.item())
        after = agreement(self.student, held, cfg.max_len)
        ok = math.isfinite(after) and after >= before + cfg.min_gain \
            and all(map(math.isfinite, losses))
        if not ok:  # roll back: the served draft stays, and so does what trains it
            self.restore(*saved)
            moved = 0
        self._remember(fresh)
        self.updates += 1
        report = UpdateReport(ok, before, after, len(losses),
                              float(np.mean(losses)) if losses else math.nan,
                              time.perf_counter() - t0, len(fresh), head_rows=moved)
        state = self.student.export_state(torch.float32) if ok else None
        return report, state

    def restore(self, student_state: dict, opt_state: dict) -> None:
        """The student and optimizer as saved (a rollback, or a resumed run), with the
        head's ids (a persistent buffer) and the index derived from them."""
        self.student.load_state_dict(student_state)
        self.opt.load_state_dict(opt_state)
        self.hidx = head_index(self.student.head_ids, self.student.embed.shape[0])

    def _follow_traffic(self, fresh: list[ServedRecord]) -> int:
        """Count what ``fresh`` served; give up to head_rows rows whose tokens nothing
        served used to the most served tokens outside the head (at least head_min_count
        times). The head is ordered by the offline set's frequency, so rows are taken from
        its end. Returns the rows moved. Why: a token outside the head is a certain miss,
        whatever the draft learns; 12.8% of the code the shift stream serves is outside
        the 8k head the draft was distilled with, 2.3% of its own domain (docs/draft.md)."""
        cfg = self.cfg
        outs = [r.tokens[r.n_prompt:] for r in fresh]
        if outs:
            self.served_tokens += np.bincount(np.concatenate(outs).astype(np.int64),
                                       minlength=self.served_tokens.size)[: self.served_tokens.size]
        if not cfg.head_rows:
            return 0
        ids = self.student.head_ids
        outside = np.ones(self.served_tokens.size, bool)
        outside[ids.numpy()] = False
        want = np.flatnonzero(outside & (self.served_tokens >= cfg.head_min_count))
        want = want[np.lexsort((want, -self.served_tokens[want]))][: cfg.head_rows]
        free = np.flatnonzero(self.served_tokens[ids.numpy()] == 0)[::-1][: want.size]
        want = torch.from_numpy(want[: free.size])
        rows = torch.from_numpy(free.copy())
        if rows.numel() == 0:
            return 0
        with torch.no_grad():
            ids[rows] = want
            self.student.head[rows] = self.student.embed[want] * self.row_scale
        moments = self.opt.state.get(self.student.head, {})
        for k in ("exp_avg", "exp_avg_sq"):  # a moved row starts its optimizer state anew
            if k in moments:
                moments[k][rows] = 0
        self.hidx = head_index(ids, self.student.embed.shape[0])
        return int(rows.numel())

    def _batches(self, data: list[ServedRecord]) -> list[list[int]]:
        """``steps`` batches of at most tokens_per_step padded tokens, similar lengths
        together, visited in a seeded order (cycled when the data is small)."""
        cfg = self.cfg
        order = sorted(range(len(data)), key=lambda i: min(len(data[i].tokens), cfg.max_len))
        groups, cur = [], []
        for i in order:
            w = min(len(data[i].tokens), cfg.max_len)
            if cur and w * (len(cur) + 1) > cfg.tokens_per_step:
                groups.append(cur)
                cur = []
            cur.append(i)
        if cur:
            groups.append(cur)
        rng = random.Random(cfg.seed * 1_000_003 + self.updates)
        out = []
        while groups and len(out) < cfg.steps:
            perm = groups[:]
            rng.shuffle(perm)
            out += perm
        return out[: cfg.steps]

    def _remember(self, fresh: list[ServedRecord]) -> None:
        """Reservoir sampling: every training request ever offered is equally likely kept."""
        for r in fresh:
            self.seen += 1
            if len(self.replay) < self.cfg.replay_requests:
                self.replay.append(r)
            else:
                j = self.rng.randrange(self.seen)
                if j < self.cfg.replay_requests:
                    self.replay[j] = r


def _worker(conn) -> None:
    """The trainer process: low priority, few threads, one update per job."""
    cfg, draft_dir, target_dir = conn.recv()
    os.nice(cfg.nice)
    torch.set_num_threads(cfg.threads)
    trainer = OnlineTrainer(cfg, student_from_draft(Path(draft_dir), _load_embed(target_dir)))
    while True:
        msg = conn.recv()
        if msg[0] == "stop":
            return
        _, fresh, held = msg
        try:
            report, state = trainer.update(fresh, held)
        except Exception as e:  # a failed update is a rolled-back one
            report = UpdateReport(False, math.nan, math.nan, 0, math.nan, 0.0, len(fresh))
            state = None
            print(f"online draft trainer: update failed: {type(e).__name__}: {e}",
                  file=sys.stderr, flush=True)
        conn.send((report, None if state is None else {k: v.numpy() for k, v in state.items()}))


def _load_embed(target_dir: Path) -> torch.Tensor:
    from safetensors import safe_open

    for f in sorted(Path(target_dir).glob("*.safetensors")):
        with safe_open(str(f), "pt") as sf:
            if _EMBED in sf.keys():
                return sf.get_tensor(_EMBED).float()
    raise FileNotFoundError(f"{target_dir} has no {_EMBED}")


def _draft_dir(engine_cfg) -> Path:
    from adaserve.engine.full_vocab import resolve_draft

    path = resolve_draft(engine_cfg.draft)
    if not (load_config(path).get("adaserve_draft") or {}).get("shared_embeddings"):
        raise ValueError(f"online_draft trains drafts made by `adaserve distill-draft`; "
                         f"{engine_cfg.draft!r} is not one")
    return path


class InlineTrainer:
    """An `OnlineTrainer` run where a job is submitted, on the caller's thread: no process,
    no throttle. For experiments that measure acceptance step by step, and tests."""

    def __init__(self, trainer: OnlineTrainer, draft_cfg: ModelConfig, embed: torch.Tensor,
                 skinny: bool) -> None:
        self.trainer = trainer
        self.draft_cfg, self.embed, self.skinny = draft_cfg, embed, skinny
        self.done = None

    @classmethod
    def for_models(cls, cfg: OnlineDraftConfig, engine_cfg, models) -> InlineTrainer:
        d = models.draft
        student = student_from_draft(_draft_dir(engine_cfg), d.embed.float())
        return cls(OnlineTrainer(cfg, student), d.cfg, d.embed, d.skinny)

    def submit(self, fresh: list[ServedRecord], held: list[ServedRecord]) -> None:
        self.done = self.trainer.update(fresh, held)

    def result(self, block: bool = False) -> tuple[UpdateReport, NewDraft | None] | None:
        got, self.done = self.done, None
        if got is None:
            return None
        report, state = got
        return report, None if state is None else to_llama(state, self.draft_cfg, self.embed,
                                                            self.skinny)

    def pause(self, on: bool) -> None:
        pass

    def close(self) -> None:
        pass


class TrainerClient:
    """The engine's handle on the trainer process."""

    def __init__(self, proc, conn, draft_cfg: ModelConfig, embed: torch.Tensor,
                 skinny: bool) -> None:
        self.proc, self.conn = proc, conn
        self.draft_cfg, self.embed, self.skinny = draft_cfg, embed, skinny
        self.stopped = False

    @classmethod
    def start(cls, cfg: OnlineDraftConfig, engine_cfg, models) -> TrainerClient:
        draft_dir = _draft_dir(engine_cfg)
        # a fresh interpreter (not fork: the engine's OpenMP threads are running; not
        # multiprocessing's spawn, which re-runs the caller's __main__), on a socket pair
        ours, theirs = socket.socketpair()
        proc = subprocess.Popen([sys.executable, "-m", "adaserve.distill.online",
                                 str(theirs.fileno())], pass_fds=[theirs.fileno()])
        theirs.close()  # so a dead trainer reads as EOF here, not as a wait forever
        conn = Connection(ours.detach())
        conn.send((cfg, str(draft_dir), str(models.path)))
        d = models.draft
        return cls(proc, conn, d.cfg, d.embed, d.skinny)

    def submit(self, fresh: list[ServedRecord], held: list[ServedRecord]) -> None:
        self.conn.send(("update", fresh, held))

    def result(self, block: bool = False) -> tuple[UpdateReport, NewDraft | None] | None:
        if not block and not self.conn.poll():
            return None
        try:
            report, state = self.conn.recv()
        except EOFError:  # the trainer died: nothing changes in serving
            return UpdateReport(False, math.nan, math.nan, 0, math.nan, 0.0, 0), None
        draft = None if state is None else to_llama(state, self.draft_cfg, self.embed,
                                                    self.skinny)
        return report, draft

    def pause(self, on: bool) -> None:
        """Stop (SIGSTOP) or resume (SIGCONT) the trainer: serving first while the queue is
        long."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGSTOP if on else signal.SIGCONT)
            self.stopped = on

    def close(self) -> None:
        if self.stopped:
            self.pause(False)
        try:
            self.conn.send(("stop",))
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.terminate()
            self.proc.wait(timeout=5)
        self.conn.close()


if __name__ == "__main__":
    _worker(Connection(int(sys.argv[1])))
