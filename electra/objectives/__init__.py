"""Pretraining objectives, one module each behind a registry (`objective.name`), all sharing the
trainer, the metrics and the export. Importing the package registers every objective."""

from electra.objectives import (  # noqa: F401  (importing registers them)
    adversarial,
    electra,
    electric,
    mlm,
    two_stage,
)
from electra.objectives.base import (
    OBJECTIVES,
    Objective,
    StepOutput,
    build_objective,
    check_objective,
    fill_objective_settings,
    objective_class,
)

__all__ = [
    "OBJECTIVES",
    "Objective",
    "StepOutput",
    "build_objective",
    "check_objective",
    "fill_objective_settings",
    "objective_class",
]
