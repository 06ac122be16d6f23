"""What the first launch of ADASERVE in SGLang (on a CPU) found, one test group per fix,
each against SGLang's own objects: the draft worker's budget waiting for SGLang's request
pool, SLO settings checked at launch in the user's terms, no overlap scheduling on a CPU,
the HTTP and report hooks leaving other algorithms' servers alone, and the first-token
stamp non-streaming requests need. (The algorithm methods SGLang's scheduler calls are
`adaserve sglang check`'s "algorithm interface" row: test_check.py.)"""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import numpy as np
import pytest
from fastapi.testclient import TestClient
from sglang.srt.entrypoints import http_server
from sglang.srt.managers import tokenizer_manager as tm
from sglang.srt.managers.schedule_batch import Req
from sglang.srt.observability.req_time_stats import SchedulerReqTimeStats
from sglang.srt.plugins import load_plugins
from sglang.srt.sampling.sampling_params import SamplingParams
from sglang.srt.server_args import ServerArgs
from sglang.srt.speculative.standalone_worker_v2 import StandaloneDraftWorker
from test_http_slo import Recorder, RecordingServing, raw
from test_report import state
from test_server_args import resolved

from adaserve.scheduler.selection import Selection
from adaserve.sglang import worker as worker_module
from adaserve.sglang.slo import configured_classes
from adaserve.sglang.worker import AdaServeDraftWorker, stamp_first_token

TOPK, STEPS, N = 2, 3, 6
SETTINGS = ("ADASERVE_SLO_CLASSES", "ADASERVE_BASELINE_MS", "ADASERVE_DEFAULT_CLASS",
            "ADASERVE_BUDGET", "ADASERVE_POLICY")


@pytest.fixture(autouse=True)
def env(monkeypatch):
    """No ADASERVE_* setting from outside; each test sets its own."""
    for var in SETTINGS:
        monkeypatch.delenv(var, raising=False)
    configured_classes.cache_clear()
    yield monkeypatch
    configured_classes.cache_clear()


# 1. the default budget is read from SGLang's request pool, which exists only after the
#    worker is constructed (StandaloneDraftWorker.alloc_memory_pool)

def draft_worker(env) -> AdaServeDraftWorker:
    """As AdaServeWorker makes it, at the point SGLang has constructed the draft worker
    and not yet allocated its request pool."""
    env.setenv("ADASERVE_SLO_CLASSES", "urgent=20,relaxed=400,best-effort")
    w = object.__new__(StandaloneDraftWorker)
    w.speculative_num_draft_tokens, w.speculative_num_steps, w.topk = N, STEPS, TOPK
    w.__class__ = AdaServeDraftWorker
    w.setup_adaserve()
    return w


def test_the_worker_sets_up_before_sglang_allocates_the_request_pool(env):
    w = draft_worker(env)  # was an AttributeError: no req_to_token_pool yet
    assert not hasattr(w, "req_to_token_pool")
    w.req_to_token_pool = SimpleNamespace(size=8)  # alloc_memory_pool, later
    assert w.policy.config.budget == N * 8  # the verify layout at the pool's size
    assert w.policy is w.policy
    with pytest.raises(AttributeError):
        w.policy = None  # read-only: made once, from the pool


def test_adaserve_budget_overrides_the_layout(env):
    env.setenv("ADASERVE_BUDGET", "7")
    w = draft_worker(env)
    w.req_to_token_pool = SimpleNamespace(size=8)
    assert w.policy.config.budget == 7


# 2. the SLO settings are checked at launch, naming the environment variables (SGLang
#    has no --baseline-ms)

@pytest.mark.parametrize("settings, names", [
    ({}, ["ADASERVE_BASELINE_MS", "ADASERVE_SLO_CLASSES"]),  # the default classes are x-multiples
    ({"ADASERVE_BASELINE_MS": "fast"}, ["ADASERVE_BASELINE_MS='fast'"]),
    ({"ADASERVE_BASELINE_MS": "20", "ADASERVE_DEFAULT_CLASS": "gold"},
     ["ADASERVE_DEFAULT_CLASS='gold'", "urgent, moderate, relaxed, best-effort"]),
])
def test_bad_slo_settings_name_the_variable(env, settings, names):
    for var, value in settings.items():
        env.setenv(var, value)
    with pytest.raises(ValueError) as e:
        configured_classes()
    for name in names:
        assert name in str(e.value)
    assert "--baseline-ms" not in str(e.value)


def test_classes_in_ms_need_no_baseline(env):
    env.setenv("ADASERVE_SLO_CLASSES", "urgent=60,relaxed=400,best-effort")
    classes, default = configured_classes()
    assert list(classes) == ["urgent", "relaxed", "best-effort"] and default == "relaxed"


@pytest.mark.parametrize("settings, name", [
    ({}, "ADASERVE_BASELINE_MS"),
    ({"ADASERVE_BASELINE_MS": "fast"}, "ADASERVE_BASELINE_MS"),
    ({"ADASERVE_BASELINE_MS": "20", "ADASERVE_DEFAULT_CLASS": "gold"}, "ADASERVE_DEFAULT_CLASS"),
])
def test_a_bad_slo_setting_stops_the_launch(env, model, settings, name):
    for var, value in settings.items():
        env.setenv(var, value)
    with pytest.raises(ValueError, match=name):
        resolved(model, speculative_draft_model_path=model)


# 4. SGLang turns overlap scheduling off on a CPU for its own algorithms only

def test_overlap_scheduling_is_off_on_a_cpu(env, model):
    env.setenv("ADASERVE_BASELINE_MS", "20")
    def overlap_off(device: str) -> bool:
        d = resolved(model, device=device, speculative_draft_model_path=model)
        return d["disable_overlap_schedule"]

    assert overlap_off("cpu") is True
    default = ServerArgs(model_path=model).disable_overlap_schedule  # as given, unresolved
    assert default is False
    assert overlap_off("cuda") is default  # untouched


# 5. plain SGLang with adaserve installed (the plugin loads into every server) is unchanged

@pytest.fixture()
def plain_server(env):
    """SGLang's app with the plugin's hooks, serving without speculation, and no
    ADASERVE_* setting at all (the default classes cannot be made)."""
    load_plugins()
    rec = Recorder(algorithm=None)
    env.setattr(http_server, "_global_state", http_server._GlobalState(rec, None, {}))
    return TestClient(http_server.app, raise_server_exceptions=False), rec


def test_generate_passes_through_on_a_plain_server(plain_server):
    c, rec = plain_server
    custom = {"tpot_slo_ms": 30, "note": "mine"}
    r = c.post("/generate", json={"text": "hi", "sampling_params": {"custom_params": custom}},
               headers={"X-SLO-Class": "urgent"})
    assert r.status_code == 200, r.text  # was a 500: no baseline for the default classes
    r = c.post("/generate", json={"text": "hi"}, headers={"X-SLO-TPOT-MS": "-1"})
    assert r.status_code == 200, r.text  # not our header to refuse
    first, second = rec.seen
    assert first.sampling_params["custom_params"] == custom
    assert second.sampling_params is None or "custom_params" not in second.sampling_params


@pytest.mark.parametrize("algorithm", [None, "STANDALONE"])
def test_openai_routes_pass_through_on_another_server(env, algorithm):
    load_plugins()
    from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest

    serving = RecordingServing.make(algorithm)
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}],
            "custom_params": {"tpot_slo_ms": 33}, "max_tokens": 0, "slo": "x"}
    got = asyncio.run(serving.handle_request(ChatCompletionRequest.model_validate(body),
                                             raw({"X-SLO-Class": "urgent"}, body)))
    assert got == {"custom_params": {"tpot_slo_ms": 33}}  # ADASERVE's contract is not theirs


@pytest.mark.parametrize("algorithm, metrics", [(None, False), (None, True),
                                               ("STANDALONE", False)])
def test_the_report_stays_out_of_another_servers_meta_info(env, algorithm, metrics):
    load_plugins()
    env.setattr(tm, "get_spec", lambda: SimpleNamespace(speculative_num_draft_tokens=4))
    me = SimpleNamespace(
        rid_to_state={"r1": state({"slo_class": "urgent", "tpot_slo_ms": 20.0}, 10.0, 10.5, 11.0)},
        server_args=SimpleNamespace(speculative_algorithm=algorithm), enable_metrics=metrics)
    recv = SimpleNamespace(rids=["r1"], completion_tokens=[10], spec_verify_ct=[4],
                           spec_num_correct_drafts=[6], spec_num_cap_tokens=None,
                           spec_correct_drafts_histogram=None)
    meta: dict = {}
    # was a ValueError with metrics on (no baseline for the default classes), the SLO
    # report in meta_info without
    tm.TokenizerManager._calculate_spec_decoding_metrics(me, meta, recv, 0)
    assert meta["spec_accept_length"] == 2.5  # SGLang's own, as without the plugin
    ours = {"slo_class", "slo_tpot_ms", "tpot_ms", "ttft_ms", "slo_attained",
            "accepted_tokens_per_step"}
    assert not ours & set(meta), meta


# 6. a non-streaming request's TTFT was its end-to-end time and its TPOT 0: SGLang's
#    scheduler stamps the first token, but pickles its time stats to the tokenizer manager
#    only with --enable-metrics; the worker marks them to be sent (and fills a missing stamp)

def test_the_first_token_time_survives_the_trip_to_the_tokenizer():
    import pickle

    stats = SchedulerReqTimeStats()
    stats.set_prefill_finished_time(12.5)  # SGLang's own stamp at prefill
    lost = pickle.loads(pickle.dumps(stats))
    assert lost.prefill_finished_time == 0.0  # what the tokenizer manager got before
    stamp_first_token(SimpleNamespace(time_stats=stats), 99.0)
    sent = pickle.loads(pickle.dumps(stats))
    assert stats.prefill_finished_time == 12.5  # SGLang's stamp kept
    # rebased onto the receiving process's clock: here the same process, the same time
    assert abs(sent.prefill_finished_time - 12.5) < 1e-6


def test_stamp_fills_only_an_unset_first_token_time():
    stats = SchedulerReqTimeStats()
    req = SimpleNamespace(time_stats=stats)
    stamp_first_token(req, 12.5)
    assert stats.prefill_finished_time == 12.5
    stamp_first_token(req, 13.0)  # a later decode
    assert stats.prefill_finished_time == 12.5


def _req(rid: str) -> Req:
    r = Req(rid, "", list(range(5)), SamplingParams(max_new_tokens=8))
    r.output_ids = [1]
    return r


def test_batch_view_stamps_each_new_request_once(env):
    stamped = []

    def spy(req, now):
        stamped.append(req.rid)
        stamp_first_token(req, now)

    env.setattr(worker_module, "stamp_first_token", spy)
    w = draft_worker(env)
    a, b = _req("a"), _req("b")
    b.time_stats.set_prefill_finished_time(5.0)  # one SGLang did stamp keeps its time
    t0 = time.perf_counter()
    w.batch_view(SimpleNamespace(reqs=[a, b]))
    t1 = time.perf_counter()
    first_a = a.time_stats.prefill_finished_time
    # on SGLang's clock for request times (perf_counter), the worker's own l starts there
    assert t0 <= first_a <= t1 and first_a == w.first_token_at["a"]
    assert b.time_stats.prefill_finished_time == 5.0
    c = _req("c")
    w.batch_view(SimpleNamespace(reqs=[a, b, c]))
    assert a.time_stats.prefill_finished_time == first_a
    assert c.time_stats.prefill_finished_time == w.first_token_at["c"] >= first_a
    assert stamped == ["a", "b", "c"]


def test_batch_view_carries_each_requests_max_tokens_left_for_triage(env):
    w = draft_worker(env)
    a, b = _req("a"), _req("b")  # max_new_tokens 8
    b.output_ids = [1, 2, 3]
    view = w.batch_view(SimpleNamespace(reqs=[a, b]))
    assert view.max_tokens_left.tolist() == [7, 5]
    b.sampling_params.max_new_tokens = None  # no cap: no horizon, triage stays out
    assert w.batch_view(SimpleNamespace(reqs=[a, b])).max_tokens_left is None


def test_the_next_draft_feeds_the_policy_what_each_request_accepted(env):
    """adaserve-calibrated learns from Policy.observe; inside SGLang the worker reads each
    request's accepted count one iteration on, from how far its output grew."""
    env.setenv("ADASERVE_POLICY", "adaserve-authors:calibrate=on")
    w = draft_worker(env)
    w.req_to_token_pool = SimpleNamespace(size=8)
    a, b, c = _req("a"), _req("b"), _req("c")
    mask = np.zeros((3, N), bool)
    mask[:, :4] = True  # root + 3 verified nodes each
    sel = Selection(mask, np.full(3, 3.4), np.ones(3))  # each predicted 2.4 beyond its root
    w.verified = (("a", "b", "c"), sel, np.array([1, 1, 1]))
    a.output_ids = [1, 2, 3, 4]  # grew by 3: 2 accepted + the bonus
    b.output_ids = [1, 2]  # grew by 1: the bonus alone
    w.observe_accepted(SimpleNamespace(reqs=[a, b]))  # c finished meanwhile: skipped
    rho = w.policy.calibration.ratios(["a", "b", "c"])
    assert rho[0] > rho[2] > rho[1]  # a beat its prediction's share, b got nothing, c unseen
    assert w.verified is None  # read once
    w.batch_view(SimpleNamespace(reqs=[a, b]))
    assert w.policy.calibration.ratio("b") < w.policy.calibration.ratio()
    w.batch_view(SimpleNamespace(reqs=[a]))  # b ended: its state goes
    assert w.policy.calibration.ratio("b") == w.policy.calibration.ratio()
