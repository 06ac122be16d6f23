"""ADASERVE registers through SGLang's own plugin loader and registry."""

from importlib.metadata import entry_points

import pytest
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
from sglang.srt.speculative.standalone_worker_v2 import StandaloneWorkerV2

from adaserve.sglang import plugin


def test_entry_point_is_declared():
    eps = {ep.name: ep.value for ep in entry_points(group="sglang.srt.plugins")}
    assert eps.get("adaserve") == "adaserve.sglang.plugin:register"


def test_sglang_loader_registers_adaserve():
    from sglang.srt.plugins import load_plugins

    load_plugins()  # SGLang's own discovery: entry points, then the hooks
    spec = SpeculativeAlgorithm.from_string("adaserve")
    assert spec.name == "ADASERVE"
    assert spec.is_speculative() and spec.is_standalone() and not spec.is_eagle()
    worker = spec.factory(None)
    assert issubclass(worker, StandaloneWorkerV2) and worker.__name__ == "AdaServeWorker"


def test_organize_hook_is_applied_where_the_worker_calls_it():
    from sglang.srt.plugins import load_plugins
    from sglang.srt.speculative import eagle_utils, eagle_worker_v2

    load_plugins()
    for module in (eagle_utils, eagle_worker_v2):
        fn = module.organize_draft_results
        assert fn.__name__ == "organize_draft_results"  # functools.wraps keeps the name
        assert getattr(fn, "__wrapped__", None) is not None, module.__name__


def test_register_is_idempotent():
    plugin.register()
    plugin.register()
    assert SpeculativeAlgorithm.from_string("ADASERVE").name == "ADASERVE"


def test_builtin_names_stay_builtin():
    assert SpeculativeAlgorithm.from_string("STANDALONE") is SpeculativeAlgorithm.STANDALONE
    with pytest.raises(ValueError):
        SpeculativeAlgorithm.register("STANDALONE")


def test_the_shared_names_import_no_hook():
    """slo.py (read by the HTTP hooks and the worker) took ALGORITHM from plugin.py, which
    imports every hook and SGLang's workers: an import circle. The names live in names.py;
    importing slo, check or names loads neither plugin nor sglang."""
    import subprocess
    import sys

    code = ("import sys, adaserve.sglang.slo, adaserve.sglang.check, adaserve.sglang.names; "
            "adaserve.sglang.slo.adaserve_selected(None); "
            "print(sorted(m for m in sys.modules if m == 'adaserve.sglang.plugin' "
            "or m.split('.')[0] == 'sglang'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout
