"""Frozen features of an encoder: a model folder's encoder (or the same architecture with its
family's random initialization) run in eval mode without gradients, in fp32 on the CPU, and its
final states pooled per example (the mean over the attention mask, the first token's state) or
read per word (each word's first sub-token, for tagging)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tokenizers
import torch
from torch import nn

from electra.errors import ElectraError
from electra.hf.from_transformers import load_encoder
from electra.model.configs import AnyModelConfig
from electra.model.family import encoder_of, family_of
from electra.tasks.base import Encoded

BATCH = 64  # rows per forward pass


@dataclass
class Frozen:
    """A model folder's encoder, ready to read features from, with what it was loaded with."""

    cfg: AnyModelConfig
    encoder: nn.Module
    tokenizer: tokenizers.Tokenizer
    source: Path


def load_frozen(path: str | Path) -> Frozen:
    """The encoder of any folder `load_encoder` takes (ours, a run's, a Hugging Face one), built
    as its family builds it and loaded with every weight: nothing of it is left at random."""
    cfg, state, tokenizer, source = load_encoder(path)
    network = family_of(cfg).pretraining(cfg)
    prefix = f"{network.base_model_prefix}."
    encoder = encoder_of(network)
    own = {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)}
    missing, unexpected = encoder.load_state_dict(own, strict=False)
    # A pooler (BERT's) belongs to a classification head, and no final state passes through it.
    missing = [k for k in missing if not k.startswith("pooler.")]
    if missing or unexpected:
        what = f"missing {missing[0]!r}" if missing else f"unexpected {unexpected[0]!r}"
        raise ElectraError(
            f"{source}: the encoder's weights do not fit its config ({what}): pass a model "
            "folder whose config.json and weights agree"
        )
    return Frozen(cfg, frozen(encoder), tokenizer, source)


def random_encoder(cfg: AnyModelConfig, seed: int) -> nn.Module:
    """The same architecture with its family's own initialization, drawn from `seed`: the
    baseline that tells what pretraining gave from what the architecture and the probe give."""
    torch.manual_seed(seed)
    return frozen(encoder_of(family_of(cfg).pretraining(cfg)))


def frozen(encoder: nn.Module) -> nn.Module:
    """The encoder in fp32 eval mode (no dropout), its weights never to be trained."""
    encoder = encoder.float().eval()
    encoder.requires_grad_(False)
    return encoder


@torch.no_grad()
def final_states(encoder: nn.Module, data: Encoded, batch: int = BATCH):
    """(first row, states [b, t, H], mask [b, t]) per batch of `data`'s rows, in order; each
    batch cut to its longest row (padding is masked, so the states are those of the full width)."""
    tensors = data.tensors
    n = len(data)
    for start in range(0, n, batch):
        mask = tensors["attention_mask"][start : start + batch]
        width = max(int(mask.sum(1).max()), 1)
        ids = tensors["input_ids"][start : start + batch, :width]
        types = tensors["token_type_ids"][start : start + batch, :width]
        mask = mask[:, :width]
        yield start, encoder(ids, types, mask).float(), mask


def pooled_features(encoder: nn.Module, data: Encoded) -> dict[str, np.ndarray]:
    """Each example's `mean` (its final states averaged over the attention mask) and `first`
    (the state at position 0, [CLS] or <s>): {"mean": [N, H], "first": [N, H]}."""
    means, firsts = [], []
    for _, states, mask in final_states(encoder, data):
        weights = mask.unsqueeze(-1).float()
        means.append((states * weights).sum(1) / weights.sum(1).clamp(min=1.0))
        firsts.append(states[:, 0])
    return {"mean": torch.cat(means).numpy(), "first": torch.cat(firsts).numpy()}


def token_features(encoder: nn.Module, data: Encoded) -> dict[str, np.ndarray]:
    """One row per word the encoding kept: the state at its first sub-token, in sentence order
    then word order ({"token": [W, H]}), as `word_positions` lists them."""
    rows = []
    firsts = data.meta["first_tokens"]
    for start, states, _ in final_states(encoder, data):
        for i in range(states.shape[0]):
            rows.append(states[i, firsts[start + i]])
    hidden = rows[0].shape[-1] if rows else 0
    return {"token": torch.cat(rows).numpy() if rows else np.zeros((0, hidden), "float32")}


def word_positions(data: Encoded) -> tuple[np.ndarray, np.ndarray]:
    """(sentence, position) of each word's first sub-token, in `token_features`' order."""
    sentences = [i for i, firsts in enumerate(data.meta["first_tokens"]) for _ in firsts]
    positions = [p for firsts in data.meta["first_tokens"] for p in firsts]
    return np.array(sentences, dtype=np.int64), np.array(positions, dtype=np.int64)
