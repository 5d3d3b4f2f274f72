"""The DeBERTa-v3 family's analytic FLOP counts: one network's forward pass over one sequence of s
tokens in the "model" convention of `electra.model.flops` (matrix products only, 2 FLOPs per
multiply-add).

Per layer, with H the hidden size, I the intermediate size and W the relative rows a row of s
tokens reaches (`electra.model.deberta.relative`): the q, k, v and output products 2*s*4H*H; the
relative rows through the query and key products 2*W*2H*H; content scores and weighted values
2*2*s*s*H; the two position terms against the W rows 2*2*s*W*H; the FFN 2*s*2*H*I. Heads: the MLM
head (dense 2*H*H, the tied output 2*H*V) at round(mlm_frac * s) positions, the enhanced mask
decoder's two extra passes of the last layer there; the discriminator's one logit 2*H per token.

The "official" convention is the ELECTRA paper's counter's, defined for BERT's 2018 layer only:
there is no count of DeBERTa's in it, and asking for one is an error.
"""

from __future__ import annotations

from electra.errors import ElectraError
from electra.model.deberta.config import DebertaV3Config
from electra.model.deberta.relative import widest_bucket
from electra.model.flops import Network


def relative_rows(cfg: DebertaV3Config, s: int) -> int:
    """The rows of the relative table a row of s tokens reaches."""
    widest = widest_bucket(s, cfg.position_buckets, cfg.relative_reach)
    span = cfg.position_buckets
    return min(2 * span - 1, span + widest) - max(0, span - widest) + 1


def layer_flops(cfg: DebertaV3Config, s: int, queries: int | None = None) -> float:
    """One layer over s keys, its queries at `queries` positions (None: all s)."""
    h, i, w = cfg.hidden_size, cfg.intermediate_size, relative_rows(cfg, s)
    n = s if queries is None else queries
    products = 2 * n * 2 * h * h + 2 * s * 2 * h * h  # q and output at n; k, v at s
    positions = 2 * w * 2 * h * h + 2 * (n + s) * w * h  # Pq, Pk; c2p at n, p2c at s
    attention = 2 * 2 * n * s * h
    return products + positions + attention + 2 * n * 2 * h * i


def forward_flops(n: Network, s: int, convention: str) -> float:
    """Network `n`'s forward FLOPs over one sequence of s tokens (the family record's
    `forward_flops`); the "official" convention has no DeBERTa count."""
    if convention == "official":
        raise ElectraError(
            "the official FLOP convention is ELECTRA's counter's (BERT's 2018 layer) and has no "
            "DeBERTa-v3 count: use the model convention"
        )
    if convention != "model":
        raise ValueError(f"unknown FLOP convention {convention!r}: official or model")
    cfg = n.config
    h = cfg.hidden_size
    forward = cfg.num_hidden_layers * layer_flops(cfg, s)
    if n.mlm_frac:
        masked = round(n.mlm_frac * s)
        forward += masked * (2 * h * h + 2 * h * cfg.vocab_size)
        if cfg.enhanced_mask_decoder:
            forward += 2 * layer_flops(cfg, s, masked)
    if n.rtd_head:
        forward += 2 * s * h
    return forward
