"""Start-up hook of every Python process the SGLang CPU runtime runs.

``adaserve sglang serve-cpu`` puts this directory first on PYTHONPATH and sets
ADASERVE_SGLANG_CPU=1; SGLang spawns its scheduler and detokenizer as fresh interpreters,
which inherit both and run this before SGLang's first import, so each of them gets the
sgl_kernel stand-in (adaserve/sglang/cpu/stub.py) in time. Any other interpreter that
happens to inherit the PYTHONPATH without the flag is left alone.

Being first on the path, this file shadows any other ``sitecustomize`` the environment
had (a virtualenv's, a site's, a development checkout's import mapping): that one runs
first, as it would have without us.
"""

import os
import sys


def _run_the_shadowed_one() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        path = os.path.join(entry or ".", "sitecustomize.py")
        if os.path.abspath(entry or ".") != here and os.path.isfile(path):
            with open(path) as f:
                code = compile(f.read(), path, "exec")
            exec(code, {"__name__": "sitecustomize", "__file__": path})
            return


_run_the_shadowed_one()

if os.environ.get("ADASERVE_SGLANG_CPU") == "1":
    from adaserve.sglang.cpu.stub import install

    install()
