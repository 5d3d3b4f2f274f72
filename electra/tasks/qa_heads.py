"""The two heads of extractive question answering (`QaSettings.qa_head`), each a small strategy
of `electra.tasks.qa.QaTask`: the model it builds, its loss, what inference keeps, its candidate
spans in a window, and its null score (the higher, the less answerable).

- official: the paper's XLNet-style head (docs/specification.md §Fine-tuning,
  `ElectraForQuestionAnswering`): start and end log-probabilities with an answerability logit,
  trained with the answerability loss; its candidates are the top `n_best` starts and, for each,
  its top ends; the null score the lowest answerability logit over the question's windows.
- linear: BERT's and Hugging Face's (`ElectraForSpanQuestionAnswering`): start and end logits,
  trained with cross-entropy towards the gold tokens (position 0, [CLS], where the window has no
  answer); the best span the highest start + end logit sum among the top `n_best` starts and
  ends; the null score HF's run_squad compares with its threshold: the lowest [CLS] score
  (start[0] + end[0]) over the windows minus the best span's score.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import nn

from electra.model.configs import AnyModelConfig
from electra.model.heads import build_head
from electra.tasks.base import Batch

ANSWERABILITY_WEIGHT = 0.5
# The linear head's null score for a question with no valid span in any window: no answer.
NO_SPAN_NULL_SCORE = 1e4
# A candidate span in a window: start and end token, the score it is ranked by, its log-probability.
Candidate = tuple[int, int, float, float]


class OfficialHead:
    name = "official"
    null_threshold = -2.75  # the official test setting, on the answerability logit
    token_outputs: tuple[str, ...] = ()  # its outputs are already the top candidates

    def __init__(self, n_best: int):
        self.n_best = n_best

    def build_model(self, cfg: AnyModelConfig) -> nn.Module:
        """`ElectraForQuestionAnswering`; the electra family's only (refused on another)."""
        return build_head("official_qa", cfg)

    def losses(self, model, batch: Batch) -> torch.Tensor:
        out = model(
            batch["input_ids"],
            batch["token_type_ids"],
            batch["attention_mask"],
            start_positions=batch["start_positions"],
        )
        start = F.cross_entropy(
            out["start_logits"].float(), batch["start_positions"], reduction="none"
        )
        end = F.cross_entropy(out["end_logits"].float(), batch["end_positions"], reduction="none")
        answerable = F.binary_cross_entropy_with_logits(
            out["answerable_logit"].float(), batch["is_impossible"], reduction="none"
        )
        return (start + end) / 2 + ANSWERABILITY_WEIGHT * answerable

    def infer(self, model, batch: Batch) -> Batch:
        out = model(
            batch["input_ids"], batch["token_type_ids"], batch["attention_mask"], n_top=self.n_best
        )
        return {k: _to_n_best(v, self.n_best) for k, v in out.items()}

    def candidates(self, row: Batch) -> Iterator[Candidate]:
        """A window's top starts and, for each, its top ends, ranked by log-probability."""
        start_lp, start_ix = row["start_log_probs"].tolist(), row["start_index"]
        end_lp, end_ix = row["end_log_probs"].tolist(), row["end_index"]
        for i, s in enumerate(start_ix.tolist()):
            for j, e in enumerate(end_ix[i].tolist()):
                score = start_lp[i] + end_lp[i][j]
                yield s, e, score, score

    def cls_scores(self, outputs: Batch) -> list[float]:
        """Each window's score of no answer, of which a question's null score is the lowest."""
        return outputs["answerable_logit"].tolist()

    def null_scores(self, lowest: dict[int, float], spans: dict) -> dict[int, float]:
        """Each question's null score from its lowest `cls_scores`: those themselves."""
        return lowest


class LinearHead:
    name = "linear"
    null_threshold = 0.0  # HF's `null_score_diff_threshold`, on the null-minus-best-span score
    # Its logits go back whole to the host, one per token (padded by `predict`).
    token_outputs = ("start_logits", "end_logits")

    def __init__(self, n_best: int):
        self.n_best = n_best

    def build_model(self, cfg: AnyModelConfig) -> nn.Module:
        """The span head of the encoder's family (`electra.model.heads.build_head`)."""
        return build_head("span_qa", cfg)

    def losses(self, model, batch: Batch) -> torch.Tensor:
        """HF's loss, per example: the mean of the start and end cross-entropies."""
        out = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
        start = F.cross_entropy(
            out["start_logits"].float(), batch["start_positions"], reduction="none"
        )
        end = F.cross_entropy(out["end_logits"].float(), batch["end_positions"], reduction="none")
        return (start + end) / 2

    def infer(self, model, batch: Batch) -> Batch:
        out = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
        return {k: v.float() for k, v in out.items()}

    def candidates(self, row: Batch) -> Iterator[Candidate]:
        """The top `n_best` starts by the top `n_best` ends of a window's tokens, ranked by
        start + end logit; the log-probability is under the start and end softmaxes."""
        start, end = row["start_logits"], row["end_logits"]
        norm = float(start.logsumexp(0) + end.logsumexp(0))
        k = min(self.n_best, len(start))
        ends = end.topk(k).indices.tolist()
        for s in start.topk(k).indices.tolist():
            for e in ends:
                score = float(start[s] + end[e])
                yield s, e, score, score - norm

    def cls_scores(self, outputs: Batch) -> list[float]:
        return (outputs["start_logits"][:, 0] + outputs["end_logits"][:, 0]).tolist()

    def null_scores(self, lowest: dict[int, float], spans: dict) -> dict[int, float]:
        """The lowest [CLS] score minus the best span's (`spans`, `QaTask._best_spans`); with no
        valid span, no answer."""
        return {i: lowest[i] - spans[i][0] if i in spans else NO_SPAN_NULL_SCORE for i in lowest}


QA_HEADS = {"official": OfficialHead, "linear": LinearHead}


def _to_n_best(value: torch.Tensor, n_best: int) -> torch.Tensor:
    """An official-head output in fp32 with its top-k dimensions filled up to `n_best`: a batch
    trimmed to fewer than `n_best` tokens has fewer candidates, and batches are concatenated.
    The filling is index 0, never a span (decoding skips it), at a log-probability below any."""
    if value.is_floating_point():
        value = value.float()
    if value.dim() < 2 or value.shape[-1] >= n_best:
        return value
    gap = n_best - value.shape[-1]
    pad = (0, gap) if value.dim() == 2 else (0, gap, 0, gap)  # [B, k] or [B, k, k]
    return F.pad(value, pad, value=-1e4 if value.is_floating_point() else 0)
