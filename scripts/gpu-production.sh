#!/usr/bin/env bash
# The production profile on a CUDA host (after scripts/gpu-oracle.sh's install, or
# `bash /root/wheelhouse/install.sh`): the qwen3-0.6b preset as vLLM serves it (its defaults,
# KV sized for the card), batches up to 64, contexts up to 8k, 5 rounds, one engine per K
# with an acceptance length that K can reach. Each K is measured on the grid of its committed
# back-to-back profile (docs/evidence/h200/production/grid-kK.json; K=3's is
# docs/evidence/h200/repeatability/grid-k3.json), so the profile in rounds sits beside it point
# for point; without such a file the engine's limits derive the grid.
#   bash scripts/gpu-production.sh "1 2 3 4 5" [extra sdbench collect args]
# Artifacts, logs and the GPU's clocks beside each K (scripts/gpu-clocks.sh, read only) go to
# $OUT/production (default ./gpu-out/production).
set -uo pipefail
ks=${1:-"1 2 3 4 5"}; shift || true
out=${OUT:-gpu-out}/production; mkdir -p "$out"
export PYTHONPATH=/tmp/site:$PWD VLLM_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
declare -A AL=([1]=1.8 [2]=2.4 [3]=2.78 [4]=3.2 [5]=3.6)
rc=0
for k in $ks; do
  args=(collect --mode agg --preset qwen3-0.6b --vllm-defaults --k "$k" --repeats 5
        --acceptance-length "${AL[$k]}" --engine-arg max_num_seqs=64
        --engine-arg max_model_len=8448 --out "$out")
  for grid in docs/evidence/h200/production/grid-k"$k".json \
              docs/evidence/h200/repeatability/grid-k"$k".json; do
    [ -e "$grid" ] && { args+=(--grid "$grid"); break; }
  done
  args+=("$@")
  start=$(date +%s)
  bash scripts/gpu-clocks.sh "$out/gpu-clocks-k$k.csv" & clocks=$!
  { echo "\$ python3 -m pytest_sdbench.cli ${args[*]}"
    python3 -m pytest_sdbench.cli "${args[@]}" 2>&1; echo "collect exit $?"; } \
    | tee "$out/collect-k$k-$(date +%H%M%S).log" | grep -v '^sdbench \[' | tail -5
  kill "$clocks" 2>/dev/null
  echo "K=$k: $(( $(date +%s) - start )) s wall"
  code=$(sed -n 's/^collect exit //p' "$out"/collect-k"$k"-*.log | tail -1)
  [ "$code" = 0 ] || rc=1
done
exit "$rc"
