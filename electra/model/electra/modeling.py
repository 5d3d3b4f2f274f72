"""The ELECTRA encoder and its two heads, as plain `nn.Module`s that know nothing of training.

Architecture (docs/specification.md §Model): BERT's post-LayerNorm Transformer with an embedding
size E that may differ from the hidden size H (then a linear `embeddings_project` maps E to H),
exact-erf GELU, and SDPA attention. Module and parameter names follow Hugging Face's
`modeling_electra.py`, so the state dict of `ElectraForPreTraining` / `ElectraForMaskedLM` here has
the keys of their HF namesakes.

The layers are torch's own (`nn.Linear`, `nn.Dropout`, SDPA). Kernels that run faster on CPU are
put in after a model is built, by `electra.model.kernels.use_kernels`, without changing its parameters.
"""

from __future__ import annotations

import re

import torch
import torch.nn.functional as F
from torch import nn

from electra.errors import ElectraError
from electra.model.electra.config import ElectraModelConfig
from electra.model.layers import activation, gather_positions


class ElectraEmbeddings(nn.Module):
    """Word + position + token-type embeddings, LayerNorm, dropout. Shared by generator and discriminator."""

    def __init__(self, cfg: ElectraModelConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(cfg.vocab_size, cfg.embedding_size)
        self.position_embeddings = nn.Embedding(cfg.max_position_embeddings, cfg.embedding_size)
        self.token_type_embeddings = nn.Embedding(cfg.type_vocab_size, cfg.embedding_size)
        self.LayerNorm = nn.LayerNorm(cfg.embedding_size, eps=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.hidden_dropout_prob)

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor,
        position_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        positions = positions_of(input_ids, position_ids)
        x = (
            self.word_embeddings(input_ids)
            + self.position_embeddings(positions)
            + self.token_type_embeddings(token_type_ids)
        )
        return self.dropout(self.LayerNorm(x))


def positions_of(input_ids: torch.Tensor, position_ids: torch.Tensor | None) -> torch.Tensor:
    """0..T-1 along each row, unless given: packed rows (electra.finetuning.packing) restart per example."""
    if position_ids is None:
        return torch.arange(input_ids.shape[1], device=input_ids.device)
    return position_ids


class ElectraSelfAttention(nn.Module):
    """Multi-head self-attention: softmax(q k^T / sqrt(d), masked), dropped out, times v."""

    def __init__(self, cfg: ElectraModelConfig):
        super().__init__()
        h = cfg.hidden_size
        self.num_heads = cfg.num_attention_heads
        self.query = nn.Linear(h, h)
        self.key = nn.Linear(h, h)
        self.value = nn.Linear(h, h)
        self.dropout_p = cfg.attention_probs_dropout_prob

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor | None, queries: torch.Tensor | None = None
    ) -> torch.Tensor:
        """x [B, T, H] to [B, T, H]; with `queries` (flat indices into [B * T]), [N, H] at those
        positions alone. `mask` is boolean, True where a key may be attended to, shaped
        [B, 1, 1 or T, T] (the same for every head)."""
        if queries is not None:
            return self.attend_at(x, mask, queries)
        b, t, h = x.shape
        heads, d = self.num_heads, h // self.num_heads
        # One product for q, k and v: a wider matrix runs nearer the machine's peak than three.
        qkv = self.project(x, self.query, self.key, self.value)  # [B, T, 3H]
        q, k, v = qkv.view(b, t, 3, heads, d).permute(2, 0, 3, 1, 4).unbind(0)  # [B, heads, T, d]
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=self.p())
        return out.transpose(1, 2).reshape(b, t, h)  # [B, heads, T, d] -> [B, T, H]

    def attend_at(
        self, x: torch.Tensor, mask: torch.Tensor | None, queries: torch.Tensor
    ) -> torch.Tensor:
        """The output at `queries` alone (flat indices into x's [B * T] positions): [N, H]. Keys
        and values are projected at every position, queries only where asked, so a head that reads
        a few positions (the [CLS] vectors of classification) spares the final layer's query
        projection, attention and everything after them at all other positions."""
        b, t, h = x.shape
        heads, d = self.num_heads, h // self.num_heads
        rows, cols = queries // t, queries % t
        n = queries.numel()
        q = self.project(x.flatten(0, 1)[queries], self.query).view(n, heads, 1, d)
        kv = self.project(x, self.key, self.value).view(b, t, 2, heads, d)
        k, v = kv[rows].permute(2, 0, 3, 1, 4).unbind(0)  # each [N, heads, T, d]
        if mask is not None:  # each query's row of the mask: [B, 1, 1 or T, T] -> [N, 1, 1, T]
            mask = mask[rows, 0, cols if mask.shape[2] > 1 else 0][:, None, None, :]
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=self.p())
        return out.reshape(n, h)  # [N, heads, 1, d] -> [N, H]

    def p(self) -> float:
        """The attention dropout rate now (none in eval)."""
        return self.dropout_p if self.training else 0.0

    # The product `project` runs: a subclass may run another with F.linear's signature.
    linear = staticmethod(F.linear)

    def project(self, x: torch.Tensor, *layers: nn.Linear) -> torch.Tensor:
        """x [..., H] through `layers` (of query, key, value) as one product: [..., len * H]."""
        if len(layers) == 1:
            return self.linear(x, layers[0].weight, layers[0].bias)
        weight = torch.cat([layer.weight for layer in layers])
        return self.linear(x, weight, torch.cat([layer.bias for layer in layers]))


class ElectraResidualOutput(nn.Module):
    """dense, dropout, add the residual, LayerNorm: HF's ElectraSelfOutput and ElectraOutput, which
    differ only in their input width (hidden after attention, intermediate after the FFN)."""

    def __init__(self, cfg: ElectraModelConfig, in_features: int):
        super().__init__()
        self.dense = nn.Linear(in_features, cfg.hidden_size)
        self.LayerNorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.hidden_dropout_prob)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dropout(self.dense(x)) + residual)


class ElectraAttention(nn.Module):
    def __init__(self, cfg: ElectraModelConfig):
        super().__init__()
        self.self = ElectraSelfAttention(cfg)
        self.output = ElectraResidualOutput(cfg, cfg.hidden_size)

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor | None, queries: torch.Tensor | None = None
    ) -> torch.Tensor:
        residual = x if queries is None else x.flatten(0, 1)[queries]
        return self.output(self.self(x, mask, queries), residual)


class ElectraIntermediate(nn.Module):
    def __init__(self, cfg: ElectraModelConfig):
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.intermediate_size)
        self.intermediate_act_fn = activation(cfg.hidden_act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.intermediate_act_fn(self.dense(x))


class ElectraLayer(nn.Module):
    def __init__(self, cfg: ElectraModelConfig):
        super().__init__()
        self.attention = ElectraAttention(cfg)
        self.intermediate = ElectraIntermediate(cfg)
        self.output = ElectraResidualOutput(cfg, cfg.intermediate_size)

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor | None, queries: torch.Tensor | None = None
    ) -> torch.Tensor:
        """[B, T, H] to [B, T, H]; with `queries` (flat indices into [B * T]), [N, H] at those
        positions alone."""
        x = self.attention(x, mask, queries)
        return self.output(self.intermediate(x), x)


class ElectraEncoder(nn.Module):
    def __init__(self, cfg: ElectraModelConfig):
        super().__init__()
        self.layer = nn.ModuleList(ElectraLayer(cfg) for _ in range(cfg.num_hidden_layers))

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor | None, queries: torch.Tensor | None = None
    ) -> torch.Tensor:
        # Only the last layer narrows to `queries`: every earlier one feeds the keys and values
        # of all positions above it.
        last = len(self.layer) - 1
        for i, layer in enumerate(self.layer):
            x = layer(x, mask, queries if i == last else None)
        if queries is not None and last < 0:
            x = x.flatten(0, 1)[queries]
        return x


class ElectraModel(nn.Module):
    """The encoder: token ids to final hidden states [B, T, H]. No pooler (the official model has none)."""

    def __init__(self, cfg: ElectraModelConfig, embeddings: ElectraEmbeddings | None = None):
        super().__init__()
        self.config = cfg
        # Passing another model's embeddings shares them: the same module, the same parameters.
        self.embeddings = embeddings if embeddings is not None else ElectraEmbeddings(cfg)
        if cfg.embedding_size != cfg.hidden_size:
            self.embeddings_project = nn.Linear(cfg.embedding_size, cfg.hidden_size)
        self.encoder = ElectraEncoder(cfg)

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        queries: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Final hidden states [B, T, H]; with `queries` (flat indices into [B * T]), [N, H] at
        those positions alone, the same values for less work (the last layer runs there only)."""
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        x = self.embeddings(input_ids, token_type_ids, position_ids)
        if hasattr(self, "embeddings_project"):
            x = self.embeddings_project(x)
        # SDPA takes a boolean mask, True where a key may be attended to: [B, T] padding masks are
        # broadcast over heads and queries; a [B, 1, T, T] mask (causal towers, packed rows) is
        # used as given.
        mask = None if attention_mask is None else attention_mask.bool()
        if mask is not None and mask.dim() == 2:
            mask = mask[:, None, None, :]
        return self.encoder(x, mask, queries)


class ElectraDiscriminatorPredictions(nn.Module):
    def __init__(self, cfg: ElectraModelConfig):
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.activation = activation(cfg.hidden_act)
        self.dense_prediction = nn.Linear(cfg.hidden_size, 1)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.dense_prediction(self.activation(self.dense(hidden))).squeeze(-1)


class ElectraForPreTraining(nn.Module):
    """The discriminator: one logit per token, positive for "replaced"."""

    base_model_prefix = "electra"  # the encoder's attribute, as in Hugging Face's classes

    def __init__(self, cfg: ElectraModelConfig, embeddings: ElectraEmbeddings | None = None):
        super().__init__()
        self.config = cfg
        self.electra = ElectraModel(cfg, embeddings)
        self.discriminator_predictions = ElectraDiscriminatorPredictions(cfg)
        init_weights(self, cfg.initializer_range)
        # The official head's last layer keeps TF's default Glorot-uniform init
        # (docs/specification.md §Discriminator).
        nn.init.xavier_uniform_(self.discriminator_predictions.dense_prediction.weight)

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        return self.discriminator_predictions(
            self.electra(input_ids, token_type_ids, attention_mask)
        )


class ElectraGeneratorPredictions(nn.Module):
    def __init__(self, cfg: ElectraModelConfig):
        super().__init__()
        self.activation = activation("gelu")
        self.LayerNorm = nn.LayerNorm(cfg.embedding_size, eps=cfg.layer_norm_eps)
        self.dense = nn.Linear(cfg.hidden_size, cfg.embedding_size)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.activation(self.dense(hidden)))


class ElectraForMaskedLM(nn.Module):
    """The generator (or the BERT-style MLM model): vocabulary logits, tied to the word embedding table."""

    base_model_prefix = "electra"

    def __init__(self, cfg: ElectraModelConfig, embeddings: ElectraEmbeddings | None = None):
        super().__init__()
        self.config = cfg
        self.electra = ElectraModel(cfg, embeddings)
        self.generator_predictions = ElectraGeneratorPredictions(cfg)
        self.generator_lm_head = nn.Linear(cfg.embedding_size, cfg.vocab_size)
        init_weights(self, cfg.initializer_range, skip=embeddings)
        self.tie_weights()

    def tie_weights(self) -> None:
        """The output head's weight is the encoder's word table (again, after the encoder changed)."""
        self.generator_lm_head.weight = self.electra.embeddings.word_embeddings.weight

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        positions: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Logits [B, T, V], or [B, N, V] at `positions` [B, N] only: the head's cost is V per position,
        so pretraining computes it where the loss needs it (the masked slots) and nowhere else."""
        hidden = self.electra(input_ids, token_type_ids, attention_mask)
        if positions is not None:
            hidden = gather_positions(hidden, positions)
        return self.logits(hidden)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The vocabulary head on encoder states [..., H]."""
        return self.generator_lm_head(self.generator_predictions(hidden))

    def hidden_at(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None,
        attention_mask: torch.Tensor | None,
        positions: torch.Tensor,
    ) -> torch.Tensor:
        """The encoder's final states [B, N, H] at `positions` [B, N] (the objectives'
        masked-LM step), gathered from all of them."""
        return gather_positions(self.electra(input_ids, token_type_ids, attention_mask), positions)


def init_weights(module: nn.Module, std: float, skip: nn.Module | None = None) -> None:
    """BERT init: truncated normal (±2 std) for weights and embeddings, zero biases, unit LayerNorms.
    `skip` (shared embeddings owned by another model) is left as it is."""
    skipped = set() if skip is None else set(skip.modules())
    for m in module.modules():
        if m in skipped:
            continue
        if isinstance(m, nn.Linear | nn.Embedding):
            nn.init.trunc_normal_(m.weight, std=std, a=-2 * std, b=2 * std)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)
        if isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)


def layerwise_depth(name: str, n: int) -> int:
    """The depth of parameter `name` of a model with `n` layers, for fine-tuning's layer-wise LR
    (`electra.finetuning.loop.layerwise_groups`): embeddings 0, layer i at i + 1, a head n + 1."""
    if name.startswith("electra.embeddings"):
        return 0
    if m := re.match(r"electra\.encoder\.layer\.(\d+)\.", name):
        return int(m.group(1)) + 1
    if name.startswith("electra."):
        raise ElectraError(f"no layer-wise LR depth for parameter {name}")
    return n + 1
