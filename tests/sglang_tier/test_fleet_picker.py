"""The SLO-aware picker in a real fleet (issue 39): `adaserve sglang fleet-cpu --policy
picker` with two ADASERVE `serve-cpu` replicas, sglang-router started with the policy
that reads `X-SMG-Target-Worker` (adaserve/sglang/target_router.py) and the front naming
each request's replica from the replicas' `GET /adaserve/load`:

- a fresh replica's report holds nothing (the fleet's own health checks are not clients);
- four urgent requests at once through the front: every one is served, the router
  counts them as named targets it found (no misses, no random fallback), and they are
  spread over both replicas (each one sent counts in the next one's view);
- afterwards each replica's report has its finished urgent requests in `recent`;
- the front's fleet view (/fleet) in a real headless Chromium at 1280 x 1000, after two
  relaxed requests more: per class, the fleet's finished requests are the replicas'
  added up and each replica's match its own report, with TPOT, TTFT and end-to-end
  attainment shown for each. The screenshot goes to the test's temporary directory; with
  ADASERVE_KEEP_SCREENSHOT=1 it replaces results/fleet.png, the one docs/fleet.md shows.

Lean, as test_fleet_cpu.py: 8 new tokens, six requests."""

from __future__ import annotations

import os
import re
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from headless import chromium, headless

from adaserve.sglang.cpu.fleet import FleetProcess
from adaserve.sglang.cpu.process import free_port

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
REPLICA_ARGS = ["--max-running-requests", "8", "--max-total-tokens", "4096",
                "--steps", "3", "--topk", "2", "--draft-tokens", "4", "--budget", "6",
                "--slo-classes", "urgent=60,relaxed=100000,best-effort",
                "--default-class", "relaxed", "--baseline-ms", "80"]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("fleet_picker")
    # no ADASERVE_* setting leaks in but the cache and a development checkout's mapping
    env = {k: v for k, v in os.environ.items() if not k.startswith("ADASERVE_")
           or k in ("ADASERVE_CACHE_DIR", "ADASERVE_WT")}
    f = FleetProcess(["--replicas", "2", "--policy", "picker", "--port", str(free_port()),
                      "--replica-port", "0", "--router-metrics-port", "0",
                      "--log-dir", str(logdir), "--", *REPLICA_ARGS],
                     logdir / "fleet.out", env=env, cwd=ROOT)
    yield f
    f.stop()


def _load(fleet, k: int) -> dict:
    r = httpx.get(fleet.replicas[k]["url"] + "/adaserve/load", timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def _branches(fleet) -> dict[str, float]:
    ready = next(ln for ln in fleet.lines() if ln["fleet"] == "ready")
    text = httpx.get(ready["router_metrics"], timeout=30).text
    out = {}
    for ln in text.splitlines():
        if ln.startswith("smg_consistent_hashing_policy_branch_total{"):
            branch = ln.split('branch="', 1)[1].split('"', 1)[0]
            out[branch] = float(ln.rsplit(" ", 1)[1])
    return out


def test_the_front_names_each_requests_replica(fleet):
    assert [_load(fleet, k) for k in range(2)] == [{"in_flight": [], "recent": [],
                                                    "totals": []}] * 2

    def one(i: int) -> httpx.Response:
        return httpx.post(fleet.url + "/generate", headers={"X-SLO-Class": "urgent"},
                          timeout=600, json={"text": f"Count to {i}:", "sampling_params": {
                              "temperature": 0, "max_new_tokens": 8, "ignore_eos": True}})

    with ThreadPoolExecutor(4) as pool:
        replies = list(pool.map(one, range(4)))
    assert [r.status_code for r in replies] == [200] * 4, [r.text for r in replies]
    assert all(r.json()["meta_info"]["slo_class"] == "urgent" for r in replies)
    branches = _branches(fleet)
    assert branches.get("target_worker_hit") == 4, branches
    assert not branches.get("target_worker_miss") and not branches.get("random_fallback")
    served = [sum(r["finished"] for r in _load(fleet, k)["recent"]
                  if r["slo_class"] == "urgent") for k in range(2)]
    assert sum(served) == 4 and min(served) >= 1, served
    assert all(_load(fleet, k)["in_flight"] == [] for k in range(2))


def test_the_fleet_view_in_chromium(fleet, tmp_path):
    binary = chromium()
    for i in range(2):  # a second class, beside the urgent ones above
        # a TTFT SLO of their own: a TTFT reading whatever default the replicas reason
        r = httpx.post(fleet.url + "/generate", headers={"X-SLO-Class": "relaxed",
                                                         "X-SLO-TTFT-MS": "600000"},
                       timeout=600, json={"text": f"Name a colour {i}:", "sampling_params": {
                           "temperature": 0, "max_new_tokens": 8, "ignore_eos": True}})
        assert r.status_code == 200, r.text
    totals = [{t["slo_class"]: t for t in _load(fleet, k)["totals"]} for k in range(2)]
    dom = headless(binary, "--dump-dom", fleet.url + "/fleet")
    assert dom.returncode == 0, dom.stderr[-2000:]
    html = dom.stdout
    assert "2 replicas, 2 answering" in html and "the SLO-aware picker" in html

    def row(where: str, cls: str) -> str:
        m = re.search(rf'<tr data-where="{where}" data-class="{cls}">(.*?)</tr>', html, re.S)
        assert m, f"no {where} row for {cls}"
        return m.group(1)

    for cls, sent in (("urgent", 4), ("relaxed", 2)):
        mine = [t.get(cls, {}).get("finished", 0) for t in totals]
        assert sum(mine) == sent, (cls, totals)
        fleet_row = row("fleet", cls)
        assert re.search(rf'class="finished">{sent}<', fleet_row), fleet_row
        for k in range(2):
            assert re.search(rf'class="finished">{mine[k]}<', row(f"replica{k}", cls))
        # each reading: the replicas' kept objectives over those that had it, added up
        for kind, met in (("tpot", "tpot_met"), ("ttft", "ttft_met"), ("e2e", "met")):
            of = "met_of" if kind == "e2e" else f"{kind}_of"
            n = sum(t.get(cls, {}).get(of, 0) for t in totals)
            cell = re.search(rf'class="att {kind}" data-value="([\d.]*)"', fleet_row)
            assert cell, (kind, fleet_row)
            if n == 0:  # no request of the class had the objective: shown as none
                assert cell.group(1) == "" and kind == "ttft" and cls == "urgent"
            else:
                want = sum(t.get(cls, {}).get(met, 0) for t in totals) / n
                assert abs(float(cell.group(1)) - want) < 1e-9, (kind, fleet_row)
    # the whole view inside a 1280 x 1000 window, no table wider than its box (two replica
    # tables side by side once overlapped, each clipped under the other)
    fit = {k: int(re.search(rf'<body[^>]*data-{k}="(\d+)"', html).group(1))
           for k in ("bottom", "right", "clipped")}
    assert fit["bottom"] <= 1000 and fit["right"] <= 1280 and fit["clipped"] == 0, fit
    shot = tmp_path / "fleet.png"
    png = headless(binary, f"--screenshot={shot}", fleet.url + "/fleet")
    assert png.returncode == 0 and shot.stat().st_size > 10_000, png.stderr[-2000:]
    if os.environ.get("ADASERVE_KEEP_SCREENSHOT") == "1":
        shutil.copyfile(shot, ROOT / "results" / "fleet.png")
