"""The hf family's pretraining step is fast enough to be the default for its types (issue 48,
item 7): it reads nothing back to the host (`HostReads`, as every native family's step is checked
in tests/engine/test_host_syncs.py), and its generator runs the vocabulary head at the masked slots
only."""

from __future__ import annotations

import pytest
import torch

from electra.config import ObjectiveConfig, TrainConfig
from electra.engine.optim import build_optimizer, param_groups
from electra.engine.step import Window, train_step
from electra.model import kernels
from electra.model.hf.config import HFConfig
from electra.model.hf.types import TYPES
from electra.objectives import OBJECTIVES, build_objective

from ...conftest import random_batch
from ...engine.test_host_syncs import HostReads

SEQ = 40


def tiny_hf(model_type: str) -> HFConfig:
    """A two-layer encoder of `model_type`, in milliseconds."""
    sizes = {"vocab_size": 100, "hidden_size": 32, "num_hidden_layers": 2}
    sizes |= {"num_attention_heads": 2, "intermediate_size": 64, "max_position_embeddings": 64}
    if model_type == "distilbert":
        sizes["type_vocab_size"] = 0  # DistilBERT reads no segments
    return HFConfig(model_type=model_type, **sizes)


def objective_of(name: str, model_type: str, special):
    """The objective `name` on a tiny `model_type` encoder; a generator sharing the token table has
    its width (the family's rule), half its depth."""
    depth = 1.0 if name == "two_stage" else 0.5
    extra = {"sharing": "none"} if name == "two_stage" else {}
    cfg = ObjectiveConfig(
        name=name,
        generator_hidden_fraction=1.0,
        generator_layers_fraction=depth,
        two_stage_steps=1,
        adversarial_mlm_steps=1,
        **extra,
    )
    torch.manual_seed(0)
    return build_objective(tiny_hf(model_type), cfg, special, seq_len=SEQ)


def batch_of(special, full: bool) -> dict[str, torch.Tensor]:
    """Padded rows, or full rows (packed pretraining data: an attention mask of ones)."""
    ids, types, attention = random_batch(special, b=8, t=SEQ)
    if full:
        attention = torch.ones_like(attention)
    return {"input_ids": ids, "token_type_ids": types, "attention_mask": attention}


CASES = [(n, "bert") for n in sorted(OBJECTIVES) if n != "electric"]  # Electric: native only
CASES += [("electra", t) for t in TYPES if t != "bert"]


@pytest.mark.parametrize("name, model_type", CASES)
def test_step_reads_nothing_back(name, model_type, special, monkeypatch):
    """Three steps (through the switches of two_stage and adversarial at step 1), on full rows
    and padded ones, with the path a GPU takes (no CPU-only kernels)."""
    monkeypatch.setattr(kernels, "stock_ops", lambda device: True)
    objective = objective_of(name, model_type, special)
    train = TrainConfig(grad_accum=2)
    groups = param_groups(objective, 0.01, by_network=objective.staged)
    optimizer = build_optimizer(groups, train, torch.device("cpu"))
    params = [p for p in objective.parameters() if p.requires_grad]
    settings = {"precision": train.precision, "clip_norm": train.clip_norm}
    micro = [batch_of(special, full=True), batch_of(special, full=False)]
    window = Window()
    for step in range(3):
        objective.begin_step(step)
        with HostReads(monkeypatch) as probe:
            train_step(objective, optimizer, params, micro, window, **settings)
        assert not probe.reads, f"step {step}: {dict(probe.reads)}"
    assert window.steps == 3 and torch.isfinite(window.sums["loss"])


@pytest.mark.parametrize("model_type", TYPES)
def test_vocabulary_head_runs_at_masked_slots_only(model_type, special):
    """The generator's decoder (the linear layer tied to the token table) sees the batch's masked
    slots, [B, slots, H], not every position: it is most of a generator's cost."""
    objective = objective_of("electra", model_type, special)
    out = TYPES[model_type].tied[0].rpartition(".")[0]
    decoder = objective.generator.get_submodule(out)
    seen = []
    decoder.register_forward_pre_hook(lambda module, args: seen.append(tuple(args[0].shape)))
    objective(**batch_of(special, full=True))
    slots = objective.num_slots
    assert 0 < slots < SEQ // 4
    assert seen == [(8, slots, 32)]
