"""The hf family's analytic FLOP counts, in the "model" convention of `electra.model.flops` (matrix
products only, 2 FLOPs per multiply-add, attention scores and weighted values included): BERT's
post-LayerNorm layer, which every type here has.

Per layer, with H the width and I the FFN size, over s tokens: the Q, K, V and output projections
4 * 2*s*H*H, the scores and weighted values 2 * 2*s*s*H, the FFN 2 * 2*s*H*I. DeBERTa's relative
attention (c2p and p2c) adds two score-sized products, 2 * 2*s*s*H, and its projections of the
relative table (bucket table rows, not tokens; not counted). Heads: the MLM head (dense 2*H*H,
decoder 2*H*V) at round(mlm_frac * s) positions; the RTD head, one logit, 2*H at every position.
The "official" convention (the ELECTRA paper's counter) is the ELECTRA family's only.
"""

from __future__ import annotations

from electra.errors import ElectraError
from electra.model.flops import Network
from electra.model.hf.config import HFConfig


def layer_flops(cfg: HFConfig, s: int) -> float:
    h, i = cfg.hidden_size, cfg.intermediate_size
    scores = 2 * 2 * s * s * h
    relative = scores if cfg.extra.get("relative_attention") else 0
    return 4 * 2 * s * h * h + scores + relative + 2 * 2 * s * h * i


def forward_flops(n: Network, seq_len: int, convention: str) -> float:
    """`electra.model.family.Family.forward_flops` for an `HFConfig`."""
    if convention == "official":
        raise ElectraError(
            "the official FLOP convention is ELECTRA's counter's and has no count for the hf "
            "family: use the model convention"
        )
    if convention != "model":
        raise ValueError(f"unknown FLOP convention {convention!r}: official or model")
    cfg, s = n.config, seq_len
    h = cfg.hidden_size
    forward = cfg.num_hidden_layers * layer_flops(cfg, s)
    if n.mlm_frac:
        forward += round(n.mlm_frac * s) * (2 * h * h + 2 * h * cfg.vocab_size)
    if n.rtd_head:
        forward += s * 2 * h
    return forward
