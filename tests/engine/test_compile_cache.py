"""Compiled steps stay correct when runs on one machine use different CPU kernel sets.

torch 2.13 keys inductor's on-disk FX graph cache, which holds the generated C++ kernels, without the
CPU capability that set their vector width. A run under `ATEN_CPU_CAPABILITY=avx2` after one with
AVX-512 kernels (the README's numeric tests run both ways, as does CI) reused 16-lane kernels and
built them against 8-lane vector types, and the reverse: packed fine-tuning under `--compile`
aborted with glibc heap errors or an "index out of bounds" check. `compile_model` keys the cache by
the capability (`electra.engine.runtime.key_compile_cache_by_cpu`). Each run is a child process
with its own environment, sharing one cache folder, so that a regression fails this test with the
child's message rather than aborting the suite.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch

from electra.engine.runtime import key_compile_cache_by_cpu
from tests.numerics import rounding_bound

pytestmark = pytest.mark.numeric

# A packed classification batch through the compiled ELECTRA head, forward and backward, as a
# compiled fine-tuning step runs it; prints the gap between the compiled and eager logits.
CHILD = textwrap.dedent(
    """
    import torch
    from electra.engine.host_memory import keep_freed_memory
    from electra.engine.runtime import compile_model
    from electra.finetuning.packing import pack_batch
    from electra.model.heads import build_head
    from electra.model.electra.config import ElectraModelConfig

    keep_freed_memory()  # as a CPU fine-tune runs: a stray write lands in malloc's own lists
    torch.manual_seed(0)
    cfg = ElectraModelConfig(vocab_size=165, embedding_size=16, hidden_size=32, num_hidden_layers=2,
                      num_attention_heads=2, intermediate_size=64, max_position_embeddings=128,
                      hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = build_head("sequence", cfg, 2)
    compiled = compile_model(model)
    lengths = torch.tensor([9, 7, 8, 8, 5, 5, 5, 4])
    real = torch.arange(16)[None] < lengths[:, None]
    ids = torch.randint(5, 165, (8, 16)) * real
    batch = pack_batch({"input_ids": ids, "token_type_ids": torch.zeros_like(ids),
                        "attention_mask": real.long(), "labels": torch.arange(8) % 2})
    args = [batch[k] for k in
            ("input_ids", "token_type_ids", "attention_mask", "position_ids", "cls_index")]
    for _ in range(3):
        compiled(*args).sum().backward()
    print((compiled(*args) - model(*args)).abs().max().item())
    """
)


def run_child(cache, capability=None):
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache)}
    env.pop("ATEN_CPU_CAPABILITY", None)
    if capability:
        env["ATEN_CPU_CAPABILITY"] = capability
    run = subprocess.run(
        [sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=600
    )
    assert run.returncode == 0, f"ATEN_CPU_CAPABILITY={capability}: {run.stderr[-1500:]}"
    return float(run.stdout.split()[-1])


@pytest.mark.skipif(
    torch.backends.cpu.get_cpu_capability() != "AVX512",
    reason="needs a CPU with AVX-512, where AVX2 is a second kernel width",
)
def test_runs_with_other_kernel_widths_do_not_share_compiled_kernels(tmp_path):
    # Compiled and eager logits agree to the rounding of the encoder's chain: 2 layers of 3
    # products of up to 64 terms, and the head's 2, on logits of size about 1.
    bound = rounding_bound(torch.float32, terms=64, depth=8)
    assert run_child(tmp_path, None) <= bound  # AVX-512 kernels into the cache
    assert run_child(tmp_path, "avx2") <= bound  # the same graph with AVX2 kernels


def test_the_cache_key_names_the_capability_and_keeps_a_users_tag():
    with torch.compiler.config.patch(cache_key_tag="mine"):
        key_compile_cache_by_cpu()
        key_compile_cache_by_cpu()  # once only
        capability = torch.backends.cpu.get_cpu_capability().lower()
        assert torch.compiler.config.cache_key_tag == f"mine,cpu-{capability}"
