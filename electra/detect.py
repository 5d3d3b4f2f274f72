"""Replaced-token detection on raw text: each token's probability of being "replaced", by a discriminator."""

from __future__ import annotations

from pathlib import Path

import torch

from electra.errors import ElectraError
from electra.model import ElectraForPreTraining
from electra.pretrained import load_pretrained


def detect(model_path: str | Path, texts: list[str]) -> list[list[dict[str, float | str]]]:
    """For each text, [{token, p_replaced}] over its word pieces ([CLS]/[SEP] left out)."""
    model, tokenizer = load_pretrained(model_path)
    if not isinstance(model, ElectraForPreTraining):
        raise ElectraError(
            f"{model_path} is a {type(model).__name__}: detect needs a discriminator "
            "(a run folder or its discriminator/ folder)"
        )
    limit = model.config.max_position_embeddings
    results = []
    for text in texts:
        enc = tokenizer.encode(text)
        ids, types = enc.ids[:limit], enc.type_ids[:limit]
        with torch.no_grad():
            logits = model(torch.tensor([ids]), torch.tensor([types]))[0]
        probs = torch.sigmoid(logits.float()).tolist()
        special = enc.special_tokens_mask[:limit]
        results.append(
            [
                {"token": tok, "p_replaced": round(p, 4)}
                for tok, p, s in zip(enc.tokens[:limit], probs, special, strict=True)
                if not s
            ]
        )
    return results


def format_table(tokens: list[dict[str, float | str]]) -> str:
    width = max((len(str(t["token"])) for t in tokens), default=5)
    lines = []
    for t in tokens:
        p = float(t["p_replaced"])
        lines.append(f"{t['token']:<{width}}  {p:.3f}  {'#' * round(p * 20)}")
    return "\n".join(lines)
