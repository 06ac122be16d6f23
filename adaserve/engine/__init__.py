"""The embedded engine: a pure-PyTorch AdaServe server core for any machine.

    from adaserve.engine import Engine, EngineConfig, SamplingParams
"""

from adaserve.engine.config import EngineConfig
from adaserve.engine.core import QueueFull
from adaserve.engine.engine import Completion, Engine
from adaserve.engine.request import Output, RequestStats
from adaserve.engine.sampling import SamplingParams

__all__ = ["Completion", "Engine", "EngineConfig", "Output", "QueueFull", "RequestStats",
           "SamplingParams"]
