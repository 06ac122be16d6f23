"""Start-up hook of every Python process the SGLang CPU runtime runs.

``adaserve sglang serve-cpu`` puts this directory first on PYTHONPATH and sets
ADASERVE_SGLANG_CPU=1; SGLang spawns its scheduler and detokenizer as fresh interpreters,
which inherit both and run this before SGLang's first import, so each of them gets the
sgl_kernel stand-in (adaserve/sglang/cpu/stub.py) in time. Any other interpreter that
happens to inherit the PYTHONPATH without the flag is left alone.
"""

import os

if os.environ.get("ADASERVE_SGLANG_CPU") == "1":
    from adaserve.sglang.cpu.stub import install

    install()
