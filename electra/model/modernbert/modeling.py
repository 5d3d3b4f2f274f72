"""The ModernBERT-architecture encoder (issue 38), as plain `nn.Module`s that know nothing of training.

Architecture (the ModernBERT paper; `transformers`' `modeling_modernbert.py` is the reference it
must equal): pre-LayerNorm layers with no biases anywhere and bias-free LayerNorms (the first
layer's attention norm is an identity, since the embedding norm just ran), a GeGLU MLP, rotary
positions (no position or token-type tables) with one theta on global layers and another on local
ones, global attention on every n-th layer (layer i when i % n == 0) and sliding-window attention
elsewhere (a token sees the keys within `local_attention // 2` of it), and a final norm.

Module and parameter names are Hugging Face's, so the state dict of `ModernBertModel` here has
exactly the keys of its HF namesake and export stays a key map. Attention runs through torch's
SDPA with a boolean mask on every device (or, as the `attention` setting asks, FlexAttention or
flash varlen: `electra.model.attention`); rows that pack several documents are masked so that
each document sees only itself.

The heads: `ModernBertForMaskedLM` (HF's keys; the generator, with its output head optionally only
at the masked positions) and `ModernBertForPreTraining` (the RTD discriminator: HF's
`ModernBertForTokenClassification` names with one logit, exported as two labels by rows [0; w]).
"""

from __future__ import annotations

import re

import torch
import torch.nn.functional as F
from torch import nn

from electra.errors import ElectraError
from electra.model.attention import PathMask, path_masks
from electra.model.configs import GLOBAL, LOCAL
from electra.model.documents import same_document
from electra.model.layers import activation, gather_positions
from electra.model.modernbert.config import ModernConfig


def layer_norm(cfg: ModernConfig) -> nn.LayerNorm:
    return nn.LayerNorm(cfg.hidden_size, eps=cfg.norm_eps, bias=False)


def out_std(cfg: ModernConfig) -> float:
    """HF's standard deviation for a product into the residual stream (and the heads' dense)."""
    return cfg.initializer_range / (2.0 * cfg.num_hidden_layers) ** 0.5


def init_weight(weight: torch.Tensor, std: float, cfg: ModernConfig) -> None:
    """HF's truncated normal, cut at `initializer_cutoff_factor` standard deviations."""
    cut = cfg.initializer_cutoff_factor * std
    nn.init.trunc_normal_(weight, mean=0.0, std=std, a=-cut, b=cut)


def rotary(seq_len: int, head_dim: int, theta: float, device: torch.device) -> torch.Tensor:
    """cos and sin of each position's angles, stacked: [2, T, head_dim], fp32. Computed per call
    rather than kept in a buffer, so that casting the model (`.half()`) cannot round the
    frequencies, and there is nothing to restore after building on the meta device. Made on
    `device`: no host-to-device copy in a step (which a captured CUDA graph could not hold)."""
    steps = torch.arange(0, head_dim, 2, dtype=torch.float, device=device)
    inv_freq = 1.0 / (theta ** (steps / head_dim))
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float, device=device), inv_freq)
    angles = torch.cat((angles, angles), dim=-1)  # the two halves of a head turn together
    return torch.stack((angles.cos(), angles.sin()))


def apply_rotary(x: torch.Tensor, rope: torch.Tensor) -> torch.Tensor:
    """Rotate x [B, heads, T, d] by the angles in `rope` [2, T, d], in fp32."""
    cos, sin = rope
    xf = x.float()
    first, second = xf.chunk(2, dim=-1)
    return (xf * cos + torch.cat((-second, first), dim=-1) * sin).to(x.dtype)


def attention_masks(
    attention_mask: torch.Tensor | None, seq_len: int, half_window: int, device: torch.device
) -> dict[str, torch.Tensor | None]:
    """The boolean SDPA mask of each layer type, True where a query may see a key, [B or 1, 1, T, T]
    (None: see everything). `attention_mask` is [B, T]: 0 for padding, else the number of the
    document the token belongs to (1 everywhere in a row of one document: an ordinary padding
    mask), so that the documents packed in one row never see each other (docs/pretraining.md,
    §Document masking); or a boolean [B, 1, T, T] of which keys each query may see (Electric's
    causal towers), used as given. Local layers also hide keys more than `half_window` away.
    Every position may see itself, so that a padded query, which sees no real key, has one (an
    all-False row makes SDPA return NaN); real positions never see a padded key or another
    document's, so their outputs are HF's exactly."""
    pos = torch.arange(seq_len, device=device)
    itself = pos[:, None] == pos[None, :]
    window = (pos[:, None] - pos[None, :]).abs() <= half_window  # [T, T]
    if attention_mask is None:
        return {GLOBAL: None, LOCAL: window[None, None]}
    keys = attention_mask.to(device)
    if keys.dim() == 2:
        keys = same_document(keys)
    keys = keys.bool()
    return {GLOBAL: keys | itself, LOCAL: (keys & window) | itself}


class ModernBertEmbeddings(nn.Module):
    """Token embeddings, norm, dropout: no position or token-type tables (positions are rotary)."""

    def __init__(self, cfg: ModernConfig):
        super().__init__()
        self.tok_embeddings = nn.Embedding(
            cfg.vocab_size, cfg.hidden_size, padding_idx=cfg.pad_token_id
        )
        self.norm = layer_norm(cfg)
        self.drop = nn.Dropout(cfg.embedding_dropout)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.drop(self.norm(self.tok_embeddings(input_ids)))


class ModernBertAttention(nn.Module):
    """Multi-head self-attention with rotary queries and keys: one fused q/k/v product (`Wqkv`),
    SDPA under the layer type's mask, and the output product (`Wo`)."""

    def __init__(self, cfg: ModernConfig):
        super().__init__()
        h = cfg.hidden_size
        self.num_heads = cfg.num_attention_heads
        self.Wqkv = nn.Linear(h, 3 * h, bias=False)
        self.Wo = nn.Linear(h, h, bias=False)
        self.dropout_p = cfg.attention_dropout
        self.out_drop = nn.Dropout(cfg.attention_dropout)

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor | None, rope: torch.Tensor
    ) -> torch.Tensor:
        b, t, h = x.shape
        q, k, v = self.heads(x, rope)
        out = self.attend(q, k, v, mask)
        return self.out_drop(self.Wo(out.transpose(1, 2).reshape(b, t, h)))

    def heads(
        self, x: torch.Tensor, rope: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q, k, v [B, heads, T, d] of x [B, T, H], q and k turned by `rope`
        (`electra.model.modernbert.kernels` does it in fewer passes on CPU)."""
        b, t, h = x.shape
        # Wqkv's rows are q, then k, then v, each head after head (HF's layout).
        qkv = self.Wqkv(x).view(b, t, 3, self.num_heads, h // self.num_heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        return apply_rotary(q, rope), apply_rotary(k, rope), v

    def attend_at(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None,
        rope: torch.Tensor,
        positions: torch.Tensor,
    ) -> torch.Tensor:
        """The output at `positions` [B, N] alone: [B, N, H]. Keys and values are projected at
        every position, queries only where asked, so the last layer of a network whose loss reads
        a few positions (the generator's masked slots) spares the query product, the attention,
        the output product and the MLP everywhere else; the values there are `forward`'s."""
        b, t, h = x.shape
        n, heads, d = positions.shape[1], self.num_heads, h // self.num_heads
        w = self.Wqkv.weight  # rows q, then k, then v (HF's layout)
        q = F.linear(gather_positions(x, positions), w[:h]).view(b, n, heads, d).transpose(1, 2)
        k, v = F.linear(x, w[h:]).view(b, t, 2, heads, d).permute(2, 0, 3, 1, 4).unbind(0)
        # Each query turns by its own position's angles: [2, B, 1, N, d].
        q, k = apply_rotary(q, rope[:, positions].unsqueeze(2)), apply_rotary(k, rope)
        if mask is not None:  # each query's row of keys: [B or 1, 1, T, T] -> [B, 1, N, T]
            mask = mask.expand(b, 1, t, t).gather(2, positions[:, None, :, None].expand(b, 1, n, t))
        out = self.attend(q, k, v, mask)
        return self.out_drop(self.Wo(out.transpose(1, 2).reshape(b, n, h)))

    def attend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None
    ) -> torch.Tensor:
        """Attention of q [B, heads, N, d] over k, v [B, heads, T, d] under the boolean `mask`
        (True where a query may see a key; None: every key), with the layer's dropout in
        training: [B, heads, N, d]. SDPA (`electra.model.modernbert.kernels` has a faster one for
        short rows on CPU), or the flex or varlen path's own (`electra.model.attention`)."""
        if isinstance(mask, PathMask):
            return mask.attend(q, k, v)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=self.dropout_now())

    def dropout_now(self) -> float:
        """The attention dropout rate now (none in eval)."""
        return self.dropout_p if self.training else 0.0


class ModernBertMLP(nn.Module):
    """GeGLU: `Wi` widens to twice the intermediate size; the activation of the first half gates
    the second; `Wo` narrows back."""

    def __init__(self, cfg: ModernConfig):
        super().__init__()
        self.Wi = nn.Linear(cfg.hidden_size, 2 * cfg.intermediate_size, bias=False)
        self.act = activation(cfg.hidden_activation)
        self.drop = nn.Dropout(cfg.mlp_dropout)
        self.Wo = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        value, gate = self.Wi(x).chunk(2, dim=-1)
        return self.Wo(self.drop(self.act(value) * gate))


class ModernBertEncoderLayer(nn.Module):
    """Pre-norm: x + attn(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, cfg: ModernConfig, index: int):
        super().__init__()
        # The embeddings end in a norm, so the first layer's would normalise twice (HF's choice).
        self.attn_norm = nn.Identity() if index == 0 else layer_norm(cfg)
        self.attn = ModernBertAttention(cfg)
        self.mlp_norm = layer_norm(cfg)
        self.mlp = ModernBertMLP(cfg)
        self.attention_type = cfg.layer_type(index)

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None,
        rope: torch.Tensor,
        positions: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """[B, T, H] to [B, T, H]; with `positions` [B, N], [B, N, H] at those alone
        (`ModernBertAttention.attend_at`)."""
        if positions is None:
            x = x + self.attn(self.attn_norm(x), mask, rope)
        else:
            attended = self.attn.attend_at(self.attn_norm(x), mask, rope, positions)
            x = gather_positions(x, positions) + attended
        return x + self.mlp(self.mlp_norm(x))


class ModernBertModel(nn.Module):
    """The encoder: token ids (and an attention mask: 0 for padding, else the token's document
    number, so 1 for every real token of a row holding one document) to the final hidden states
    [B, T, H]."""

    # How the layers attend: sdpa, flex or varlen (`electra.model.attention.use_attention`).
    attention_path = "sdpa"

    def __init__(self, cfg: ModernConfig, embeddings: nn.Module | None = None):
        super().__init__()
        self.config = cfg
        # Passing another model's embeddings shares them: the same module, the same parameters.
        self.shares_embeddings = embeddings is not None
        self.embeddings = embeddings if embeddings is not None else ModernBertEmbeddings(cfg)
        self.layers = nn.ModuleList(
            ModernBertEncoderLayer(cfg, i) for i in range(cfg.num_hidden_layers)
        )
        self.final_norm = layer_norm(cfg)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """HF's initialisation: truncated normals, the products into the residual stream scaled
        down by sqrt(2 * layers)."""
        cfg = self.config
        std_in, std_out = cfg.initializer_range, out_std(cfg)
        if not self.shares_embeddings:  # the owner initialises them
            init_weight(self.embeddings.tok_embeddings.weight, std_in, cfg)
        for layer in self.layers:
            init_weight(layer.attn.Wqkv.weight, std_in, cfg)
            init_weight(layer.attn.Wo.weight, std_out, cfg)
            init_weight(layer.mlp.Wi.weight, std_in, cfg)
            init_weight(layer.mlp.Wo.weight, std_out, cfg)
        for module in self.layers.modules():
            if isinstance(module, nn.LayerNorm):
                nn.init.ones_(module.weight)
        nn.init.ones_(self.final_norm.weight)
        if not self.shares_embeddings:
            nn.init.ones_(self.embeddings.norm.weight)

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        positions: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Final hidden states [B, T, H]; with `positions` [B, N], [B, N, H] at those alone, the
        same values for less work (the last layer runs there only). `token_type_ids` is taken so
        that every family is called alike, and ignored: the architecture has no segments (a pair
        is told apart by its [SEP])."""
        cfg, t, device = self.config, input_ids.shape[1], input_ids.device
        if t > cfg.max_position_embeddings:
            raise ElectraError(
                f"a sequence of {t} tokens is longer than model.max_position_embeddings="
                f"{cfg.max_position_embeddings}: shorten it or raise the limit"
            )
        x = self.embeddings(input_ids)
        kinds = {layer.attention_type for layer in self.layers}
        half, shape = cfg.local_attention // 2, input_ids.shape
        masks = path_masks(self.attention_path, attention_mask, shape, half, device, kinds)
        if masks is None:  # the plain masked SDPA
            masks = attention_masks(attention_mask, t, half, device)
        ropes = {kind: rotary(t, cfg.head_dim, cfg.rope_theta(kind), device) for kind in kinds}
        last = self.layers[-1]  # only it narrows: every earlier layer feeds keys everywhere
        # The flex and varlen paths attend whole rows: there the last layer runs everywhere.
        narrow = positions if self.attention_path == "sdpa" else None
        for layer in self.layers:
            kind = layer.attention_type
            x = layer(x, masks[kind], ropes[kind], narrow if layer is last else None)
        x = self.final_norm(x)
        return x if positions is None or narrow is not None else gather_positions(x, positions)


class ModernBertPredictionHead(nn.Module):
    """dense -> act -> norm, the shape of every HF ModernBERT head (no biases: HF's
    `classifier_bias` and `norm_bias` default to False)."""

    def __init__(self, cfg: ModernConfig):
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size, bias=False)
        self.act = activation(cfg.classifier_activation)
        self.norm = layer_norm(cfg)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.norm(self.act(self.dense(hidden)))


def head_and_linear(cfg: ModernConfig, outputs: int) -> tuple[ModernBertPredictionHead, nn.Linear]:
    """HF's head (dense -> act -> norm) and the linear layer after it to `outputs` values,
    initialised as HF initialises a classifier: the dense as a product into the residual stream,
    the linear with std hidden_size ** -0.5 ("final_out") and a zero bias. What every per-token
    or per-sequence output of the family is built from (the discriminator, the task heads,
    All-Tokens MLM's copy gate)."""
    head = ModernBertPredictionHead(cfg)
    linear = nn.Linear(cfg.hidden_size, outputs)
    init_weight(head.dense.weight, out_std(cfg), cfg)
    init_weight(linear.weight, cfg.hidden_size**-0.5, cfg)
    nn.init.zeros_(linear.bias)
    return head, linear


class ModernBertWithClassifier(nn.Module):
    """The encoder (`model`), then `head`, `drop` and a linear `classifier` to `outputs` values:
    HF's `ModernBertFor*Classification` layout, which the discriminator and every task head
    share (`head_and_linear`)."""

    base_model_prefix = "model"

    def __init__(self, cfg: ModernConfig, outputs: int, embeddings: nn.Module | None = None):
        super().__init__()
        self.config = cfg
        self.model = ModernBertModel(cfg, embeddings)
        head, classifier = head_and_linear(cfg, outputs)
        self.head = head
        self.drop = nn.Dropout(cfg.classifier_dropout)
        self.classifier = classifier

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The outputs [..., outputs] of encoder states [..., H]."""
        return self.classifier(self.drop(self.head(hidden)))


class ModernBertForMaskedLM(nn.Module):
    """The generator (and an MLM model): encoder, head, and a decoder whose weight is the token
    embedding table (HF ties them; its `decoder_bias` defaults to True, so the decoder has a
    bias). The state dict has HF's `ModernBertForMaskedLM` keys, the tied weight listed twice as
    HF lists it."""

    base_model_prefix = "model"

    def __init__(self, cfg: ModernConfig, embeddings: nn.Module | None = None):
        super().__init__()
        self.config = cfg
        self.model = ModernBertModel(cfg, embeddings)
        self.head = ModernBertPredictionHead(cfg)
        self.decoder = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=True)
        self.tie_weights()
        init_weight(self.head.dense.weight, out_std(cfg), cfg)
        nn.init.zeros_(self.decoder.bias)

    def tie_weights(self) -> None:
        """The decoder's weight is the encoder's token table (again, after the encoder changed)."""
        self.decoder.weight = self.model.embeddings.tok_embeddings.weight

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        positions: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Logits [B, T, V]; with `positions` [B, K] (the masked slots), only there: [B, K, V]
        (ELECTRA's generator predicts only what was masked, and the vocabulary-wide product is
        most of the head's cost). The whole encoder runs, as the FLOP count charges it
        (`electra.model.modernbert.flops`); `hidden_at` runs its last layer at the positions only."""
        hidden = self.model(input_ids, token_type_ids, attention_mask)
        if positions is not None:
            hidden = gather_positions(hidden, positions)
        return self.logits(hidden)

    def hidden_at(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None,
        attention_mask: torch.Tensor | None,
        positions: torch.Tensor,
    ) -> torch.Tensor:
        """The encoder's final states [B, N, H] at `positions` [B, N] (the objectives'
        masked-LM step): the values `forward` gathers, with the last layer run there only, which
        spares most of that layer's work (the FLOP count, a convention, still charges it whole)."""
        return self.model(input_ids, token_type_ids, attention_mask, positions)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The vocabulary head on encoder states [..., H]."""
        return self.decoder(self.head(hidden))


class ModernBertForPreTraining(ModernBertWithClassifier):
    """The discriminator: encoder, head, and one replaced-token logit per token [B, T]. The names
    are HF's `ModernBertForTokenClassification`'s, so export with two labels is a key map plus
    the classifier's rows [0; w] and [0; b]: softmax over (0, z) is sigmoid(z)."""

    def __init__(self, cfg: ModernConfig, embeddings: nn.Module | None = None):
        super().__init__(cfg, 1, embeddings)

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        hidden = self.model(input_ids, token_type_ids, attention_mask)
        return self.logits(hidden).squeeze(-1)


def layerwise_depth(name: str, n: int) -> int:
    """The depth of parameter `name` for fine-tuning's layer-wise LR (`electra.model.electra.modeling`'s):
    embeddings 0, layer i at i + 1, the final norm with the last layer
    (it normalises that layer's output, as the last layer's own LayerNorm does in electra's),
    and the head (`head`, `classifier`) the top, n + 1."""
    if name.startswith("model.embeddings"):
        return 0
    if m := re.match(r"model\.layers\.(\d+)\.", name):
        return int(m.group(1)) + 1
    if name.startswith("model.final_norm"):
        return n
    if name.startswith("model."):
        raise ElectraError(f"no layer-wise LR depth for parameter {name}")
    return n + 1
