"""The peers `pretrain_throughput.py --arch deberta-v3` times ours against, built from Hugging Face
`transformers`' DebertaV2 classes (eager attention: `transformers` has no SDPA path for them) with
DeBERTa-v3's settings (`electra.model.deberta.hf.config_values`: relative attention, p2c and c2p,
256 log buckets, the relative table layer-normed, keys shared, no absolute positions, no token
types, the legacy MLM head microsoft's checkpoints carry):

- careful: DeBERTa-v3's RTD recipe wired by hand: `DebertaV2ForMaskedLM` (the generator: the
  discriminator's width, half its depth, as `generator_config` makes ours) and
  `DebertaV2ForTokenClassification` with one label (the discriminator), embeddings shared as GDES
  (the DeBERTa-v3 paper, §4): the discriminator reads stop_gradient(the generator's table) plus its
  own table, zeroed, as the residual, through its own LayerNorm (`inputs_embeds`); generator
  logits only at the masked positions, Gumbel sampling, the recipe's masking and loss weights, the
  same optimizer and clipping;
- hf-mlm: an MLM step of `DebertaV2ForMaskedLM` at the discriminator's size, with the same masking,
  its own loss (labels -100 off the masked positions, logits at every position).

Neither can run the enhanced mask decoder (`transformers` has none), so `ours` runs with it off and
`ours-emd` with it on, as the presets train.

Each builder takes (cfg, device, tools) and returns step(batch); `tools` carries what the script
shares with its other peers (special ids, autocast, Gumbel sampling, compile, the careful loop),
so that this module does not import the script.
"""

from __future__ import annotations

from dataclasses import replace

import torch
import torch.nn.functional as F

from electra.config import generator_config
from electra.engine.optim import build_optimizer, param_groups
from electra.model.deberta.config import DebertaV3Config
from electra.objectives.masking import mask_tokens


def without_emd(cfg):
    """`cfg` with the enhanced mask decoder off: the work `transformers` can do too."""
    return replace(cfg, model=replace(cfg.model, enhanced_mask_decoder=False))


def with_emd(cfg):
    """`cfg` with the enhanced mask decoder on, as the deberta-v3 presets train."""
    return replace(cfg, model=replace(cfg.model, enhanced_mask_decoder=True))


def hf_deberta_config(m: DebertaV3Config, **extra):
    """HF's DebertaV2Config of `m`, as our export writes it (every DeBERTa-v3 setting stated)."""
    import transformers

    from electra.model.deberta.hf import config_values

    return transformers.DebertaV2Config(**config_values(m), **extra)


def hf_deberta_pair(cfg, device):
    """HF generator and one-logit discriminator, GDES-shared: the discriminator's own word table
    is zeroed and serves as the residual (`gdes_embeds` adds the generator's, detached)."""
    import transformers

    disc = transformers.DebertaV2ForTokenClassification(hf_deberta_config(cfg.model, num_labels=1))
    gen_cfg = generator_config(cfg.model, cfg.objective)
    gen = transformers.DebertaV2ForMaskedLM(hf_deberta_config(gen_cfg))
    with torch.no_grad():
        disc.deberta.embeddings.word_embeddings.weight.zero_()
    return gen.to(device).train(), disc.to(device).train()


def gdes_embeds(gen, disc, ids):
    """The discriminator's input under GDES: stop_gradient(generator's table) + its residual."""
    table = gen.deberta.embeddings.word_embeddings.weight.detach()
    return F.embedding(ids, table) + disc.deberta.embeddings.word_embeddings(ids)


def careful_deberta(cfg, device, tools):
    cfg = without_emd(cfg)
    gen, disc = hf_deberta_pair(cfg, device)

    def generator_logits(m, mask):
        hidden = gen.deberta(m.input_ids, attention_mask=mask).last_hidden_state
        picked = hidden.gather(1, m.positions[..., None].expand(-1, -1, hidden.shape[-1]))
        return gen.cls(picked)

    def disc_logits(corrupted, mask):
        embeds = gdes_embeds(gen, disc, corrupted)
        return disc(inputs_embeds=embeds, attention_mask=mask).logits.squeeze(-1)

    return tools.careful_loop(cfg, device, gen, disc, generator_logits, disc_logits)


def _optimizer_step(model, cfg, device):
    """The update every implementation shares: clip, AdamW's step, gradients freed."""
    optimizer = build_optimizer(param_groups(model, cfg.train.weight_decay), cfg.train, device)
    params = list(model.parameters())

    def update(loss):
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, cfg.train.clip_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return update


def hf_mlm_deberta(cfg, device, tools):
    """`DebertaV2ForMaskedLM` at the discriminator's size: masked inputs, labels the original ids
    at the masked positions and -100 elsewhere, HF's own loss."""
    import transformers

    model = transformers.DebertaV2ForMaskedLM(hf_deberta_config(cfg.model)).to(device).train()
    update = _optimizer_step(model, cfg, device)
    o = cfg.objective
    n_slots = o.num_predictions(cfg.data.seq_len)

    def loss(batch):
        ids, mask = batch["input_ids"], batch["attention_mask"]
        with tools.autocast(device, cfg.train.precision):
            m = mask_tokens(ids, mask, tools.special, o, n_slots, cfg.model.vocab_size)
            labels = torch.full_like(ids, -100).scatter(1, m.positions, m.targets)
            return model(m.input_ids, attention_mask=mask, labels=labels).loss

    loss = tools.compiled(loss, cfg)
    return lambda batch: update(loss(batch))


def ours_deberta(cfg, device, tools):
    """Ours with the enhanced mask decoder off: the headline comparison's equal work."""
    return tools.ours(without_emd(cfg), device)


def ours_emd(cfg, device, tools):
    """Ours as the deberta-v3 presets train, the enhanced mask decoder on (work the peers skip)."""
    return tools.ours(with_emd(cfg), device)


DEBERTA_IMPLEMENTATIONS = {
    "ours": ours_deberta,
    "careful": careful_deberta,
    "hf-mlm": hf_mlm_deberta,
    "ours-emd": ours_emd,
}
