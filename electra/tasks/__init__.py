"""The fine-tuning tasks by name: GLUE, SQuAD 1.1/2.0 and CoNLL-2003 NER, and the tasks on the
user's own files (classification, multilabel, regression, tagging, qa)."""

from __future__ import annotations

import difflib

from electra.errors import ElectraError
from electra.finetuning.config import FinetuneConfig
from electra.tasks.base import Task
from electra.tasks.glue import GLUE, GlueTask
from electra.tasks.ner import NerTask
from electra.tasks.squad import SquadTask, squad_settings

OWN_DATA = ("classification", "multilabel", "regression", "tagging", "qa")
TASKS = (*GLUE, "squad1", "squad2", "conll2003", *OWN_DATA)
ALIASES = {"ner": "conll2003", "sst-2": "sst2", "sts-b": "stsb", "squad": "squad1"}


def get_task(name: str, cfg: FinetuneConfig | None = None) -> Task:
    cfg = cfg or FinetuneConfig()
    key = ALIASES.get(name.lower(), name.lower())
    if key in GLUE:
        return GlueTask(GLUE[key])
    if key in ("squad1", "squad2"):
        return SquadTask(version="1.1" if key == "squad1" else "2.0", **squad_settings(cfg))
    if key == "conll2003":
        return NerTask()
    if key in OWN_DATA:
        return _own_data_task(key, cfg)
    hint = difflib.get_close_matches(key, TASKS, n=1)
    did_you_mean = f" (did you mean {hint[0]}?)" if hint else ""
    raise ElectraError(f"unknown task {name!r}{did_you_mean}: choose one of {', '.join(TASKS)}")


def _own_data_task(key: str, cfg: FinetuneConfig) -> Task:
    """A task on the user's files, set up from the recipe's column and label settings. Imported
    here, not at the top: the GLUE, SQuAD and NER tasks need none of them."""
    if key == "tagging":
        from electra.tasks.tagging import TaggingTask

        return TaggingTask(tag_column=cfg.tag_column)
    if key == "qa":
        from electra.tasks.qa import QaTask

        return QaTask(cfg)
    from electra.tasks.labelled import ClassificationTask, MultilabelTask, RegressionTask

    kinds = {
        "classification": ClassificationTask,
        "multilabel": MultilabelTask,
        "regression": RegressionTask,
    }
    return kinds[key](cfg)
