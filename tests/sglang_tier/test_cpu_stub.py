"""The sgl_kernel stand-in (adaserve.sglang.cpu.stub) fails loudly. SGLang's own stub
(test_utils.maybe_stub_sgl_kernel) answers every name with a MagicMock, so a CPU op nobody
wrote silently does nothing; ours serves the torch ops by name and lets any other name be
imported but not called. Every check runs in a fresh interpreter: another test in this
process may have imported sgl_kernel, or put SGLang's stub in front of the import system."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from adaserve.sglang.cpu.kernels import OPS

BOOT = Path(__file__).resolve().parents[2] / "adaserve/sglang/cpu/boot"

PROBE = """
import json, sys
from adaserve.sglang.cpu import stub
from adaserve.sglang.cpu.kernels import OPS

def call(f):
    try:
        f(1, out=None)
    except NotImplementedError as e:
        return str(e)
    return "returned"

seen = {"real_kernel_loads": stub.real_kernel_loads(),
        "left_in_sys_modules": sorted(m for m in sys.modules if m.split(".")[0] == "sgl_kernel"),
        "install": [stub.install(), stub.install()]}
seen["finders"] = sum(isinstance(f, stub._Finder) for f in sys.meta_path)
import sgl_kernel
import sgl_kernel as again
from sgl_kernel import fused_add_rmsnorm
from sgl_kernel.utils import get_cuda_stream
import sgl_kernel.flash_attn
seen["stub"] = getattr(sgl_kernel, "ADASERVE_STUB", False)
seen["same_module"] = again is sgl_kernel
seen["ops"] = sorted(name for name, fn in OPS.items() if getattr(sgl_kernel, name) is fn)
seen["dunder"] = hasattr(sgl_kernel, "__wrapped__")
seen["missing"] = {
    "sgl_kernel.fused_add_rmsnorm": call(fused_add_rmsnorm),
    "sgl_kernel.utils.get_cuda_stream": call(get_cuda_stream),
    "sgl_kernel.flash_attn.flash_attn_varlen_func":
        call(sgl_kernel.flash_attn.flash_attn_varlen_func),
    "sgl_kernel.elementwise.silu_and_mul": call(sgl_kernel.elementwise.silu_and_mul),
}
print(json.dumps(seen))
"""


def python(code: str, cpu_flag: bool | None = None) -> subprocess.CompletedProcess:
    """`code` in a fresh interpreter; with cpu_flag set, started as the CPU runtime starts
    SGLang's processes (adaserve/sglang/cpu/launch.py): boot/ first on PYTHONPATH, and
    ADASERVE_SGLANG_CPU=1 if the flag is True."""
    env = {k: v for k, v in os.environ.items() if k != "ADASERVE_SGLANG_CPU"}
    if cpu_flag is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(BOOT), *filter(None, [env.get("PYTHONPATH")])])
    if cpu_flag:
        env["ADASERVE_SGLANG_CPU"] = "1"
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=300)


@pytest.fixture(scope="module")
def seen() -> dict:
    out = python(PROBE)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_real_kernel_does_not_load_here_and_leaves_nothing_behind(seen):
    assert seen["real_kernel_loads"] is False
    assert seen["left_in_sys_modules"] == []  # a half-imported package would shadow the stub


def test_install_is_idempotent(seen):
    assert seen["install"] == [True, True]
    assert seen["finders"] == 1
    assert seen["stub"] is True and seen["same_module"] is True


def test_sgl_kernel_serves_the_torch_ops_by_name(seen):
    assert seen["ops"] == sorted(OPS)


def test_any_other_name_imports_but_raises_naming_itself_when_called(seen):
    for name, message in seen["missing"].items():
        assert message != "returned", f"{name} did nothing, as SGLang's MagicMock stub does"
        assert message.startswith(f"{name} was called"), message
        assert "adaserve/sglang/cpu/kernels.py" in message
    assert seen["dunder"] is False  # hasattr probes (inspect, torch) see a plain module


def test_boot_installs_the_stub_under_the_flag_only():
    code = "import sgl_kernel, sys; print(getattr(sgl_kernel, 'ADASERVE_STUB', False))"
    on = python(code, cpu_flag=True)
    assert on.returncode == 0, on.stderr[-3000:]
    assert on.stdout.strip() == "True"
    off = python(code, cpu_flag=False)  # the real package: no GPU, so it fails to import
    assert off.returncode != 0 or off.stdout.strip() == "False", off.stdout
