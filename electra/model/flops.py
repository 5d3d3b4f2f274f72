"""The ELECTRA family's analytic FLOP counts: one network's forward pass over one sequence, in two
conventions (say which one a figure uses). What a pretraining step runs, and so its total, is the
objective's (`electra.objectives.flops`).

- "official": the official counter's convention (flops_computation.py, docs/specification.md
  §Published numbers), so our figures compare with the paper's Table 1: training counts as 2x the
  forward pass; it includes elementwise work (LayerNorm 5, activation 8, softmax 5, dropout 4
  FLOPs per element), counts the embedding lookup as a one-hot matrix product, and charges the
  generator's output head for the fraction `max_predictions / seq_len` of positions.
  ELECTRA-Small, 1M steps: 1.29e18.
- "model": what MFU divides by the hardware's matmul peak: matrix products only (2 FLOPs per
  multiply-add, attention scores and weighted values included), training as 3x the forward pass,
  and the generator's vocabulary head only at the masked positions it is run on.
"""

from __future__ import annotations

from dataclasses import dataclass

from electra.config import ModelConfig

DROPOUT, LAYER_NORM, ACTIVATION, SOFTMAX = 4, 5, 8, 5  # the official counter's per-element costs


def _official_layer(m: ModelConfig, s: int) -> float:
    """One encoder layer over a sequence of s tokens."""
    h, i, heads = m.hidden_size, m.intermediate_size, m.num_attention_heads
    attention = (
        6 * h * h
        + 3 * h  # q, k, v projections and biases
        + 2 * h * s  # scores
        + (SOFTMAX + DROPOUT + 1) * s * heads  # softmax, dropout, scaling of the scores
        + 2 * h * s  # weighted values
        + 2 * h * h
        + h  # output projection and bias
        + (DROPOUT + 1) * h
        + LAYER_NORM  # dropout, residual, LayerNorm (the counter's constant)
    )
    ffn = 4 * h * i + ACTIVATION * i + i + h + (DROPOUT + 1) * h + LAYER_NORM * h
    return (attention + ffn) * s


def _official_embeddings(m: ModelConfig, s: int) -> float:
    e, h = m.embedding_size, m.hidden_size
    flops = 2 * e * m.vocab_size + 2 * e * (s + 2) + 2 * e + (LAYER_NORM + DROPOUT) * e
    if e != h:
        flops += 2 * h * e + h  # the projection to the hidden size
    return flops * s


def _official_mlm_head(m: ModelConfig, s: int, output_frac: float) -> float:
    e, h, v = m.embedding_size, m.hidden_size, m.vocab_size
    per_position = 2 * e * v + 2 * h * e + e + (ACTIVATION + LAYER_NORM) * e + SOFTMAX * v + 2 * v
    return output_frac * per_position * s


def _official_rtd_head(m: ModelConfig, s: int) -> float:
    h = m.hidden_size
    return (2 * h * h + h + ACTIVATION * h + 2 * h) * s


@dataclass(frozen=True)
class Network:
    """One network a pretraining step runs: its size, its heads and whether it is trained (the
    objective says which, `Objective.step_networks`)."""

    config: ModelConfig  # or the family's own config (`electra.model.modernbert.ModernConfig`)
    mlm_frac: float = 0.0  # fraction of positions that get the vocabulary head (0: none)
    rtd_head: bool = False  # the per-token dense + one-logit head (discriminator, copy gate)
    trained: bool = True  # False: forward only (a frozen generator)


def official_forward_flops(n: Network, s: int) -> float:
    """The official counter's forward FLOPs of network `n` over one sequence of s tokens:
    embeddings, encoder layers and its heads, elementwise work included."""
    m = n.config
    forward = m.num_hidden_layers * _official_layer(m, s) + _official_embeddings(m, s)
    if n.mlm_frac:
        forward += _official_mlm_head(m, s, n.mlm_frac)
    if n.rtd_head:
        forward += _official_rtd_head(m, s)
    return forward


# --- model FLOPs (matmuls only) -------------------------------------------------------------------


def encoder_forward_flops(m: ModelConfig, s: int) -> float:
    """Matmul FLOPs of the encoder's forward pass over one sequence of s tokens."""
    h, i = m.hidden_size, m.intermediate_size
    layer = 2 * s * (4 * h * h + 2 * h * i) + 4 * s * s * h  # projections, FFN, attention
    project = 2 * s * m.embedding_size * h if m.embedding_size != h else 0
    return m.num_hidden_layers * layer + project


def model_forward_flops(n: Network, s: int) -> float:
    """Matmul FLOPs of network `n`'s forward pass over one sequence of s tokens, heads included,
    the vocabulary projection only at the positions it is run on."""
    m = n.config
    forward = encoder_forward_flops(m, s)
    if n.mlm_frac:
        positions = round(n.mlm_frac * s)
        forward += (
            positions * 2 * (m.hidden_size * m.embedding_size + m.embedding_size * m.vocab_size)
        )
    if n.rtd_head:
        forward += 2 * s * (m.hidden_size**2 + m.hidden_size)
    return forward


# How many forward passes a trained network costs in each convention (a frozen one costs 1).
TRAINED_PASSES = {"official": 2, "model": 3}


def forward_flops(n: Network, s: int, convention: str) -> float:
    """Network `n`'s forward FLOPs over one sequence of s tokens in `convention` ("official" or
    "model"): the ELECTRA family's entry of `electra.model.registry`."""
    if convention == "official":
        return official_forward_flops(n, s)
    if convention == "model":
        return model_forward_flops(n, s)
    raise ValueError(f"unknown FLOP convention {convention!r}: official or model")
