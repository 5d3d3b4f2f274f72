"""A tokenizer's special tokens, whatever they are called, and how it frames a sequence or a pair.

Any `tokenizers` tokenizer works (WordPiece, BPE, Unigram): the roles pad, unk, cls, sep and mask
come from the folder's tokenizer_config.json / special_tokens_map.json when they name them, else
from the known spellings (BERT's [CLS], RoBERTa's and SentencePiece's <s>), else, for cls and sep,
from the tokens the tokenizer's own post-processor puts around a sequence. The framing (which ids
open a row, sit between the segments of a pair and close it) is read from that post-processor, so
a RoBERTa row is `<s> A </s></s> B </s>` where a BERT row is `[CLS] A [SEP] B [SEP]`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer, processors

from electra.errors import ElectraError

ROLES = ("pad", "unk", "cls", "sep", "mask")
# Searched in this order, so a tokenizer holding BERT's spellings keeps BERT's ids.
KNOWN_SPELLINGS = {
    "pad": ("[PAD]", "<pad>", "<|padding|>"),
    "unk": ("[UNK]", "<unk>"),
    "cls": ("[CLS]", "<s>", "<cls>", "[BOS]", "<bos>"),
    "sep": ("[SEP]", "</s>", "<sep>", "[EOS]", "<eos>"),
    "mask": ("[MASK]", "<mask>"),
}
# tokenizer_config.json keys naming a role; bos/eos stand in for cls/sep where those are absent.
_CONFIG_KEYS = {
    "pad": ("pad_token",),
    "unk": ("unk_token",),
    "cls": ("cls_token", "bos_token"),
    "sep": ("sep_token", "eos_token"),
    "mask": ("mask_token",),
}
# A special token spelled <|name|>, [name] or <name> with one of these names plays the role.
_ROLE_NAMES = {
    "pad": ("pad", "padding"),
    "unk": ("unk", "unknown"),
    "cls": ("cls", "bos"),
    "sep": ("sep", "eos"),
    "mask": ("mask",),
}
_CONFIG_FILES = ("tokenizer_config.json", "special_tokens_map.json")


@dataclass(frozen=True)
class SpecialIds:
    pad: int
    unk: int
    cls: int
    sep: int
    mask: int


@dataclass(frozen=True)
class Framing:
    """The ids a tokenizer's post-processor adds: around one segment, and around two."""

    single: tuple[tuple[int, ...], tuple[int, ...]]  # before A, after A
    pair: tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]  # before A, between, after B
    # Tokens of a pair row typed 0 (prefix, A and the type-0 part of the middle), less len(A);
    # None where the whole pair is type 0 (RoBERTa).
    pair_type0_extra: int | None

    @property
    def single_extra(self) -> int:
        return sum(map(len, self.single))

    @property
    def pair_extra(self) -> int:
        return sum(map(len, self.pair))

    def ids(self) -> set[int]:
        return {i for part in (*self.single, *self.pair) for i in part}

    def row(self, a: list[int], b: list[int] | None = None) -> tuple[list[int], list[int]]:
        """The ids and token types of a row holding `a` (and `b`) framed as the tokenizer frames
        them: BERT's `[CLS] a [SEP] b [SEP]` typed 0...0 1...1, RoBERTa's `<s> a </s></s> b </s>`
        all typed 0."""
        if b is None:
            ids = [*self.single[0], *a, *self.single[1]]
            return ids, [0] * len(ids)
        ids = [*self.pair[0], *a, *self.pair[1], *b, *self.pair[2]]
        typed0 = len(ids) if self.pair_type0_extra is None else len(a) + self.pair_type0_extra
        return ids, [0] * typed0 + [1] * (len(ids) - typed0)


def bert_framing(special: SpecialIds) -> Framing:
    """BERT's framing, `[CLS] A [SEP]` and `[CLS] A [SEP] B [SEP]` with B's part typed 1."""
    cls, sep = (special.cls,), (special.sep,)
    return Framing((cls, sep), (cls, sep, sep), 2)


# Where `remember` keeps, on a loaded `Tokenizer`, the roles its folder's config files name, so
# that every later `special_ids` of that tokenizer finds the same ids as `prepare` did.
_NAMED_ATTR = "_electra_named_specials"


def remember(tok: Tokenizer, named: dict[str, str]) -> Tokenizer:
    """Records on `tok` the role -> spelling its folder names (`configured_tokens`)."""
    setattr(tok, _NAMED_ATTR, dict(named))
    return tok


def remembered(tok: Tokenizer) -> dict[str, str] | None:
    """The roles `remember` recorded on `tok`; None for a tokenizer built in memory."""
    return getattr(tok, _NAMED_ATTR, None)


def configured_tokens(folder: Path) -> dict[str, str]:
    """Role -> spelling, as the folder's tokenizer_config.json (first) and
    special_tokens_map.json name them; empty where neither file is there."""
    named: dict[str, str] = {}
    for name in _CONFIG_FILES:
        path = folder / name
        if not path.is_file():
            continue
        try:
            config = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise ElectraError(f"cannot read {path}: {e}") from None
        if not isinstance(config, dict):
            raise ElectraError(f"{path} is not a JSON object: fix or remove it")
        for role, keys in _CONFIG_KEYS.items():
            for key in keys:
                token = _token_text(config.get(key))
                if token and role not in named:
                    named[role] = token
                    break
    return named


def _token_text(value: object) -> str | None:
    """A special token as the config writes it: a string, or an AddedToken dict."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) and value else None


def find_special_ids(
    tok: Tokenizer, named: dict[str, str] | None = None, source: str = ""
) -> SpecialIds:
    """The ids of the roles a run needs; one error naming `source` when one is missing."""
    named = named or {}
    where = source or "the tokenizer"
    ids: dict[str, int | None] = {}
    for role in ROLES:
        if role in named:
            token_id = tok.token_to_id(named[role])
            if token_id is None:
                raise ElectraError(
                    f"{where}: its config names {named[role]!r} as {role}_token but the "
                    "vocabulary has no such token: fix tokenizer_config.json or add the token"
                )
            ids[role] = token_id
        else:
            ids[role] = _known_id(tok, role)
    if ids["cls"] is None or ids["sep"] is None:
        for role, token_id in zip(("cls", "sep"), _framing_ends(tok), strict=True):
            ids[role] = token_id if ids[role] is None else ids[role]
    missing = [role for role in ("pad", "cls", "sep", "mask") if ids[role] is None]
    if missing:
        looked = "; ".join(f"{r}: {' '.join(KNOWN_SPELLINGS[r])}" for r in missing)
        raise ElectraError(
            f"{where} has no {'/'.join(missing)} token (looked for {looked}): add it to the "
            "tokenizer as a special token, or pass a tokenizer folder whose "
            f"tokenizer_config.json names it ({', '.join(r + '_token' for r in missing)})"
        )
    # A byte-level vocabulary needs no unknown token; pad stands in (it is never a text token).
    if ids["unk"] is None:
        ids["unk"] = ids["pad"]
    return SpecialIds(**ids)


def check_distinct(tok: Tokenizer, special: SpecialIds, source: str) -> None:
    """Refuses, before any data is written, roles that training and export could not keep
    apart: a pad token that is also cls, sep or mask (the model's padding row is never trained,
    as in `transformers`), a mask token that is also cls or sep (a masked position would read as
    the frame), and a role that plain text spells as an ordinary word (HF's tokenizer would cut
    text at it, ours would not)."""
    clash = [
        (a, b)
        for a, b in (
            ("pad", "cls"),
            ("pad", "sep"),
            ("pad", "mask"),
            ("mask", "cls"),
            ("mask", "sep"),
        )
        if getattr(special, a) == getattr(special, b)
    ]
    if clash:
        a, b = clash[0]
        raise ElectraError(
            f"{source}: its {a} and {b} token are the same, {tok.id_to_token(getattr(special, a))}"
            f": a run needs them apart; name a distinct {a}_token in the folder's "
            "tokenizer_config.json (adding the token to the tokenizer if it has none)"
        )
    specials = {i for i, t in tok.get_added_tokens_decoder().items() if t.special}
    for role in ROLES:
        token_id = getattr(special, role)
        token = tok.id_to_token(token_id)
        if token_id in specials or token is None:
            continue
        if tok.encode(token, add_special_tokens=False).ids == [token_id]:
            raise ElectraError(
                f"{source}: its {role} token {token!r} is an ordinary word of the vocabulary, "
                "which text would give: add it to the tokenizer as a special token, or name "
                f"another {role}_token in the folder's tokenizer_config.json"
            )


def _known_id(tok: Tokenizer, role: str) -> int | None:
    """The id of the first known spelling of `role`, among the special added tokens first; then
    a special token named after the role in another bracketing (<|mask|>, [pad])."""
    specials = {t.content: i for i, t in tok.get_added_tokens_decoder().items() if t.special}
    for pool in (specials, tok.get_vocab(with_added_tokens=True)):
        for token in KNOWN_SPELLINGS[role]:
            if token in pool:
                return pool[token]
    names = _ROLE_NAMES[role]
    return next((i for token, i in sorted(specials.items()) if _bare(token) in names), None)


def _bare(token: str) -> str:
    return token.strip("<>[]|/ ").lower()


def _framing_ends(tok: Tokenizer) -> tuple[int | None, int | None]:
    """The first and last ids the post-processor adds around one segment, if it adds any."""
    probe = _probe(tok, pair=False)
    if probe is None:
        return None, None
    before, after = _segment_runs(probe, 1, "the tokenizer")
    return (before[0] if before else None), (after[-1] if after else None)


def _probe(tok: Tokenizer, pair: bool):
    """The post-processed encoding of one or two short segments; None when no probe text gives
    a token."""
    if tok.padding or tok.truncation:  # padding would read as added ids: probe a bare copy
        tok = Tokenizer.from_str(tok.to_str())
        tok.no_padding()
        tok.no_truncation()
    for text in ("a", "x", "0", "the"):
        if tok.encode(text, add_special_tokens=False).ids:
            return tok.encode(text, text if pair else None, add_special_tokens=True)
    return None


def framing(tok: Tokenizer, special: SpecialIds, source: str = "the tokenizer") -> Framing:
    """How `tok` frames rows. A tokenizer whose post-processor adds nothing (a bare byte-level
    BPE, a SentencePiece Unigram) is given BERT's template over its cls/sep tokens first, so it
    frames its own encodings as the rows are framed. `source` names it in errors."""
    single = _probe(tok, pair=False)
    if single is None:
        raise ElectraError(f"{source} gives no token for plain text (tried 'a', 'x', '0', 'the')")
    if all(s is not None for s in single.sequence_ids):
        _add_template(tok, special)
        single = _probe(tok, pair=False)
    pair = _probe(tok, pair=True)
    single_runs, pair_runs = _segment_runs(single, 1, source), _segment_runs(pair, 2, source)
    frame = Framing(
        (single_runs[0], single_runs[1]),
        (pair_runs[0], pair_runs[1], pair_runs[2]),
        _type0_extra(pair),
    )
    foreign = frame.ids() - {special.cls, special.sep}
    if foreign:
        names = " ".join(str(tok.id_to_token(i)) for i in sorted(foreign))
        raise ElectraError(
            f"{source}: its post-processor frames text with {names}, which is neither its cls "
            f"token {tok.id_to_token(special.cls)} nor its sep token "
            f"{tok.id_to_token(special.sep)}: name them as cls_token/sep_token in the folder's "
            "tokenizer_config.json, or give the tokenizer a [CLS] $A [SEP] template"
        )
    return frame


def _segment_runs(encoding, segments: int, source: str) -> list[tuple[int, ...]]:
    """The added ids before the first segment, between segments and after the last."""
    runs: list[list[int]] = [[]]
    seen: list[int] = []
    for token_id, seq in zip(encoding.ids, encoding.sequence_ids, strict=True):
        if seq is None:
            runs[-1].append(token_id)
        elif not seen or seen[-1] != seq:
            seen.append(seq)
            runs.append([])
    if len(seen) != segments:
        raise ElectraError(
            f"{source}: its post-processor does not frame one and two segments as a template "
            "(a prefix, the segment(s), a suffix): give it a TemplateProcessing post-processor"
        )
    return [tuple(run) for run in runs]


def _type0_extra(pair) -> int | None:
    """Type-0 tokens of the probe pair beyond segment A's own; None: all are type 0."""
    if all(t == 0 for t in pair.type_ids):
        return None
    return sum(t == 0 for t in pair.type_ids) - pair.sequence_ids.count(0)


def _add_template(tok: Tokenizer, special: SpecialIds) -> None:
    cls, sep = tok.id_to_token(special.cls), tok.id_to_token(special.sep)
    template = processors.TemplateProcessing(
        single=f"{cls} $A {sep}",
        pair=f"{cls} $A {sep} $B:1 {sep}:1",
        special_tokens=[(cls, special.cls), (sep, special.sep)],
    )
    # Kept after the existing processor (a ByteLevel one trims offsets), never in its place.
    tok.post_processor = (
        processors.Sequence([tok.post_processor, template]) if tok.post_processor else template
    )


def folder_of(path: Path) -> Path | None:
    """The folder whose config files describe the tokenizer at `path`, if it has any."""
    folder = path if path.is_dir() else path.parent
    return folder if any((folder / name).is_file() for name in _CONFIG_FILES) else None
