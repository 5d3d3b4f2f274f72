"""The networks: what architecture families share (this package's modules: the `Family` record
and its registry, attention paths, FLOP conventions, CPU kernels, fine-tuning heads by kind) and
one folder per family (`electra/model/<family>/`). Modules here know nothing of training."""

# The public way to add a family (docs/architecture.md §Adding a family). `family(name)` is
# `electra.model.family.family`: the name `family` here is that module.
from electra.model.family import Family, Preset, Ref, families, register_family

__all__ = ["Family", "Preset", "Ref", "families", "register_family"]
