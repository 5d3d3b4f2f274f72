"""What a logging window reports of an objective's steps: each statistic's mean, and the
discriminator's AUC over every token it judged, from histograms built on the device.

A step's statistics are detached tensors that the trainer sums over the window's micro-batches
(and ranks) without reading them back; an objective turns those sums into logged numbers once
per window (`Objective.metrics`). A scalar statistic is logged as its mean; a histogram is summed
whole and read by the objective that made it.
"""

from __future__ import annotations

import math

import torch

AUC_BINS = 4096
# Each histogram has one more bin, after the AUC_BINS of p(replaced), counting the tokens whose
# score is NaN (a diverging step's): they stay out of the AUC and are logged as their count.
NAN_BIN = AUC_BINS
# The statistic holding a window's [replaced, original] histograms of p(replaced); the logged
# metric is `disc_auc`, under its own name so that it keeps its column in metrics.jsonl.
AUC_HISTOGRAMS = "disc_auc_histograms"
# The logged count of judged tokens whose score was NaN, where a window had any.
NAN_SCORES = "disc_nan_scores"


def auc_histograms(
    logits: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Counts of real tokens per bin of p(replaced), for replaced and for original tokens, and in
    the last bin (`NAN_BIN`) those whose score is NaN.

    Built with scatter_add on the device (static shapes, no host sync), so a logging window can
    sum them over every token it saw and read back one small tensor at the end. An infinite logit
    is p = 0 or 1; a NaN one would turn into a bin of -2**63 (an index error, or a device assert
    on a GPU) and goes to `NAN_BIN` instead, so a diverging step is counted, not fatal."""
    p = torch.sigmoid(logits.float()).flatten()
    scaled = (p.nan_to_num(0.0) * (AUC_BINS - 1)).round().long().clamp_(0, AUC_BINS - 1)
    bins = torch.where(torch.isnan(p), NAN_BIN, scaled)
    real = mask.flatten().float()
    replaced = labels.flatten().float() * real
    zeros = torch.zeros(AUC_BINS + 1, device=logits.device)
    return zeros.scatter_add(0, bins, replaced), zeros.scatter_add(0, bins, real - replaced)


def auc_from_histograms(pos: torch.Tensor, neg: torch.Tensor) -> float:
    """ROC AUC: P(score of a replaced token > score of an original one), ties counted half.
    Exact up to the bin width; NaN when one class is absent. NaN scores (`NAN_BIN`) are left out."""
    pos, neg = pos[..., :AUC_BINS].double().cpu(), neg[..., :AUC_BINS].double().cpu()
    n_pos, n_neg = pos.sum().item(), neg.sum().item()
    if n_pos == 0 or n_neg == 0:
        return math.nan
    neg_below = torch.cumsum(neg, 0) - neg
    return ((pos * (neg_below + 0.5 * neg)).sum() / (n_pos * n_neg)).item()


def auc_stat(logits: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The `AUC_HISTOGRAMS` statistic of one micro-batch: [2, AUC_BINS + 1], replaced then
    original."""
    with torch.no_grad():
        return torch.stack(auc_histograms(logits.detach(), labels, mask))


def mean_stats(sums: dict[str, torch.Tensor], counts: dict[str, int]) -> dict[str, float]:
    """Each scalar statistic's mean over the `counts[k]` micro-batches (of all ranks) whose sum
    is `sums[k]`; statistics of another shape are left to whoever made them."""
    return {k: v.item() / counts[k] for k, v in sums.items() if v.dim() == 0}


def detection_metrics(sums: dict[str, torch.Tensor], counts: dict[str, int]) -> dict[str, float]:
    """`mean_stats`, and `disc_auc` over every token the window's discriminator judged (absent
    when no step of the window reported its histograms), with `disc_nan_scores`, the tokens left
    out of it for a NaN score, where there were any."""
    metrics = mean_stats(sums, counts)
    if AUC_HISTOGRAMS in sums:
        pos, neg = sums[AUC_HISTOGRAMS]
        metrics["disc_auc"] = auc_from_histograms(pos, neg)
        nan_scores = int(pos[NAN_BIN].item() + neg[NAN_BIN].item())
        if nan_scores:
            metrics[NAN_SCORES] = nan_scores
    return metrics
