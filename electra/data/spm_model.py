"""A tokenizer folder that holds a SentencePiece model and no tokenizer.json (`spm.model`, as
microsoft/deberta-v3-* ship it; `sentencepiece.bpe.model`, as xlm-roberta-* and camembert-* do),
converted to a `tokenizers` Tokenizer by transformers' own converter: the ids, post-processor and
special tokens that `AutoTokenizer` gives. The converter needs sentencepiece, protobuf and
transformers (the optional extra `electra[spm]`); without them, one line says so.
"""

from __future__ import annotations

import functools
import importlib
import json
from pathlib import Path

from tokenizers import Tokenizer

from electra.data.specials import ROLES
from electra.errors import ElectraError

# The file names the hub ships, and the model type whose tokenizer reads each where the folder
# names no class (a hub deberta-v3 folder's tokenizer_config.json names none).
SPM_FILES = {"spm.model": "deberta-v2", "sentencepiece.bpe.model": "xlm-roberta"}
EXTRA = "spm"
_EXTRA_MODULES = ("sentencepiece", "google.protobuf", "transformers")
# The files whose contents change what the conversion gives (lowercasing, the special tokens).
_STAMPED = (
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "config.json",
)


def spm_file(folder: Path) -> Path | None:
    """The SentencePiece model a tokenizer folder holds, if any."""
    return next((folder / name for name in SPM_FILES if (folder / name).is_file()), None)


def convert_spm(file: Path) -> tuple[Tokenizer, dict[str, str]]:
    """The tokenizer transformers builds from the SentencePiece model `file` and its folder's
    config files, and its roles (role -> spelling) as transformers' class names them. Nothing is
    written; a second call for unchanged files reuses the first conversion."""
    missing = [name for name in _EXTRA_MODULES if not _importable(name)]
    if missing:
        raise ElectraError(
            f"{file.parent} has no tokenizer.json, only {file.name} (a SentencePiece model), "
            f"and converting it needs {', '.join(missing)}, not installed: pip install "
            f"'electra[{EXTRA}]', or save a tokenizer.json there with transformers"
        )
    text, roles = _converted(str(file), _stamp(file))
    return Tokenizer.from_str(text), dict(roles)


def _importable(name: str) -> bool:
    try:
        importlib.import_module(name)
    except ImportError:
        return False
    return True


def _stamp(file: Path) -> tuple:
    """What identifies the files a conversion read: edited files convert again."""
    paths = [file, *(file.parent / name for name in _STAMPED)]
    return tuple((p.name, s.st_mtime_ns, s.st_size) for p in paths if (s := _stat(p)) is not None)


def _stat(path: Path):
    try:
        return path.stat()
    except OSError:
        return None


@functools.lru_cache(maxsize=4)
def _converted(file: str, stamp: tuple) -> tuple[str, tuple[tuple[str, str], ...]]:
    """The converted tokenizer as JSON, and its roles; `stamp` keys the cache."""
    import sentencepiece
    from transformers import AutoTokenizer
    from transformers.utils import logging

    path = Path(file)
    folder = path.parent
    try:  # read first: on a file it cannot parse, transformers tries other formats and misleads
        sentencepiece.SentencePieceProcessor(model_file=file)
    except Exception as e:
        raise ElectraError(
            f"{path} is not a SentencePiece model ({_reason(e)}): replace it with the model's "
            "own file, or give a folder with a tokenizer.json"
        ) from None
    # A folder that names its tokenizer class (or its model type) is converted as it says; a
    # bare model file, as the kind of model that ships that file name.
    kind = {} if _names_class(folder) else {"tokenizer_type": SPM_FILES[path.name]}
    verbosity = logging.get_verbosity()
    logging.set_verbosity_error()  # its notes on the conversion are not the user's concern
    try:
        hf = AutoTokenizer.from_pretrained(str(folder), local_files_only=True, **kind)
        backend = hf.backend_tokenizer
    except Exception as e:  # transformers raises many kinds
        raise ElectraError(
            f"transformers cannot convert the SentencePiece model {path}: {_reason(e)}"
        ) from None
    finally:
        logging.set_verbosity(verbosity)
    roles = tuple(
        (role, str(token)) for role in ROLES if (token := getattr(hf, f"{role}_token", None))
    )
    return backend.to_str(), roles


def _reason(e: Exception) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0]


def _names_class(folder: Path) -> bool:
    """Whether transformers can tell the folder's tokenizer class from its own config files."""
    for name, key in (("tokenizer_config.json", "tokenizer_class"), ("config.json", "model_type")):
        try:
            config = json.loads((folder / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(config, dict) and config.get(key):
            return True
    return False
