"""The fine-tuning tasks by name: GLUE, SQuAD 1.1/2.0 and CoNLL-2003 NER."""

from __future__ import annotations

import difflib

from electra.config import FinetuneConfig
from electra.errors import ElectraError
from electra.tasks.base import Task
from electra.tasks.glue import GLUE, GlueTask
from electra.tasks.ner import NerTask
from electra.tasks.squad import SquadTask

TASKS = (*GLUE, "squad1", "squad2", "conll2003")
ALIASES = {"ner": "conll2003", "sst-2": "sst2", "sts-b": "stsb", "squad": "squad1"}


def get_task(name: str, cfg: FinetuneConfig | None = None) -> Task:
    cfg = cfg or FinetuneConfig()
    key = ALIASES.get(name.lower(), name.lower())
    if key in GLUE:
        return GlueTask(GLUE[key])
    if key in ("squad1", "squad2"):
        return SquadTask(
            version="1.1" if key == "squad1" else "2.0",
            doc_stride=cfg.doc_stride,
            max_query_length=cfg.max_query_length,
            n_best=cfg.n_best,
            max_answer_length=cfg.max_answer_length,
            null_threshold=cfg.null_threshold,
        )
    if key == "conll2003":
        return NerTask()
    hint = difflib.get_close_matches(key, TASKS, n=1)
    did_you_mean = f" (did you mean {hint[0]}?)" if hint else ""
    raise ElectraError(f"unknown task {name!r}{did_you_mean}: choose one of {', '.join(TASKS)}")
