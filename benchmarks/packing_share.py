"""How much of a fine-tuning batch is real tokens: padded to its longest row, and packed.

    python benchmarks/packing_share.py --tokenizer m2k --glue ../shared/data/glue

For each GLUE task, random batches of `--batch` training examples encoded at max length 128, as
`electra finetune` draws them: the share of positions that hold a real token when each batch is
trimmed to its longest row (`--no-pack`) and when it is packed (`electra.finetuning.packing`, the default).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from electra.data.tokenizer import load_tokenizer
from electra.finetuning.inference import trim
from electra.finetuning.packing import pack_batch
from electra.tasks import get_task

GLUE_DIRS = {"sst2": "SST-2", "cola": "CoLA", "mrpc": "MRPC", "stsb": "STS-B", "rte": "RTE"}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tokenizer", type=Path, required=True, help="a model or tokenizer folder")
    p.add_argument("--glue", type=Path, required=True, help="the folder holding SST-2/, ...")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--batches", type=int, default=100)
    args = p.parse_args()
    tokenizer = load_tokenizer(args.tokenizer)
    print("| task | real share, padded | real share, packed | positions padded / packed |")
    print("|---|---|---|---|")
    for name, folder in GLUE_DIRS.items():
        task = get_task(name)
        rows = task.read(args.glue / folder / "train.tsv", "train")
        data = task.encode(rows, tokenizer, 128, training=True).tensors
        order = torch.randperm(len(rows), generator=torch.Generator().manual_seed(0))
        real = padded = packed = 0
        for idx in order.split(args.batch)[: args.batches]:
            batch = {k: v[idx] for k, v in data.items()}
            real += int(batch["attention_mask"].sum())
            padded += trim(batch)["input_ids"].numel()
            packed += pack_batch(batch)["input_ids"].numel()
        print(f"| {name} | {real / padded:.2f} | {real / packed:.2f} | {padded / packed:.2f}x |")


if __name__ == "__main__":
    main()
