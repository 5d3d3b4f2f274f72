"""`electra demo`: tokenizer -> prepare -> pretrain (tiny preset) -> detect -> plot, on CPU, in minutes.

The corpus is the Python documentation that every CPython ships (`pydoc_data.topics`): English
prose that needs no download and is not part of this repository.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from electra.config import apply_overrides, preset
from electra.data import prepare
from electra.detect import detect, format_table
from electra.errors import ElectraError
from electra.plot import plot_run
from electra.tokenizer import save_tokenizer, train_tokenizer
from electra.tracking import read_metrics
from electra.train import pretrain

MARKER = ".electra-demo"
SENTENCES = (
    "the for statement is used to iterate over the elements of a sequence .",
    "the for statement is used to iterate over the elements of a class .",
)


def write_builtin_corpus(path: Path) -> int:
    """One document per documentation topic, one line per paragraph line, blank lines between."""
    import pydoc_data.topics

    topics = pydoc_data.topics.topics
    with path.open("w", encoding="utf-8") as f:
        for name in sorted(topics):
            lines = [line.strip() for line in topics[name].splitlines()]
            f.write("\n".join(line for line in lines if line) + "\n\n")
    return len(topics)


def run_demo(out_dir: str | Path, steps: int | None = None) -> Path:
    out = Path(out_dir)
    if out.exists():
        if not (out / MARKER).exists():
            raise ElectraError(f"{out} exists and is not a demo folder: pass another --out")
        shutil.rmtree(out)
    out.mkdir(parents=True)
    (out / MARKER).touch()

    def say(msg: str) -> None:
        print(f"\n== {msg}", file=sys.stderr)

    corpus = out / "corpus" / "python-docs.txt"
    corpus.parent.mkdir()
    n = write_builtin_corpus(corpus)
    say(
        f"corpus: {n} Python documentation topics ({corpus.stat().st_size / 1e6:.1f} MB) -> {corpus}"
    )

    say("electra tokenizer train (WordPiece, 8192 tokens)")
    tokenizer = train_tokenizer([corpus], vocab_size=8192, lowercase=True)
    save_tokenizer(tokenizer, out / "tokenizer", lowercase=True)

    say("electra prepare (seq len 128)")
    summary = prepare([str(corpus)], out / "tokenizer", seq_len=128, out_dir=out / "data")
    print(f"{summary['examples']} examples, {summary['tokens']} tokens", file=sys.stderr)

    say("electra pretrain --preset tiny")
    cfg = preset("tiny")
    overrides = {"data.path": str(out / "data"), "train.tensorboard": False}
    if steps:
        overrides["train.steps"] = steps
    run = pretrain(apply_overrides(cfg, overrides), out / "run")

    say("electra detect: the same sentence, original and with one word replaced")
    for sentence, tokens in zip(SENTENCES, detect(run, list(SENTENCES)), strict=True):
        print(f"\n{sentence}\n{format_table(tokens)}")
    png = plot_run(run)
    rows = read_metrics(run)
    aucs = [r["disc_auc"] for r in rows if r.get("disc_auc") is not None]
    say(
        f"learning curves: {png}\n"
        f"generator MLM loss {rows[0]['mlm_loss']:.2f} -> {rows[-1]['mlm_loss']:.2f}; discriminator "
        f"AUC {aucs[0]:.2f} -> {max(aucs):.2f} at best, {aucs[-1]:.2f} at the end.\n"
        "The AUC climbs fast against a near-random generator, then dips as the generator learns\n"
        "which words are plausible (its replacements get harder to spot): ELECTRA's usual\n"
        "dynamic. A model this small, trained for minutes, mostly learns which tokens tend\n"
        "to be replaced; spotting a wrong word from its context takes a larger model and longer.\n"
        f"metrics: {run / 'metrics.jsonl'}\nmodels: {run}/discriminator, {run}/generator"
    )
    return run
