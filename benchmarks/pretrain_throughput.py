"""Pretraining step throughput: ours against the two peers users assemble today.

    python benchmarks/pretrain_throughput.py --preset small --batch 32 --seq-len 128 --precision fp32

All three train the same ELECTRA pair (generator sharing the discriminator's embeddings, its output
layer tied to the word table) with the same masking rate, Gumbel sampling, loss weights, AdamW and
clipping, on the same random token batches, and are timed in alternation in one process:

- ours: `electra.objectives` on `electra.model.electra.modeling` (masked-slot generator head, SDPA attention);
- careful peer: Hugging Face `ElectraForMaskedLM` + `ElectraForPreTraining` in a lean loop that
  gathers the masked positions before the generator's output head;
- common peer: lucidrains' `electra-pytorch` 0.1.2 (`pip install --no-deps electra-pytorch==0.1.2`)
  driving the same Hugging Face models, projecting every position onto the vocabulary.

`--arch modernbert` times ours on a modern preset (default `modern-small`) against the peers
`benchmarks/modern_peers.py` wires from `transformers`' ModernBERT classes: `careful`, the same
hand-wired RTD loop, and `hf-mlm`, an MLM step of `ModernBertForMaskedLM` at the discriminator's size.

`--arch hf` times the hf family (`transformers`' own modules; default `hf-small`: `small`'s
encoder sizes as a BERT, its generator the family's rule, full width and half depth, sharing the
token table) against `native`, our ELECTRA family at the very same shapes (embeddings at full
width, the same generator), and `careful`, the same hand-wired RTD loop on the type's
`...ForMaskedLM` and `...ForTokenClassification` with one label.

`--arch deberta-v3` times ours on a DeBERTa-v3 preset (default `deberta-v3-xsmall`) against the
peers `benchmarks/deberta_peers.py` wires from `transformers`' DebertaV2 classes: `careful`, the
hand-wired RTD loop (GDES-shared), and `hf-mlm`; all with the enhanced mask decoder off, which
`transformers` cannot run, and `ours-emd` as the presets train, with it on.

`--attention flex|varlen` runs ours on the modern family's other attention paths
(`electra.model.attention`, `train.attention`; CUDA, varlen in bf16); the peers keep SDPA.

`--compile` compiles our objective and the careful peer's forward and losses alike
(`--compile-mode reduce-overhead` replays them as CUDA graphs on a GPU).

Model FLOPs are counted analytically (`electra.objectives.flops.model_flops_per_step`: matmuls only, training as
3x forward, the vocabulary head at masked positions only) and are the same useful work for all
three; achieved FLOP/s is divided by this machine's matmul peak for the precision: the best of
measurements taken once a round between the timed steps, so a peak caught in a slow moment of a
shared machine does not flatter the fraction; in fp32 on CPU, the best of MKL's and oneDNN's
products, so that a library we avoid for being slow does not flatter it either.
On CPU all three run with the malloc setting `electra pretrain` applies (`electra.engine.host_memory`), so
the ratios compare the training code alone; `--default-malloc` leaves malloc as it is.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import math
import os
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from types import SimpleNamespace

import torch
import torch.nn.functional as F

from electra.config import ATTENTION_PATHS, COMPILE_MODES, generator_config, preset
from electra.data.tokenizer import SpecialIds
from electra.engine.graphs import GraphedTrainStep
from electra.engine.host_memory import keep_freed_memory
from electra.engine.optim import build_optimizer, param_groups
from electra.engine.runtime import Runtime
from electra.engine.step import Window, train_step
from electra.errors import ElectraError
from electra.folders.continuation import (
    continued_groups,
    continued_networks,
    load_pair_weights,
    pair_configs,
)
from electra.model.attention import check_attention
from electra.model.kernels import onednn_mm
from electra.objectives import build_objective
from electra.objectives.flops import model_flops_per_step
from electra.objectives.masking import mask_tokens
from electra.pretraining.resolve import CONTINUE_HEAD_LR_SCALE, pair_objective

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # its sibling, run as a script
from deberta_peers import DEBERTA_IMPLEMENTATIONS, with_emd  # noqa: E402
from modern_peers import MODERN_IMPLEMENTATIONS  # noqa: E402

SPECIAL = SpecialIds(pad=0, unk=100, cls=101, sep=102, mask=103)  # BERT's uncased ids


def run_config(args):
    """The preset at the run's sizes; on deberta-v3 with the enhanced mask decoder off, work the
    `transformers` peers cannot do (`ours-emd` turns it back on)."""
    cfg = preset(args.preset)
    if args.init_from:  # a continued run's shapes and settings, as `electra pretrain` resolves them
        disc, gen = pair_configs(args.init_from)
        objective = pair_objective(cfg.objective, gen, None)
        train = replace(cfg.train, init_from=args.init_from, head_lr_scale=CONTINUE_HEAD_LR_SCALE)
        cfg = replace(cfg, model=disc, objective=objective, train=train)
    if args.arch == "deberta-v3":
        cfg = replace(cfg, model=replace(cfg.model, enhanced_mask_decoder=False))
    return replace(
        cfg,
        data=replace(cfg.data, seq_len=args.seq_len),
        train=replace(
            cfg.train,
            batch_size=args.batch,
            device=args.device,
            precision=args.precision,
            attention=args.attention,
        ),
    )


def batches(cfg, device, n=4):
    """Full rows of random ids ([CLS] ... [SEP]) and no padding, as packed pretraining data has."""
    g = torch.Generator().manual_seed(0)
    out = []
    for _ in range(n):
        ids = torch.randint(
            1000, cfg.model.vocab_size, (cfg.train.batch_size, cfg.data.seq_len), generator=g
        )
        ids[:, 0], ids[:, -1] = SPECIAL.cls, SPECIAL.sep
        out.append(
            {
                "input_ids": ids.to(device),
                "token_type_ids": torch.zeros_like(ids).to(device),
                "attention_mask": torch.ones_like(ids).to(device),
            }
        )
    return out


def autocast(device, precision):
    if precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def gumbel_sample(logits, temperature):
    """The peers sample as the official code does (`PH.sample_from_softmax`): Gumbel-max in fp32."""
    with torch.no_grad():
        u = torch.rand(logits.shape, device=logits.device)
        return (logits.float() / temperature - torch.log(-torch.log(u + 1e-9) + 1e-9)).argmax(-1)


# --- the three implementations: each returns step(batch) --------------------------------------


def compiled(fn, cfg):
    """`fn` under torch.compile with --compile (ours and the careful peer alike), else itself."""
    return torch.compile(fn, mode=cfg.train.compile_mode) if cfg.train.compile else fn


def with_cuda_graph(cfg):
    """Ours with its whole step captured (`train.cuda_graph`): its compile mode, if compiled,
    is then the default, since the capture replaces the graphs of reduce-overhead."""
    return replace(cfg, train=replace(cfg.train, cuda_graph=True, compile_mode="default"))


def ours(cfg, device):
    """The trainer's own step (`electra.engine.step.train_step`: statistics window, non-finite guard
    and all), or with --cuda-graph its whole-step CUDA graph (`electra.engine.graphs`)."""
    objective = build_objective(cfg.model, cfg.objective, SPECIAL, cfg.data.seq_len)
    objective = Runtime.of(cfg.train, device).prepare(objective)  # kernels, attention path
    if cfg.train.init_from:  # its weights, and its fresh heads' groups
        load_pair_weights(*continued_networks(objective), cfg.train.init_from)
    groups = param_groups(
        objective, cfg.train.weight_decay, **continued_groups(objective, cfg.train)
    )
    optimizer = build_optimizer(groups, cfg.train, device)
    params = list(objective.parameters())
    fn = compiled(objective, cfg)
    settings = {"precision": cfg.train.precision, "clip_norm": cfg.train.clip_norm}
    if cfg.train.cuda_graph:
        run = GraphedTrainStep(fn, optimizer, params, device, **settings)
    else:
        run = functools.partial(train_step, fn, optimizer, params, **settings)
    window = Window()

    def step(batch):
        run([batch], window=window)

    return step


def hf_pair(cfg, device):
    """HF generator and discriminator sharing embeddings, the generator's output re-tied."""
    import transformers

    def hf_config(m):
        fields = {k: v for k, v in vars(m).items()}
        return transformers.ElectraConfig(**fields, attn_implementation="sdpa")

    disc = transformers.ElectraForPreTraining(hf_config(cfg.model))
    gen = transformers.ElectraForMaskedLM(hf_config(generator_config(cfg.model, cfg.objective)))
    gen.electra.embeddings = disc.electra.embeddings
    gen.generator_lm_head.weight = disc.electra.embeddings.word_embeddings.weight
    return gen.to(device).train(), disc.to(device).train()


def careful_loop(cfg, device, gen, disc, generator_logits, disc_logits):
    """The careful peer's RTD step on any generator and discriminator: masking, the generator's
    logits at the masked slots only (`generator_logits(masked, mask)`), Gumbel sampling, the
    discriminator's logit per token (`disc_logits(corrupted, mask)`), both losses, one AdamW step."""
    models = torch.nn.ModuleList([gen, disc])
    optimizer = build_optimizer(param_groups(models, cfg.train.weight_decay), cfg.train, device)
    params = list(models.parameters())
    o = cfg.objective
    n_slots = o.num_predictions(cfg.data.seq_len)

    def losses(batch):
        ids, mask = batch["input_ids"], batch["attention_mask"]
        with autocast(device, cfg.train.precision):
            m = mask_tokens(ids, mask, SPECIAL, o, n_slots, cfg.model.vocab_size)
            logits = generator_logits(m, mask).float()
            mlm_loss = F.cross_entropy(logits.flatten(0, 1), m.targets.flatten())
            sampled = gumbel_sample(logits, o.temperature)
            corrupted = ids.scatter(1, m.positions, sampled)
            labels = (corrupted != ids).float()
            disc_loss = F.binary_cross_entropy_with_logits(
                disc_logits(corrupted, mask).float(), labels
            )
            return o.gen_weight * mlm_loss + o.disc_weight * disc_loss

    losses = compiled(losses, cfg)

    def step(batch):
        losses(batch).backward()
        torch.nn.utils.clip_grad_norm_(params, cfg.train.clip_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def at_slots(hidden, positions):
    return hidden.gather(1, positions[..., None].expand(-1, -1, hidden.shape[-1]))


def careful_peer(cfg, device):
    gen, disc = hf_pair(cfg, device)

    def generator_logits(m, mask):
        hidden = gen.electra(m.input_ids, attention_mask=mask).last_hidden_state
        return gen.generator_lm_head(gen.generator_predictions(at_slots(hidden, m.positions)))

    def disc_logits(corrupted, mask):
        return disc(corrupted, attention_mask=mask).logits

    return careful_loop(cfg, device, gen, disc, generator_logits, disc_logits)


def common_peer(cfg, device):
    from electra_pytorch import Electra

    gen, disc = hf_pair(cfg, device)

    class Logits(torch.nn.Module):  # the wrapper expects a module that returns logits
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, ids, **kwargs):
            return self.model(ids, **kwargs).logits

    o = cfg.objective
    trainer = Electra(
        Logits(gen),
        Logits(disc),
        mask_prob=o.mask_prob,
        replace_prob=o.mask_frac,
        mask_token_id=SPECIAL.mask,
        pad_token_id=SPECIAL.pad,
        mask_ignore_token_ids=[SPECIAL.cls, SPECIAL.sep],
        disc_weight=o.disc_weight,
        gen_weight=o.gen_weight,
        temperature=o.temperature,
    ).to(device)
    optimizer = build_optimizer(param_groups(trainer, cfg.train.weight_decay), cfg.train, device)
    params = list(trainer.parameters())

    def step(batch):
        with autocast(device, cfg.train.precision):
            loss = trainer(batch["input_ids"], attention_mask=batch["attention_mask"]).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, cfg.train.clip_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def native_config(cfg):
    """`cfg` with its hf encoder as our ELECTRA family's at the same shapes: embeddings at full
    width (a BERT has no projection), the same objective and so the same generator."""
    from electra.model.electra.config import ElectraModelConfig
    from electra.model.hf.config import SIZE_FIELDS

    m = cfg.model
    sizes = {name: getattr(m, name) for name in SIZE_FIELDS}
    return replace(cfg, model=ElectraModelConfig(**sizes, embedding_size=m.hidden_size))


def native(cfg, device):
    """Our ELECTRA family's step (`ours`) at the hf run's shapes (`native_config`)."""
    return ours(native_config(cfg), device)


def hf_type_pair(cfg, device):
    """The type's `...ForMaskedLM` (the generator) and `...ForTokenClassification` with one label
    (the discriminator), built as `transformers` builds them from config (SDPA where the type has
    it), the generator on the discriminator's embeddings, its decoder re-tied to their table."""
    import transformers

    from electra.model.hf.config import hf_values
    from electra.model.hf.types import TYPES

    kind = TYPES[cfg.model.model_type]
    attention = {"attn_implementation": "sdpa"} if kind.sdpa else {}

    def build(auto, m, **extra):
        config = transformers.AutoConfig.for_model(m.model_type, **hf_values(m), **extra)
        return getattr(transformers, auto).from_config(config, **attention)

    disc = build("AutoModelForTokenClassification", cfg.model, num_labels=1)
    gen = build("AutoModelForMaskedLM", generator_config(cfg.model, cfg.objective))
    base = getattr(disc, kind.base)
    getattr(gen, kind.base).embeddings = base.embeddings
    out, _ = kind.tied
    owner, _, name = out.rpartition(".")
    setattr(gen.get_submodule(owner), name, base.embeddings.word_embeddings.weight)
    return gen.to(device).train(), disc.to(device).train(), kind


def careful_hf(cfg, device):
    """The careful peer's loop on `hf_type_pair`: generator logits only at the masked positions."""
    gen, disc, kind = hf_type_pair(cfg, device)

    def generator_logits(m, mask):
        hidden = getattr(gen, kind.base)(m.input_ids, attention_mask=mask).last_hidden_state
        picked = at_slots(hidden, m.positions)
        for head in kind.mlm_head:
            picked = getattr(gen, head)(picked)
        return picked

    def disc_logits(corrupted, mask):
        return disc(corrupted, attention_mask=mask).logits.squeeze(-1)

    return careful_loop(cfg, device, gen, disc, generator_logits, disc_logits)


IMPLEMENTATIONS = {"ours": ours, "careful": careful_peer, "common": common_peer}
HF = {"ours": ours, "native": native, "careful": careful_hf}
# What the modern peers share with the electra ones (modern_peers.py does not import this script).
TOOLS = SimpleNamespace(
    special=SPECIAL,
    autocast=autocast,
    gumbel_sample=gumbel_sample,
    compiled=compiled,
    careful_loop=careful_loop,
    ours=ours,
)
MODERN = {"ours": ours} | {
    name: functools.partial(build, tools=TOOLS) for name, build in MODERN_IMPLEMENTATIONS.items()
}
DEBERTA = {
    name: functools.partial(build, tools=TOOLS) for name, build in DEBERTA_IMPLEMENTATIONS.items()
}
FAMILIES = {"electra": IMPLEMENTATIONS, "modernbert": MODERN, "hf": HF, "deberta-v3": DEBERTA}
DEFAULT_PRESET = {
    "electra": "small",
    "modernbert": "modern-small",
    "hf": "hf-small",
    "deberta-v3": "deberta-v3-xsmall",
}


def implementations(arch):
    return FAMILIES[arch]


def useful_flops(cfg, name):
    """The step's model FLOPs (`model_flops_per_step`); hf-mlm's are the MLM objective's on the
    discriminator alone (its vocabulary head counted at the masked slots, as ours would); native's
    are its own family's count at the hf run's shapes; on deberta-v3 every row's but ours-emd's
    without the enhanced mask decoder (`run_config` turns it off)."""
    if name == "ours-emd":
        cfg = with_emd(cfg)
    if name == "hf-mlm":
        cfg = replace(cfg, objective=replace(cfg.objective, name="mlm"))
    if name == "native":
        cfg = native_config(cfg)
    return model_flops_per_step(cfg)


# --- measurement ------------------------------------------------------------------------------------


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def matmul_peak(device, precision, n=4096, reps=5) -> float:
    """FLOP/s of a large square matrix product at this precision: the achievable peak. In fp32 on CPU
    the best of torch's two libraries, MKL (`a @ b`) and oneDNN (its linear, which
    `electra.model.kernels` uses where it is faster); bf16 products on CPU already go through oneDNN."""
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    products = [lambda: a @ b]
    if device.type == "cpu" and dtype == torch.float32 and torch.backends.mkldnn.is_available():
        products.append(lambda: onednn_mm(a, b))
    best = float("inf")
    for product in products:
        for _ in range(2):
            product()
        sync(device)
        for _ in range(reps):
            start = time.perf_counter()
            product()
            sync(device)
            best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best


def time_steps(step, data, steps, device) -> float:
    sync(device)
    start = time.perf_counter()
    for i in range(steps):
        step(data[i % len(data)])
    sync(device)
    return (time.perf_counter() - start) / steps


def peak_memory(args, name) -> float:
    """Peak memory of one implementation, measured alone in a fresh subprocess."""
    cmd = [sys.executable, __file__, *sys.argv[1:], "--memory-of", name]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def _status_mib(field: str) -> float:
    with open("/proc/self/status") as f:
        line = next(x for x in f if x.startswith(field + ":"))
    return int(line.split()[1]) / 1024


def measure_memory(args, name):
    """Prints the memory one implementation adds while training: on GPU, peak allocated; on CPU,
    peak resident set size above what the process held before building it (Linux)."""
    cfg = run_config(args)
    device = torch.device(args.device)
    data = batches(cfg, device)
    if name != "ours" or args.arch == "hf":
        import transformers  # noqa: F401 - imported before the baseline, like torch

        if name == "common":
            import electra_pytorch  # noqa: F401
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets the peak RSS (VmHWM) to the current RSS
    baseline = _status_mib("VmRSS")
    step = implementations(args.arch)[name](cfg, device)
    for i in range(args.warmup):
        step(data[i % len(data)])
    sync(device)
    if device.type == "cuda":
        print(torch.cuda.max_memory_allocated() / 2**20)
    else:
        print(_status_mib("VmHWM") - baseline)


def check_arch(p, args):
    """Fills in the preset and impls --arch implies; a preset or impl of another family is a usage
    error naming what to pick."""
    args.preset = args.preset or DEFAULT_PRESET[args.arch]
    impls = implementations(args.arch)
    args.impls = args.impls or list(impls)
    other = [name for name in args.impls if name not in impls]
    if other:
        p.error(
            f"--impls {' '.join(other)}: not an implementation of --arch {args.arch}; "
            f"use {', '.join(impls)}"
        )
    if args.attention != "sdpa" and args.arch not in ("modernbert", "deberta-v3"):
        p.error(
            f"--attention {args.attention} is a path of the modern and deberta-v3 families: "
            "--arch modernbert or deberta-v3"
        )
    arch = preset(args.preset).model.arch
    if arch != args.arch:
        p.error(
            f"--preset {args.preset} is a model.arch={arch} preset: pick one of --arch "
            f"{args.arch}'s (e.g. {DEFAULT_PRESET[args.arch]}), or --arch {arch}"
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--arch",
        choices=list(FAMILIES),
        default="electra",
        help="the architecture family: electra (ours, careful, common), modernbert (ours, "
        "careful, hf-mlm), hf (ours, native, careful) or deberta-v3 (ours, careful, hf-mlm, "
        "ours-emd)",
    )
    p.add_argument(
        "--preset",
        help="default: small, modern-small with --arch modernbert, hf-small with --arch hf, "
        "deberta-v3-xsmall with --arch deberta-v3",
    )
    p.add_argument(
        "--init-from",
        help="--arch hf: a model folder (a BERT-type checkpoint) continued, as `electra pretrain "
        "--init-from` runs it: ours from its weights with its fresh heads' groups, the peers at "
        "its shapes",
    )
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument(
        "--compile",
        action="store_true",
        help="torch.compile the forward and loss of ours and careful",
    )
    p.add_argument("--compile-mode", default="default", choices=COMPILE_MODES)
    p.add_argument(
        "--attention",
        choices=ATTENTION_PATHS,
        default="sdpa",
        help="ours' attention path on --arch modernbert or deberta-v3 (train.attention; flex "
        "and varlen on CUDA, varlen in bf16, deberta-v3 flex only); the peers keep theirs",
    )
    p.add_argument(
        "--cuda-graph",
        action="store_true",
        help="ours captures its whole step as one CUDA graph (train.cuda_graph); compiled, in "
        "the default mode, while the peers keep --compile-mode",
    )
    p.add_argument(
        "--profile",
        action="store_true",
        help="after timing, profile a few steps of each implementation and print its kernels",
    )
    p.add_argument(
        "--impls",
        nargs="+",
        choices=list(IMPLEMENTATIONS | MODERN | HF | DEBERTA),
        help="default: every implementation of --arch",
    )
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=5, help="timed steps per round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument(
        "--skip-memory",
        action="store_true",
        help="do not measure peak memory (each measurement builds, and compiles, the model again)",
    )
    p.add_argument(
        "--peak-size", type=int, default=4096, help="the side of the matmul peak's matrices"
    )
    p.add_argument("--memory-of", help=argparse.SUPPRESS)
    p.add_argument("--json", help="also write the results here")
    p.add_argument(
        "--default-malloc",
        action="store_true",
        help="leave glibc's malloc as it is; otherwise every implementation runs with the setting "
        "`electra pretrain` uses on CPU (electra.engine.host_memory: freed pages stay in the process)",
    )
    args = p.parse_args()
    check_arch(p, args)
    try:
        check_attention(args.attention, torch.device(args.device), args.precision)
    except ElectraError as e:
        p.error(str(e))
    if torch.device(args.device).type == "cpu" and not args.default_malloc:
        keep_freed_memory()
    if args.memory_of:
        measure_memory(args, args.memory_of)
        return

    cfg = run_config(args)
    if args.compile:
        cfg = replace(cfg, train=replace(cfg.train, compile=True, compile_mode=args.compile_mode))
    device = torch.device(args.device)
    torch.manual_seed(0)
    data = batches(cfg, device)
    steps = {
        name: implementations(args.arch)[name](
            with_cuda_graph(cfg) if args.cuda_graph and name == "ours" else cfg, device
        )
        for name in args.impls
    }
    for step in steps.values():
        time_steps(step, data, args.warmup, device)
    times = {name: [] for name in steps}
    peaks = []
    for _ in range(args.rounds):  # alternate, so drifts in clock or load hit all alike
        for name, step in steps.items():
            times[name].append(time_steps(step, data, args.steps, device))
        peaks.append(matmul_peak(device, args.precision, n=args.peak_size))

    tokens = cfg.train.batch_size * cfg.data.seq_len
    flops = useful_flops(cfg, "ours")
    peak = max(peaks)  # the achievable peak: the best the run saw
    threads = torch.get_num_threads()
    machine = torch.cuda.get_device_name() if device.type == "cuda" else f"CPU, {threads} threads"
    results = {
        "arch": args.arch,
        "preset": args.preset,
        "batch": args.batch,
        "seq_len": args.seq_len,
        "precision": args.precision,
        "compile": args.compile and args.compile_mode,
        "ours_cuda_graph": args.cuda_graph,
        "ours_attention": args.attention,
        "malloc": "default" if args.default_malloc else "keep freed memory",
        "device": machine,
        "model_flops_per_step": flops,
        "matmul_peak_flops": peak,
        "matmul_peak_flops_per_round": peaks,
        "impls": {},
    }
    print(
        f"{args.preset} batch {args.batch} seq {args.seq_len} {args.precision} on {machine}; "
        f"model FLOPs/step {flops:.3g} (matmuls, 3x forward, vocab head at masked slots); "
        f"matmul peak {peak / 1e12:.2f} TFLOP/s"
    )
    for name in steps:
        t = statistics.median(times[name])
        mem = math.nan if args.skip_memory else peak_memory(args, name)
        work = useful_flops(cfg, name)
        results["impls"][name] = {
            "arch": args.arch,
            "objective": "mlm" if name == "hf-mlm" else cfg.objective.name,
            "step_s": t,
            "step_s_per_round": times[name],
            "tokens_per_s": tokens / t,
            "sequences_per_s": cfg.train.batch_size / t,
            "model_flops_per_step": work,
            "model_flops_per_s": work / t,
            "fraction_of_peak": work / t / peak,
            "peak_memory_mib": mem,
        }
        r = results["impls"][name]
        print(
            f"  {name:8s} {r['tokens_per_s']:10.0f} tokens/s  {r['sequences_per_s']:8.1f} seq/s  "
            f"{r['model_flops_per_s'] / 1e12:6.3f} TFLOP/s  {100 * r['fraction_of_peak']:5.1f}% of peak  "
            f"{mem:8.0f} MiB peak"
        )
    if "ours" in steps:
        for name in steps:
            if name != "ours":
                ratio = (
                    results["impls"]["ours"]["tokens_per_s"]
                    / results["impls"][name]["tokens_per_s"]
                )
                results[f"speedup_vs_{name}"] = ratio
                print(f"  ours / {name}: {ratio:.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    if args.profile:
        for name, step in steps.items():
            profile(name, step, data, device)


def profile(name, step, data, device, steps=5):
    """The GPU kernels of `steps` steps: the busiest, and the kernel time per step, which is the
    floor a step reaches once the host no longer holds it back."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    sync(device)
    with torch_profile(activities=activities) as prof:
        time_steps(step, data, steps, device)
    events = prof.key_averages()
    attr = "device_time_total" if device.type == "cuda" else "cpu_time_total"
    kernels = [e for e in events if e.device_type.name == "CUDA"] if device.type == "cuda" else []
    busy = sum(getattr(e, "self_device_time_total", 0) for e in kernels) / steps / 1e3
    print(f"\n== {name}: {len(kernels)} distinct kernels, {busy:.2f} ms of kernel time per step")
    print(events.table(sort_by=attr, row_limit=25, max_name_column_width=70))


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
