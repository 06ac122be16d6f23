"""Replay acceptance: recorded from a tiny random Llama pair (no real model), the simulator
accepts exactly what the target would, and with trees the real draft grows on the target's
path it accepts as many tokens per iteration as the real engine does."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from adaserve.engine.config import EngineConfig  # noqa: E402
from adaserve.engine.core import EngineCore  # noqa: E402
from adaserve.engine.sampling import SamplingParams  # noqa: E402
from adaserve.sim import (Recording, ReplayAcceptance, SimExecutor, SimRequest,  # noqa: E402
                          SimSetup, VirtualClock, build, simulate)
from adaserve.sim.record import record  # noqa: E402
from engine.tiny_models import perturbed, tiny_models, tiny_state  # noqa: E402
from sim_models import linear_hardware  # noqa: E402

PROMPTS = [[1 + i, 5, 9, 3 + i] * (i + 1) for i in range(4)]
NEW = 12


@pytest.fixture(autouse=True)
def one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def pair():
    t = tiny_state(0)
    return tiny_models(None, t, perturbed(t, 1, 0.3))


@pytest.fixture(scope="module")
def recording(pair, tmp_path_factory):
    rec = record(pair, PROMPTS, NEW + 8, top_k=8, meta={"target": "tiny", "draft": "tiny-0.3"})
    path = tmp_path_factory.mktemp("rec") / "tiny.npz"
    rec.save(path)
    return Recording.load(path)


def _cfg(policy: str, **kw) -> EngineConfig:
    return EngineConfig(policy=policy, draft=None if policy == "incremental" else "target",
                        max_batch=3, max_context=128, prefill_chunk=8, **kw)


def _outputs(core: EngineCore) -> tuple[dict, list[int]]:
    for i, p in enumerate(PROMPTS):
        core.add(str(i), p, SamplingParams(max_tokens=NEW, ignore_eos=True))
    out: dict[str, list[int]] = {str(i): [] for i in range(len(PROMPTS))}
    while core.has_work:
        for o in core.step():
            out[o.request_id].extend(o.token_ids)
    return out, [s.emitted_tokens for s in core.stats]


def test_a_recording_round_trips_and_holds_the_targets_continuation(pair, recording):
    assert recording.prompts == [tuple(p) for p in PROMPTS]
    real, _ = _outputs(EngineCore(_cfg("incremental"), pair))
    for i, p in enumerate(PROMPTS):
        assert recording.tokens[i][len(p):len(p) + NEW].tolist() == real[str(i)]
        assert recording.top_ids[i].shape == (NEW + 8, 8)
        assert np.all(np.diff(recording.top_logp[i], axis=1) <= 0)


@pytest.mark.parametrize("policy", ["adaserve-authors", "specinfer", "global-greedy", "incremental"])
def test_replay_commits_exactly_the_targets_tokens(pair, recording, policy):
    cfg = _cfg(policy, budget=6, max_depth=3, max_width=2)
    sim = EngineCore(cfg, executor=SimExecutor(linear_hardware(), ReplayAcceptance(recording),
                                               VirtualClock(), n_slots=3))
    out, _ = _outputs(sim)
    for i, p in enumerate(PROMPTS):
        assert out[str(i)] == recording.tokens[i][len(p):len(p) + NEW].tolist()


def test_replay_accepts_what_the_real_engine_accepts(pair, recording):
    # chains (width 1) that all fit the budget: every drafted node is verified, and nodes
    # off the target's path, where replay's distributions stand in, are never accepted
    cfg = _cfg("global-greedy", budget=32, max_depth=3, max_width=1)
    real_out, real_emitted = _outputs(EngineCore(cfg, pair))
    clock = VirtualClock()
    sim = EngineCore(cfg, executor=SimExecutor(linear_hardware(), ReplayAcceptance(recording),
                                               clock, n_slots=3), clock=clock.now)
    sim_out, sim_emitted = _outputs(sim)
    assert sim_out == real_out
    assert sim_emitted == real_emitted
    assert sum(real_emitted) / len(real_emitted) > 1.2  # the draft does get tokens accepted


def test_unrecorded_prompts_and_overruns_are_refused(recording):
    setup = SimSetup(linear_hardware(), ReplayAcceptance(recording), policy="adaserve-authors")
    core, clock = build(setup, max_context=128, max_waiting=4)
    with pytest.raises(ValueError, match="not recorded"):
        simulate(core, clock, [SimRequest(0, 0.0, "a", 100.0, 3, 4, prompt_ids=(7, 7, 7))])
    core, clock = build(setup, max_context=128, max_waiting=4)
    long = SimRequest(0, 0.0, "a", 100.0, 4, 60, prompt_ids=tuple(PROMPTS[0]))
    with pytest.raises(ValueError, match="past its recorded continuation"):
        simulate(core, clock, [long])


def test_a_recording_loads_by_path(recording, tmp_path):
    from adaserve.sim import load_acceptance

    recording.save(tmp_path / "r.npz")
    assert isinstance(load_acceptance(tmp_path / "r.npz"), ReplayAcceptance)
