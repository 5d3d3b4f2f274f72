"""Train a tokenizer (BERT-style WordPiece, RoBERTa-style byte-level BPE, or a SentencePiece-style
Unigram as DeBERTa-v3's); load any `tokenizers` tokenizer (WordPiece, BPE, Unigram) from a
tokenizer.json, a folder, a BERT vocab.txt or a SentencePiece model (converted by transformers:
electra/data/spm_model.py); save a folder HF reads, always with a tokenizer.json.

The tokenizer is the only source of special-token ids in the project: everything else asks
`special_ids(tok)` (or reads a data folder's meta) rather than assuming [PAD] is 0; the roles and
the framing of other tokenizers are found in electra/data/specials.py.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

from tokenizers import (
    AddedToken,
    Regex,
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
)
from tokenizers.trainers import BpeTrainer, UnigramTrainer, WordPieceTrainer

from electra.atomic import writing
from electra.data.corpus import ReadStats, iter_documents, warn_read

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
from electra.data.spm_model import SPM_FILES, convert_spm, spm_file
from electra.errors import ElectraError

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")

# What `train_tokenizer` builds, with the special tokens each is trained with (ids 0-4 in this
# order) and whether it lowercases unless told: BERT's WordPiece is uncased; RoBERTa's byte-level
# BPE and DeBERTa-v3's SentencePiece Unigram are cased. RoBERTa's ids; DeBERTa-v3's for the
# first four, its [MASK] (last there) brought forward so that every kind holds its roles at 0-4.
TOKENIZER_MODELS = {
    "wordpiece": (SPECIAL_TOKENS, True),
    "bpe": (("<s>", "<pad>", "</s>", "<unk>", "<mask>"), False),
    "unigram": (("[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]"), False),
}
DEFAULT_MIN_FREQUENCY = 2
_BYTES = 256  # byte-level BPE's alphabet, always in the vocabulary

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
    or special_tokens_map.json names them (or, for a converted SentencePiece model, as
    transformers' class does), else by their known spellings."""
    file = resolve_tokenizer_file(path)
    folder = folder_of(file)
    named = {**(remembered(tok) or {}), **(configured_tokens(folder) if folder else {})}
    return find_special_ids(tok, named, str(file))


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
    paths: list[Path],
    vocab_size: int,
    lowercase: bool | None = None,
    min_frequency: int | None = None,
    model: str = "wordpiece",
) -> Tokenizer:
    """Train a tokenizer of kind `model` (a key of `TOKENIZER_MODELS`) on the lines of a corpus
    (any format `iter_documents` reads), its special tokens at ids 0-4. `lowercase` None: the
    kind's default (WordPiece uncased, BPE and Unigram cased); `min_frequency` None: 2, for
    WordPiece and BPE only (Unigram prunes pieces by likelihood, not by count)."""
    specials, uncased = model_specials(model)
    lowercase = uncased if lowercase is None else lowercase
    if model == "unigram" and min_frequency is not None:
        raise ElectraError(
            "--min-frequency is for WordPiece and BPE: Unigram keeps the pieces that best "
            "explain the corpus, whatever their count; leave it out"
        )
    min_frequency = DEFAULT_MIN_FREQUENCY if min_frequency is None else min_frequency
    _check_vocab_size(model, vocab_size, specials)
    if model == "bpe":
        return _train_bpe(paths, vocab_size, lowercase, min_frequency)
    if model == "unigram":
        return _train_unigram(paths, vocab_size, lowercase)
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
    _train_on(tok, trainer, paths)
    return _add_post_processor(tok)


def model_specials(model: str) -> tuple[tuple[str, ...], bool]:
    """The special tokens a `model` kind is trained with, and whether it lowercases by default;
    an unknown kind is a user error naming the known ones."""
    if model not in TOKENIZER_MODELS:
        raise ElectraError(f"unknown tokenizer model {model!r}: use {', '.join(TOKENIZER_MODELS)}")
    return TOKENIZER_MODELS[model]


def _check_vocab_size(model: str, vocab_size: int, specials: tuple[str, ...]) -> None:
    if model == "bpe" and vocab_size <= _BYTES + len(specials):
        raise ElectraError(
            f"vocab_size {vocab_size} is too small: byte-level BPE must exceed its {_BYTES} "
            f"byte tokens and {len(specials)} special tokens (RoBERTa uses 50265)"
        )
    if vocab_size < len(specials) + 1:
        example = "DeBERTa-v3 uses 128000" if model == "unigram" else "BERT uses 30522"
        raise ElectraError(
            f"vocab_size {vocab_size} is too small: it must exceed the {len(specials)} "
            f"special tokens ({example})"
        )


def _train_bpe(
    paths: list[Path], vocab_size: int, lowercase: bool, min_frequency: int
) -> Tokenizer:
    """RoBERTa's byte-level BPE: no unknown token (every byte is one), `<s> A </s></s> B </s>`."""
    specials = TOKENIZER_MODELS["bpe"][0]
    tok = Tokenizer(models.BPE())
    if lowercase:
        tok.normalizer = normalizers.Lowercase()
    # No prefix space, as RoBERTa: a text's first word is spelled without Ġ, as HF's
    # RobertaTokenizer spells it; trim_offsets keeps a word's offsets off its leading space.
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True)
    tok.decoder = decoders.ByteLevel()
    trainer = BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=list(specials),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    _train_on(tok, trainer, paths)
    ids = special_ids(tok)
    tok.post_processor = processors.RobertaProcessing(
        ("</s>", ids.sep), ("<s>", ids.cls), trim_offsets=True, add_prefix_space=False
    )
    # As RoBERTa's: "a <mask>" masks the word with its leading space, as a fill-mask user means.
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, special=True, normalized=False)])
    return tok


def _train_unigram(paths: list[Path], vocab_size: int, lowercase: bool) -> Tokenizer:
    """SentencePiece's Unigram over Metaspace (▁ opens a word), framed as DeBERTa-v3's."""
    specials = TOKENIZER_MODELS["unigram"][0]
    tok = Tokenizer(models.Unigram())
    # SentencePiece's defaults: NFKC and runs of spaces as one (▁▁ pieces would waste the vocab).
    steps = [normalizers.NFKC(), normalizers.Replace(Regex(" {2,}"), " ")]
    if lowercase:
        steps.append(normalizers.Lowercase())
    tok.normalizer = normalizers.Sequence(steps)
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always")
    trainer = UnigramTrainer(
        vocab_size=vocab_size, special_tokens=list(specials), unk_token="[UNK]", show_progress=False
    )
    try:
        _train_on(tok, trainer, paths)
    except Exception as e:
        # tokenizers' refusals are plain Exceptions; a read error or our own is not.
        if type(e) is not Exception:
            raise
        reason = str(e).splitlines()[0]
        if "not large enough" in reason:  # Unigram keeps every character the corpus holds
            reason += " (it must hold every character of the corpus: raise it)"
        raise ElectraError(
            f"cannot train a Unigram tokenizer with vocab_size {vocab_size}: {reason}"
        ) from None
    return _add_post_processor(tok)


def _train_on(tok: Tokenizer, trainer, paths: list[Path]) -> None:
    """Trains `tok` on the corpus lines; a corpus without a non-blank line is a user error
    (byte-level BPE's alphabet would otherwise pass for a vocabulary)."""
    texts = 0

    def batches() -> Iterator[list[str]]:
        nonlocal texts
        for batch in _line_batches(paths):
            texts += any(line.strip() for line in batch)
            yield batch

    tok.train_from_iterator(batches(), trainer=trainer)
    if not texts:
        raise ElectraError("no text found in the corpus to train a tokenizer on: check the paths")


def _line_batches(paths: list[Path]) -> Iterator[list[str]]:
    """The corpus's lines (a long one in pieces: `iter_documents`), a batch at a time; what the
    reading changed or skipped is said at the end, as `prepare` says it."""
    batch: list[str] = []
    stats = ReadStats()
    for doc in iter_documents(paths, stats):
        batch.extend(doc)
        if len(batch) >= _TRAIN_BATCH_LINES:
            yield batch
            batch = []
    if batch:
        yield batch
    warn_read(stats)


def load_tokenizer(path: Path | str) -> Tokenizer:
    """Load a folder holding tokenizer.json (preferred), vocab.txt or a SentencePiece model
    (`SPM_FILES`, converted as transformers converts it), or one of these files directly."""
    path = resolve_tokenizer_file(path)
    if path.name.endswith(".txt"):
        return _load_vocab_txt(path)
    roles: dict[str, str] = {}
    if path.name in SPM_FILES:
        tok, roles = convert_spm(path)
    else:
        try:
            tok = Tokenizer.from_file(str(path))
        except Exception as e:  # tokenizers raises plain Exception on bad JSON
            raise ElectraError(f"cannot read tokenizer {path}: {str(e).splitlines()[0]}") from None
    # A hub tokenizer.json may pad or truncate: packing needs every line's ids, unpadded.
    if tok.padding or tok.truncation:
        tok.no_padding()
        tok.no_truncation()
    return _remember_roles(tok, path, roles)


def _remember_roles(tok: Tokenizer, file: Path, roles: dict[str, str] | None = None) -> Tokenizer:
    """`tok` carrying the roles its folder's config files name (over `roles`, those transformers'
    class gave a converted SentencePiece model), so that `special_ids(tok)` is
    `tokenizer_special_ids(file, tok)` wherever the tokenizer goes (a model folder written by
    `save_tokenizer` names its own spellings, `<|endoftext|>` as pad say)."""
    folder = folder_of(file)
    named = {**(roles or {}), **(configured_tokens(folder) if folder else {})}
    return remember(tok, named) if named else tok


def resolve_tokenizer_file(path: Path | str) -> Path:
    """The tokenizer.json, vocab.txt or SentencePiece model that `path` (the file, or a folder
    holding it) means; a folder's tokenizer.json first, as transformers reads it first."""
    path = Path(path)
    if path.is_dir():
        if (path / "tokenizer.json").is_file():
            path = path / "tokenizer.json"
        elif (path / "vocab.txt").is_file():
            path = path / "vocab.txt"
        elif spm := spm_file(path):
            path = spm
        else:
            raise ElectraError(
                f"tokenizer folder {path} has neither tokenizer.json nor vocab.txt (nor a "
                f"SentencePiece {' or '.join(SPM_FILES)}): train one with `electra tokenizer` or "
                "point to a BERT/ELECTRA tokenizer folder or a hub model folder"
            )
    elif not path.is_file():
        raise ElectraError(
            f"tokenizer not found: {path} (give a folder with tokenizer.json, vocab.txt or "
            f"a SentencePiece {' or '.join(SPM_FILES)})"
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
    with writing(out_dir / "tokenizer.json"):  # the Rust library's own error on a full disk
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
