"""`adaserve sglang check` against the installed sglang: fits, and a wrong version or a
vanished hook target is a clear error (exit 2)."""

import subprocess
import sys

from adaserve.sglang import check


def test_installed_sglang_fits():
    r = subprocess.run([sys.executable, "-m", "adaserve.cli", "sglang", "check"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ok   sglang version: 0.5.23" in r.stdout
    assert "BAD" not in r.stdout
    assert sum(line.startswith("ok ") for line in r.stdout.splitlines()) == 2 + len(check.TARGETS)


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
