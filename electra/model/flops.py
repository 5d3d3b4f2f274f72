"""Analytic FLOP counts for a pretraining step, in two conventions (say which one a figure uses).

- `official_train_flops`: the official counter's convention (flops_computation.py,
  docs/specification.md §Published numbers), so our figures compare with the paper's Table 1:
  training counts as 2x the forward pass; it includes elementwise work (LayerNorm 5, activation 8,
  softmax 5, dropout 4 FLOPs per element), counts the embedding lookup as a one-hot matrix product,
  and charges the generator's output head for the fraction `max_predictions / seq_len` of positions.
  ELECTRA-Small, 1M steps: 1.29e18.
- `model_flops_per_step`: what MFU divides by the hardware's matmul peak: matrix products only
  (2 FLOPs per multiply-add, attention scores and weighted values included), training as 3x the
  forward pass, and the generator's vocabulary head only at the masked positions it is run on.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

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


@dataclass(frozen=True)
class Network:
    """One network a pretraining step runs: its size, its heads and whether it is trained."""

    config: ModelConfig
    mlm_frac: float = 0.0  # fraction of positions that get the vocabulary head (0: none)
    rtd_head: bool = False  # the per-token dense + one-logit head (discriminator, copy gate)
    trained: bool = True  # False: forward only (a frozen generator)


def step_networks(cfg: RunConfig, step: int = 0) -> list[Network]:
    """The networks the objective runs at optimizer step `step` (0-based)."""
    o, disc = cfg.objective, cfg.model
    frac = o.num_predictions(cfg.data.seq_len) / cfg.data.seq_len
    if o.name == "mlm":
        return [Network(disc, mlm_frac=frac)]
    gen = Network(generator_config(disc, o), mlm_frac=frac)
    if o.name == "replace_mlm":
        return [gen, Network(disc, mlm_frac=frac)]
    if o.name == "all_tokens_mlm":
        return [gen, Network(disc, mlm_frac=1.0, rtd_head=True)]
    if o.name == "electric":  # two towers with a cloze head everywhere (read as one tower's)
        return [
            replace(gen, mlm_frac=0.0),
            replace(gen, mlm_frac=1.0),
            Network(disc, rtd_head=True),
        ]
    if o.name == "two_stage":
        if step < o.two_stage_steps:
            return [gen]
        return [replace(gen, trained=False), Network(disc, rtd_head=True)]
    return [gen, Network(disc, rtd_head=True)]  # electra, electra15, adversarial


def _step_boundaries(cfg: RunConfig, steps: int) -> list[tuple[int, int]]:
    """Ranges of steps over which `step_networks` is constant."""
    switch = cfg.objective.two_stage_steps if cfg.objective.name == "two_stage" else 0
    if 0 < switch < steps:
        return [(0, switch), (switch, steps)]
    return [(0, steps)]


def official_train_flops(cfg: RunConfig, steps: float | None = None) -> float:
    """Training FLOPs for the first `steps` steps (default: the run's) under the official
    counter's convention: a trained network costs 2x its forward pass, a frozen one 1x."""
    s, batch = cfg.data.seq_len, cfg.train.batch_size
    steps = cfg.train.steps if steps is None else steps
    total = 0.0
    for start, end in _step_boundaries(cfg, int(steps)):
        per_sequence = 0.0
        for n in step_networks(cfg, start):
            m = n.config
            forward = m.num_hidden_layers * _official_layer(m, s) + _official_embeddings(m, s)
            if n.mlm_frac:
                forward += _official_mlm_head(m, s, n.mlm_frac)
            if n.rtd_head:
                forward += _official_rtd_head(m, s)
            per_sequence += (2 if n.trained else 1) * forward
        total += batch * (end - start) * per_sequence
    return total


# --- model FLOPs (matmuls only) -------------------------------------------------------------------


def encoder_forward_flops(m: ModelConfig, s: int) -> float:
    """Matmul FLOPs of the encoder's forward pass over one sequence of s tokens."""
    h, i = m.hidden_size, m.intermediate_size
    layer = 2 * s * (4 * h * h + 2 * h * i) + 4 * s * s * h  # projections, FFN, attention
    project = 2 * s * m.embedding_size * h if m.embedding_size != h else 0
    return m.num_hidden_layers * layer + project


def model_flops_per_step(cfg: RunConfig, step: int = 0) -> float:
    """Matmul FLOPs of training step `step` (3x forward for a trained network, 1x for a frozen
    one), heads included, vocabulary projections only at the positions they are run on."""
    s = cfg.data.seq_len
    total = 0.0
    for n in step_networks(cfg, step):
        m = n.config
        forward = encoder_forward_flops(m, s)
        if n.mlm_frac:
            positions = round(n.mlm_frac * s)
            forward += (
                positions * 2 * (m.hidden_size * m.embedding_size + m.embedding_size * m.vocab_size)
            )
        if n.rtd_head:
            forward += 2 * s * (m.hidden_size**2 + m.hidden_size)
        total += (3 if n.trained else 1) * forward
    return cfg.train.batch_size * total
