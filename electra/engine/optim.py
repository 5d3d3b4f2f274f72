"""The official optimizer and learning-rate schedule (docs/specification.md §Optimizer).

BERT's AdamW: no bias correction (the default; `bias_correction` switches to torch's AdamW),
decoupled weight decay, none on LayerNorm parameters or biases (embedding tables are decayed, as in
the official code; `no_decay`, pretraining's rule and fine-tuning's); and the official schedule: a linear decay from the peak to zero that starts at
step 0, multiplied by a linear warmup ramp.
"""

from __future__ import annotations

import torch
from torch import nn

from electra.config import OptimConfig


def no_decay(model: nn.Module) -> set[int]:
    """The ids of the parameters that take no weight decay: those of every LayerNorm and every
    bias. By module type, not by name, so that it holds in every family: the official rule
    matched names containing "LayerNorm", which are exactly the electra family's LayerNorms, but
    the modern family's norms are `norm`, `attn_norm`, `mlp_norm` and `final_norm`."""
    norms = {id(p) for m in model.modules() if isinstance(m, nn.LayerNorm) for p in m.parameters()}
    biases = {id(p) for name, p in model.named_parameters() if name.endswith("bias")}
    return norms | biases


def param_groups(
    model: nn.Module,
    weight_decay: float,
    by_network: bool = False,
    lr_scales: dict[str, float] | None = None,
    fresh: tuple[set[int], float] = (set(), 1.0),
    held: tuple[set[int], int] = (set(), 0),
) -> list[dict]:
    """Splits parameters into decayed and not decayed (`no_decay`). With
    `by_network`, each top-level submodule (an objective's network) gets its own pair of groups:
    the layout two_stage's checkpoints hold (earlier versions counted Adam's steps per group; the
    pinned count of `AdamWNoBiasCorrection` needs no count). `lr_scales` multiplies the learning
    rate of the parameters that only the named top-level submodule holds (`train.generator_lr_scale`:
    the generator's own layers and head); a parameter two networks share (their embeddings) keeps
    the model's rate, and every scale of 1 leaves the groups as they were. `fresh` (parameter ids,
    scale) multiplies the rate of a continued run's fresh heads instead (`train.head_lr_scale`);
    `held` (parameter ids, steps) keeps those parameters still for the first steps
    (`train.head_warmup_steps`: `set_learning_rate` gives their groups no rate until then)."""
    lr_scales = {k: v for k, v in (lr_scales or {}).items() if v != 1.0}
    holders: dict[int, set[str]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        holders.setdefault(id(p), set()).add(name.split(".")[0])
    groups: dict[tuple[str, bool, float, int], list[nn.Parameter]] = {}
    kept = no_decay(model)
    for name, p in model.named_parameters():  # shared parameters appear once
        if not p.requires_grad:
            continue
        skip = id(p) in kept
        network = name.split(".")[0] if by_network else ""
        (holder,) = holders[id(p)] if len(holders[id(p)]) == 1 else ("",)
        scale = fresh[1] if id(p) in fresh[0] else lr_scales.get(holder, 1.0)
        hold = held[1] if id(p) in held[0] else 0
        groups.setdefault((network, skip, scale, hold), []).append(p)
    return [
        {"params": params, "weight_decay": 0.0 if skip else weight_decay}
        | ({"lr_scale": scale} if scale != 1.0 else {})
        | ({"hold_steps": hold} if hold else {})
        for (_, skip, scale, hold), params in groups.items()
    ]


# Adam's step count is held here, where torch's bias corrections 1 - beta^t are exactly 1 (beta^t
# underflows to 0) and a float32 count no longer moves (2^30 +- 1 rounds back to 2^30).
PINNED_STEP = float(2**30)


class AdamWNoBiasCorrection(torch.optim.AdamW):
    """BERT's `AdamWeightDecayOptimizer` (docs/specification.md §Optimizer): Adam without bias
    correction, the decay added to the update: p -= lr * (m / (sqrt(v) + eps) + wd * p).

    It runs torch's AdamW kernels (fused where they exist: one pass over each tensor) with every
    parameter's step count pinned at `PINNED_STEP`, where torch's bias corrections are exactly 1:
    torch's decoupled update p * (1 - lr * wd) - lr * m / (sqrt(v) + eps) is then the official
    one. Nothing changes from step to step on the host, so the step can be captured in a CUDA
    graph (`electra.engine.graphs`), and a group that starts late (two_stage's discriminator) takes the
    official first step whenever it comes. A state without a pinned count (a checkpoint of an
    earlier version, which counted steps and rescaled lr, eps and decay to cancel the
    corrections) is pinned on loading.
    """

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None and not self.state[p]:
                    self._init_state(p, group)
        return super().step(closure)

    def _init_state(self, p: torch.Tensor, group: dict) -> None:
        """The state torch would create, with the count already pinned (on the device where the
        fused or capturable kernels read it, else on the host)."""
        on_device = group["fused"] or group["capturable"]
        self.state[p].update(
            step=torch.full(
                (),
                PINNED_STEP,
                dtype=torch.float32,
                device=p.device if on_device else torch.device("cpu"),
            ),
            exp_avg=torch.zeros_like(p, memory_format=torch.preserve_format),
            exp_avg_sq=torch.zeros_like(p, memory_format=torch.preserve_format),
        )

    def load_state_dict(self, state_dict: dict) -> None:
        super().load_state_dict(state_dict)
        for group in self.param_groups:
            group.pop("official_steps", None)  # the count earlier versions kept
        for state in self.state.values():
            if "step" in state:
                state["step"].fill_(PINNED_STEP)


def build_optimizer(
    groups: list[dict], cfg: OptimConfig, device: torch.device
) -> torch.optim.Optimizer:
    """Adam(W) over parameter groups; a group's `lr_scale` (layer-wise decay) multiplies its LR."""
    # torch's AdamW decays decoupled (p *= 1 - lr * wd), which equals the official rule. The fused
    # kernel (one pass over each tensor) exists for CUDA and CPU.
    fused = device.type in ("cuda", "cpu")
    adam = torch.optim.AdamW if cfg.bias_correction else AdamWNoBiasCorrection
    return adam(
        groups,
        lr=cfg.lr,
        betas=(cfg.adam_beta1, cfg.adam_beta2),
        eps=cfg.adam_eps,
        fused=fused,
        foreach=not fused,
    )


def learning_rate(step: int, peak: float, total: int, warmup: int) -> float:
    """LR for the update taken at `step` (0-based): peak * (1 - step/total) * min(1, step/warmup)."""
    decay = max(0.0, 1.0 - step / total)
    ramp = min(1.0, step / warmup) if warmup > 0 else 1.0
    return peak * decay * ramp


def set_learning_rate(optimizer: torch.optim.Optimizer, lr: float, step: int = 0) -> None:
    """Sets each group's LR (times its `lr_scale`; none before its `hold_steps` at `step`); an LR
    held in a device tensor (see `make_capturable`) is written in place, where a captured step
    reads it."""
    for group in optimizer.param_groups:
        value = 0.0 if step < group.get("hold_steps", 0) else lr * group.get("lr_scale", 1.0)
        if isinstance(group["lr"], torch.Tensor):
            group["lr"].fill_(value)
        else:
            group["lr"] = value


def make_capturable(optimizer: torch.optim.Optimizer, device: torch.device) -> None:
    """Prepares a fused Adam(W) for CUDA graph capture: each group's LR moves into a tensor on
    `device` that the kernel reads when it runs, so a replayed step takes the LR of its step."""
    for group in optimizer.param_groups:
        if not group.get("fused"):
            raise ValueError("only a fused optimizer can be captured")
        group["capturable"] = True
        group["lr"] = torch.tensor(float(group["lr"]), dtype=torch.float32, device=device)
    optimizer.register_state_dict_post_hook(_plain_groups)


def _plain_groups(optimizer: torch.optim.Optimizer, state: dict) -> dict:
    """Checkpoints hold the optimizer as `build_optimizer` makes it (a float LR, not capturable),
    so that any run, captured or not, resumes them. (Read back at checkpoints only.)"""
    for group in state["param_groups"]:
        group["lr"] = float(group["lr"])
        group["capturable"] = False
    return state
