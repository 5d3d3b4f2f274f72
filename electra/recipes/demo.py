"""`electra demo`: tokenizer -> prepare -> pretrain (tiny preset) -> held-out detection -> plot,
on CPU, in minutes.

The corpus is the Python documentation that every CPython ships (`pydoc_data.topics`): English
prose that needs no download and is not part of this repository. Every tenth topic is held out,
so the discriminator is judged on text it never trained on. A demo stopped by Ctrl-C or SIGTERM
keeps its checkpoint, and `electra demo` run again continues it.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from electra.atomic import atomic_dir, atomic_path
from electra.config import apply_overrides, preset
from electra.data.prepare import prepare
from electra.data.tokenizer import load_tokenizer, save_tokenizer, train_tokenizer
from electra.engine.plot import plot_run
from electra.engine.tracking import HELDOUT, read_metrics
from electra.errors import ElectraError, Interrupted
from electra.folders.checkpoint import latest_complete
from electra.locks import claim_output
from electra.pretraining.resolve import resumed_config
from electra.pretraining.train import pretrain
from electra.scoring.health import Health
from electra.scoring.heldout import corrupt_and_score, showcase, summary
from electra.scoring.verdict import in_words

MARKER = ".electra-demo"
HELD_OUT_EVERY = 10  # every tenth documentation topic is held out of training
VOCAB_SIZE = 8192


def say(msg: str) -> None:
    print(f"\n== {msg}", file=sys.stderr)


def write_builtin_corpus(train: Path, held_out: Path) -> tuple[int, int]:
    """One document per documentation topic, one line per paragraph line, blank lines between;
    returns the topics written to each file."""
    import pydoc_data.topics

    topics = pydoc_data.topics.topics
    names = sorted(topics)
    files = {train: [n for i, n in enumerate(names) if i % HELD_OUT_EVERY != HELD_OUT_EVERY - 1]}
    files[held_out] = [n for n in names if n not in set(files[train])]
    for path, chosen in files.items():
        with atomic_path(path) as tmp, tmp.open("w", encoding="utf-8") as f:
            for name in chosen:
                lines = [line.strip() for line in topics[name].splitlines()]
                f.write("\n".join(line for line in lines if line) + "\n\n")
    return len(files[train]), len(files[held_out])


def _open_folder(out: Path) -> bool:
    """Makes `out` ready; True when it holds an interrupted demo to continue."""
    run = out / "run"
    if out.exists():
        if not (out / MARKER).exists():
            raise ElectraError(f"{out} exists and is not a demo folder: pass another --out")
        if not (run / "discriminator").is_dir() and latest_complete(run) is not None:
            return True
        shutil.rmtree(out)
    out.mkdir(parents=True)
    (out / MARKER).touch()
    return False


def _build_data(out: Path) -> None:
    """Corpus, tokenizer and the two data folders; a stage already complete is kept."""
    corpus, held_out = out / "corpus" / "python-docs.txt", out / "corpus" / "held-out.txt"
    if not held_out.is_file():
        corpus.parent.mkdir(exist_ok=True)
        n_train, n_held = write_builtin_corpus(corpus, held_out)
        say(
            f"corpus: {n_train} Python documentation topics for training "
            f"({corpus.stat().st_size / 1e6:.1f} MB), {n_held} held out -> {corpus.parent}"
        )
    if not (out / "tokenizer" / "tokenizer.json").is_file():
        tokenizer = train_tokenizer([corpus], vocab_size=VOCAB_SIZE, lowercase=True)
        with atomic_dir(out / "tokenizer") as tmp:  # whole or absent, so a rerun can trust it
            save_tokenizer(tokenizer, tmp, lowercase=True)
        built = tokenizer.get_vocab_size()
        fewer = f" (asked for {VOCAB_SIZE}: the corpus gave fewer)" if built < VOCAB_SIZE else ""
        say(f"electra tokenizer train: WordPiece, {built} tokens{fewer}")
    for source, folder in ((corpus, out / "data"), (held_out, out / "held-out-data")):
        if not (folder / "meta.json").is_file():
            s = prepare(
                [str(source)], out / "tokenizer", seq_len=128, out_dir=folder, overwrite=True
            )
            text = s["text_tokens"]
            say(
                f"electra prepare {source.name} (seq len 128): {s['examples']} examples, "
                f"{text['kept']} of {text['read']} text tokens kept"
            )


def run_demo(out_dir: str | Path, steps: int | None = None) -> Path:
    """The demo in `out_dir`, held by this process alone (`claim_output`: a second demo into it
    is refused); a folder of a finished demo is replaced, an interrupted one continued."""
    with claim_output(out_dir, overwrite=True):
        return _run_demo(Path(out_dir), steps)


def _run_demo(out: Path, steps: int | None) -> Path:
    run = out / "run"
    resume = _open_folder(out)
    if resume:
        say(f"continuing the interrupted demo in {out}")
        cfg = resumed_config(run)  # the run's saved config
    else:
        _build_data(out)
        overrides = {
            "data.path": str(out / "data"),
            "train.tensorboard": False,
            # The run scores itself on the held-out topics as it trains (and says if it collapses).
            "train.eval_data": str(out / "held-out-data"),
        }
        if steps:
            overrides["train.steps"] = steps
        cfg = apply_overrides(preset("tiny"), overrides)
        shutil.rmtree(run, ignore_errors=True)  # a run stopped before its first checkpoint
    say("electra pretrain --preset tiny")
    pretrain(cfg, run, resume=resume)  # settings resolved as `electra pretrain` does
    if not (run / "discriminator").is_dir():
        raise Interrupted(f"the demo stopped: run `electra demo --out {out}` again to continue it")
    _report(out, run)
    return run


def _report(out: Path, run: Path) -> None:
    say("the discriminator on held-out text corrupted by its own generator")
    detection = corrupt_and_score(run, out / "held-out-data")
    print(summary(detection), file=sys.stderr)
    print(
        "\nthe first held-out passage with a replacement; 'flagged' marks the tokens in the "
        f"top {detection.replaced_fraction:.1%} by p(replaced):\n"
        f"{showcase(detection, load_tokenizer(run / 'tokenizer'))}"
    )
    png = plot_run(run)
    rows = read_metrics(run)
    heldout = read_metrics(run, HELDOUT)
    if heldout:
        say(f"how the discriminator stands: {in_words(Health.from_record(heldout[-1]))}")
    say(
        f"learning curves: {png}\n"
        f"generator MLM loss {rows[0]['mlm_loss']:.2f} -> {rows[-1]['mlm_loss']:.2f} on its "
        "training batches. A model this small, trained for minutes, mostly learns which words\n"
        "tend to be replaced; spotting a wrong word from its context takes a larger model and "
        "longer.\n"
        f'try your own sentence: electra detect --model {run} "a sentence with one word replaced"\n'
        f"metrics: {run / 'metrics.jsonl'}\nmodels: {run}/discriminator, {run}/generator"
    )
