"""The exact rewrite of the paper's one-layer classifier into Hugging Face's two-layer
`ElectraClassificationHead` (dense H->H, exact GELU, out_proj H->L), so that an exported
classifier computes our logits (docs/huggingface.md#fine-tuned-models).

The rewrite carries each logit in pairs of GELU units, GELU(a) - GELU(-a) = a (`paired_head`),
so that HF's dropout on its hidden units leaves a model that `transformers` goes on training near
its fine-tuned loss; with more labels than pairs fit, in offset units where GELU is the identity
(`offset_head`). Either is checked in fp32 on the worst-case inputs before anything is written.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from torch import nn

from electra.errors import ElectraError

# The offset rewrite of the one-layer classifier into HF's two layers (`offset_head`), used when
# the labels outnumber the GELU pairs HF's head has room for: each logit's hidden unit runs in
# [GELU_FLOOR, GELU_FLOOR + 2 * HEAD_SPREAD], where exact-erf GELU is the identity in fp32 (Phi(z)
# rounds to 1 from z = 5.37). A wider spread makes the constant that the output layer takes back
# off smaller beside the signal (fp32 rounding ~ B (1 + 6/k)).
GELU_FLOOR = 6.0
HEAD_SPREAD = 64.0
# GELU pairs per label in the rewrite that keeps training (`paired_head`), at most. More pairs
# dilute HF's dropout on them further, but r copies of one value summed by out_proj add their
# fp32 rounding alike: at 16 the worst-case logit is ours to ~5e-7 of its size, as our own fp32
# is; at 64, ~3e-6, which a logit of 30 would take past REWRITE_TOLERANCE.
MAX_PAIRS = 16


def exact_classification_head(
    weight: torch.Tensor,
    bias: torch.Tensor,
    gamma: torch.Tensor,
    beta: torch.Tensor,
    source: Path,
) -> dict[str, torch.Tensor]:
    """Our one linear layer (`weight` [L, H], `bias`) on the final [CLS] vector, rewritten as HF's
    `ElectraClassificationHead` (dense H->H, exact GELU, out_proj H->L) computing the same logits:
    in GELU pairs (`paired_head`) when 2L <= H, else with offset units (`offset_head`). The
    logits are then ours up to fp32 rounding, which is checked here on the worst-case inputs
    before anything is written."""
    labels, hidden = weight.shape
    if labels > hidden:
        raise ElectraError(
            f"{source}: {labels} labels exceed the hidden size {hidden}; HF's two-layer head "
            "cannot carry them exactly, so export is refused"
        )
    w, b = weight.double(), bias.double()
    if pairs_fit(labels, hidden):
        head = paired_head(w, b, beta.double())
    else:
        head = offset_head(w, b, gamma.double(), beta.double())
    head = {k: v.float() for k, v in head.items()}
    _check_rewrite(head, weight, bias, gamma, beta, source)
    return head


def pairs_fit(labels: int, hidden: int) -> bool:
    """Whether HF's head has room for a GELU pair per label (`paired_head`)."""
    return 2 * labels <= hidden


def paired_head(w: torch.Tensor, b: torch.Tensor, beta: torch.Tensor) -> dict[str, torch.Tensor]:
    """The rewrite that keeps training: GELU(a) - GELU(-a) = a Phi(a) + a (1 - Phi(a)) = a for
    every a, so label j's part v_j = w_j . (x - beta) is carried by r = min(MAX_PAIRS, H // (2L))
    pairs of hidden units, a = +-v_j / (r s_j), with out_proj weights +-s_j; out_proj's bias adds
    b_j + w_j . beta back. No unit holds an offset, so HF's dropout on them (train mode) moves
    logit j by about |v_j| sqrt(p / ((1 - p) 2r)), 6% at r = 16 and p = 0.1, where offset units
    swing it by their whole size. w_j . beta, the logit of the [CLS] vector beta (a zero-mean
    LayerNorm input), is the middle of its reachable range (`offset_head`), found without data;
    s_j = sqrt(|w_j| / r) splits the map between the layers evenly (dense rows and out_proj
    weights of one norm, the smallest weights that carry it)."""
    labels, hidden = w.shape
    r = min(MAX_PAIRS, hidden // (2 * labels))
    scale = (w.norm(dim=1) / r).sqrt().clamp_min(1e-12)
    rows = w / (r * scale[:, None])
    centre = w @ beta
    dense_w = torch.zeros(hidden, hidden, dtype=torch.float64)
    dense_b = torch.zeros(hidden, dtype=torch.float64)
    out_w = torch.zeros(labels, hidden, dtype=torch.float64)
    for j in range(labels):
        for sign, first in ((1.0, 2 * j * r), (-1.0, (2 * j + 1) * r)):
            units = slice(first, first + r)
            dense_w[units] = sign * rows[j]
            dense_b[units] = -sign * centre[j] / (r * scale[j])
            out_w[j, units] = sign * scale[j]
    return {
        "dense.weight": dense_w,
        "dense.bias": dense_b,
        "out_proj.weight": out_w,
        "out_proj.bias": b + centre,
    }


def offset_head(
    w: torch.Tensor, b: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor
) -> dict[str, torch.Tensor]:
    """The rewrite for more labels than pairs fit: one unit per label, shifted to where GELU is
    the identity. Exact in eval mode; in train mode HF's dropout on a unit removes its offset
    (logits swing by tens), so further training starts far from the fine-tuned loss.

    The [CLS] vector is a LayerNorm output x = gamma * n + beta with sum(n) = 0 and |n|^2 < H, so
    logit j's linear part u_j = w_j . x lies within B_j = |centred(w_j * gamma)| sqrt(H) of
    m_j = w_j . beta (Cauchy-Schwarz; reached by some input). Dense unit j computes
    z_j = (u_j - m_j) k / B_j + k + 6, always in [6, 2k + 6], where GELU(z) = z exactly in fp32;
    out_proj takes the scale and shift back off. The other H - L units get zero weights and bias,
    so GELU(0) = 0 and they add nothing."""
    labels, hidden = w.shape
    v = w * gamma
    spread = ((v - v.mean(1, keepdim=True)).norm(dim=1) * math.sqrt(hidden)).clamp_min(1e-12)
    scale = HEAD_SPREAD / spread
    shift = HEAD_SPREAD + GELU_FLOOR - scale * (w @ beta)
    dense_w = torch.zeros(hidden, hidden, dtype=torch.float64)
    dense_w[:labels] = w * scale[:, None]
    dense_b = torch.zeros(hidden, dtype=torch.float64)
    dense_b[:labels] = shift
    out_w = torch.zeros(labels, hidden, dtype=torch.float64)
    out_w[:, :labels] = torch.diag(1.0 / scale)
    return {
        "dense.weight": dense_w,
        "dense.bias": dense_b,
        "out_proj.weight": out_w,
        "out_proj.bias": b - shift / scale,
    }


# The rewritten head's logits may differ from ours by this much (fp32 rounding), scaled up for
# logits beyond 50 in size: a [CLS] vector made to push a logit to its extreme.
REWRITE_TOLERANCE = 1e-4


def _check_rewrite(head, weight, bias, gamma, beta, source: Path) -> None:
    """Compares the rewritten head with ours in fp32 on LayerNorm outputs: random ones, and for
    each logit the two inputs at the ends of its range (where the hidden units are least and
    most, and the rounding largest). Refuses the export if they differ."""
    hidden = weight.shape[1]
    v = weight.double() * gamma.double()
    direction = v - v.mean(1, keepdim=True)
    n = direction / direction.norm(dim=1, keepdim=True).clamp_min(1e-12) * math.sqrt(hidden)
    n = torch.cat([n, -n, torch.randn(64, hidden, generator=torch.Generator().manual_seed(0))])
    n = n - n.mean(1, keepdim=True)
    n = n / n.pow(2).mean(1, keepdim=True).sqrt().clamp_min(1e-12) * (1 - 1e-6)
    x = (n * gamma.double() + beta.double()).float()
    ours = x @ weight.T + bias
    z = x @ head["dense.weight"].T + head["dense.bias"]
    theirs = nn.functional.gelu(z) @ head["out_proj.weight"].T + head["out_proj.bias"]
    limit = REWRITE_TOLERANCE * max(1.0, ours.abs().max().item() / 50)
    if (theirs - ours).abs().max().item() > limit:
        raise ElectraError(
            f"{source}: the classifier could not be rewritten exactly as Hugging Face's two-layer "
            "head (logits differ beyond fp32 rounding), so export is refused"
        )
