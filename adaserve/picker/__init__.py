"""The SLO-aware endpoint picker shared by the real fleet's front and the simulated fleet
(issue 39): ``report`` (what a replica says of itself), ``pick`` (where a request goes)."""

from adaserve.picker.pick import BEST_EFFORT_WEIGHT, Pick, PickerConfig, Prediction, pick, predict
from adaserve.picker.report import (Ask, ClassLoad, ClassTally, Recent, ReplicaReport,
                                    from_json)

__all__ = ["Ask", "BEST_EFFORT_WEIGHT", "ClassLoad", "ClassTally", "Pick", "PickerConfig",
           "Prediction", "Recent", "ReplicaReport", "from_json", "pick", "predict"]
