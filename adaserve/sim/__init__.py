"""Iteration-level simulation (issue 17): the engine's own scheduling loop (EngineCore) over
a simulated executor, on virtual time from a hardware latency model and acceptance from an
acceptance model. See docs/sim.md."""

from adaserve.sim.acceptance import AcceptanceModel, SimTrees, walk
from adaserve.sim.clock import VirtualClock
from adaserve.sim.driver import SimSetup, build, simulate, write_run
from adaserve.sim.executor import SimExecutor
from adaserve.sim.hardware import HardwareModel, TableCost, available, linear_fit
from adaserve.sim.models import load_acceptance
from adaserve.sim.replay import Recording, ReplayAcceptance
from adaserve.sim.synthetic import SyntheticAcceptance, SyntheticParams
from adaserve.sim.workload import SimRequest, from_arrivals, paper_class, read_paper_trace

__all__ = [
    "AcceptanceModel", "HardwareModel", "Recording", "ReplayAcceptance", "SimExecutor",
    "SimRequest", "SimSetup", "SimTrees", "SyntheticAcceptance", "SyntheticParams", "TableCost",
    "VirtualClock", "available", "build", "from_arrivals", "linear_fit", "load_acceptance",
    "paper_class", "read_paper_trace", "simulate", "walk", "write_run",
]
