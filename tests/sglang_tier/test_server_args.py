"""``--speculative-algorithm ADASERVE`` resolves through SGLang's own ServerArgs pipeline
(``resolve_once``, as its launcher calls it) to a draft shape the worker can start with,
and arguments SGLang could not run are refused with the flag to change.

A local config-only Llama checkpoint stands in for the models: resolution reads the
architecture from config.json and loads no weights."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from sglang.srt.server_args import ServerArgs
from sglang.srt.speculative import spec_utils

from adaserve.sglang.slo import configured_classes

@pytest.fixture(autouse=True)
def slo_env(monkeypatch):
    # resolution checks the SLO classes (a bad setting stops the launch); the default
    # classes are multiples of the baseline
    monkeypatch.setenv("ADASERVE_BASELINE_MS", "20")
    yield
    configured_classes.cache_clear()


def resolved(model, device: str = "cuda", **kw) -> dict:
    """SGLang's launch-time resolution (ServerArgs.resolve_once) of an ADASERVE launch."""
    args = ServerArgs(model_path=model, device=device, speculative_algorithm="ADASERVE", **kw)
    args.resolve_once()
    return args.resolved_dict()


def test_defaults_give_the_worker_a_tree_shape(model):
    d = resolved(model, speculative_draft_model_path=model)
    assert (d["speculative_num_steps"], d["speculative_eagle_topk"],
            d["speculative_num_draft_tokens"]) == (5, 4, 8)
    assert d["max_running_requests"] == 48 and d["enable_mixed_chunk"] is False
    assert d["speculative_algorithm"] == "ADASERVE"


def test_given_flags_are_kept_and_a_chain_is_made_consistent(model):
    d = resolved(model, speculative_draft_model_path=model, speculative_num_steps=3,
                 speculative_eagle_topk=2, speculative_num_draft_tokens=6,
                 max_running_requests=16)
    assert (d["speculative_num_steps"], d["speculative_eagle_topk"],
            d["speculative_num_draft_tokens"], d["max_running_requests"]) == (3, 2, 6, 16)
    d = resolved(model, speculative_draft_model_path=model, speculative_num_steps=3,
                 speculative_eagle_topk=1, speculative_num_draft_tokens=8)
    assert d["speculative_num_draft_tokens"] == 4  # a chain verifies root + its 3 steps


@pytest.mark.parametrize("kw, match", [
    ({}, "--speculative-draft-model-path"),
    ({"speculative_num_steps": 2, "speculative_eagle_topk": 2,
      "speculative_num_draft_tokens": 9}, "2 to 7"),
    ({"tp_size": 2, "dp_size": 2, "enable_dp_attention": True}, "DP attention"),
    # found on the CPU: SGLang starts with it and its scheduler dies at the first verify
    ({"speculative_num_steps": 3, "speculative_eagle_topk": 2,
      "speculative_num_draft_tokens": 3}, "at least 4 verify positions"),
])
def test_what_sglang_could_not_run_is_refused(model, kw, match):
    if kw:
        kw = {"speculative_draft_model_path": model, **kw}
    with pytest.raises(ValueError, match=match):
        resolved(model, **kw)


def test_sglangs_adaptive_steps_stay_off(model):
    # AdaServe adapts depth and width itself; SGLang turns its own adaptation off for
    # every algorithm but EAGLE/EAGLE3, which the ADASERVE draft relies on
    d = resolved(model, speculative_draft_model_path=model, speculative_adaptive=True)
    assert d["speculative_adaptive"] is False and d["speculative_num_steps"] == 5


def test_the_standalone_draft_takes_no_hidden_states(model, monkeypatch):
    # SGLang decides it by the algorithm's name, STANDALONE only; the hook adds ours
    for algo, want in [("ADASERVE", False), ("STANDALONE", False), ("EAGLE", True)]:
        monkeypatch.setattr(spec_utils, "get_spec", lambda a=algo: SimpleNamespace(
            speculative_algorithm=a, enable_multi_layer_eagle=False))
        assert spec_utils.spec_need_hidden_states() is want, algo


def test_a_misspelt_verify_mode_stops_the_launch(model, monkeypatch):
    monkeypatch.setenv("ADASERVE_VERIFY", "raged")
    with pytest.raises(ValueError, match="ADASERVE_VERIFY='raged'"):
        resolved(model, speculative_draft_model_path=model)


@pytest.mark.parametrize("asked, triton, graphs, want", [
    ("", True, False, "ragged"),  # the default where the target can
    ("ragged", True, False, "ragged"),
    ("alternate", True, False, "alternate"),
    ("uniform", True, False, "uniform"),
    ("", False, False, "uniform"),  # another attention backend: uniform, saying why
    ("", True, True, "uniform"),  # verify CUDA graphs, captured for [bs, N]
])
def test_which_verify_runs(monkeypatch, asked, triton, graphs, want):
    from adaserve.sglang.server_args import verify_mode

    monkeypatch.setenv("ADASERVE_VERIFY", asked)
    mode, why = verify_mode(triton_backend=triton, verify_graphs=graphs)
    assert mode == want and why
    if want == "uniform" and asked != "uniform":
        assert ("triton" in why) != ("CUDA graphs" in why)


@pytest.mark.parametrize("asked", ["ragged", "alternate"])
@pytest.mark.parametrize("triton, graphs, reason", [(False, False, "not triton"),
                                                    (True, True, "CUDA graphs")])
def test_ragged_asked_for_where_it_cannot_run_is_an_error(monkeypatch, triton, graphs, reason,
                                                          asked):
    from adaserve.sglang.server_args import verify_mode

    monkeypatch.setenv("ADASERVE_VERIFY", asked)
    with pytest.raises(ValueError, match=reason):
        verify_mode(triton_backend=triton, verify_graphs=graphs)


@pytest.mark.parametrize("given", [None, 256, -1])
def test_the_default_ttft_reads_the_chunk_sglang_resolved(model, given, monkeypatch):
    """The chunk of the default TTFT's prefill rate is SGLang's resolved one: its raw
    ServerArgs field stays None unless given (reading it gave no default on a real
    server), and -1 (chunked prefill off) gives no prefill rate."""
    from adaserve.sglang.slo import chunk_of, configured_prefill, prefill_rate

    kw = {} if given is None else {"chunked_prefill_size": given}
    args = ServerArgs(model_path=model, device="cuda", speculative_algorithm="ADASERVE",
                      speculative_draft_model_path=model, **kw)
    args.resolve_once()
    want = args.resolved_dict()["chunked_prefill_size"]
    assert chunk_of(args) == want
    assert (given is None and want > 0) or want == given
    monkeypatch.setenv("ADASERVE_PREFILL_CHUNK_MS", "100")
    configured_prefill.cache_clear()
    rate = prefill_rate(chunk_of(args))
    assert (rate is None) == (want == -1)
    configured_prefill.cache_clear()
