#!/usr/bin/env bash
# Issue 18's planning profile on a CUDA host (after `bash /root/wheelhouse/install.sh`):
# qwen3-0.6b as vLLM serves it (max_num_seqs 64, max_model_len 9216, chunked prefill off),
# K=3, synthetic AL 2.78, the grid AISimulate's direct interpolation needs (--grid aisimulate:
# 957 points for these limits, docs/export.md), in ROUNDS rounds. It outlasts one device
# command (10 minutes), so `start` runs the collection in a session of its own (setsid: it
# survives the command) and `wait` polls it, each within one command's limit.
#   bash scripts/gpu-aisimulate.sh start NAME [ROUNDS] [extra sdbench collect args]
#   bash scripts/gpu-aisimulate.sh wait NAME [SECONDS]     # exit 0 done, 3 still running
# The run's folder is /root/runs/aisimulate/NAME; when it ends, the log and the artifact are
# copied to $OUT (default ./gpu-out).
set -uo pipefail
verb=${1:?start or wait}; name=${2:?run name}; shift 2
run=/root/runs/aisimulate/$name; out=${OUT:-gpu-out}; mkdir -p "$run" "$out"
export PYTHONPATH=/tmp/site:$PWD VLLM_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
if [ "$verb" = start ]; then
  rounds=${1:-5}; shift || true
  args=(collect --mode agg --preset qwen3-0.6b --vllm-defaults --k 3 --acceptance-length 2.78
        --engine-arg max_num_seqs=64 --engine-arg max_model_len=9216
        --engine-arg enable_chunked_prefill=false --grid aisimulate --repeats "$rounds"
        --out "$run" "$@")
  { echo "\$ python3 -m pytest_sdbench.cli ${args[*]}"
    nvidia-smi --query-gpu=name,memory.used,memory.total,clocks.sm --format=csv,noheader
  } > "$run/collect.log"
  # the collection's own session: the device command may end before it does
  setsid bash -c 'start=$(date +%s); python3 -m pytest_sdbench.cli "$@" >> "'"$run"'/collect.log" 2>&1
                  echo "collect exit $? after $(( $(date +%s) - start )) s wall, engine start included" \
                    >> "'"$run"'/collect.log"; touch "'"$run"'/done"' _ "${args[@]}" \
    < /dev/null > /dev/null 2>&1 &
  echo "started $name ($rounds rounds) in $run"
  exit 0
fi
limit=${1:-540}; waited=0
while [ ! -e "$run/done" ] && [ "$waited" -lt "$limit" ]; do sleep 10; waited=$((waited + 10)); done
grep -v '^sdbench \[' "$run/collect.log" | tail -4
tail -c 300 "$run/collect.log"; echo
if [ ! -e "$run/done" ]; then echo "$name: still running after $waited s of waiting"; exit 3; fi
cp "$run/collect.log" "$out/collect-$name.log"
for f in "$run"/sdbench-agg-*.json; do [ -e "$f" ] && gzip -c "$f" > "$out/$(basename "$f").gz"; done
grep -q "^collect exit 0 " "$run/collect.log"
