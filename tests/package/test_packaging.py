"""The distribution installs the user's top-level folders under the ``adaserve`` namespace."""

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_wheel_maps_scheduler_and_loadgen_into_adaserve(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "-w", str(tmp_path), str(ROOT)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    wheel = next(tmp_path.glob("adaserve-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "adaserve/scheduler/selection.py" in names
    assert "adaserve/loadgen/__init__.py" in names
    assert not any(n.startswith(("scheduler/", "loadgen/")) for n in names)
    draft = "adaserve/engine/drafts/smollm2-135m-distilled/"
    assert {draft + f for f in ("model.safetensors", "config.json", "README.md")} <= set(names)
    assert "adaserve/distill/train.py" in names
    # the CPU kernels' source: an installed engine compiles it at first use
    assert {"adaserve/engine/kernels/__init__.py", "adaserve/engine/kernels/skinny.cpp"} <= set(names)
    assert {"adaserve/sim/driver.py", "adaserve/sim/data/hardware/cpu-smollm2-135m.json",
            "adaserve/sim/data/acceptance/synthetic-cpu-pair.json"} <= set(names)

    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--quiet",
                    "--target", str(target), str(wheel)], check=True)
    # -I: isolated, so neither the source tree nor the editable install can answer.
    code = (f"import sys; sys.path.insert(0, {str(target)!r}); "
            "import adaserve.scheduler as s, adaserve.loadgen as l; "
            "print(s.__file__); print(l.__file__)")
    shown = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True,
                           text=True, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert all(line.startswith(str(target)) for line in shown.stdout.split())


def test_console_script_lists_policies():
    exe = Path(sys.executable).with_name("adaserve")
    out = subprocess.run([str(exe), "policies"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    for name in ("adaserve", "global-greedy", "equal-greedy", "specinfer", "turbospec",
                 "incremental", "chain-4", "chain-6", "chain-8"):
        assert name in out.stdout


def test_scheduler_benchmark_runs(tmp_path):
    """Smoke: the benchmark script still runs end to end (its timings are not checked)."""
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.engine.scheduler_overhead", "--repeats", "1",
         "--out", str(tmp_path)], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    table = (tmp_path / "scheduler_overhead.md").read_text()
    assert table.count("\n| ") == 17 + 11  # grid: header + 16 cells; scaling: header + 10
    assert (tmp_path / "scheduler_overhead.png").stat().st_size > 0
