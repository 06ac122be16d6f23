"""The CPU runtime's changes to SGLang, as REPLACE hooks (no edit to SGLang's files).

Registered by the plugin (``adaserve.sglang.plugin.register``) when ADASERVE_SGLANG_CPU=1,
in every SGLang process; SGLang's ``load_plugins`` applies them and rebinds every module's
``from ... import`` of a replaced name:

- the triton attention backend's kernels -> torch (``attention.REPLACEMENTS``): SGLang's
  speculative decoding refuses torch_native attention, and its Triton kernels run on a
  CPU only through Triton's interpreter, at minutes per request;
- ``eagle_utils.default_tree_mask_mode`` -> FULL_MASK: on a CPU SGLang picks the AMX
  backend's QLEN_ONLY layout, which the triton backend (ours) does not read.

`adaserve sglang check` verifies that every target of ``replacements()`` resolves in the
installed SGLang (a renamed kernel in a new SGLang is a BAD row, not a silent fallback to
the interpreted one).
"""

from __future__ import annotations

import os

TREE_MASK = "sglang.srt.speculative.eagle_utils.default_tree_mask_mode"


def enabled() -> bool:
    return os.environ.get("ADASERVE_SGLANG_CPU") == "1"


def full_mask():
    """The tree-mask layout the triton backend's verify attention reads."""
    from sglang.kernels.ops.speculative.spec_tree import TreeMaskMode

    return TreeMaskMode.FULL_MASK


def replacements() -> dict:
    """{fully qualified SGLang target: our function}."""
    from adaserve.sglang.cpu.attention import REPLACEMENTS

    return {TREE_MASK: full_mask, **REPLACEMENTS}


def register() -> None:
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    for target, fn in replacements().items():
        HookRegistry.register(target, fn, HookType.REPLACE)
