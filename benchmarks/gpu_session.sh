#!/usr/bin/env bash
# The GPU checks of issues 13, 15 and 16, in stages that each fit one 10-minute call on a lent
# H100 (figures in benchmarks/RESULTS.md). Every stage has a deadline, and after each command it
# packs its logs and JSON into OUT/STAGE.tgz, so a stage cut short still returns what it measured.
#
#   bash benchmarks/gpu_session.sh speed  OUT DATA GLUE   # issue 15: throughput, trainer, fine-tuning
#   bash benchmarks/gpu_session.sh anchor OUT DATA GLUE   # issue 13 item 4: pretrain small, fine-tune
#   bash benchmarks/gpu_session.sh tests  OUT DATA GLUE   # issue 15 item 4: the suite on the GPU
#
# DATA is a folder from `electra prepare ... --seq-len 128`, GLUE the folder holding SST-2/, ...
# ANCHOR_PRETRAIN_S (default 300) bounds the anchor's pretraining; COMPILE_MODE (default
# reduce-overhead) is its torch.compile mode, PRESET (default small) its size; BUDGET_S (default
# 570) bounds each stage. Run `speed` first: if its trainer-small step fails under CUDA graphs,
# run `anchor` with COMPILE_MODE=default.
set -uo pipefail
stage=$1 out=$2 data=${3:-} glue=${4:-}
work=${WORK:-/tmp/electra-gpu}
logs=$work/$stage
mkdir -p "$out" "$logs"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
deadline=$((SECONDS + ${BUDGET_S:-570}))

# run NAME LIMIT_S CMD...: CMD under a timeout of LIMIT_S or what is left of the stage, logged.
run() {
    local name=$1 limit=$2
    shift 2
    local left=$((deadline - SECONDS - 5))
    ((left < limit)) && limit=$left
    if ((limit < 20)); then
        echo "== $name: skipped, $left s left" | tee -a "$logs/session.log"
        return 1
    fi
    echo "== $name (limit ${limit}s): $*" | tee -a "$logs/session.log"
    local t0=$SECONDS
    timeout -s TERM -k 30 "$limit" "$@" >"$logs/$name.log" 2>&1
    local rc=$?
    echo "== $name: rc $rc in $((SECONDS - t0)) s" | tee -a "$logs/session.log"
    tail -n 12 "$logs/$name.log"
    pack
    return $rc
}

pack() { tar -czf "$out/.$stage.$BASHPID" -C "$logs" . && mv "$out/.$stage.$BASHPID" "$out/$stage.tgz"; }

{
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
    python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
} 2>&1 | tee "$logs/machine.txt"

case $stage in
speed)
    tp=(python3 benchmarks/pretrain_throughput.py --seq-len 128 --precision bf16 --device cuda
        --impls ours careful --warmup 10 --steps 20 --rounds 5)
    # The trainer itself under CUDA graphs, on real data: tokens_per_s past compilation.
    run trainer-small 150 python3 -m electra.cli pretrain --preset small --data "$data" \
        --out "$work/trainer-small" --steps 400 --compile --train.compile_mode reduce-overhead \
        --train.log_every 100 --train.save_every 100000 --train.progress false
    cp "$work/trainer-small/metrics.jsonl" "$logs/trainer-small.jsonl" && pack
    run small-ro 150 "${tp[@]}" --preset small --batch 128 --compile --compile-mode reduce-overhead \
        --skip-memory --json "$logs/small-ro.json"
    run small-eager 80 "${tp[@]}" --preset small --batch 128 --json "$logs/small-eager.json"
    run finetune-sst2 100 python3 benchmarks/finetune_throughput.py --preset small --glue "$glue" \
        --task sst2 --device cuda --steps 200 --warmup 20 --out "$logs/finetune.jsonl"
    run base-ro 150 "${tp[@]}" --preset base --batch 128 --compile --compile-mode reduce-overhead \
        --skip-memory --json "$logs/base-ro.json"
    ;;
anchor)
    run_dir=$work/small-1m
    # The paper's 1M-step schedule, stopped by SIGTERM (a checkpoint is written at the next step).
    run pretrain "${ANCHOR_PRETRAIN_S:-300}" python3 -m electra.cli pretrain --preset "${PRESET:-small}" \
        --data "$data" --out "$run_dir" --steps 1000000 --compile \
        --train.compile_mode "${COMPILE_MODE:-reduce-overhead}" --train.log_every 200 \
        --train.save_every 1000000 --train.progress false
    cp "$run_dir/metrics.jsonl" "$logs/pretrain-metrics.jsonl"
    step=$(ls "$run_dir/checkpoints" | sed 's/^step_//' | sort -n | tail -n 1)
    run export 60 python3 -m electra.cli export --model "$run_dir" --step "$step" --out "$work/small-x"
    # paper_anchor.py reads the training FLOPs from the metrics beside the discriminator.
    cp "$run_dir/metrics.jsonl" "$work/small-x/metrics.jsonl"
    for task in sst2 cola mrpc stsb rte; do  # side by side on the one GPU
        OMP_NUM_THREADS=3 run "finetune-$task" 600 python3 benchmarks/transfer.py --model "$work/small-x/discriminator" \
            --glue "$glue" --out "$work/transfer" --tasks "$task" --inits pretrained \
            --seeds "${SEEDS:-3}" --seeds-large 1 &
    done
    wait
    cp "$work/transfer/transfer.json" "$logs/" 2>/dev/null
    for f in "$work"/transfer/runs/*/summary.json; do
        cp "$f" "$logs/$(basename "$(dirname "$f")").summary.json"
    done
    python3 benchmarks/paper_anchor.py --run "small $step steps=$work/transfer" --out "$out/anchor.png"
    pack
    ;;
tests)
    # The suite as CI runs it, with the GPU visible; GLUE where the call carried it.
    [[ -n $glue && ! -e ../shared/data/glue ]] && mkdir -p ../shared/data && ln -s "$(realpath "$glue")" ../shared/data/glue
    run pytest 540 python3 -m pytest -q -n 8 --timeout 300
    ;;
*)
    echo "unknown stage $stage: speed, anchor or tests" >&2
    exit 2
    ;;
esac
