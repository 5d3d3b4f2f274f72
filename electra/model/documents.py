"""Which keys a query may see when a row packs several documents: the attention masks built from
document numbers (docs/pretraining.md, §Document masking)."""

from __future__ import annotations

import torch


def same_document(documents: torch.Tensor) -> torch.Tensor:
    """[B, 1, T, T]: True where query and key are real tokens of the same document, from
    document numbers [B, T] (0 for padding; a padding mask of 0s and 1s is one document)."""
    docs = documents[:, None, :]
    return (docs[..., :, None] == docs[..., None, :]) & (docs[..., None, :] != 0)
