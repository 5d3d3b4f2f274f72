"""Train the BERT-style WordPiece tokenizer; load any `tokenizers` tokenizer (WordPiece, BPE,
Unigram) from a tokenizer.json, a folder or a BERT vocab.txt; save a folder HF reads.

The tokenizer is the only source of special-token ids in the project: everything else asks
`special_ids(tok)` (or reads a data folder's meta) rather than assuming [PAD] is 0; the roles and
the framing of other tokenizers are found in electra/data/specials.py.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
from tokenizers.trainers import WordPieceTrainer

from electra.data.corpus import iter_documents

# SpecialIds is re-exported: the objectives and tasks import it from here.
from electra.data.specials import (
    SpecialIds,
    configured_tokens,
    find_special_ids,
    folder_of,
    framing,
    remember,
    remembered,
)
from electra.errors import ElectraError

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")

# Lines handed to the trainer at a time: batching cuts the per-call overhead.
_TRAIN_BATCH_LINES = 1000


def special_ids(tok: Tokenizer, source: str = "") -> SpecialIds:
    """Ids of the pad, unk, cls, sep and mask tokens: as the config files of the folder that
    `load_tokenizer` read `tok` from name them (`tokenizer_special_ids`), else by their known
    spellings ([CLS] or <s>, ...); `source` names the tokenizer in the error when one the run
    needs is missing."""
    return find_special_ids(tok, remembered(tok), source)


def tokenizer_special_ids(path: Path | str, tok: Tokenizer) -> SpecialIds:
    """The special ids of the tokenizer loaded from `path`: as its folder's tokenizer_config.json
    or special_tokens_map.json names them, else by their known spellings."""
    file = resolve_tokenizer_file(path)
    folder = folder_of(file)
    return find_special_ids(tok, configured_tokens(folder) if folder else None, str(file))


def _check_bert_specials(tok: Tokenizer) -> None:
    """A vocab.txt is BERT's: it must hold BERT's five special tokens."""
    for token in SPECIAL_TOKENS:
        if tok.token_to_id(token) is None:
            raise ElectraError(
                f"tokenizer vocabulary has no {token} token: the vocabulary must contain BERT's "
                f"special tokens {' '.join(SPECIAL_TOKENS)}"
            )


def _bert_tokenizer(model: models.WordPiece, lowercase: bool) -> Tokenizer:
    """The BERT pipeline around a WordPiece model (post-processor is added once ids are known)."""
    tok = Tokenizer(model)
    # strip_accents=None follows `lowercase`, exactly as BERT's do_lower_case does.
    tok.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=lowercase
    )
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    return tok


def _add_post_processor(tok: Tokenizer) -> Tokenizer:
    ids = special_ids(tok)
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", ids.cls), ("[SEP]", ids.sep)],
    )
    return tok


def train_tokenizer(
    paths: list[Path], vocab_size: int, lowercase: bool = True, min_frequency: int = 2
) -> Tokenizer:
    """Train a WordPiece vocabulary on the lines of a corpus (any format `iter_documents` reads)."""
    if vocab_size < len(SPECIAL_TOKENS) + 1:
        raise ElectraError(
            f"vocab_size {vocab_size} is too small: it must exceed the {len(SPECIAL_TOKENS)} "
            "special tokens (BERT uses 30522)"
        )
    tok = _bert_tokenizer(
        models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=100), lowercase
    )
    trainer = WordPieceTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=list(SPECIAL_TOKENS),
        continuing_subword_prefix="##",
        show_progress=False,
    )
    tok.train_from_iterator(_line_batches(paths), trainer=trainer)
    if tok.get_vocab_size() <= len(SPECIAL_TOKENS):
        raise ElectraError("no text found in the corpus to train a tokenizer on: check the paths")
    return _add_post_processor(tok)


def _line_batches(paths: list[Path]) -> Iterator[list[str]]:
    batch: list[str] = []
    for doc in iter_documents(paths):
        batch.extend(doc)
        if len(batch) >= _TRAIN_BATCH_LINES:
            yield batch
            batch = []
    if batch:
        yield batch


def load_tokenizer(path: Path | str) -> Tokenizer:
    """Load a folder holding tokenizer.json (preferred) or vocab.txt, or either file directly."""
    path = resolve_tokenizer_file(path)
    if path.name.endswith(".txt"):
        return _load_vocab_txt(path)
    try:
        tok = Tokenizer.from_file(str(path))
    except Exception as e:  # tokenizers raises plain Exception on bad JSON
        raise ElectraError(f"cannot read tokenizer {path}: {str(e).splitlines()[0]}") from None
    # A hub tokenizer.json may pad or truncate: packing needs every line's ids, unpadded.
    if tok.padding or tok.truncation:
        tok.no_padding()
        tok.no_truncation()
    return _remember_roles(tok, path)


def _remember_roles(tok: Tokenizer, file: Path) -> Tokenizer:
    """`tok` carrying the roles its folder's config files name, so that `special_ids(tok)` is
    `tokenizer_special_ids(file, tok)` wherever the tokenizer goes (a model folder written by
    `save_tokenizer` names its own spellings, `<|endoftext|>` as pad say)."""
    folder = folder_of(file)
    return remember(tok, configured_tokens(folder)) if folder else tok


def resolve_tokenizer_file(path: Path | str) -> Path:
    """The tokenizer.json or vocab.txt that `path` (the file, or a folder holding it) means."""
    path = Path(path)
    if path.is_dir():
        if (path / "tokenizer.json").is_file():
            path = path / "tokenizer.json"
        elif (path / "vocab.txt").is_file():
            path = path / "vocab.txt"
        else:
            raise ElectraError(
                f"tokenizer folder {path} has neither tokenizer.json nor vocab.txt: "
                "train one with `electra tokenizer` or point to a BERT/ELECTRA tokenizer folder"
            )
    elif not path.is_file():
        raise ElectraError(
            f"tokenizer not found: {path} (give a folder with tokenizer.json or vocab.txt)"
        )
    return path


def _load_vocab_txt(path: Path) -> Tokenizer:
    try:
        vocab = models.WordPiece.read_file(str(path))
    except Exception as e:
        raise ElectraError(f"cannot read vocabulary {path}: {str(e).splitlines()[0]}") from None
    if not vocab:
        raise ElectraError(f"vocabulary {path} is empty: give a BERT vocab.txt, one token a line")
    model = models.WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100)
    tok = _bert_tokenizer(model, _do_lower_case(path.parent))
    tok.add_special_tokens([t for t in SPECIAL_TOKENS if t in vocab])
    _check_bert_specials(tok)  # a vocab.txt without BERT's special tokens is unusable: fail here
    return _remember_roles(_add_post_processor(tok), path)


def _do_lower_case(folder: Path) -> bool:
    config = folder / "tokenizer_config.json"
    if not config.is_file():
        return True
    try:
        return bool(json.loads(config.read_text(encoding="utf-8")).get("do_lower_case", True))
    except (OSError, ValueError, AttributeError) as e:
        raise ElectraError(f"cannot read {config}: {e}") from None


def lowercases(tok: Tokenizer) -> bool:
    """Whether the tokenizer's normalizer lowercases its input."""
    return _normalizer_lowercases(json.loads(tok.to_str()).get("normalizer"))


def _normalizer_lowercases(normalizer: dict | None) -> bool:
    if not normalizer:
        return False
    kind = normalizer.get("type")
    if kind == "BertNormalizer":
        return bool(normalizer.get("lowercase"))
    if kind == "Lowercase":
        return True
    if kind == "Sequence":
        return any(_normalizer_lowercases(n) for n in normalizer.get("normalizers", []))
    return False


def continuation_ids(tok: Tokenizer) -> frozenset[int]:
    """Ids of the word pieces that continue a word, so examples are never cut inside one:
    WordPiece's "##" pieces, or the pieces without the word-start mark of a byte-level ("Ġ")
    or SentencePiece ("▁") pre-tokenizer."""
    vocab = tok.get_vocab(with_added_tokens=False)
    prefix = getattr(tok.model, "continuing_subword_prefix", None)
    if prefix:
        return frozenset(i for t, i in vocab.items() if t.startswith(prefix))
    mark = _word_start_mark(json.loads(tok.to_str()).get("pre_tokenizer"))
    if not mark:
        return frozenset()
    added = set(tok.get_added_tokens_decoder())
    return frozenset(i for t, i in vocab.items() if not t.startswith(mark) and i not in added)


def _word_start_mark(pre_tokenizer: dict | None) -> str | None:
    if not pre_tokenizer:
        return None
    kind = pre_tokenizer.get("type")
    if kind == "ByteLevel":
        return "\u0120"  # Ġ: the byte-level spelling of a leading space
    if kind == "Metaspace":
        return pre_tokenizer.get("replacement") or "\u2581"
    if kind == "Sequence":
        marks = map(_word_start_mark, pre_tokenizer.get("pretokenizers", []))
        return next((m for m in marks if m), None)
    return None


def vocabulary(tok: Tokenizer) -> list[str]:
    """All tokens in id order."""
    vocab = tok.get_vocab(with_added_tokens=True)
    return [token for token, _ in sorted(vocab.items(), key=lambda item: item[1])]


def fingerprint(tok: Tokenizer) -> str:
    """sha256 of the vocabulary and the lowercase setting: equal tokenizers, equal fingerprints."""
    text = "\n".join(vocabulary(tok)) + f"\nlowercase={lowercases(tok)}"
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def save_tokenizer(
    tok: Tokenizer,
    out_dir: Path,
    lowercase: bool,
    *,
    token_types: bool = True,
    special: SpecialIds | None = None,
    model_max_length: int = 512,
) -> None:
    """Write a folder that both `load_tokenizer` and HF `AutoTokenizer.from_pretrained` read.

    A WordPiece tokenizer is written as ELECTRA's (with a vocab.txt); any other as a plain fast
    tokenizer. Special tokens go under their own spellings (`special`, else found by their known
    spellings). token_types=False: the folder's tokenizer emits no token_type_ids (a model
    without a token-type table, such as ModernBERT, refuses them). A tokenizer whose
    post-processor frames nothing is given BERT's template first (`framing`), so that the
    folder's tokenizer frames rows as training did; `model_max_length` is what HF's pipelines
    truncate to."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    special = special or special_ids(tok)
    framing(tok, special, str(out_dir))
    tok.save(str(out_dir / "tokenizer.json"))
    wordpiece = isinstance(tok.model, models.WordPiece)
    if wordpiece:  # a BERT vocab.txt means something only for WordPiece
        tokens = vocabulary(tok)
        (out_dir / "vocab.txt").write_text("".join(t + "\n" for t in tokens), encoding="utf-8")
    roles = ("unk", "sep", "pad", "cls", "mask")
    spelled = {
        f"{role}_token": tok.id_to_token(getattr(special, role))
        for role in roles
        if role != "unk" or special.unk != special.pad  # no unk stood in by pad
    }
    config = {
        "tokenizer_class": "ElectraTokenizer" if wordpiece else "PreTrainedTokenizerFast",
        "do_lower_case": lowercase,
        "model_max_length": model_max_length,
        **spelled,
    }
    # Said outright wherever it differs from the class's default (HF's fast tokenizer emits no
    # token types in 5.x, ELECTRA's does).
    if not token_types or not wordpiece:
        types = ["token_type_ids"] if token_types else []
        config["model_input_names"] = ["input_ids", *types, "attention_mask"]
    _write_json(out_dir / "tokenizer_config.json", config)
    _write_json(out_dir / "special_tokens_map.json", spelled)


def _write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
