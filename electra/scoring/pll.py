"""Electric's pseudo-log-likelihood of text (Clark et al. 2020, §re-ranking): the energy model
gives log p(x_t | x_\\t) = -E(x)_t up to a normaliser that NCE training drives towards 1, so a
text's score is -Σ_t E(x)_t over its word pieces ([CLS] and [SEP] left out), from one forward pass
(a masked LM needs one pass per token). Higher is more likely; used to re-rank candidates.
"""

from __future__ import annotations

from pathlib import Path

from electra.errors import ElectraError
from electra.folders.model_folder import trained_objective
from electra.scoring.detect import check_texts, load_discriminator, token_logits


def pseudo_log_likelihood(model_path: str | Path, texts: list[str]) -> list[dict]:
    """For each text: {"text", "pll", "tokens", "energies"} under an Electric energy model."""
    model_path = Path(model_path)
    objective = trained_objective(model_path)
    if objective not in (None, "electric"):
        raise ElectraError(
            f"{model_path} was pretrained with objective.name={objective}: its logits are not "
            "energies; score-text needs a model pretrained with objective.name=electric"
        )
    model, tokenizer = load_discriminator(model_path, "score-text")
    check_texts(tokenizer, texts, model.config.max_position_embeddings)
    results = []
    for text in texts:
        energies, _ = token_logits(model, tokenizer, text)
        results.append(
            {
                "text": text,
                "pll": -energies.sum().item(),
                "tokens": len(energies),
                "energies": [round(e, 4) for e in energies.tolist()],
            }
        )
    return results
