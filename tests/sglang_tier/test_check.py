"""`adaserve sglang check` against the installed sglang: fits, and a wrong version, a
vanished hook target, an algorithm method AdaServeSpec lacks or a CPU-runtime target
SGLang no longer has is a clear error (exit 2)."""

import subprocess
import sys

from adaserve.sglang import check
from adaserve.sglang.cpu.hooks import replacements
from adaserve.sglang.cpu.kernels import OPS


def test_installed_sglang_fits():
    r = subprocess.run([sys.executable, "-m", "adaserve.cli", "sglang", "check"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ok   sglang version: 0.5.23" in r.stdout
    assert "BAD" not in r.stdout
    assert "ok   algorithm interface: " in r.stdout
    for op in OPS:
        assert f"ok   CPU op {op}: imported from sgl_kernel by sglang/" in r.stdout
    rows = 2 + len(check.TARGETS) + 1 + len(replacements()) + len(OPS)
    assert sum(line.startswith("ok ") for line in r.stdout.splitlines()) == rows


def test_version_mismatch_is_an_error(monkeypatch, capsys):
    monkeypatch.setattr(check, "version", lambda name: "0.5.22")
    assert check.main(None) == 2
    out = capsys.readouterr().out
    assert "BAD  sglang version: 0.5.22 (the plugin targets 0.5.23)" in out


def test_missing_hook_target_is_an_error(monkeypatch, capsys):
    monkeypatch.setitem(check.TARGETS, "organize seam",
                        "sglang.srt.speculative.eagle_utils.no_such_function")
    assert check.main(None) == 2
    assert "BAD  organize seam: sglang.srt.speculative.eagle_utils.no_such_function" in \
        capsys.readouterr().out


def test_an_algorithm_method_adaserve_lacks_is_named(monkeypatch, capsys):
    # what SGLang 0.5.23's scheduler called and CustomSpecAlgo lacked: AttributeError at
    # start-up before AdaServeSpec had them
    from adaserve.sglang.spec import AdaServeSpec

    monkeypatch.delattr(AdaServeSpec, "need_topk")
    monkeypatch.delattr(AdaServeSpec, "create_future_map")
    assert check.main(None) == 2
    bad = [line for line in capsys.readouterr().out.splitlines() if line.startswith("BAD")]
    assert bad == ["BAD  algorithm interface: AdaServeSpec (adaserve/sglang/spec.py) lacks "
                   "SpeculativeAlgorithm.create_future_map, need_topk"]


def test_a_vanished_cpu_replacement_target_is_an_error(monkeypatch):
    from sglang.kernels.ops.attention import decode_attention

    monkeypatch.delattr(decode_attention, "decode_attention_fwd")
    rows = {what: (ok, detail) for what, ok, detail in check.check()}
    ok, detail = rows["CPU hook decode_attention_fwd"]
    assert not ok
    assert detail.startswith("sglang.kernels.ops.attention.decode_attention."
                             "decode_attention_fwd: AttributeError")
    assert rows["CPU hook extend_attention_fwd"][0]


def test_an_op_no_sglang_module_imports_is_an_error(monkeypatch):
    # a renamed op in a new SGLang: the stub would serve a name nobody imports
    monkeypatch.setitem(OPS, "fill_bonus_tokens_v2_cpu", OPS["fill_bonus_tokens_cpu"])
    rows = {what: (ok, detail) for what, ok, detail in check.cpu_runtime()}
    ok, detail = rows["CPU op fill_bonus_tokens_v2_cpu"]
    assert not ok and "no sglang module imports it" in detail
    assert rows["CPU op fill_bonus_tokens_cpu"] == (
        True, "imported from sgl_kernel by sglang/kernels/ops/speculative/eagle.py")


def test_sgl_kernel_imports_reads_every_import_form(tmp_path):
    pkg = tmp_path / "sglang"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "a.py").write_text("if _is_cpu:\n    from sgl_kernel import x_cpu, y_cpu  # noqa\n")
    (pkg / "sub" / "b.py").write_text(
        "from sgl_kernel import (\n    x_cpu as sgl_x,  # the CPU build\n    z_cpu,\n)\n"
        "import sgl_kernel\nfrom sgl_kernel.utils import not_this\n"
        "# from sgl_kernel import commented_out\n")
    assert check.sgl_kernel_imports(pkg) == {
        "x_cpu": ["sglang/a.py", "sglang/sub/b.py"], "y_cpu": ["sglang/a.py"],
        "z_cpu": ["sglang/sub/b.py"]}
