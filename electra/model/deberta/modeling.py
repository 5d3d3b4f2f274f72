"""The DeBERTa-v3 encoder and its pretraining networks, as plain `nn.Module`s that know nothing of
training (docs/specification.md §The DeBERTa-v3 family).

Architecture (the DeBERTa and DeBERTa-v3 papers; `transformers`' `modeling_deberta_v2.py` is the
reference it must equal): BERT's post-LayerNorm layers whose attention is disentangled: a query i
and key j score q_i.k_j + q_i.Pk[r(i, j)] + k_j.Pq[r(i, j)] (content-to-content,
content-to-position, position-to-content), over sqrt(3d), where Pq and Pk are the layer's own query
and key products of a shared, layer-normed table of relative positions and r(i, j) the log-bucketed
distance (`electra.model.deberta.relative`). The input has no absolute positions and no token
types.

Module and parameter names are Hugging Face's, so a state dict here has the keys of its HF
namesake and export is a key map. Attention is torch's SDPA with the two position terms as an
additive bias, built from products against only the rows of the relative table a row's distances
reach, where `transformers` multiplies the whole table and runs an eager softmax
(`DisentangledSelfAttention.bias`); on CUDA the flex path adds the same terms in a `score_mod`
(`electra.model.deberta.flex`).

The networks: `DebertaV2Model`; `DebertaV2ForMaskedLM` (the generator: HF's legacy MLM head
`cls.predictions`, its output weight the token table; optionally the enhanced mask decoder, the
DeBERTa paper's §3.2); `DebertaV2ForPreTraining` (the discriminator: dropout and one logit per
token, HF's `DebertaV2ForTokenClassification` layout, exported as two labels by rows [0; w]).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from electra.errors import ElectraError
from electra.model.deberta.config import DebertaV3Config
from electra.model.deberta.flex import block_mask, flex_disentangled
from electra.model.deberta.relative import RelativeRows
from electra.model.layers import activation, gather_positions


def layer_norm(cfg: DebertaV3Config) -> nn.LayerNorm:
    return nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)


@dataclass
class Context:
    """What every layer of one forward pass shares: the boolean attention mask (True where a key
    may be seen, [B, 1, 1 or T, T]; None: every key), the rows of the layer-normed relative table
    the row's distances reach [W, H], and which of them query i reads for key j [T, T]."""

    mask: torch.Tensor | None
    rel: torch.Tensor
    index: torch.Tensor
    flex: Any = None  # on the flex path: its `BlockMask` of the padding (None: every key)
    path: str = "sdpa"


class DebertaV2Embeddings(nn.Module):
    """Token embeddings, LayerNorm, zeros at padding (as HF's), dropout: no position or
    token-type tables (positions are relative, in the attention)."""

    def __init__(self, cfg: DebertaV3Config):
        super().__init__()
        self.word_embeddings = nn.Embedding(
            cfg.vocab_size, cfg.hidden_size, padding_idx=cfg.pad_token_id
        )
        self.LayerNorm = layer_norm(cfg)
        self.dropout = nn.Dropout(cfg.hidden_dropout_prob)

    def forward(self, input_ids: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.dropout(real_only(self.LayerNorm(self.word_embeddings(input_ids)), mask))


def real_only(x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """x [B, T, H] with zeros where a [B, T] attention mask is 0 (HF's embeddings do this)."""
    if mask is None or mask.dim() != 2:
        return x
    return x * (mask != 0).unsqueeze(-1).to(x.dtype)


class DisentangledSelfAttention(nn.Module):
    """Disentangled multi-head self-attention (c2p and p2c, keys shared with the relative table):
    SDPA over q k^T / sqrt(3d) plus the position terms as an additive bias."""

    def __init__(self, cfg: DebertaV3Config):
        super().__init__()
        h = cfg.hidden_size
        self.num_attention_heads = cfg.num_attention_heads
        self.query_proj = nn.Linear(h, h)
        self.key_proj = nn.Linear(h, h)
        self.value_proj = nn.Linear(h, h)
        self.pos_dropout = nn.Dropout(cfg.hidden_dropout_prob)
        self.dropout_p = cfg.attention_probs_dropout_prob
        # HF's scale: sqrt(d * 3), one for each term of the score.
        self.scale = math.sqrt(cfg.head_dim * 3)

    def forward(
        self,
        x: torch.Tensor,
        ctx: Context,
        queries: torch.Tensor | None = None,
        positions: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """x [B, T, H] (keys and values) to [B, N, H]: the queries are `queries` [B, N, H] where
        given (the enhanced mask decoder's), else x at `positions` [B, N], else x itself."""
        q, k, v = self.heads(x, queries, positions)
        pos_q, pos_k = self.position_heads(ctx.rel)
        rows = ctx.index[None] if positions is None else ctx.index[positions]  # [B or 1, N, T]
        if ctx.path == "flex" and positions is None:  # at a few queries, the bias is small
            c2p, p2c = q @ pos_k.transpose(-1, -2), k @ pos_q.transpose(-1, -2)
            out = flex_disentangled(q, k, v, c2p, p2c, rows, ctx.flex, 1.0 / self.scale)
        else:
            bias = self.bias(q, k, pos_q, pos_k, rows, row_mask(ctx.mask, positions))
            out = F.scaled_dot_product_attention(
                q, k, v, attn_mask=bias, dropout_p=self.dropout_now(), scale=1.0 / self.scale
            )
        b, heads, n, d = out.shape
        return out.transpose(1, 2).reshape(b, n, heads * d)

    def heads(
        self, x: torch.Tensor, queries: torch.Tensor | None, positions: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q [B, heads, N, d] and k, v [B, heads, T, d]."""
        b, t, h = x.shape
        heads = self.num_attention_heads
        if queries is None and positions is None:  # one product for q, k and v
            w = torch.cat([self.query_proj.weight, self.key_proj.weight, self.value_proj.weight])
            bias = torch.cat([self.query_proj.bias, self.key_proj.bias, self.value_proj.bias])
            qkv = F.linear(x, w, bias).view(b, t, 3, heads, h // heads)
            return qkv.permute(2, 0, 3, 1, 4).unbind(0)
        if queries is None:
            queries = gather_positions(x, positions)
        q = self.query_proj(queries).view(b, -1, heads, h // heads).transpose(1, 2)
        w = torch.cat([self.key_proj.weight, self.value_proj.weight])
        bias = torch.cat([self.key_proj.bias, self.value_proj.bias])
        kv = F.linear(x, w, bias).view(b, t, 2, heads, h // heads)
        k, v = kv.permute(2, 0, 3, 1, 4).unbind(0)
        return q, k, v

    def position_heads(self, rel: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The relative rows [W, H] through the layer's query and key products (the keys shared
        with the table, `share_att_key`): Pq and Pk, each [heads, W, d]."""
        rel = self.pos_dropout(rel)
        w = torch.cat([self.query_proj.weight, self.key_proj.weight])
        bias = torch.cat([self.query_proj.bias, self.key_proj.bias])
        heads = self.num_attention_heads
        both = F.linear(rel, w, bias).view(rel.shape[0], 2, heads, -1).permute(1, 2, 0, 3)
        return both[0], both[1]

    def bias(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        pos_q: torch.Tensor,
        pos_k: torch.Tensor,
        rows: torch.Tensor,
        mask: torch.Tensor | None,
    ) -> torch.Tensor:
        """The additive bias [B, heads, N, T] of SDPA's scores, scaled: (q_i.Pk[r] + k_j.Pq[r])
        / sqrt(3d), r = rows[i, j], and -inf at keys `mask` hides. Each term is one product
        against the W reachable rows ([B, heads, N or T, W]) and one gather."""
        b, heads, n, _ = q.shape
        t = k.shape[2]
        c2p = torch.matmul(q, pos_k.transpose(-1, -2)).gather(
            -1, rows[:, None].expand(b, heads, n, t)
        )
        p2c = torch.matmul(k, pos_q.transpose(-1, -2)).gather(
            -1, rows.transpose(1, 2)[:, None].expand(b, heads, t, n)
        )
        bias = (c2p + p2c.transpose(-1, -2)) / self.scale
        if mask is not None:
            bias = bias.masked_fill(~mask, float("-inf"))
        return bias

    def dropout_now(self) -> float:
        """The attention dropout rate now (none in eval)."""
        return self.dropout_p if self.training else 0.0


def row_mask(mask: torch.Tensor | None, positions: torch.Tensor | None) -> torch.Tensor | None:
    """The mask's rows for the queries at `positions` [B, N] (all rows where None)."""
    if mask is None or positions is None or mask.shape[2] == 1:
        return mask
    b, n, t = positions.shape[0], positions.shape[1], mask.shape[-1]
    return mask.expand(b, 1, t, t).gather(2, positions[:, None, :, None].expand(b, 1, n, t))


class DebertaV2ResidualOutput(nn.Module):
    """dense, dropout, add the residual, LayerNorm: HF's DebertaV2SelfOutput and DebertaV2Output,
    which differ only in their input width."""

    def __init__(self, cfg: DebertaV3Config, in_features: int):
        super().__init__()
        self.dense = nn.Linear(in_features, cfg.hidden_size)
        self.LayerNorm = layer_norm(cfg)
        self.dropout = nn.Dropout(cfg.hidden_dropout_prob)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dropout(self.dense(x)) + residual)


class DebertaV2Attention(nn.Module):
    def __init__(self, cfg: DebertaV3Config):
        super().__init__()
        self.self = DisentangledSelfAttention(cfg)
        self.output = DebertaV2ResidualOutput(cfg, cfg.hidden_size)

    def forward(self, x, ctx, queries=None, positions=None) -> torch.Tensor:
        if queries is not None:  # the enhanced mask decoder's query states are the residual
            residual = queries
        else:
            residual = x if positions is None else gather_positions(x, positions)
        return self.output(self.self(x, ctx, queries, positions), residual)


class DebertaV2Intermediate(nn.Module):
    def __init__(self, cfg: DebertaV3Config):
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.intermediate_size)
        self.intermediate_act_fn = activation(cfg.hidden_act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.intermediate_act_fn(self.dense(x))


class DebertaV2Layer(nn.Module):
    def __init__(self, cfg: DebertaV3Config):
        super().__init__()
        self.attention = DebertaV2Attention(cfg)
        self.intermediate = DebertaV2Intermediate(cfg)
        self.output = DebertaV2ResidualOutput(cfg, cfg.intermediate_size)

    def forward(
        self,
        x: torch.Tensor,
        ctx: Context,
        queries: torch.Tensor | None = None,
        positions: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """[B, T, H] to [B, T, H]; with `positions` [B, N], [B, N, H] at those alone; with
        `queries` [B, N, H], the layer run with those as its query states (and residual) over x's
        keys and values (the enhanced mask decoder's step)."""
        x = self.attention(x, ctx, queries, positions)
        return self.output(self.intermediate(x), x)


class DebertaV2Encoder(nn.Module):
    """The layers, the relative table (`rel_embeddings`, 2 * position_buckets rows) and its
    LayerNorm (`norm_rel_ebd`)."""

    def __init__(self, cfg: DebertaV3Config):
        super().__init__()
        self.config = cfg
        self.layer = nn.ModuleList(DebertaV2Layer(cfg) for _ in range(cfg.num_hidden_layers))
        self.rel_embeddings = nn.Embedding(2 * cfg.position_buckets, cfg.hidden_size)
        if cfg.norm_rel_ebd == "layer_norm":
            self.LayerNorm = layer_norm(cfg)

    def context(self, attention_mask, seq_len: int, device, path: str = "sdpa") -> Context:
        """The shared `Context` of a row of `seq_len` tokens under `attention_mask` (as the
        encoder takes it) on attention `path`: the relative rows its distances reach, normed once
        for all layers."""
        cfg = self.config
        rows = RelativeRows.of(seq_len, cfg.position_buckets, cfg.relative_reach, device)
        rel = self.rel_embeddings.weight[rows.lo : rows.lo + rows.rows]
        if hasattr(self, "LayerNorm"):
            rel = self.LayerNorm(rel)
        ctx = Context(key_mask(attention_mask), rel, rows.index, path=path)
        if path == "flex" and attention_mask is not None:
            ctx.flex = block_mask(attention_mask, seq_len, device)
        return ctx

    def forward(
        self, x: torch.Tensor, ctx: Context, positions: torch.Tensor | None = None, upto=None
    ) -> torch.Tensor:
        """The layers over x [B, T, H] (the first `upto` of them, where given). Only the last
        layer narrows to `positions`: every earlier one feeds keys and values everywhere."""
        layers = self.layer if upto is None else self.layer[:upto]
        last = len(layers) - 1
        for i, layer in enumerate(layers):
            x = layer(x, ctx, positions=positions if i == last else None)
        if positions is not None and last < 0:
            x = gather_positions(x, positions)
        return x


def key_mask(attention_mask: torch.Tensor | None) -> torch.Tensor | None:
    """SDPA's boolean mask of a [B, T] padding mask (broadcast over heads and queries,
    [B, 1, 1, T]); a [B, 1, T, T] mask (Electric's causal towers) as given."""
    if attention_mask is None:
        return None
    mask = attention_mask.bool()
    return mask[:, None, None, :] if mask.dim() == 2 else mask


class DebertaV2Model(nn.Module):
    """The encoder: token ids (and a [B, T] padding mask) to the final hidden states [B, T, H]."""

    # How the layers attend: sdpa or flex (`electra.model.attention.use_attention`).
    attention_path = "sdpa"

    def __init__(self, cfg: DebertaV3Config, embeddings: nn.Module | None = None):
        super().__init__()
        self.config = cfg
        # Passing another model's embeddings shares them: the same module, the same parameters.
        self.embeddings = embeddings if embeddings is not None else DebertaV2Embeddings(cfg)
        self.encoder = DebertaV2Encoder(cfg)

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        positions: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Final hidden states [B, T, H]; with `positions` [B, N], [B, N, H] at those alone, the
        same values for less work (the last layer runs there only). `token_type_ids` is taken so
        that every family is called alike, and ignored: DeBERTa-v3 has no segments."""
        x = self.embeddings(input_ids, attention_mask)
        ctx = self.context(attention_mask, input_ids.shape[1], input_ids.device)
        return self.encoder(x, ctx, positions)

    def context(self, attention_mask, seq_len: int, device) -> Context:
        return self.encoder.context(attention_mask, seq_len, device, self.attention_path)


class DebertaV2PredictionHeadTransform(nn.Module):
    """dense -> act -> LayerNorm (HF's legacy MLM head's `transform`)."""

    def __init__(self, cfg: DebertaV3Config):
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.transform_act_fn = activation(cfg.hidden_act)
        self.LayerNorm = layer_norm(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.transform_act_fn(self.dense(x)))


class DebertaV2LMPredictionHead(nn.Module):
    """`transform`, then the token table as the output weight, plus a bias of its own (HF ties its
    `decoder` to both; here the product reads them, so no tied copy is held)."""

    def __init__(self, cfg: DebertaV3Config):
        super().__init__()
        self.transform = DebertaV2PredictionHeadTransform(cfg)
        self.bias = nn.Parameter(torch.zeros(cfg.vocab_size))


class DebertaV2OnlyMLMHead(nn.Module):
    def __init__(self, cfg: DebertaV3Config):
        super().__init__()
        self.predictions = DebertaV2LMPredictionHead(cfg)


class DebertaV2ForMaskedLM(nn.Module):
    """The generator (and an MLM model): encoder, HF's legacy head `cls.predictions`, and, with
    `enhanced_mask_decoder`, the DeBERTa paper's decoder: the last layer's input plus absolute
    position embeddings (`position_embeddings`) as query states, the last layer run twice over
    that input's keys and values, the head on the result."""

    base_model_prefix = "deberta"

    def __init__(self, cfg: DebertaV3Config, embeddings: nn.Module | None = None):
        super().__init__()
        self.config = cfg
        self.deberta = DebertaV2Model(cfg, embeddings)
        self.cls = DebertaV2OnlyMLMHead(cfg)
        if cfg.enhanced_mask_decoder:
            self.position_embeddings = nn.Embedding(cfg.max_position_embeddings, cfg.hidden_size)
        init_weights(self, cfg.initializer_range, skip=embeddings)

    def tie_weights(self) -> None:
        """Nothing to tie: the output product reads the token table itself."""

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        positions: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Logits [B, T, V]; with `positions` [B, K] (the masked slots), only there: [B, K, V]."""
        if positions is None and self.config.enhanced_mask_decoder:
            b, t = input_ids.shape
            positions = torch.arange(t, device=input_ids.device).expand(b, t)
        if positions is None:
            return self.logits(self.deberta(input_ids, token_type_ids, attention_mask))
        return self.logits(self.hidden_at(input_ids, token_type_ids, attention_mask, positions))

    def hidden_at(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None,
        attention_mask: torch.Tensor | None,
        positions: torch.Tensor,
    ) -> torch.Tensor:
        """The final states [B, N, H] at `positions` [B, N], the last layer (and the enhanced mask
        decoder's two passes) run there only."""
        if not self.config.enhanced_mask_decoder:
            return self.deberta(input_ids, token_type_ids, attention_mask, positions)
        deberta = self.deberta
        x = deberta.embeddings(input_ids, attention_mask)
        ctx = deberta.context(attention_mask, input_ids.shape[1], input_ids.device)
        x = deberta.encoder(x, ctx, upto=len(deberta.encoder.layer) - 1)
        last = deberta.encoder.layer[-1]
        queries = gather_positions(x, positions) + self.position_embeddings(positions)
        for _ in range(2):
            queries = last(x, ctx, queries, positions)
        return queries

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The vocabulary head on encoder states [..., H]."""
        head = self.cls.predictions
        table = self.deberta.embeddings.word_embeddings.weight
        return F.linear(head.transform(hidden), table, head.bias)


class DebertaV2ForPreTraining(nn.Module):
    """The discriminator: encoder, dropout, one replaced-token logit per token [B, T]. The names
    are HF's `DebertaV2ForTokenClassification`'s, so export with two labels is a key map plus the
    classifier's rows [0; w] and [0; b]: softmax over (0, z) is sigmoid(z)."""

    base_model_prefix = "deberta"

    def __init__(self, cfg: DebertaV3Config, embeddings: nn.Module | None = None):
        super().__init__()
        self.config = cfg
        self.deberta = DebertaV2Model(cfg, embeddings)
        self.dropout = nn.Dropout(cfg.hidden_dropout_prob)
        self.classifier = nn.Linear(cfg.hidden_size, 1)
        init_weights(self, cfg.initializer_range, skip=embeddings)

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        hidden = self.deberta(input_ids, token_type_ids, attention_mask)
        return self.classifier(self.dropout(hidden)).squeeze(-1)


def init_weights(module: nn.Module, std: float, skip: nn.Module | None = None) -> None:
    """HF's DebertaV2 init: normal(0, std) weights and embeddings (the padding row zero), zero
    biases (the MLM head's own bias too), unit LayerNorms. `skip` (shared embeddings owned by
    another model) is left as it is."""
    skipped = set() if skip is None else set(skip.modules())
    for m in module.modules():
        if m in skipped:
            continue
        if isinstance(m, nn.Linear | nn.Embedding):
            nn.init.normal_(m.weight, std=std)
        if isinstance(m, nn.Embedding) and m.padding_idx is not None:
            nn.init.zeros_(m.weight[m.padding_idx])
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)
        if isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
        if isinstance(m, DebertaV2LMPredictionHead):
            nn.init.zeros_(m.bias)


def layerwise_depth(name: str, n: int) -> int:
    """The depth of parameter `name` of a model with `n` layers, for fine-tuning's layer-wise LR:
    embeddings 0, layer i at i + 1, the relative table and its norm with the embeddings (every
    layer reads them, as every layer reads the input), a head n + 1."""
    if name.startswith(("deberta.embeddings", "deberta.encoder.rel_embeddings")):
        return 0
    if name.startswith("deberta.encoder.LayerNorm"):
        return 0
    if m := re.match(r"deberta\.encoder\.layer\.(\d+)\.", name):
        return int(m.group(1)) + 1
    if name.startswith("deberta."):
        raise ElectraError(f"no layer-wise LR depth for parameter {name}")
    return n + 1
