"""The modern (ModernBERT-architecture) family's analytic FLOP counts: one network's forward pass
over one sequence of s tokens, in the "model" convention of `electra.model.flops` (matrix products
only, 2 FLOPs per multiply-add, attention scores and weighted values included), so that a modern
run's MFU and a compute-matched comparison with the ELECTRA family use one yardstick (issue 39,
item 2).

Per encoder layer, with H the hidden size, I the intermediate size and V the vocabulary:
- `Wqkv`: 2*s*H*3H; `Wo`: 2*s*H*H;
- attention: 2*H per (query, key) pair for the scores and 2*H for the weighted values, summed over
  the pairs the layer's mask lets through: s*s on a global layer; on a local layer the keys with
  |i - j| <= local_attention // 2 (`ModernBertModel`'s mask), counted EXACTLY, edges included: a
  query near either end of the row sees fewer keys than the bound min(s, 2*(local_attention//2)+1);
- GeGLU MLP: `Wi` widens to 2I (value and gate), 2*s*H*2I; `Wo` narrows back, 2*s*I*H.
Heads: the MLM head (dense 2*H*H, decoder 2*H*V) at round(mlm_frac * s) positions, as ELECTRA's
counter charges it; the RTD head (dense 2*H*H, one-logit classifier 2*H) at every position.
Embedding lookups, rotary, norms, activations, biases and the GeGLU product are elementwise work,
not counted here.

The "official" convention is the ELECTRA paper's counter's (elementwise work at its per-element
costs, the embedding lookup as a one-hot product); it is defined for BERT's 2018 layer only, so
there is no modern-family count in it and asking for one is an error.

A padded sequence costs what a full one does: the masked SDPA computes every pair in its window.
"""

from __future__ import annotations

from electra.errors import ElectraError
from electra.model.configs import GLOBAL
from electra.model.flops import Network
from electra.model.modernbert.config import ModernConfig


def local_keys(seq_len: int, half_window: int) -> int:
    """The (query, key) pairs of a local layer over s tokens: for each query i the keys j with
    |i - j| <= half_window inside the row, summed exactly. Each full window holds 2w+1 keys; the
    first and last w queries each lose w(w+1)/2 keys in all, once the row is long enough (s > w)
    that no query's window reaches both ends."""
    s, w = seq_len, half_window
    if s <= w + 1:  # every window covers the whole row
        return s * s
    return s * (2 * w + 1) - w * (w + 1)


def attended_pairs(cfg: ModernConfig, layer_type: str, seq_len: int) -> int:
    """The (query, key) pairs one layer of `layer_type` computes over s tokens."""
    if layer_type == GLOBAL:
        return seq_len * seq_len
    return local_keys(seq_len, cfg.local_attention // 2)


def attention_flops(cfg: ModernConfig, layer_type: str, seq_len: int) -> float:
    """Scores and weighted values: 2*H FLOPs each per attended (query, key) pair."""
    return 2 * 2 * cfg.hidden_size * attended_pairs(cfg, layer_type, seq_len)


def projection_flops(cfg: ModernConfig, seq_len: int) -> float:
    """The attention's `Wqkv` (H -> 3H) and `Wo` (H -> H) over s tokens."""
    h = cfg.hidden_size
    return 2 * seq_len * h * 3 * h + 2 * seq_len * h * h


def mlp_flops(cfg: ModernConfig, seq_len: int) -> float:
    """GeGLU over s tokens: `Wi` (H -> 2I, value and gate) and `Wo` (I -> H)."""
    h, i = cfg.hidden_size, cfg.intermediate_size
    return 2 * seq_len * h * 2 * i + 2 * seq_len * i * h


def layer_flops(cfg: ModernConfig, layer_type: str, seq_len: int) -> float:
    """One encoder layer of `layer_type` (global or local) over s tokens."""
    return (
        projection_flops(cfg, seq_len)
        + attention_flops(cfg, layer_type, seq_len)
        + mlp_flops(cfg, seq_len)
    )


def encoder_flops(cfg: ModernConfig, seq_len: int) -> float:
    """Every layer of the encoder, each by its own type."""
    return sum(layer_flops(cfg, cfg.layer_type(i), seq_len) for i in range(cfg.num_hidden_layers))


def mlm_head_flops(cfg: ModernConfig, seq_len: int, mlm_frac: float) -> float:
    """dense (H -> H) and the tied decoder (H -> V) at round(mlm_frac * s) positions."""
    h = cfg.hidden_size
    return round(mlm_frac * seq_len) * (2 * h * h + 2 * h * cfg.vocab_size)


def rtd_head_flops(cfg: ModernConfig, seq_len: int) -> float:
    """dense (H -> H) and the one-logit classifier (H -> 1) at every position."""
    h = cfg.hidden_size
    return seq_len * (2 * h * h + 2 * h)


def modern_forward_flops(
    cfg: ModernConfig, seq_len: int, *, mlm_frac: float | None = None, rtd: bool = False
) -> float:
    """Matmul FLOPs of a modern network's forward pass over one sequence of s tokens: the encoder,
    the MLM head at the fraction `mlm_frac` of positions (None: no MLM head) and the RTD head."""
    if seq_len < 1:
        raise ElectraError(f"a FLOP count needs a sequence length of at least 1, not {seq_len}")
    forward = encoder_flops(cfg, seq_len)
    if mlm_frac is not None:
        if not 0 <= mlm_frac <= 1:
            raise ElectraError(f"mlm_frac={mlm_frac} must be a fraction of positions in [0, 1]")
        forward += mlm_head_flops(cfg, seq_len, mlm_frac)
    if rtd:
        forward += rtd_head_flops(cfg, seq_len)
    return forward


def forward_flops(n: Network, seq_len: int, convention: str) -> float:
    """The registry's signature (`electra.model.family.Family.forward_flops`) for a `Network`
    whose config is a `ModernConfig`: a ready adapter for the modern family's entry."""
    if convention == "official":
        raise ElectraError(
            "the official FLOP convention is ELECTRA's counter's (BERT's 2018 layer) and has no "
            "modern-family count: use the model convention"
        )
    if convention != "model":
        raise ValueError(f"unknown FLOP convention {convention!r}: official or model")
    if not isinstance(n.config, ModernConfig):
        raise ElectraError(
            f"the modern family's FLOP count needs a ModernConfig, not {type(n.config).__name__}"
        )
    return modern_forward_flops(n.config, seq_len, mlm_frac=n.mlm_frac or None, rtd=n.rtd_head)
