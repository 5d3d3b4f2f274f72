"""Train, save and load the BERT-style WordPiece tokenizer (Hugging Face `tokenizers`).

The tokenizer is the only source of special-token ids in the project: everything else asks
`special_ids(tok)` rather than assuming [PAD] is 0.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
from tokenizers.trainers import WordPieceTrainer

from electra.data.corpus import iter_documents
from electra.errors import ElectraError

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
_SPECIAL_NAMES = ("pad", "unk", "cls", "sep", "mask")

# Lines handed to the trainer at a time: batching cuts the per-call overhead.
_TRAIN_BATCH_LINES = 1000


@dataclass(frozen=True)
class SpecialIds:
    pad: int
    unk: int
    cls: int
    sep: int
    mask: int


def special_ids(tok: Tokenizer) -> SpecialIds:
    """Ids of [PAD] [UNK] [CLS] [SEP] [MASK] in this tokenizer's vocabulary."""
    ids = {}
    for name, token in zip(_SPECIAL_NAMES, SPECIAL_TOKENS, strict=True):
        token_id = tok.token_to_id(token)
        if token_id is None:
            raise ElectraError(
                f"tokenizer vocabulary has no {token} token: the vocabulary must contain BERT's "
                f"special tokens {' '.join(SPECIAL_TOKENS)}"
            )
        ids[name] = token_id
    return SpecialIds(**ids)


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
    if path.name.endswith(".txt"):
        return _load_vocab_txt(path)
    try:
        return Tokenizer.from_file(str(path))
    except Exception as e:  # tokenizers raises plain Exception on bad JSON
        raise ElectraError(f"cannot read tokenizer {path}: {str(e).splitlines()[0]}") from None


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
    special_ids(tok)  # a vocab.txt without BERT's special tokens is unusable: fail here
    return _add_post_processor(tok)


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


def vocabulary(tok: Tokenizer) -> list[str]:
    """All tokens in id order."""
    vocab = tok.get_vocab(with_added_tokens=True)
    return [token for token, _ in sorted(vocab.items(), key=lambda item: item[1])]


def fingerprint(tok: Tokenizer) -> str:
    """sha256 of the vocabulary and the lowercase setting: equal tokenizers, equal fingerprints."""
    text = "\n".join(vocabulary(tok)) + f"\nlowercase={lowercases(tok)}"
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def save_tokenizer(
    tok: Tokenizer, out_dir: Path, lowercase: bool, token_types: bool = True
) -> None:
    """Write a folder that both `load_tokenizer` and HF `AutoTokenizer.from_pretrained` read.
    `token_types=False`: HF's tokenizer gives no token_type_ids (a model without segments)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tok.save(str(out_dir / "tokenizer.json"))
    tokens = vocabulary(tok)
    (out_dir / "vocab.txt").write_text("".join(t + "\n" for t in tokens), encoding="utf-8")
    special = {
        "unk_token": "[UNK]",
        "sep_token": "[SEP]",
        "pad_token": "[PAD]",
        "cls_token": "[CLS]",
        "mask_token": "[MASK]",
    }
    config = {
        "tokenizer_class": "ElectraTokenizer",
        "do_lower_case": lowercase,
        "model_max_length": 512,
        **special,
    }
    if json.loads(tok.to_str())["model"]["type"] != "WordPiece":
        # HF's ElectraTokenizer rebuilds a WordPiece from vocab.txt; the generic class reads
        # tokenizer.json as it is (BPE, Unigram).
        config["tokenizer_class"] = "PreTrainedTokenizerFast"
    if not token_types:
        config["model_input_names"] = ["input_ids", "attention_mask"]
    _write_json(out_dir / "tokenizer_config.json", config)
    _write_json(out_dir / "special_tokens_map.json", special)


def _write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
