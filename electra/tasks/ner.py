"""Named-entity recognition on CoNLL-2003 files, a named configuration of the general tagging task
(`electra.tasks.tagging`): one `word POS chunk TAG` line per token, a blank line between sentences,
`-DOCSTART-` lines between documents, and the nine tags of the benchmark.
"""

from __future__ import annotations

from pathlib import Path

from electra.errors import ElectraError
from electra.tasks.base import require_suffix
from electra.tasks.tagging import Sentence, TaggingTask, read_words

CONLL_TAGS = ("O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC")
CONLL_SUFFIXES = (".txt", ".conll", ".iob", ".bio", ".testa", ".testb", ".train")


def read_conll(path: Path, labels: tuple[str, ...]) -> list[Sentence]:
    sentences: list[Sentence] = []
    words: list[str] = []
    tags: list[str] = []

    def flush() -> None:
        if words:
            sentences.append(Sentence(str(len(sentences)), tuple(words), tuple(tags)))
            words.clear()
            tags.clear()

    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, start=1):
            fields = line.split()
            if not fields or fields[0] == "-DOCSTART-":
                flush()
                continue
            if len(fields) < 2:
                raise ElectraError(
                    f"{path}, line {line_no}: expected a word and its tag separated by spaces, "
                    f"found {line.strip()!r}: is this a CoNLL-2003 file?"
                )
            if fields[-1] not in labels:
                raise ElectraError(
                    f"{path}, line {line_no}: unknown tag {fields[-1]!r} (expected one of "
                    f"{', '.join(labels)})"
                )
            words.append(fields[0])
            tags.append(fields[-1])
    flush()
    if not sentences:
        raise ElectraError(f"{path} has no sentences: expected a CoNLL-2003 file")
    return sentences


class NerTask(TaggingTask):
    name = "conll2003"
    finetune_test = False  # its test split is scored by `evaluate --split test`
    writes_submission = False  # CoNLL-2003's test file is tagged: scored as dev is, no server
    fixed_splits = True  # its train and dev share 193 short sentences ("LONDON 1996-08-30"...)
    files = {
        "train": {"train": ("train.txt", "eng.train")},
        "dev": {"dev": ("valid.txt", "dev.txt", "eng.testa")},
        "test": {"test": ("test.txt", "eng.testb")},
    }

    def __init__(self, labels: tuple[str, ...] = CONLL_TAGS):
        super().__init__(tags=tuple(labels))

    def with_head_config(self, head):
        return NerTask(tuple(head["labels"]))

    def read(self, path, split):
        return read_conll(path, self.labels)

    def read_inputs(self, path: Path) -> list[Sentence]:
        """Sentences of a CoNLL-style file: a word per line (its first field; tags and other
        columns, if any, are ignored), a blank line between sentences."""
        require_suffix(path, CONLL_SUFFIXES, self.name)
        return read_words(path)
