"""A continued run's fresh heads (issue 59, item 2): they train at `train.head_lr_scale` times the
rate, and for `train.head_warmup_steps` the checkpoint's encoder is held still while they and the
generator train."""

from __future__ import annotations

import torch
from safetensors.torch import load_file

from electra.config import apply_overrides, preset
from electra.engine.optim import param_groups, set_learning_rate
from electra.pretraining.train import pretrain

from .test_hf_pretraining import corpus, mlm_folder  # noqa: F401 (a fixture)


def test_held_groups_get_no_rate_until_their_step():
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2))
    fresh = {id(p) for p in model[1].parameters()}
    held = {id(p) for p in model[0].parameters()}
    groups = param_groups(model, 0.01, fresh=(fresh, 10.0), held=(held, 3))
    optimizer = torch.optim.SGD(groups, lr=1.0)
    for step, want in ((0, 0.0), (2, 0.0), (3, 0.5)):
        set_learning_rate(optimizer, 0.5, step)
        rates = {id(p): g["lr"] for g in optimizer.param_groups for p in g["params"]}
        assert {rates[i] for i in held} == {want}
        assert {rates[i] for i in fresh} == {5.0}


def test_a_held_encoder_stays_the_checkpoints_while_the_heads_train(tmp_path, corpus):  # noqa: F811
    """Two steps, both held: the discriminator's encoder is the folder's bit for bit, while the
    generator (the folder's lower layers, not held) has moved."""
    folder, data = mlm_folder(tmp_path, "bert", corpus)
    over = {
        "data.path": str(data),
        "train.init_from": str(folder),
        "train.device": "cpu",
        "train.steps": 2,
        "train.batch_size": 4,
        "train.head_warmup_steps": 2,
        "train.progress": False,
        "train.tensorboard": False,
    }
    run = pretrain(apply_overrides(preset("hf-tiny"), over), tmp_path / "run")
    theirs = load_file(folder / "model.safetensors")
    disc = load_file(run / "discriminator" / "model.safetensors")
    encoder = {k: v for k, v in theirs.items() if k.startswith("bert.")}
    assert encoder and all(torch.equal(disc[k], v) for k, v in encoder.items())
    fresh_head = load_file(run / "generator" / "model.safetensors")
    layer0 = "bert.encoder.layer.0.attention.self.query.weight"
    assert not torch.equal(fresh_head[layer0], theirs[layer0])  # the generator trained
