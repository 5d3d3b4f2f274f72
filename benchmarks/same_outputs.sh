#!/usr/bin/env bash
# What a user sees of a checkout, written to one folder so that two checkouts can be diffed
# (issue 47 item 7: a restructuring changes nothing a user has): every command's --help, the
# metrics.jsonl of a fixed-seed pretraining run of each family (electra, mlm and electric
# objectives), a classification fine-tune's results and the exported weights' SHA-256.
#
#   bash benchmarks/same_outputs.sh OUT [CORPUS]      # run in the checkout to describe
#   diff -r OUT_BEFORE OUT_AFTER
#
# STEPS, PRESETS and OBJECTIVES shrink it (the smoke test runs 2 steps of tiny with electra);
# TOKENIZER=OUT_BEFORE/tokenizer makes the second checkout use the first one's tokenizer.
set -euo pipefail
out="$(realpath -m "$1")"
corpus="${2:-../shared/data/wikitext-2-raw/wiki.valid.raw}"
work="$(mktemp -d)"
mkdir -p "$out/help"
electra --help >"$out/help/electra.txt"
for cmd in tokenizer prepare pretrain experiment detect score-text export finetune evaluate \
    predict score plot presets demo; do
    COLUMNS=100 electra "$cmd" --help >"$out/help/$cmd.txt"
done
COLUMNS=100 electra tokenizer train --help >"$out/help/tokenizer-train.txt"
electra presets >"$out/presets.txt"
head -c 400000 "$corpus" >"$work/corpus.txt"
# The tokenizer's trainer breaks ties between equally frequent pairs in no fixed order, so two
# checkouts compare on one tokenizer: TOKENIZER names a saved one (the first run's is kept in OUT).
if [ -n "${TOKENIZER:-}" ]; then
    cp -r "$TOKENIZER" "$work/tok"
else
    electra tokenizer train "$work/corpus.txt" --vocab-size 2000 --out "$work/tok" >/dev/null 2>&1
fi
cp -r "$work/tok" "$out/tokenizer"
electra prepare "$work/corpus.txt" --tokenizer "$work/tok" --seq-len 64 --out "$work/data" \
    >/dev/null 2>&1
steps=(--train.steps "${STEPS:-12}" --train.batch_size 8 --train.log_every 3 --train.save_every "${STEPS:-12}"
    --train.seed 7 --no-progress --threads 2)
for preset in ${PRESETS:-tiny modern-tiny}; do
    for objective in ${OBJECTIVES:-electra mlm electric}; do
        run="$work/runs/$preset-$objective"
        electra pretrain --preset "$preset" --data "$work/data" --out "$run" \
            --objective.name "$objective" "${steps[@]}" >/dev/null 2>&1
        # wall-clock fields differ between any two runs
        python - "$run/metrics.jsonl" >"$out/metrics-$preset-$objective.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print(json.dumps({k: v for k, v in r.items() if not any(
        w in k for w in ("time", "sec", "per_s", "elapsed", "wall", "eta", "mfu", "tokens_s"))}))
PY
    done
    run="$work/runs/$preset-electra"
    electra export --model "$run" --out "$work/export-$preset" >/dev/null 2>&1
    # A safetensors file's header lists its metadata in no fixed order from one process to the
    # next, so the weights are compared by name and bytes, the metadata as a sorted dict.
    python - "$work/export-$preset" >"$out/export-$preset.sha256" <<'PY'
import hashlib, json, sys
from pathlib import Path
from safetensors import safe_open
root = Path(sys.argv[1])
for path in sorted([*root.rglob("*.safetensors"), *root.rglob("config.json")]):
    h = hashlib.sha256()
    if path.suffix == ".json":
        h.update(path.read_bytes())
    else:
        with safe_open(str(path), "np") as f:
            h.update(json.dumps(f.metadata(), sort_keys=True).encode())
            for name in sorted(f.keys()):
                h.update(name.encode() + f.get_tensor(name).tobytes())
    print(h.hexdigest(), path.relative_to(root))
PY
    sst="${SHARED_DATA:-../shared/data}/glue/SST-2"
    electra finetune --model "$work/export-$preset/discriminator" --task sst2 \
        --data "$sst" --out "$work/ft-$preset" --max-train-examples 64 --batch-size 16 --max-seq-len 64 \
        --epochs 1 --seed 3 --seeds 1 --no-progress >/dev/null 2>"$work/ft.err" \
        || { echo "finetune failed:"; tail -3 "$work/ft.err"; } >"$out/ft-$preset.txt"
    if [ -f "$work/ft-$preset/results.json" ]; then
        python -c "import json,sys; r=json.load(open(sys.argv[1])); [r.pop(k,None) for k in list(r) if 'time' in k or 'sec' in k]; print(json.dumps(r, indent=1, sort_keys=True).replace(sys.argv[2], 'WORK'))" \
            "$work/ft-$preset/results.json" "$work" >"$out/ft-$preset.json"
    fi
done
rm -rf "$work"
echo "wrote $out"
