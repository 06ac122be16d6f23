"""Acceptance models by name or file: the one place that knows every kind (acceptance.py
holds the interface the kinds implement, so it imports none of them)."""

from __future__ import annotations

import json
from pathlib import Path

from adaserve.sim.acceptance import DATA, AcceptanceModel
from adaserve.sim.replay import Recording, ReplayAcceptance
from adaserve.sim.synthetic import SyntheticAcceptance


def load_acceptance(name_or_path: str | Path) -> AcceptanceModel:
    """A shipped acceptance model by name, a JSON file (synthetic), or a recording (.npz,
    replay)."""
    path = Path(name_or_path)
    if path.suffix == ".npz" and path.is_file():
        return ReplayAcceptance(Recording.load(path))
    if not path.is_file():
        path = DATA / f"{name_or_path}.json"
    if not path.is_file():
        shipped = ", ".join(sorted(p.stem for p in DATA.glob("*.json")))
        raise ValueError(f"no acceptance model {name_or_path!r}; shipped: {shipped}, "
                         "or give a JSON file")
    d = json.loads(path.read_text())
    if d.get("kind") != "synthetic":
        raise ValueError(f"{path}: a JSON acceptance model has kind 'synthetic' (replay "
                         "models are .npz recordings)")
    return SyntheticAcceptance.from_dict(d)
