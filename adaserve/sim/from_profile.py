"""A simulator hardware model from a saved `adaserve profile`, priced by its context table.

    python -m adaserve.sim.from_profile PROFILE.json OUT.json [--name NAME]

The model's target (and draft) cost is the profile's ``context-table`` (requests x tokens
per request x context per request; scheduler/context_cost.py), so a simulated long-context
workload is priced as this machine measured it; B and the baseline latency are the
profile's. A profile saved before the table has none: then the linear models are written
(kind ``linear``), which price every context by one slope.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from adaserve.engine.profile_data import Profile


def _cost(table, linear) -> dict | None:
    if table is not None:
        return {"kind": "context-table", **table.to_dict()}
    if linear is not None:
        return {"kind": "linear", **linear.to_dict()}
    return None


def hardware_from_profile(profile: Profile, name: str, source: str) -> dict:
    """The hardware JSON (adaserve.sim.hardware.HardwareModel.from_dict) of a profile."""
    return {
        "name": name, "target_model": profile.model, "draft_model": profile.draft,
        "gpu": f"none: {profile.machine}", "tp": 1, "source": source,
        "target": _cost(profile.target_table, profile.target),
        "draft": _cost(profile.draft_table, profile.draft_model),
        "budget": int(profile.budget),
        "baseline_latency_ms": float(profile.baseline_latency_s) * 1e3,
        "iteration_overhead_ms": 0.0,
        # the embedded engine pads each request to the batch's longest, as the table's
        # uniform n x q forwards were timed; it runs prefill and verify as two forwards
        "pads_rows": True, "fuses_prefill": False,
        "notes": [f"Forwards of the engine alone, measured by `adaserve profile` on "
                  f"{profile.date}; no host time (the served engine's iterations take longer)."],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m adaserve.sim.from_profile",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("profile", type=Path, help="a profile `adaserve profile` saved")
    p.add_argument("out", type=Path, help="where to write the hardware model's JSON")
    p.add_argument("--name", default=None, help="the model's name (default: OUT's stem)")
    args = p.parse_args(argv)
    prof = Profile.load(args.profile)
    name = args.name or args.out.stem
    model = hardware_from_profile(prof, name, f"`adaserve profile` -> {args.profile.name}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(model, indent=2) + "\n")
    print(f"wrote {args.out} ({'context table' if prof.target_table else 'linear models'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
