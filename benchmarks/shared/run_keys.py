"""What a kept simulated run is keyed on: the source it runs, docstrings stripped.

A run is the engine's loop (adaserve/engine, adaserve/sim), the scheduler library, one
policy and, in a fleet, one router. Its key holds a hash of the loop and the library
without the modules of variants (the policies: scheduler/adaserve_policy.py,
scheduler/baselines.py and their registry scheduler/policies.py; the routers:
adaserve/sim/routers.py), and a hash of the run's own policy (its classes in the module
that defines them, and that module's and the registry's functions; the base classes in
scheduler/policy_base.py are the library's) and router. So a new policy or router beside the others, a docstring, a
comment or a reflowed line keep every kept run; a change to what a run executes makes it
stale, and the pages refuse stale runs.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import inspect
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# the loop and the library every run executes; the metric code is here too, since a kept
# run holds what it measured
LOOP = ("scheduler/*.py", "adaserve/engine/*.py", "adaserve/sim/*.py", "loadgen/records.py")
# modules of variants: a run executes one entry of each, hashed on its own
VARIANTS = {"policies.py": "scheduler/policies.py",
            "adaserve_policy.py": "scheduler/adaserve_policy.py",
            "baselines.py": "scheduler/baselines.py", "routers.py": "adaserve/sim/routers.py",
            "options.py": "scheduler/options.py"}


@functools.lru_cache(maxsize=1)
def code_sha() -> str:
    """One hash over the loop and the library, less the registries of variants."""
    h = hashlib.sha256()
    for pattern in LOOP:
        for p in sorted(ROOT.glob(pattern)):
            if str(p.relative_to(ROOT)) in VARIANTS.values():
                continue
            h.update(p.name.encode())
            h.update(runnable(p.read_text()))
    return h.hexdigest()


@functools.lru_cache(maxsize=None)
def policy_sha(policy: str) -> str:
    """A hash of what running ``policy`` (a policy spec or one of the paper's systems)
    executes of the policy modules: its classes in the module that defines them
    (adaserve_policy.py or baselines.py) with that module's functions, and the registry's
    functions (policies.py); for an AdaServe spec, also scheduler/options.py and the
    options."""
    from adaserve.engine.systems import resolve_system
    from adaserve.scheduler import policy_options

    cls, options = policy_options(resolve_system(policy).policy)
    h = hashlib.sha256(_variant_sha(VARIANTS[cls.__module__.rsplit(".", 1)[-1] + ".py"],
                                    cls).encode())
    h.update(slice_sha((ROOT / VARIANTS["policies.py"]).read_text(), set()).encode())
    sha = h.hexdigest()
    if options is None:
        return sha
    # an AdaServe spec runs the options module and the options it resolves to: a preset
    # that changes what it turns on makes its runs stale, the others' stay
    h = hashlib.sha256(sha.encode())
    h.update(slice_sha((ROOT / VARIANTS["options.py"]).read_text(), set()).encode())
    h.update(options.text().encode())
    return h.hexdigest()


@functools.lru_cache(maxsize=None)
def router_sha(spec: str) -> str:
    """The same for a router spec (``class-affinity:32``) of adaserve/sim/routers.py."""
    from adaserve.sim.routers import make_router

    cls = type(make_router(spec, 2))
    sha = _variant_sha(VARIANTS["routers.py"], cls)
    if not getattr(cls, "reads_reports", False):
        return sha
    # the shared picker (issue 39) runs adaserve/picker/ too, which no other router does
    h = hashlib.sha256(sha.encode())
    for p in sorted((ROOT / "adaserve" / "picker").glob("*.py")):
        h.update(runnable(p.read_text()))
    return h.hexdigest()


def _variant_sha(rel: str, cls: type) -> str:
    return slice_sha((ROOT / rel).read_text(), {c.__name__ for c in inspect.getmro(cls)})


def slice_sha(source: str, classes: set[str]) -> str:
    """A hash of a module as one of its variants runs it: the module's functions and
    constants and the named ``classes``, without the other classes or the registries."""
    tree = ast.parse(source)
    tree.body = [n for n in tree.body
                 if not (isinstance(n, ast.ClassDef) and n.name not in classes)
                 and not _registry(n)]
    return hashlib.sha256(runnable(tree)).hexdigest()


def _registry(node: ast.stmt) -> bool:
    """A module-level dict or tuple that names classes (POLICIES, ROUTERS, STATIC_CHAINS):
    it grows with every variant and changes what none of them runs."""
    value = getattr(node, "value", None)
    return (isinstance(node, (ast.Assign, ast.AnnAssign))
            and isinstance(value, (ast.Dict, ast.DictComp, ast.Tuple)))


def runnable(source: str | ast.Module) -> bytes:
    """A module's syntax tree without its docstrings, dumped: comments, docstrings and
    layout drop out, every statement and name stays."""
    tree = ast.parse(source) if isinstance(source, str) else source
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                    and isinstance(body[0].value.value, str)):
                node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree).encode()
