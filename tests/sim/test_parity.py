"""The real and the simulated executor under the same scheduling loop make identical
decisions on a recorded run: the torch executor (tiny random Llama pair, no real model)
runs a workload while its draft trees, verify verdicts and clock readings are recorded;
the simulated executor then replays those trees and verdicts through its own acceptance
walk, on the recorded clock. Every BatchView, plan, selection and output must agree."""

from __future__ import annotations

import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from adaserve.engine.config import EngineConfig  # noqa: E402
from adaserve.engine.core import EngineCore  # noqa: E402
from adaserve.engine.executor import Executor  # noqa: E402
from adaserve.engine.sampling import SamplingParams  # noqa: E402
from adaserve.engine.torch_executor import TorchExecutor  # noqa: E402
from adaserve.scheduler import SLO, CandidateBatch  # noqa: E402
from adaserve.sim import AcceptanceModel, SimExecutor, SimTrees, VirtualClock  # noqa: E402
from engine.tiny_models import perturbed, tiny_models, tiny_state  # noqa: E402
from sim_models import linear_hardware  # noqa: E402


@pytest.fixture(autouse=True)
def one_thread():
    """The tiny models need no second thread, and OpenMP's spinning on a busy 2-core
    machine made these tests 100x slower with two."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


class Recording(Executor):
    """A TorchExecutor that keeps, per verify, the trees and what the target said."""

    def __init__(self, inner: TorchExecutor) -> None:
        self.inner = inner
        self.n_slots, self.vocab = inner.n_slots, inner.vocab
        self.eos_ids, self.tokenizer = inner.eos_ids, inner.tokenizer
        self.verdicts: list[SimTrees] = []

    def open_slot(self, slot):
        self.inner.open_slot(slot)

    def prefill(self, chunks):
        self.inner.prefill(chunks)

    def draft(self, reqs, plan):
        return self.inner.draft(reqs, plan)

    def verify(self, reqs, candidates, mask, drafted):
        res = self.inner.verify(reqs, candidates, mask, drafted)
        # what the target said along each accepted path, and the bonus after it; -1
        # (matching no child) everywhere else: the walk needs no more
        says = np.full(candidates.token.shape, -1, np.int64)
        for i, (nodes, new) in enumerate(zip(res.accepted, res.new_tokens)):
            path = np.r_[0, nodes]
            says[i, path] = new
        self.verdicts.append(SimTrees(candidates, says))
        return res

    def commit_draft(self, reqs, drafted, result):
        self.inner.commit_draft(reqs, drafted, result)

    def swap_slots(self, a, b, len_a, len_b):
        self.inner.swap_slots(a, b, len_a, len_b)

    def copy_slot(self, src, dst, length):
        self.inner.copy_slot(src, dst, length)


class Replay(AcceptanceModel):
    def __init__(self, verdicts: list[SimTrees]) -> None:
        self.verdicts = list(verdicts)

    def trees(self, reqs, plan):
        v = self.verdicts.pop(0)
        if not plan.speculates:  # the loop verifies its own root-only batch
            return SimTrees(CandidateBatch.roots([r.tokens[-1] for r in reqs]), v.target_token)
        return v


class RecordedClock:
    def __init__(self) -> None:
        self.readings: list[float] = []

    def __call__(self) -> float:
        self.readings.append(time.perf_counter())
        return self.readings[-1]


def _spy(core: EngineCore) -> list:
    seen = []
    plan, select = core.policy.plan, core.policy.select

    def spy_plan(view):
        p = plan(view)
        seen.append(("plan", view.request_ids, view.decode_latency_s.copy(),
                     view.decoded_tokens.copy(), view.context_tokens.copy(), p))
        return p

    def spy_select(view, p, cands):
        s = select(view, p, cands)
        seen.append(("select", cands.token.copy(), s.mask.copy()))
        return s

    core.policy.plan, core.policy.select = spy_plan, spy_select
    return seen


def _drive(core: EngineCore) -> list:
    # 5 requests through 3 slots: admission waits, chunked prefill, promotions, frees
    for i in range(5):
        slo = SLO.from_ms(30.0 if i % 2 else 1e5)
        core.add(f"r{i}", [1 + i, 5, 9, 3 + i] * (i + 1),
                 SamplingParams(max_tokens=10 + i, ignore_eos=True), slo)
    outs = []
    while core.has_work:
        outs.append(core.step())
    return outs


@pytest.mark.parametrize("policy", ["adaserve-authors", "specinfer", "incremental"])
def test_real_and_simulated_executors_decide_alike(policy):
    torch.manual_seed(0)
    t = tiny_state(0)
    models = tiny_models(None, t, perturbed(t, 1, 0.3))
    cfg = EngineConfig(policy=policy, draft=None if policy == "incremental" else "target",
                       budget=6, max_depth=3, max_width=2, max_batch=3, max_context=128,
                       prefill_chunk=8)
    clock = RecordedClock()
    real = EngineCore(cfg, models=models, clock=clock)
    real.executor = rec = Recording(real.executor)
    real_seen, real_outs = _spy(real), _drive(real)

    replay = iter(clock.readings)
    sim_exec = SimExecutor(linear_hardware(), Replay(rec.verdicts), VirtualClock(), n_slots=3)
    sim = EngineCore(cfg, executor=sim_exec, clock=lambda: next(replay))
    sim_seen, sim_outs = _spy(sim), _drive(sim)

    assert len(sim_seen) == len(real_seen) > 0
    for a, b in zip(real_seen, sim_seen):
        assert a[0] == b[0]
        for x, y in zip(a[1:], b[1:]):
            if isinstance(x, np.ndarray):
                np.testing.assert_array_equal(x, y)
            else:
                assert x == y
    assert sim_outs == real_outs
    assert [s for s in sim.stats] == [s for s in real.stats]
    assert next(replay, None) is None  # every recorded clock reading was used
