"""The peers `pretrain_throughput.py --arch modernbert` times ours against, built from
Hugging Face `transformers`' ModernBERT classes (SDPA attention):

- careful: RTD wired by hand from `ModernBertForMaskedLM` (the generator: the discriminator's
  width, a third of its depth, as `generator_config` makes ours) and
  `ModernBertForTokenClassification` with one label (the discriminator: head and classifier, as
  ours has), the generator sharing the discriminator's embeddings and its decoder tied to the word
  table, exactly as the ELECTRA family's careful peer (`careful_peer` beside this) is wired:
  generator logits only at the masked positions, Gumbel sampling, loss weights 1 and 50, the same
  optimizer and clipping;
- hf-mlm: an MLM step of `ModernBertForMaskedLM` at the discriminator's size, with the same masking,
  its own loss (labels -100 off the masked positions) and HF's default dense prediction head.

Each builder takes (cfg, device, tools) and returns step(batch); `tools` carries what the script
shares with its electra peers (special ids, autocast, Gumbel sampling, compile), so that this
module does not import the script.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from electra.config import generator_config
from electra.engine.optim import build_optimizer, param_groups
from electra.model.modernbert.config import ModernConfig
from electra.objectives.masking import mask_tokens


def hf_modern_config(m: ModernConfig, **extra):
    """HF's ModernBertConfig of `m`, as our export writes it (`electra.model.hf_names`: sizes, the
    layer pattern and thetas in both spellings), with SDPA attention."""
    import transformers

    from electra.model.modernbert.hf import HF

    fields = HF.config_json(HF.encoder, m)
    fields.pop("model_type")
    return transformers.ModernBertConfig(**fields, attn_implementation="sdpa", **extra)


def hf_modern_pair(cfg, device):
    """HF generator and one-logit discriminator, the generator on the discriminator's embeddings
    (word table and its norm, as ours shares them) with its decoder re-tied to that table."""
    import transformers

    disc = transformers.ModernBertForTokenClassification(hf_modern_config(cfg.model, num_labels=1))
    gen_cfg = generator_config(cfg.model, cfg.objective)
    gen = transformers.ModernBertForMaskedLM(hf_modern_config(gen_cfg))
    gen.model.embeddings = disc.model.embeddings
    gen.decoder.weight = disc.model.embeddings.tok_embeddings.weight
    return gen.to(device).train(), disc.to(device).train()


def _optimizer_step(models, cfg, device):
    """The update every implementation shares: clip, AdamW's step, gradients freed."""
    optimizer = build_optimizer(param_groups(models, cfg.train.weight_decay), cfg.train, device)
    params = list(models.parameters())

    def update(loss):
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, cfg.train.clip_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return update


def careful_modern(cfg, device, tools):
    gen, disc = hf_modern_pair(cfg, device)
    update = _optimizer_step(torch.nn.ModuleList([gen, disc]), cfg, device)
    o = cfg.objective
    n_slots = o.num_predictions(cfg.data.seq_len)

    def losses(batch):
        ids, mask = batch["input_ids"], batch["attention_mask"]
        with tools.autocast(device, cfg.train.precision):
            m = mask_tokens(ids, mask, tools.special, o, n_slots, cfg.model.vocab_size)
            hidden = gen.model(m.input_ids, attention_mask=mask).last_hidden_state
            picked = hidden.gather(1, m.positions[..., None].expand(-1, -1, hidden.shape[-1]))
            logits = gen.decoder(gen.head(picked)).float()
            mlm_loss = F.cross_entropy(logits.flatten(0, 1), m.targets.flatten())
            sampled = tools.gumbel_sample(logits, o.temperature)
            corrupted = ids.scatter(1, m.positions, sampled)
            labels = (corrupted != ids).float()
            disc_logits = disc(corrupted, attention_mask=mask).logits.squeeze(-1).float()
            disc_loss = F.binary_cross_entropy_with_logits(disc_logits, labels)
            return o.gen_weight * mlm_loss + o.disc_weight * disc_loss

    losses = tools.compiled(losses, cfg)
    return lambda batch: update(losses(batch))


def hf_mlm(cfg, device, tools):
    """`ModernBertForMaskedLM` at the discriminator's size: masked inputs, labels the original ids
    at the masked positions and -100 elsewhere, HF's own loss."""
    import transformers

    model = transformers.ModernBertForMaskedLM(hf_modern_config(cfg.model)).to(device).train()
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


MODERN_IMPLEMENTATIONS = {"careful": careful_modern, "hf-mlm": hf_mlm}
