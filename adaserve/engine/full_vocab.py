"""The distilled draft as a standard, full-vocabulary Hugging Face Llama checkpoint.

Our draft (docs/draft.md) borrows the target's input embeddings and has an output head
over the 8,192 tokens the target emits most; the embedded engine maps its rows back to
target ids (``adaserve.token_ids``). A runtime that loads a separate draft model as is --
SGLang's standalone draft, which checks that the draft's vocabulary and tokenizer are the
target's -- needs every token id in the head. This writes that model:

- the target's input embeddings, stored (a standalone runtime shares nothing);
- the draft's 3 decoder layers and final norm, fp16 -> fp32 (the CPU's fast path);
- a head over all 49,152 ids: the draft's 8,192 trained rows where it has them, the
  target's tied embedding/LM-head rows elsewhere -- the rows the draft's head was
  initialised from, so the other tokens score as the untrained draft would have scored
  them rather than not at all (teacher-forced greedy agreement with the target on 24
  load-generator prompts: 0.636 with these rows, 0.640 with the 8k head alone; ad hoc,
  2026-11-23, dev CPU);
- the target's tokenizer files, and ``hot_tokens.pt``: the 8,192 trained ids in SGLang's
  ``--speculative-token-map`` format (a draft head cut to them: docs/sglang-internals.md).

Built once into the model cache at first use (``resolve_draft``), like the target.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from adaserve.engine.weights import (DEFAULT_DRAFT, DEFAULT_MODEL, FULL_VOCAB_DRAFT,
                                     TOKEN_IDS_KEY, cache_root, load_config, load_state,
                                     resolve_model)
from adaserve.engine.weights import resolve_draft as resolve_packaged_draft

HOT_TOKENS = "hot_tokens.pt"
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                    "chat_template.jinja", "vocab.json", "merges.txt")


def resolve_draft(draft: str) -> Path:
    """FULL_VOCAB_DRAFT (exported from the packaged draft and the default target into the
    cache on first use), else ``weights.resolve_draft``: the packaged draft or a local
    model directory."""
    if draft != FULL_VOCAB_DRAFT:
        return resolve_packaged_draft(draft)
    out = cache_root() / "models" / FULL_VOCAB_DRAFT
    if not (out / "config.json").is_file():
        export_full_vocab(resolve_packaged_draft(DEFAULT_DRAFT), resolve_model(DEFAULT_MODEL),
                          out)
    return out


def export_full_vocab(draft_dir: Path, target_dir: Path, out: Path) -> None:
    """Write ``draft_dir`` (one of ours: shared embeddings, reduced head) as a standalone
    full-vocabulary checkpoint in ``out``, atomically. ValueError if the draft is not one
    of ours or does not fit the target."""
    import torch
    from safetensors.torch import save_file

    dcfg, tcfg = load_config(draft_dir), load_config(target_dir)
    meta = dcfg.get("adaserve_draft") or {}
    if not meta.get("shared_embeddings"):
        raise ValueError(f"{draft_dir} is not a draft of ours with shared embeddings; a "
                         "standard checkpoint needs no export")
    dstate, tstate = load_state(draft_dir), load_state(target_dir)
    embed = tstate["model.embed_tokens.weight"].float()  # [V, H]
    # the target's LM head: tied to its embeddings in SmolLM2, separate in other models
    head = tstate.get("lm_head.weight", embed).float().clone()  # [V, H]
    ids = dstate[TOKEN_IDS_KEY].long()  # [K] target ids of the draft's head rows
    rows = dstate["lm_head.weight"].float()  # [K, H]
    if embed.shape[1] != rows.shape[1] or int(ids.max()) >= head.shape[0]:
        raise ValueError(f"draft {draft_dir} does not fit target {target_dir}: head "
                         f"{tuple(rows.shape)} over ids up to {int(ids.max())}, target "
                         f"embeddings {tuple(embed.shape)}")
    head[ids] = rows
    state = {k: v.float().contiguous() for k, v in dstate.items()
             if k.startswith("model.")}
    state["model.embed_tokens.weight"] = embed.contiguous()
    state["lm_head.weight"] = head.contiguous()

    config = {k: v for k, v in dcfg.items() if k != "adaserve_draft"}
    config.update(architectures=["LlamaForCausalLM"], vocab_size=int(head.shape[0]),
                  tie_word_embeddings=False, dtype="float32", torch_dtype="float32")
    config["adaserve_draft"] = {**meta, "full_vocab_export": True,
                                "head_rows_trained": int(ids.numel()),
                                "other_rows": "the target's LM head"}

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".export-", dir=out.parent))
    try:
        save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        (tmp / "config.json").write_text(json.dumps(config, indent=2))
        torch.save(ids.tolist(), tmp / HOT_TOKENS)
        for name in _TOKENIZER_FILES:
            if (target_dir / name).is_file():
                shutil.copy2(target_dir / name, tmp / name)
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
