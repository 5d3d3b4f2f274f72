"""Replaced-token detection on raw text: each token's probability of being "replaced", by a discriminator."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from tokenizers import decoders

from electra.engine.runtime import prepare_model
from electra.errors import ElectraError
from electra.folders.model_folder import load_pretrained, trained_objective, with_article
from electra.model.family import families


def discriminators() -> tuple[type, ...]:
    """Every registered family's discriminator class: one replaced-token logit per token."""
    return tuple(f.pretraining for f in families().values())


def load_discriminator(model_path: str | Path, command: str):
    """The discriminator in `model_path` (of any family: a modern one's folder is HF's two-label
    token classifier, read back as one logit) and its tokenizer, or an error naming `command`."""
    model, tokenizer = load_pretrained(model_path)
    if not isinstance(model, discriminators()):
        raise ElectraError(
            f"{model_path} is {with_article(type(model).__name__)}: {command} needs a "
            "discriminator (a run folder or its discriminator/ folder)"
        )
    return prepare_model(model, torch.device("cpu")).eval(), tokenizer


def token_logits(model: torch.nn.Module, tokenizer, text: str) -> tuple[torch.Tensor, list]:
    """The discriminator's logit per word piece of `text` (cut to the model's length,
    `max_position_embeddings` in every family), and the word pieces as text (`piece_text`),
    [CLS] and [SEP] left out."""
    enc = tokenizer.encode(text)
    limit = model.config.max_position_embeddings
    with torch.no_grad():
        logits = model(torch.tensor([enc.ids[:limit]]), torch.tensor([enc.type_ids[:limit]]))
    keep = torch.tensor(enc.special_tokens_mask[:limit]) == 0
    pieces = zip(enc.tokens[:limit], enc.offsets[:limit], keep.tolist(), strict=True)
    tokens = [piece_text(tokenizer, t, text[a:b]) for t, (a, b), k in pieces if k]
    return logits[0].float()[keep], tokens


def piece_text(tokenizer, piece: str, span: str) -> str:
    """A word piece as text: the tokenizer's decoder on the piece alone, so that a byte-level BPE
    piece reads as its characters (`Ġche` is " che", the space marking a word's start) and a
    WordPiece continuation keeps its `##` (`##ing`), as BERT's decoder writes a piece alone, and
    a Unigram piece's `▁` is a space too. A
    piece that holds part of a character's bytes (no text alone) is the text it covers
    (`span`); a tokenizer without a decoder gives its pieces as they are."""
    decoder = tokenizer.decoder
    if decoder is None:
        return piece
    text = decoder.decode([piece])
    if isinstance(decoder, decoders.Metaspace) and piece.startswith(decoder.replacement):
        # Metaspace drops a text's first word-start mark, which a lone piece always is: keep it
        # as a space, as byte-level BPE's `Ġ` reads.
        text = " " + text
    return span if "\ufffd" in text and "\ufffd" not in span and span else text


def detect(model_path: str | Path, texts: list[str]) -> list[list[dict[str, float | str]]]:
    """For each text, [{token, p_replaced}] over its word pieces ([CLS]/[SEP] left out): each
    piece as text (`piece_text`), its probability at full precision."""
    if trained_objective(Path(model_path)) == "electric":
        raise ElectraError(
            f"{model_path} is an Electric energy model: its outputs are energies, not "
            "probabilities of replacement; score texts with `electra score-text`"
        )
    model, tokenizer = load_discriminator(model_path, "detect")
    check_texts(tokenizer, texts, model.config.max_position_embeddings)
    results = []
    for text in texts:
        logits, tokens = token_logits(model, tokenizer, text)
        probs = torch.sigmoid(logits).tolist()
        results.append([{"token": t, "p_replaced": p} for t, p in zip(tokens, probs, strict=True)])
    return results


def check_texts(tokenizer, texts: list[str], limit: int) -> None:
    """Refuses an empty text before anything is printed (its table would be blank), and warns of
    a text the model cannot read whole (its table would end early)."""
    warnings = []
    for i, text in enumerate(texts, 1):
        mask = tokenizer.encode(text).special_tokens_mask
        pieces, kept = mask.count(0), mask[:limit].count(0)
        if not text.strip():
            raise ElectraError(f"text {i} is empty: pass non-empty texts")
        if pieces == 0:
            raise ElectraError(
                f"text {i} ({text!r}) has no word pieces for this tokenizer: pass texts with words"
            )
        if kept < pieces:
            warnings.append(
                f"warning: text {i} was cut to its first {kept} of {pieces} word pieces: the "
                f"model reads at most {limit} positions (max_position_embeddings)"
            )
    for line in warnings:
        print(line, file=sys.stderr)


def format_table(tokens: list[dict[str, float | str]]) -> str:
    width = max((len(str(t["token"])) for t in tokens), default=5)
    lines = []
    for t in tokens:
        p = float(t["p_replaced"])
        lines.append(f"{t['token']:<{width}}  {p:.3f}  {'#' * round(p * 20)}")
    return "\n".join(lines)
