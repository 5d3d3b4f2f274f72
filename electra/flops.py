"""Analytic FLOP counts for a pretraining step, in two conventions (say which one a figure uses).

- `official_train_flops`: the official counter's convention (flops_computation.py, ELECTRA.md §9),
  so our figures compare with the paper's Table 1: training counts as 2x the forward pass; it
  includes elementwise work (LayerNorm 5, activation 8, softmax 5, dropout 4 FLOPs per element),
  counts the embedding lookup as a one-hot matrix product, and charges the generator's output head
  for the fraction `max_predictions / seq_len` of positions. ELECTRA-Small, 1M steps: 1.29e18.
- `model_flops_per_step`: what MFU divides by the hardware's matmul peak: matrix products only
  (2 FLOPs per multiply-add, attention scores and weighted values included), training as 3x the
  forward pass, and the generator's vocabulary head only at the masked positions it is run on.
"""

from __future__ import annotations

from electra.config import ModelConfig, RunConfig, generator_config

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


def official_train_flops(cfg: RunConfig, steps: float | None = None) -> float:
    """Training FLOPs for `steps` (default: the run's) under the official counter's convention."""
    s, batch = cfg.data.seq_len, cfg.train.batch_size
    steps = cfg.train.steps if steps is None else steps
    frac = cfg.objective.num_predictions(s) / s
    disc = cfg.model

    def forward(m: ModelConfig, head: float) -> float:
        return m.num_hidden_layers * _official_layer(m, s) + _official_embeddings(m, s) + head

    if cfg.objective.name == "mlm":
        per_sequence = forward(disc, _official_mlm_head(disc, s, frac))
    else:
        gen = generator_config(disc, cfg.objective)
        per_sequence = forward(disc, _official_rtd_head(disc, s)) + forward(
            gen, _official_mlm_head(gen, s, frac)
        )
    return 2 * batch * steps * per_sequence


# --- model FLOPs (matmuls only) -------------------------------------------------------------------


def encoder_forward_flops(m: ModelConfig, s: int) -> float:
    """Matmul FLOPs of the encoder's forward pass over one sequence of s tokens."""
    h, i = m.hidden_size, m.intermediate_size
    layer = 2 * s * (4 * h * h + 2 * h * i) + 4 * s * s * h  # projections, FFN, attention
    project = 2 * s * m.embedding_size * h if m.embedding_size != h else 0
    return m.num_hidden_layers * layer + project


def model_flops_per_step(cfg: RunConfig) -> float:
    """Matmul FLOPs of one training step (3x forward), heads included, the generator's
    vocabulary projection at the masked positions only."""
    s = cfg.data.seq_len
    n = cfg.objective.num_predictions(s)
    disc = cfg.model

    def mlm_head(m: ModelConfig) -> float:
        return n * 2 * (m.hidden_size * m.embedding_size + m.embedding_size * m.vocab_size)

    if cfg.objective.name == "mlm":
        forward = encoder_forward_flops(disc, s) + mlm_head(disc)
    else:
        gen = generator_config(disc, cfg.objective)
        rtd_head = 2 * s * (disc.hidden_size**2 + disc.hidden_size)
        forward = (
            encoder_forward_flops(disc, s)
            + rtd_head
            + encoder_forward_flops(gen, s)
            + mlm_head(gen)
        )
    return 3 * cfg.train.batch_size * forward
