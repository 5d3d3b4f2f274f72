"""The ELECTRA family's analytic FLOP counts: one network's forward pass over one sequence, in the
two conventions of `electra.model.flops`."""

from __future__ import annotations

from electra.model.electra.config import ElectraModelConfig
from electra.model.flops import Network

DROPOUT, LAYER_NORM, ACTIVATION, SOFTMAX = 4, 5, 8, 5  # the official counter's per-element costs


def _official_layer(m: ElectraModelConfig, s: int) -> float:
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


def _official_embeddings(m: ElectraModelConfig, s: int) -> float:
    e, h = m.embedding_size, m.hidden_size
    flops = 2 * e * m.vocab_size + 2 * e * (s + 2) + 2 * e + (LAYER_NORM + DROPOUT) * e
    if e != h:
        flops += 2 * h * e + h  # the projection to the hidden size
    return flops * s


def _official_mlm_head(m: ElectraModelConfig, s: int, output_frac: float) -> float:
    e, h, v = m.embedding_size, m.hidden_size, m.vocab_size
    per_position = 2 * e * v + 2 * h * e + e + (ACTIVATION + LAYER_NORM) * e + SOFTMAX * v + 2 * v
    return output_frac * per_position * s


def _official_rtd_head(m: ElectraModelConfig, s: int) -> float:
    h = m.hidden_size
    return (2 * h * h + h + ACTIVATION * h + 2 * h) * s


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


def encoder_forward_flops(m: ElectraModelConfig, s: int) -> float:
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


def forward_flops(n: Network, s: int, convention: str) -> float:
    """Network `n`'s forward FLOPs over one sequence of s tokens in `convention` ("official" or
    "model"): the ELECTRA family's record's `forward_flops`."""
    if convention == "official":
        return official_forward_flops(n, s)
    if convention == "model":
        return model_forward_flops(n, s)
    raise ValueError(f"unknown FLOP convention {convention!r}: official or model")
