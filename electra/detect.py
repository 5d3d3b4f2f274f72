"""Replaced-token detection on raw text: each token's probability of being "replaced", by a discriminator."""

from __future__ import annotations

from pathlib import Path

import torch

from electra.errors import ElectraError
from electra.model import ElectraForPreTraining
from electra.pretrained import load_pretrained, trained_objective


def load_discriminator(model_path: str | Path, command: str):
    """The discriminator in `model_path` and its tokenizer, or an error naming `command`."""
    model, tokenizer = load_pretrained(model_path)
    if not isinstance(model, ElectraForPreTraining):
        raise ElectraError(
            f"{model_path} is a {type(model).__name__}: {command} needs a discriminator "
            "(a run folder or its discriminator/ folder)"
        )
    return model.eval(), tokenizer


def token_logits(model: ElectraForPreTraining, tokenizer, text: str) -> tuple[torch.Tensor, list]:
    """The discriminator's logit per word piece of `text` (cut to the model's length), and the
    word pieces, [CLS] and [SEP] left out."""
    enc = tokenizer.encode(text)
    limit = model.config.max_position_embeddings
    with torch.no_grad():
        logits = model(torch.tensor([enc.ids[:limit]]), torch.tensor([enc.type_ids[:limit]]))
    keep = torch.tensor(enc.special_tokens_mask[:limit]) == 0
    tokens = [t for t, k in zip(enc.tokens[:limit], keep.tolist(), strict=True) if k]
    return logits[0].float()[keep], tokens


def detect(model_path: str | Path, texts: list[str]) -> list[list[dict[str, float | str]]]:
    """For each text, [{token, p_replaced}] over its word pieces ([CLS]/[SEP] left out)."""
    if trained_objective(Path(model_path)) == "electric":
        raise ElectraError(
            f"{model_path} is an Electric energy model: its outputs are energies, not "
            "probabilities of replacement; score texts with `electra score-text`"
        )
    model, tokenizer = load_discriminator(model_path, "detect")
    results = []
    for text in texts:
        logits, tokens = token_logits(model, tokenizer, text)
        probs = torch.sigmoid(logits).tolist()
        results.append(
            [{"token": t, "p_replaced": round(p, 4)} for t, p in zip(tokens, probs, strict=True)]
        )
    return results


def format_table(tokens: list[dict[str, float | str]]) -> str:
    width = max((len(str(t["token"])) for t in tokens), default=5)
    lines = []
    for t in tokens:
        p = float(t["p_replaced"])
        lines.append(f"{t['token']:<{width}}  {p:.3f}  {'#' * round(p * 20)}")
    return "\n".join(lines)
