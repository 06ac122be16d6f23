"""A stand-in for ``sgl_kernel`` where its CUDA build cannot load, loud where it matters.

sglang imports ``sgl_kernel`` at module level all over; on a machine without a GPU the
installed (CUDA) build fails to import and so does SGLang. SGLang's own test stub
(``sglang/test/test_utils.py:maybe_stub_sgl_kernel``) answers every attribute with a
MagicMock: imports succeed and every call silently does nothing, which is how the CPU
runtime's first blockers hid (KV slots never written, bonus tokens never filled).

Here the module answers with ``kernels.OPS`` (torch versions of the CPU ops SGLang calls)
and, for any other name, a ``Missing`` placeholder: importing it is fine (SGLang imports
many CUDA-only names it never calls on a CPU), calling it raises NotImplementedError
naming the op. Nothing fails silently.

Must be installed before anything imports sglang, in every process SGLang spawns:
``boot/sitecustomize.py`` does it at interpreter start when ADASERVE_SGLANG_CPU=1.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import logging
import sys
import types

log = logging.getLogger("adaserve.sglang.cpu")

NAME = "sgl_kernel"


class Missing:
    """An sgl_kernel name with no CPU version: importable, fails loudly when used."""

    def __init__(self, qualname: str) -> None:
        self._qualname = qualname

    def __getattr__(self, name: str) -> Missing:
        if name.startswith("__"):
            raise AttributeError(name)
        return Missing(f"{self._qualname}.{name}")

    def __call__(self, *args, **kwargs):
        raise NotImplementedError(
            f"{self._qualname} was called, but sgl_kernel is stubbed on this CPU "
            f"(adaserve.sglang.cpu) and has no version of it: add one to "
            f"adaserve/sglang/cpu/kernels.py or avoid the code path that needs it")

    def __repr__(self) -> str:
        return f"<missing {self._qualname}>"


class _Loader(importlib.abc.Loader):
    def create_module(self, spec):
        return types.ModuleType(spec.name)

    def exec_module(self, module) -> None:
        from adaserve.sglang.cpu.kernels import OPS

        module.__path__ = []  # a package: `import sgl_kernel.utils` works
        module.__version__ = "0.0.0+adaserve-cpu-stub"
        module.ADASERVE_STUB = True
        if module.__name__ == NAME:
            module.__dict__.update(OPS)
        prefix = module.__name__

        def missing(name: str):
            if name.startswith("__"):
                raise AttributeError(name)
            return Missing(f"{prefix}.{name}")

        module.__getattr__ = missing


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname == NAME or fullname.startswith(NAME + "."):
            return importlib.machinery.ModuleSpec(fullname, _Loader(), is_package=True)
        return None


def real_kernel_loads() -> bool:
    """Does the installed sgl_kernel import here? (Only a CUDA machine's does.)"""
    try:
        import sgl_kernel  # noqa: F401
    except (ImportError, OSError):
        for name in [m for m in sys.modules if m == NAME or m.startswith(NAME + ".")]:
            del sys.modules[name]  # a half-imported package must not shadow the stub
        return False
    return not getattr(sys.modules[NAME], "ADASERVE_STUB", False)


def install() -> bool:
    """Put the stub in front of the import system unless the real sgl_kernel loads.
    Returns whether the stub is in place. Idempotent."""
    if any(isinstance(f, _Finder) for f in sys.meta_path):
        return True
    if real_kernel_loads():
        return False
    sys.meta_path.insert(0, _Finder())
    return True


def installed() -> bool:
    return any(isinstance(f, _Finder) for f in sys.meta_path)
