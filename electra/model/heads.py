"""Fine-tuning heads by kind, whatever the family: "sequence" (classification and regression on
the first token), "token" (tagging), "span_qa" (BERT's start/end head) and "official_qa" (the
official XLNet-style QA head, which only some families have). Each family's classes are its own
(`electra/model/<family>/heads.py`), named as Hugging Face names them; its record lists them.
"""

from __future__ import annotations

from typing import Any

from electra.errors import ElectraError
from electra.model.family import families, family_of
from electra.model.hf_names import hf_families


def head_classes() -> tuple[str, ...]:
    """The class names of every registered family's heads: what a fine-tuned folder may hold
    (a family of several model types has a class per type, named as its HF names say)."""
    ours = tuple(cls.__name__ for f in families().values() for cls in f.heads.values())
    return ours + tuple(h.ours for names in hf_families().values() for h in names.heads)


def build_head(kind: str, cfg: Any, *args: Any) -> Any:
    """The `kind` head ("sequence", "token", "span_qa", "official_qa") of the family `cfg.arch`
    names, built with `args` (the number of outputs)."""
    family = family_of(cfg)
    if kind == "official_qa" and kind not in family.heads:
        having = " and ".join(f.name for f in families().values() if kind in f.heads)
        raise ElectraError(
            f"model.arch={cfg.arch}: the official XLNet-style QA head is the {having} family's "
            "only; fine-tune with --qa-head linear"
        )
    return family.head(kind)(cfg, *args)
