"""Replaced-token detection on held-out text: a pretraining run's discriminator on text corrupted
by its own generator, scored against what chance and the always-"original" answer get.

Training logs the discriminator's AUC on the batches it learns from, [CLS] and [SEP] included;
this is the honest figure: text the run never saw, word pieces only (specials are never replaced,
so they would flatter it). The flagging rule is the one a user can apply without labels: with r
the share of replaced tokens, flag the r share the discriminator scores highest; its precision
against chance (r) says how much better than guessing the flags are.
"""

from __future__ import annotations

from dataclasses import astuple, dataclass
from pathlib import Path

import numpy as np
import torch
from sklearn.metrics import roc_auc_score

from electra.config import RunConfig
from electra.data.store import PretrainingData
from electra.engine.runtime import prepare_model
from electra.errors import ElectraError
from electra.folders.model_folder import load_pretrained
from electra.objectives.base import Objective


@dataclass
class Detection:
    """Scores over held-out word pieces, and what each token was (for a showcase)."""

    tokens: int
    replaced_fraction: float  # r: the chance precision of any flagging rule
    auc: float  # chance: 0.5
    precision_at_r: float  # of the r share scored highest, the share truly replaced
    accuracy: float  # at p > 0.5
    always_original: float  # accuracy of answering "original" everywhere: 1 - r
    threshold: float  # the p(replaced) above which a token is among the r share flagged
    rows: list[dict]  # per example: original ids, corrupted ids, p(replaced), replaced, scored


def corrupt_and_score(
    run_dir: str | Path, data_dir: str | Path, max_examples: int = 256, seed: int = 0
) -> Detection:
    """Masks held-out examples as the run's objective does, fills them with its generator's
    samples and scores every word piece with its discriminator."""
    run_dir = Path(run_dir)
    cfg = RunConfig.load(run_dir / "config.json")
    if not (run_dir / "generator").is_dir() or not (run_dir / "discriminator").is_dir():
        raise ElectraError(
            f"{run_dir} has no generator/ and discriminator/: held-out detection needs a "
            "finished ELECTRA run"
        )
    generator, _ = load_pretrained(run_dir / "generator")
    discriminator, _ = load_pretrained(run_dir / "discriminator")
    cpu = torch.device("cpu")
    generator, discriminator = prepare_model(generator, cpu), prepare_model(discriminator, cpu)
    data = PretrainingData(data_dir)
    corruption = Objective(cfg.objective, data.special, data.seq_len)
    batch = data.batch(np.arange(min(len(data), max_examples)), bool(cfg.data.document_mask))
    ids, types, mask = batch["input_ids"], batch["token_type_ids"], batch["attention_mask"]
    with torch.no_grad(), torch.random.fork_rng():
        torch.manual_seed(seed)
        c = corruption.corrupt(generator, ids, types, mask)
        probs = torch.sigmoid(discriminator(c.corrupted, types, mask).float())
    specials = torch.tensor(astuple(data.special))
    scored = mask.bool() & ~torch.isin(ids, specials)  # word pieces only
    return _scores(ids, c.corrupted, probs, c.replaced, scored)


def _scores(ids, corrupted, probs, replaced, scored) -> Detection:
    p, truth = probs[scored].numpy(), replaced[scored].numpy()
    k = int(truth.sum())
    if k == 0 or k == len(truth):
        raise ElectraError("the held-out text has no replaced or no original token to score")
    order = np.argsort(-p, kind="stable")
    columns = {"original": ids, "corrupted": corrupted, "p": probs, "replaced": replaced}
    columns["scored"] = scored
    rows = [{name: t[b].tolist() for name, t in columns.items()} for b in range(len(ids))]
    r = k / len(truth)
    return Detection(
        tokens=len(truth),
        replaced_fraction=r,
        auc=float(roc_auc_score(truth, p)),
        precision_at_r=float(truth[order[:k]].mean()),
        accuracy=float(((p > 0.5) == truth).mean()),
        always_original=1 - r,
        threshold=float(p[order[k - 1]]),
        rows=rows,
    )


def summary(d: Detection) -> str:
    """The evaluation in three lines, each figure beside what guessing gets."""
    return (
        f"held-out text, {d.tokens} word pieces, {d.replaced_fraction:.1%} replaced by the "
        "generator:\n"
        f"  AUC {d.auc:.3f} (chance 0.5); of the {d.replaced_fraction:.1%} it scores highest, "
        f"{d.precision_at_r:.1%} were replaced (chance {d.replaced_fraction:.1%})\n"
        f"  accuracy at p > 0.5: {d.accuracy:.1%} (always answering 'original': "
        f"{d.always_original:.1%})"
        + (
            "\n  its p > 0.5 answers are no better than always 'original': what it has learned "
            "shows in its ranking (AUC, precision), not yet in calibrated answers"
            if d.accuracy <= d.always_original
            else ""
        )
    )


def showcase(d: Detection, tokenizer, before: int = 6, width: int = 24) -> str:
    """A window of held-out prose around a replacement: each word piece with p(replaced), what the
    generator replaced, and what the evaluation's rule flags. The window is the first one, in data
    order, that holds a replacement and is mostly words (not code or tables): chosen by position,
    never by how well the model did on it."""
    row, window = next(_prose_windows(d, tokenizer, before, width), (d.rows[0], []))
    lines = []
    for i in window:
        token = tokenizer.id_to_token(row["corrupted"][i])
        p = row["p"][i]
        was = f"replaced (was {tokenizer.id_to_token(row['original'][i])!r})"
        note = [was] if row["replaced"][i] else []
        note += ["flagged"] if p >= d.threshold else []
        lines.append(f"{token:<14} {p:.3f}  {'#' * round(p * 20):<20}  {', '.join(note)}")
    return "\n".join(lines)


def _prose_windows(d: Detection, tokenizer, before: int, width: int):
    for row in d.rows:
        scored = [i for i, s in enumerate(row["scored"]) if s]
        for n, i in enumerate(scored):
            window = scored[max(0, n - before) :][:width]
            words = sum(tokenizer.id_to_token(row["original"][j]).isalpha() for j in window)
            if row["replaced"][i] and words >= 0.75 * len(window):
                yield row, window
