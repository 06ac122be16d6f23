"""`python -m adaserve.sim ...` is `adaserve simulate ...` (docs/sim.md)."""

from __future__ import annotations

import sys

from adaserve.cli import main

if __name__ == "__main__":
    # the summaries record the command as `adaserve simulate ...`, which this one equals
    sys.argv = ["adaserve", "simulate", *sys.argv[1:]]
    sys.exit(main(sys.argv[1:]))
