"""The engine's compiled CPU kernels: built once per machine from skinny.cpp (the few-row
matmuls and small ops; on AVX-512 CPUs the tiles of skinny_avx512.cpp), attention.cpp
(decode/verify attention over the KV cache; its verify shapes on AVX-512 in
attention_avx512.cpp, where the CPU has it) and probe.cpp (the machine's FMA peaks, which
benchmarks set kernels against, and whether it runs AVX-512), cached beside the model
cache, loaded as torch ops (torch.ops.adaserve.*).

`load()` never raises: where the kernels cannot be had (no AVX2, no C++ compiler, a failed
build, ADASERVE_FAST_KERNELS=0) it says why once and the engine keeps its eager matmuls.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import torch

from adaserve.engine.weights import cache_root

log = logging.getLogger("adaserve.engine")

SOURCES = tuple(Path(__file__).with_name(f) for f in
                ("skinny.cpp", "skinny_avx512.cpp", "attention.cpp", "attention_avx512.cpp",
                 "probe.cpp"))
# part of the cache key, not compiled on their own
HEADERS = tuple(Path(__file__).with_name(f) for f in ("attention.h", "wide.h"))
SWITCH_ENV = "ADASERVE_FAST_KERNELS"  # "0": eager matmuls only, for debugging
CXX_ENV = "CXX"  # the compiler, g++ by default
# AVX2 + FMA only (the dev machines' ISA): an AVX-512 machine runs them too.
FLAGS = ("-O3", "-mavx2", "-mfma", "-fopenmp", "-fPIC", "-shared", "-std=c++20")


@dataclass(frozen=True, slots=True)
class KernelStatus:
    """What `load()` found: whether torch.ops.adaserve.skinny_linear can be called."""

    available: bool
    reason: str  # why not, or where the library came from
    path: Path | None = None
    build_s: float | None = None  # seconds spent compiling in this process; None: cached


def switched_on() -> bool:
    return os.environ.get(SWITCH_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def _cxx() -> str | None:
    return shutil.which(os.environ.get(CXX_ENV) or "g++")


def _supported() -> str | None:
    """Why this machine cannot run the kernels, or None."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return f"the kernels are x86-64 AVX2 code; this machine is {platform.machine()}"
    cap = torch.backends.cpu.get_cpu_capability()
    if cap not in ("AVX2", "AVX512"):
        return f"the CPU lacks AVX2/FMA (torch reports {cap})"
    if _cxx() is None:
        return f"no C++ compiler ({os.environ.get(CXX_ENV) or 'g++'} not on PATH)"
    return None


def _command(out: Path | str) -> list[str]:
    torch_dir = Path(torch.__file__).parent
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    return [_cxx(), *FLAGS, f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
            f"-I{torch_dir / 'include'}", f"-I{torch_dir / 'include/torch/csrc/api/include'}",
            *map(str, SOURCES), "-o", str(out), f"-L{torch_dir / 'lib'}", "-lc10", "-ltorch_cpu",
            "-lmvec",  # glibc's vector math: expf 8 lanes at a time (the SiLU gating)
            # libgomp by soname: the one torch has loaded, so one OpenMP pool serves both
            f"-Wl,-rpath,{torch_dir / 'lib'}"]


def library_path() -> Path:
    """The cached library for this source and build command (torch's paths and ABI, the
    compiler, every flag and library)."""
    key = hashlib.sha256()
    for source in SOURCES + HEADERS:
        key.update(source.read_bytes())
    key.update(f"{torch.__version__} {' '.join(_command('OUT'))}".encode())
    return cache_root() / "kernels" / f"skinny-{key.hexdigest()[:16]}.so"


def build(path: Path) -> float:
    """Compiles the library into ``path`` (atomically); returns the seconds it took."""
    path.parent.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=path.parent)
    os.close(fd)
    try:
        run = subprocess.run(_command(Path(tmp)), capture_output=True, text=True)
        if run.returncode != 0:
            tail = "\n".join(run.stderr.strip().splitlines()[-12:])
            raise RuntimeError(f"compiling {' '.join(s.name for s in SOURCES)} failed:\n{tail}")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return time.perf_counter() - t


@cache
def load() -> KernelStatus:
    """Builds the kernels if this machine has none cached, and loads them. Once a process."""
    if not switched_on():
        return KernelStatus(False, f"{SWITCH_ENV}=0: eager matmuls")
    why = _supported()
    if why is not None:
        return _unavailable(why)
    path = library_path()
    spent = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # one build per machine even when several processes start together
        with open(path.parent / ".build.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not path.is_file():
                log.info("building the engine's CPU kernels (once per machine, ~10-45 s) into %s",
                         path)
                spent = build(path)
                log.info("CPU kernels built in %.1f s", spent)
        torch.ops.load_library(str(path))
    except (OSError, RuntimeError) as e:
        return _unavailable(str(e))
    return KernelStatus(True, f"loaded {path}", path, spent)


def _unavailable(why: str) -> KernelStatus:
    log.warning("fast CPU kernels unavailable, the engine uses eager matmuls: %s", why)
    return KernelStatus(False, why)
