"""The base of Electric's two-tower cloze generator (docs/objectives.md §Electric), whatever the
family: a left-to-right and a right-to-left encoder read each position's context on either side;
each family's subclass (its record's `cloze_towers`) builds the towers and the head."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from electra.model.documents import same_document


class ClozeTowers(nn.Module):
    """q(x_t | x_\\t) at every position from a left-to-right and a right-to-left encoder (`ltr`,
    `rtl`, called as every family's encoder is) and a head over their states side by side; each
    family's class builds the towers and the head."""

    def forward(
        self, input_ids: torch.Tensor, token_type_ids: torch.Tensor, attention_mask: torch.Tensor
    ) -> torch.Tensor:
        """Cloze logits [B, T, V]."""
        t = input_ids.shape[1]
        lower = torch.ones(t, t, dtype=torch.bool, device=input_ids.device).tril()
        eye = torch.eye(t, dtype=torch.bool, device=input_ids.device)
        keys = same_document(attention_mask)  # [B, 1, T, T]
        # Query i attends to the real keys of its document on its side; always to itself, so
        # that no row of a padded query is empty (an all-masked softmax row is NaN).
        ltr = self.ltr(input_ids, token_type_ids, (lower & keys) | eye)
        rtl = self.rtl(input_ids, token_type_ids, (lower.T & keys) | eye)
        left = F.pad(ltr[:, :-1], (0, 0, 1, 0))  # position t gets ltr[t - 1]
        right = F.pad(rtl[:, 1:], (0, 0, 0, 1))  # and rtl[t + 1]
        # ... of its own document only: a packed row's next document is not its context.
        docs = attention_mask[:, :, None]
        left = left * (F.pad(docs[:, :-1], (0, 0, 1, 0)) == docs)
        right = right * (F.pad(docs[:, 1:], (0, 0, 0, 1)) == docs)
        return self.cloze_logits(torch.cat([left, right], -1))

    def cloze_logits(self, both: torch.Tensor) -> torch.Tensor:
        """Vocabulary logits from the two towers' states side by side [..., 2H]."""
        raise NotImplementedError
