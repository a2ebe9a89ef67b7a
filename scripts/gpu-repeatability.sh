#!/usr/bin/env bash
# Issue 17's evidence on a CUDA host (after `bash /root/wheelhouse/install.sh`): one
# independent collection (a process and an engine start of its own) of the K=3 production
# grid (docs/evidence/h200/repeatability/grid-k3.json, 94 points), as vLLM serves the preset,
# in 5 rounds. Run it twice per preset (names a and b); the second run also writes the
# report of the pair (scripts/repeatability-report.py).
#   bash scripts/gpu-repeatability.sh qwen3-0.6b a [extra sdbench collect args]
# Artifacts stay in /root/runs/repeatability/PRESET-NAME for the lease; the log, the artifact
# and the report are copied to $OUT (default ./gpu-out). Beside the collection, nvidia-smi
# reads the GPU's clocks, temperature and power once a second (read only: nothing is set) into
# gpu-clocks-PRESET-NAME.csv, so that a run that disagrees can be checked against the GPU's
# own speed; the log gives the UTC time the command started.
set -uo pipefail
preset=${1:?preset}; name=${2:?run name}; shift 2
runs=/root/runs/repeatability; out=${OUT:-gpu-out}
mkdir -p "$runs/$preset-$name" "$out"
export PYTHONPATH=/tmp/site:$PWD VLLM_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
# Each run of a pair draws its rounds' order from a seed of its own (from its name; recorded
# in the artifact), so the two runs do not measure their points in the same order.
seed=$(printf %s "$name" | cksum | cut -d' ' -f1)
args=(collect --mode agg --preset "$preset" --vllm-defaults --k 3 --repeats 5 --order-seed "$seed"
      --acceptance-length 2.78 --engine-arg max_num_seqs=64 --engine-arg max_model_len=8448
      --grid docs/evidence/h200/repeatability/grid-k3.json --out "$runs/$preset-$name" "$@")
log=$out/collect-$preset-$name.log
start=$(date +%s)
bash scripts/gpu-clocks.sh "$out/gpu-clocks-$preset-$name.csv" &
smi=$!
{ echo "\$ python3 -m pytest_sdbench.cli ${args[*]}"
  echo "started $(date -u +%FT%T.%3NZ)"
  nvidia-smi --query-gpu=name,memory.used,memory.total,clocks.sm --format=csv,noheader
  python3 -m pytest_sdbench.cli "${args[@]}" 2>&1; echo "collect exit $?"; } > "$log"
kill "$smi" 2>/dev/null
echo "$preset $name: $(( $(date +%s) - start )) s wall, engine start included" | tee -a "$log"
grep -E "^sdbench: engine started|^wrote|^collect exit|Error|error" "$log" | tail -5
cp "$runs/$preset-$name"/sdbench-agg-*.json "$out/" 2>/dev/null
if ls "$runs/$preset-a"/sdbench-agg-*.json "$runs/$preset-b"/sdbench-agg-*.json >/dev/null 2>&1; then
  python3 scripts/repeatability-report.py "$runs/$preset-a"/sdbench-agg-*.json \
    "$runs/$preset-b"/sdbench-agg-*.json 2>&1 | tee "$out/report-$preset.txt"
fi
