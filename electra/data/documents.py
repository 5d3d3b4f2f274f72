"""`prepare --packing documents`: several documents per row, as ModernBERT packs its pretraining
data, with each token's document number kept so that attention can stay within a document
(docs/pretraining.md, §Document masking).

A row is filled with whole documents, each framed as one segment ([CLS] text [SEP] for BERT's
tokenizers), one after another. A document that does not fit the room left is cut at a word
start and its rest opens the next row, so nothing is dropped and only a chunk's last row (one per
2000 documents) is left part empty. A new document does not open in the last few slots of a row
(`MIN_PIECE`): a scrap of a document that short teaches little and costs its framing.

Unlike the other packings there are no pairs, no 10% single-segment coin and no random short
targets: the modern family has no token types, and the short examples ELECTRA's builder mixes in
(for fine-tuning on short inputs) come here from the documents that are short themselves.
"""

from __future__ import annotations

import numpy as np

MIN_PIECE = 16  # fewest word pieces of a document worth opening in a row's leftover room

Row = list[list[int]]  # the word pieces of each document (part) in a row, without specials


class DocumentPacker:
    """Packs documents, given line by line, into rows of `seq_len` tokens; `extra` is how many
    special tokens frame one segment. `add_line` and `end_document` return the rows they
    complete; `finish` the last, part-filled one."""

    def __init__(self, seq_len: int, continuation: frozenset[int], extra: int = 2):
        self.seq_len = seq_len
        self.continuation = continuation  # ids of word pieces that continue a word ("##ing")
        self.extra = extra
        self.document: list[int] = []
        self.row: Row = []
        self.used = 0  # tokens of the open row, specials included
        self.tokens_read = 0
        self.tokens_kept = 0
        self.pieces = 0  # document parts written, a document cut across rows counting twice

    def add_line(self, ids: list[int]) -> list[Row]:
        self.tokens_read += len(ids)
        self.document += ids
        return []

    def end_document(self) -> list[Row]:
        rows: list[Row] = []
        ids, self.document = self.document, []
        while ids:
            room = self.seq_len - self.used - self.extra
            if self.row and room < min(len(ids), MIN_PIECE):
                rows.append(self._close())
                continue
            cut = len(ids) if len(ids) <= room else (self._word_start(ids, room) or room)
            self.row.append(ids[:cut])
            self.used += cut + self.extra
            self.tokens_kept += cut
            self.pieces += 1
            ids = ids[cut:]
            if ids:  # the document goes on in the next row
                rows.append(self._close())
        return rows

    def finish(self) -> list[Row]:
        return [self._close()] if self.row else []

    def _close(self) -> Row:
        row, self.row, self.used = self.row, [], 0
        return row

    def _word_start(self, ids: list[int], at: int) -> int:
        """The last position in 1..at where a word starts, or 0 when there is none."""
        for i in range(at, 0, -1):
            if ids[i] not in self.continuation:
                return i
        return 0


def frame_rows(
    rows: list[Row], before: list[int], after: list[int], seq_len: int, pad: int, dtype: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Token ids [n, seq_len], lengths [n, 2] (all type 0, so both columns are the length) and
    document numbers [n, seq_len] uint16 (1, 2, ... in a row, 0 for padding) of packed rows,
    each document framed by `before` and `after`."""
    ids = np.full((len(rows), seq_len), pad, dtype=dtype)
    documents = np.zeros((len(rows), seq_len), dtype=np.uint16)
    lengths = np.empty((len(rows), 2), dtype=np.int16)
    for r, row in enumerate(rows):
        at = 0
        for number, piece in enumerate(row, start=1):
            tokens = [*before, *piece, *after]
            ids[r, at : at + len(tokens)] = tokens
            documents[r, at : at + len(tokens)] = number
            at += len(tokens)
        lengths[r] = at, at
    return ids, lengths, documents
