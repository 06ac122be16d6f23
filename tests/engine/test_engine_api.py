"""The threaded Engine: streaming, abort, bad input, stop conditions, cache accounting."""

from __future__ import annotations

import threading

import pytest
from engine_helpers import PROMPTS

from adaserve.engine import Engine, EngineConfig, QueueFull, SamplingParams
from adaserve.scheduler import SLO


@pytest.fixture(scope="module")
def engine(smollm):
    with Engine(EngineConfig(max_context=256, max_batch=4, max_waiting=6),
                models=smollm) as eng:
        yield eng


def _pool_whole(eng: Engine) -> bool:
    core = eng.core
    return not core.slots and core.n_decode == 0 and core.free_slots == core.n_slots


def test_stream_delivers_incremental_text(engine):
    rid = engine.submit(PROMPTS[0], SamplingParams(max_tokens=12, ignore_eos=True))
    outs = list(engine.stream(rid, timeout=60))
    assert outs[-1].finished and outs[-1].finish_reason == "length"
    assert sum(len(o.token_ids) for o in outs) == 12
    text = "".join(o.text for o in outs)
    ids = [t for o in outs for t in o.token_ids]
    assert text == engine.tokenizer.decode(ids, skip_special_tokens=True)
    st = outs[-1].stats
    assert st.output_tokens == 12 and st.tpot_s > 0 and st.ttft_s > 0


def test_abort_mid_generation_frees_the_cache(engine):
    rid = engine.submit(PROMPTS[1], SamplingParams(max_tokens=200, ignore_eos=True))
    stream = engine.stream(rid, timeout=60)
    first = next(stream)
    assert not first.finished
    engine.abort(rid)
    rest = list(stream)
    assert rest[-1].finished and rest[-1].finish_reason == "abort"
    engine.generate(["ping"], SamplingParams(max_tokens=2))  # one more iteration has run
    assert _pool_whole(engine)


def test_prompt_over_the_context_limit_is_rejected_and_serving_goes_on(engine):
    long = "word " * 400
    with pytest.raises(ValueError, match="context limit of 256 tokens"):
        engine.submit(long, SamplingParams(max_tokens=8))
    with pytest.raises(ValueError, match="context limit"):
        engine.submit(PROMPTS[0], SamplingParams(max_tokens=256))
    [c] = engine.generate([PROMPTS[3]], SamplingParams(max_tokens=6, ignore_eos=True))
    assert len(c.token_ids) == 6


@pytest.mark.parametrize("bad", [
    {"max_tokens": 0}, {"max_tokens": -3}, {"max_tokens": 2.5}, {"temperature": -1.0},
    {"temperature": float("nan")}, {"top_p": 0.0}, {"top_p": 1.5}, {"top_k": -1},
    {"stop": [""]}, {"seed": "x"},
])
def test_bad_sampling_params_raise_value_error(bad):
    with pytest.raises(ValueError):
        SamplingParams(**bad)


def test_bad_prompts_raise(engine):
    with pytest.raises(ValueError, match="empty"):
        engine.submit([], SamplingParams())
    with pytest.raises(ValueError, match="token ids"):
        engine.submit([10**9], SamplingParams())
    with pytest.raises(ValueError, match="exactly one"):
        engine.submit(PROMPTS[0], messages=[{"role": "user", "content": "hi"}])


def test_stop_string_truncates_and_finishes(engine):
    ref = engine.generate([PROMPTS[1]], SamplingParams(max_tokens=30, ignore_eos=True))[0]
    stop = ref.text[10:14]
    c = engine.generate([PROMPTS[1]], SamplingParams(max_tokens=30, stop=(stop,)))[0]
    assert c.finish_reason == "stop"
    assert c.text == ref.text[: ref.text.find(stop)]


def test_chat_template_and_eos(engine):
    rid = engine.submit(messages=[{"role": "user", "content": "Say hello."}],
                        params=SamplingParams(max_tokens=100))
    c = engine.result(rid)
    assert c.finish_reason == "stop"  # the model closes its turn with <|im_end|>
    assert c.text and "<|im_end|>" not in c.text
    assert 2 not in c.token_ids


def test_full_queue_raises_queue_full(engine):
    """max_batch 4 + max_waiting 6: the eleventh request cannot be queued."""
    ids = []
    with pytest.raises(QueueFull):
        for _ in range(40):
            ids.append(engine.submit(PROMPTS[2], SamplingParams(max_tokens=40, ignore_eos=True)))
    for rid in ids:
        engine.abort(rid)
    for rid in ids:
        assert engine.result(rid).finish_reason in ("abort", "length")
    engine.generate(["ping"], SamplingParams(max_tokens=2))
    assert _pool_whole(engine)


def test_concurrent_submitters_and_pool_whole_after_workload(engine):
    results = {}

    def client(k: int) -> None:
        p = SamplingParams(max_tokens=5 + k, temperature=0.7, seed=k)
        results[k] = engine.generate([PROMPTS[k]], p, slo=SLO.from_ms(50))[0]

    threads = [threading.Thread(target=client, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert sorted(results) == list(range(6))
    for k, c in results.items():
        assert c.finish_reason in ("length", "stop")
        assert c.stats.slo_tpot_s == pytest.approx(0.05)
        # attained is exactly TPOT <= SLO, from the request's own token timestamps
        st = c.stats
        if st.output_tokens >= 2:
            assert st.slo_attained is (st.tpot_s <= 0.05)
        else:  # one token has no TPOT: nothing to miss
            assert st.tpot_s is None and st.slo_attained is True


def test_slo_attained_follows_the_measured_tpot(engine):
    """No CPU decodes a token in 1 us, every one does in 1000 s; best effort has no verdict."""
    p = SamplingParams(max_tokens=6, ignore_eos=True)
    tight, loose, none = (engine.generate([PROMPTS[0]], p, slo=slo)[0].stats
                          for slo in (SLO.from_ms(0.001), SLO.from_ms(1e6), SLO.from_ms(None)))
    assert tight.output_tokens == 6 and tight.tpot_s > 1e-6
    assert tight.slo_attained is False and loose.slo_attained is True
    assert none.slo_attained is None and none.slo_tpot_s is None
    assert _pool_whole(engine)


def test_t_spec_tracks_measured_iterations(smollm, tokenizer):
    """No profile: t_spec starts at 0 and becomes the (weighted) mean measured iteration."""
    from adaserve.engine.core import EngineCore
    core = EngineCore(EngineConfig(max_batch=2, max_context=128), smollm)
    for i in range(2):
        core.add(f"t{i}", tokenizer.encode(PROMPTS[i]), SamplingParams(max_tokens=12))
    while core.has_work:
        core.step()
    stats = list(core.stats)
    assert stats[0].predicted_seconds == 0.0
    measured = [s.seconds for s in stats]
    # every later plan used a t_spec inside the range of what had been measured before it
    for k in range(1, len(stats)):
        assert min(measured[:k]) <= stats[k].predicted_seconds <= max(measured[:k])
    assert core.latency.ratio > 0
