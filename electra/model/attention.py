"""The modern encoder's attention paths beside its plain masked SDPA (docs/performance.md,
§Attention paths of the modern family): the `attention` setting (sdpa, flex, varlen), checked
against the device and the model, put into a built model (`use_attention`), and the per-forward
masks each path attends under (`path_masks`).

- sdpa: `modernbert.attention_masks`' dense boolean masks through SDPA, on every device (the
  reference every other path must equal).
- flex: `torch.nn.attention.flex_attention` under a `BlockMask` whose mask is SDPA's, built once
  per forward for each layer type (blocks no query of which sees any key are skipped). Compiled on
  CUDA (it is only fast so); eager on CPU, where PyTorch has its forward but no backward, so it
  cannot train there.
- varlen: `torch.nn.attention.varlen.varlen_attn` (flash attention over variable-length
  sequences; CUDA, fp16/bf16 only): the [B, T] tokens flattened into one packed sequence in which
  every run of one document within a row (a padding run too) is its own sequence, so a token sees
  exactly its own document's keys; local layers add the window as flash's `window_size`. The
  sequence boundaries (`varlen_sequences`) have a static shape and need no host read, so a step on
  this path keeps static shapes for compile and CUDA graphs.

Each mask object (`FlexMask`, `VarlenMask`) attends by itself (`attend(q, k, v)`), so the encoder
layer's only change is to call it in place of SDPA. Neither path has dropout on the attention
probabilities, so a model with `attention_dropout` > 0 is refused on them rather than trained
without it.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from dataclasses import dataclass
from typing import Any

import torch

from electra.errors import ElectraError
from electra.model.configs import GLOBAL, LOCAL
from electra.model.family import families, family_of

try:
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
except ImportError:  # PyTorch before 2.5: `check_attention` refuses flex
    create_block_mask = flex_attention = None

# What each path needs of PyTorch: a function, and a release known to have it as used here
# (varlen_attn came in 2.10, its window_size later).
PATH_FUNCTIONS = {
    "flex": ("torch.nn.attention.flex_attention", "flex_attention", "2.5"),
    "varlen": ("torch.nn.attention.varlen", "varlen_attn", "2.12"),
}


def check_attention(path: str, device: torch.device, precision: str, section: str = "") -> None:
    """Refuses a path the device cannot train on, naming the setting as the user names it
    (`section`: "train." in pretraining) and what to use instead; called when a run's device is
    known, before it writes anything (`electra.engine.runtime.Runtime`)."""
    if path == "sdpa":
        return
    setting = f"{section}attention"
    use_sdpa = f"use {setting}=sdpa on the {device.type}"
    if path == "varlen" and device.type != "cuda":
        raise ElectraError(
            f"{setting}=varlen runs on CUDA only (PyTorch's flash varlen kernel): {use_sdpa}"
        )
    if path == "flex" and device.type != "cuda":
        raise ElectraError(
            f"{setting}=flex trains on CUDA only (PyTorch's FlexAttention has no backward on "
            f"the {device.type}): {use_sdpa}"
        )
    if path == "varlen" and precision == "fp32":
        raise ElectraError(
            f"{setting}=varlen runs flash attention, which takes bf16 but not fp32: use "
            f"{section}precision=bf16 (or auto), or {setting}=sdpa"
        )
    _check_torch_has(path, setting)


def _check_torch_has(path: str, setting: str) -> None:
    """One line naming the release to install where this PyTorch lacks what `path` calls."""
    module, name, release = PATH_FUNCTIONS[path]
    try:
        function = getattr(importlib.import_module(module), name)
        ok = path != "varlen" or "window_size" in inspect.signature(function).parameters
    except (ImportError, AttributeError):
        ok = False
    if not ok:
        raise ElectraError(
            f"{setting}={path} needs {module}.{name} as PyTorch {release} has it (this is "
            f"{torch.__version__}): upgrade torch or use {setting}=sdpa"
        )


def check_model(path: str, model_cfg: Any, section: str = "") -> None:
    """Refuses `path` for a model it cannot run: one of a family that does not list it in its
    record's `attention_paths` (the electra family runs SDPA only), or one with dropout on its
    attention probabilities, which neither flex nor varlen has.
    Fine-tuning calls it as soon as it has read the encoder's config, before writing anything."""
    if path == "sdpa":
        return
    setting = f"{section}attention"
    if path not in family_of(model_cfg).attention_paths:
        raise _family_error(path, setting, model_cfg.arch)
    # HF's two names for it (ModernBERT's, BERT's and DeBERTa's).
    for name in ("attention_dropout", "attention_probs_dropout_prob"):
        dropout = getattr(model_cfg, name, 0.0)
        if dropout:
            raise ElectraError(
                f"{setting}={path} has no dropout on the attention probabilities, but the "
                f"model's {name} is {dropout:g}: set model.{name}=0 (fine-tuning: --dropout 0) "
                f"or use {setting}=sdpa"
            )


def _family_error(path: str, setting: str, arch: str) -> ElectraError:
    having = " or ".join(f.name for f in families().values() if path in f.attention_paths)
    paths = " or ".join(families()[arch].attention_paths)
    return ElectraError(
        f"{setting}={path} is an attention path of the family model.arch={having} only; the "
        f"{arch} family runs {paths}: use {setting}=sdpa"
    )


def use_attention(model: torch.nn.Module, path: str, section: str = "") -> torch.nn.Module:
    """`model` with every modern encoder in it (a module with an `attention_path`, i.e.
    `modernbert.ModernBertModel`) set to attend by `path`; `path` other than sdpa on a model
    without one (the electra family) is refused."""
    encoders = [m for m in model.modules() if isinstance(getattr(m, "attention_path", None), str)]
    if path != "sdpa" and not encoders:
        raise _family_error(path, f"{section}attention", model.config.arch)
    for encoder in encoders:
        check_model(path, encoder.config, section)
        encoder.attention_path = path
    return model


class PathMask:
    """What a layer of a path other than sdpa gets in place of SDPA's mask: it attends by itself.
    q, k, v [B, heads, T, d] (rotated), out the same shape."""

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


def path_masks(
    path: str,
    attention_mask: torch.Tensor | None,
    shape: tuple[int, int],
    half_window: int,
    device: torch.device,
    kinds: set[str],
) -> dict[str, Any] | None:
    """Each layer type's mask object on `path` ({GLOBAL, LOCAL} -> `PathMask`), or None where the
    encoder should build SDPA's masks (`modernbert.attention_masks`): on sdpa, and on varlen for a
    4-D mask (Electric's causal towers: a mask of any shape, which sequences cannot express).
    `attention_mask` is as `attention_masks` takes it: [B, T] document numbers (0 padding), a
    boolean [B, 1, T, T], or None; `shape` is the batch's [B, T]."""
    seq_len = shape[1]
    if path == "flex":
        return flex_masks(attention_mask, seq_len, half_window, device, kinds)
    if path == "varlen" and (attention_mask is None or attention_mask.dim() == 2):
        docs = attention_mask
        if docs is None:  # one document a row
            docs = torch.ones(shape, dtype=torch.long, device=device)
        cu_seqlens = varlen_sequences(docs.to(device))
        return {
            GLOBAL: VarlenMask(cu_seqlens, seq_len, -1),
            LOCAL: VarlenMask(cu_seqlens, seq_len, half_window),
        }
    return None


# --- flex ------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class FlexMask(PathMask):
    block_mask: Any  # a BlockMask, or None: every query sees every key

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        # Eager, flex_attention runs a dense reference, as slow as it is memory-hungry: on CUDA
        # it is compiled, by itself or with the model that `train.compile` compiles around it.
        # Eager elsewhere, where only its forward runs (the tests).
        eager = q.device.type != "cuda" or torch.compiler.is_compiling()
        flex = flex_attention if eager else compiled_flex()
        return flex(q, k, v, block_mask=self.block_mask)


@functools.cache
def compiled_flex():
    return torch.compile(flex_attention)


def flex_masks(
    attention_mask: torch.Tensor | None,
    seq_len: int,
    half_window: int,
    device: torch.device,
    kinds: set[str],
) -> dict[str, FlexMask]:
    """SDPA's masks (`modernbert.attention_masks`) as BlockMasks, one per layer type in `kinds`:
    a query sees the real keys of its own document (or, given a 4-D mask, the keys it allows),
    on local layers only those within `half_window`, and always itself."""
    batch = None
    if attention_mask is None:
        seen = None
    elif attention_mask.dim() == 2:
        docs = attention_mask.to(device)
        batch = docs.shape[0]

        def seen(b, q, kv):
            return (docs[b, q] == docs[b, kv]) & (docs[b, kv] != 0)

    else:  # a boolean [B or 1, 1, T, T] of which keys each query may see
        keys = attention_mask.to(device).bool()
        batch = keys.shape[0]

        def seen(b, q, kv):
            return keys[b, 0, q, kv]

    def global_mod(b, h, q, kv):
        return seen(b, q, kv) | (q == kv)

    def local_mod(b, h, q, kv):
        near = (q - kv).abs() <= half_window
        return near if seen is None else (seen(b, q, kv) & near) | (q == kv)

    # Compiled on CUDA, the mask is made block by block instead of as a [B, T, T] tensor (2 GiB
    # at batch 32 and 8k tokens); inside a compiled model it is traced with it.
    compile_mask = device.type == "cuda" and not torch.compiler.is_compiling()
    masks = {}
    for kind, mod in ((GLOBAL, global_mod), (LOCAL, local_mod)):
        if kind not in kinds:
            continue
        if kind == GLOBAL and seen is None:
            masks[kind] = FlexMask(None)
            continue
        block_mask = create_block_mask(
            mod, batch, None, seq_len, seq_len, device=device, _compile=compile_mask
        )
        masks[kind] = FlexMask(block_mask)
    return masks


# --- varlen ----------------------------------------------------------------------------------------


def varlen_sequences(documents: torch.Tensor) -> torch.Tensor:
    """The cumulative sequence starts (flash's cu_seqlens, int32, [B*T + 1]) of the [B, T] tokens
    flattened row after row, where a sequence is a run of equal document numbers within a row
    (each document; each stretch of padding, whose outputs are not used): the start of every
    sequence, then the total B*T repeated for the zero-length sequences that fill the static shape.
    Built without reading anything back to the host (no nonzero, no item): sequence i starts at
    the first token whose running count of starts exceeds i. A document's tokens are assumed
    contiguous in its row, as `prepare` and the collators write them."""
    b, t = documents.shape
    first = torch.ones(b, 1, dtype=torch.bool, device=documents.device)
    starts = torch.cat((first, documents[:, 1:] != documents[:, :-1]), dim=1).reshape(-1)
    count = starts.cumsum(0)
    wanted = torch.arange(1, b * t + 2, device=documents.device)
    return torch.searchsorted(count, wanted, out_int32=True)


@dataclass(frozen=True, eq=False)
class VarlenMask(PathMask):
    cu_seqlens: torch.Tensor  # [B*T + 1] int32 (`varlen_sequences`)
    max_len: int  # T: no sequence is longer than a row
    half_window: int  # keys this far each side (local layers); -1: the whole sequence

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        b, h, t, d = q.shape
        # varlen_attn takes tokens x heads x d; the rows are laid end to end.
        packed = [x.transpose(1, 2).reshape(b * t, h, d) for x in (q, k, v)]
        window = (self.half_window, self.half_window)
        cu, n = self.cu_seqlens, self.max_len
        out = varlen_attn(*packed, cu, cu, n, n, window_size=window)
        return out.view(b, t, h, d).transpose(1, 2)


def varlen_attn(*args: Any, **kwargs: Any) -> torch.Tensor:
    """PyTorch's `torch.nn.attention.varlen.varlen_attn`, imported when first called (older
    releases lack it; `check_attention` says so before a run starts). Tests replace this name
    with a reference that runs on CPU."""
    from torch.nn.attention.varlen import varlen_attn as flash_varlen

    return flash_varlen(*args, **kwargs)
