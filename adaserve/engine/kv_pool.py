"""How many KV slots the engine preallocates, from memory and the context it must hold.

A slot is reserved for a whole request (kv_cache.py: the view layout is what makes decode
fast), so the pool is ``n_slots`` = memory / bytes per slot, at most ``max_batch``. The
memory is ``kv_cache_mb``, or with "auto" a fixed share of what the machine has free once
the weights are loaded: the rest is left to activations, the tokenizer, the server and
whatever else runs on the machine.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

from adaserve.engine.config import EngineConfig
from adaserve.engine.draft_window import DraftWindow
from adaserve.engine.kv_cache import KVCache
from adaserve.engine.loader import Models

log = logging.getLogger(__name__)

# kv_cache_mb="auto" takes this share of the memory available after the weights load
# (MemAvailable on Linux, free device memory on a GPU). The other half is left to
# activations, the server and other processes on a shared machine; a server alone on its
# machine can pass a number instead.
KV_MEMORY_FRACTION = 0.5


@dataclass(frozen=True, slots=True)
class PoolSize:
    """The pool an `EngineConfig` gets on this machine."""

    n_slots: int
    slot_len: int  # target columns per slot: max_context + tree scratch + trash column
    draft_slot_len: int | None  # draft columns per slot; None: no draft KV
    slot_bytes: int  # target + draft bytes of one slot
    budget_bytes: int  # the memory the pool was sized from
    source: str  # where budget_bytes came from, for the start-up line

    @property
    def nbytes(self) -> int:
        return self.n_slots * self.slot_bytes


def available_bytes(device: str) -> int:
    """Memory free for the KV pool now: device memory on a GPU, else MemAvailable."""
    if device.startswith("cuda"):
        return int(torch.cuda.mem_get_info(torch.device(device))[0])
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    import os

    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def check_context(cfg: EngineConfig, models: Models) -> None:
    """max_context may not exceed what the models were trained for (RoPE positions)."""
    for name, m in (("model", models.target), ("draft", models.draft)):
        if m is not None and cfg.max_context > m.cfg.max_positions:
            raise ValueError(f"max_context={cfg.max_context} exceeds the {name}'s context of "
                             f"{m.cfg.max_positions} tokens (max_position_embeddings); "
                             f"use max_context <= {m.cfg.max_positions}")


def plan_pool(cfg: EngineConfig, models: Models, max_tree: int, window: DraftWindow | None,
              use_draft: bool) -> PoolSize:
    """Slots for ``cfg``: ValueError if the memory cannot hold one request."""
    check_context(cfg, models)
    t = models.target
    dt = t.dtype
    slot_len = cfg.max_context + max_tree + 1  # context, a verify tree's scratch, trash
    per_slot = KVCache.bytes_per_slot(t.n_layers, t.cfg.kv_heads, t.cfg.head_dim, slot_len, dt)
    d = models.draft if use_draft else None
    draft_len = None
    if d is not None:
        draft_len = slot_len if window is None else window.slot_len(max_tree)
        per_slot += KVCache.bytes_per_slot(d.n_layers, d.cfg.kv_heads, d.cfg.head_dim,
                                           draft_len, dt)
    if cfg.kv_cache_mb == "auto":
        free = available_bytes(models.device)
        budget = int(free * KV_MEMORY_FRACTION)
        source = (f"kv_cache_mb=auto: {KV_MEMORY_FRACTION:.0%} of {free / 2**30:.1f} GiB "
                  "available")
    else:
        budget = cfg.kv_cache_mb * 2**20
        source = f"kv_cache_mb={cfg.kv_cache_mb}"
    n_slots = min(cfg.max_batch, budget // per_slot)
    if n_slots < 1:
        raise ValueError(f"{source} cannot hold one request of max_context={cfg.max_context} "
                         f"({per_slot / 2**20:.1f} MiB each); lower max_context or give "
                         "more memory")
    pool = PoolSize(n_slots, slot_len, draft_len, per_slot, budget, source)
    short = n_slots < cfg.max_batch
    log.log(logging.WARNING if short else logging.INFO,
            "KV pool: %d slots of %d tokens (%.0f MiB, %.1f MiB a slot; %s)%s", n_slots,
            cfg.max_context, pool.nbytes / 2**20, per_slot / 2**20, source,
            f": fewer than max_batch={cfg.max_batch}" if short else "")
    return pool
