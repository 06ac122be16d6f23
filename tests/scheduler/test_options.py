"""One AdaServe: its options, the presets, and the specs that name them (scheduler/options.py)."""

from __future__ import annotations

import pytest

from adaserve.engine.systems import resolve_system
from adaserve.scheduler import (PRESETS, AdaServeOptions, SchedulerConfig, make_policy,
                                policy_options)
from adaserve.scheduler.policies import AdaServePolicy, IncrementalPolicy
from adaserve.sim.setups import Deployment


def test_presets_are_the_best_configuration_and_the_authors_scheduler():
    assert PRESETS["adaserve"] == AdaServeOptions(pace=0.7, triage=True, depth="measured",
                                                  floor=True, admit="deadline",
                                                  budget="goodput", prefill="yield",
                                                  refuse_tpot="latest")
    assert PRESETS["adaserve-authors"] == AdaServeOptions()  # every option off
    assert make_policy("adaserve", SchedulerConfig(budget=8)).options == PRESETS["adaserve"]


def test_a_spec_changes_only_the_options_it_names():
    cls, opts = policy_options("adaserve:pace=off,depth=eq8")
    assert cls is AdaServePolicy
    assert opts == AdaServeOptions(pace=None, triage=True, depth="eq8", floor=True,
                                   admit="deadline", budget="goodput", prefill="yield",
                                   refuse_tpot="latest")
    # the TPOT door's spellings: on/off from the days it had one form, the pace
    assert policy_options("adaserve:refuse_tpot=on")[1].refuse_tpot == "pace"
    assert policy_options("adaserve:refuse_tpot=off")[1].refuse_tpot == "off"
    with pytest.raises(ValueError, match="refuse_tpot must be one of off, pace, missed"):
        policy_options("adaserve:refuse_tpot=sometimes")
    assert policy_options("adaserve-authors: pace = 0.8 , triage=ON")[1] == AdaServeOptions(
        pace=0.8, triage=True)
    assert policy_options("incremental") == (IncrementalPolicy, None)


@pytest.mark.parametrize("spec", ["adaserve", "adaserve:pace=off", "adaserve-authors:pace=0.5",
                                  "adaserve:admit=deadline,refuse=on", "adaserve:lost=roots"])
def test_text_round_trips(spec):
    name = spec.partition(":")[0]
    opts = policy_options(spec)[1]
    assert policy_options(f"{name}:{opts.text()}")[1] == opts


@pytest.mark.parametrize("spec, words", [
    ("adaserve:pace=1.5", "pace"), ("adaserve:pace=fast", "pace"), ("adaserve:pace", "key=value"),
    ("adaserve:depth=deep", "depth"), ("adaserve:triage=maybe", "on or off"),
    ("adaserve:refuse=503", "on or off"), ("adaserve:lost=drop", "lost must be one of serve, roots"),
    ("adaserve:speed=2", "unknown option 'speed'"), ("incremental:pace=0.7", "takes no options"),
    ("adaserve-paced", "unknown policy"),
])
def test_bad_specs_say_what_is_wrong(spec, words):
    with pytest.raises(ValueError, match=words):
        policy_options(spec)


def test_only_what_an_option_turns_on_is_built():
    ours = make_policy("adaserve", SchedulerConfig(budget=8))
    authors = make_policy("adaserve-authors", SchedulerConfig(budget=8))
    assert ours.depth is not None and ours.calibration is None
    assert authors.depth is None and authors.calibration is None
    assert make_policy("adaserve-authors:calibrate=on", SchedulerConfig(budget=8)).calibration
    # refusing is the option's alone: no preset and no baseline refuses
    assert make_policy("adaserve:refuse=on", SchedulerConfig(budget=8)).refuses
    assert not ours.refuses and not authors.refuses
    assert not make_policy("incremental", SchedulerConfig(budget=8)).refuses
    # the TPOT door: the preset keeps its latest form, the authors' scheduler and the
    # baselines none
    assert ours.tpot_door == "latest" and authors.tpot_door == "off"
    assert make_policy("incremental", SchedulerConfig(budget=8)).tpot_door == "off"


def test_a_spec_is_a_system_and_runs_with_its_presets_settings():
    system = resolve_system("adaserve:triage=off")
    assert (system.policy, system.prefill_mode) == ("adaserve:triage=off", "chunked")
    with pytest.raises(ValueError, match="unknown option"):
        resolve_system("adaserve:bogus=1")
    deploy = Deployment.load("paper-llama3.1-70b")
    # ours plans with the profiled draft cost; the authors' scheduler with their constant
    assert deploy.setup("adaserve:pace=off").planning_draft_ms is None
    assert deploy.setup("adaserve-authors").planning_draft_ms == 70.0


def test_a_list_of_specs_keeps_each_specs_options_together():
    from adaserve.scheduler import split_specs

    assert split_specs("turbospec, adaserve:pace=off,calibrate=on,incremental") == [
        "turbospec", "adaserve:pace=off,calibrate=on", "incremental"]
    assert split_specs("adaserve:refuse=on,adaserve-authors:triage=on,admit=deadline") == [
        "adaserve:refuse=on", "adaserve-authors:triage=on,admit=deadline"]
    assert split_specs("adaserve,,sarathi,") == ["adaserve", "sarathi"]
    # each spec still resolves: the options reach the policy
    _, opts = policy_options(split_specs("x,adaserve:pace=off,calibrate=on")[1])
    assert opts.pace is None and opts.calibrate
    with pytest.raises(ValueError, match="no policy before it"):
        split_specs("turbospec,pace=off")
    with pytest.raises(ValueError, match="no policy before it"):
        split_specs("pace=off")
