#!/usr/bin/env bash
# Tensor parallel on a host with two CUDA GPUs, after `bash /root/wheelhouse/install.sh`:
#   bash scripts/gpu-tp.sh oracle       the oracle suite at --sdbench-tp 2 (CUDA graphs,
#                                       qwen3-0.6b, synthetic AL 2.78): logs and artifacts
#   bash scripts/gpu-tp.sh side-by-side the same grid collected at TP=1 and at TP=2, and a
#                                       table TP1 ms | TP2 ms | ratio for docs/performance.md
# Everything goes to $OUT (default ./gpu-out). Each part takes a few minutes (< 9).
set -uo pipefail
part=${1:?oracle or side-by-side}; shift
out=${OUT:-gpu-out}; mkdir -p "$out"
export PYTHONPATH=/tmp/site:$PWD VLLM_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
# NVLink multicast off; vLLM's torch symmetric-memory all-reduce off (engine/compat.py sets
# both for the ranks too).
export NCCL_NVLS_ENABLE=0 VLLM_ALLREDUCE_USE_SYMM_MEM=0
nvidia-smi --query-gpu=index,name,memory.used,memory.total,driver_version --format=csv \
  | tee "$out/gpus-$part.txt"
start=$(date +%s)
case "$part" in
oracle)
  args=(--sdbench-tp=2 --sdbench-mode=agg --sdbench-preset=qwen3-0.6b
        --sdbench-acceptance-length=2.78 --sdbench-cuda-graphs
        --sdbench-artifact-dir="$out/artifacts-tp2-graph" -p no:cacheprovider -rA)
  { echo "\$ python3 -m pytest oracle_tests ${args[*]} $*"
    python3 -m pytest oracle_tests "${args[@]}" "$@" 2>&1; echo "pytest exit $?"
    echo "GPU processes left after the session (want none):"
    nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader
    python3 -m pytest_sdbench.cli validate "$out"/artifacts-tp2-graph/*.json; } \
    | tee "$out/oracle-tp2-graph.log"
  rc=$(sed -n 's/^pytest exit //p' "$out/oracle-tp2-graph.log" | tail -1)
  ;;
side-by-side)
  rc=0
  for tp in 1 2; do
    dir="$out/side-by-side/tp$tp"; mkdir -p "$dir"
    args=(collect --tp "$tp" --mode agg --preset qwen3-0.6b --cuda-graphs
          --acceptance-length 2.78 --repeats 3 --out "$dir" "$@")
    { echo "\$ python3 -m pytest_sdbench.cli ${args[*]}"
      python3 -m pytest_sdbench.cli "${args[@]}" 2>&1; echo "collect exit $?"; } \
      | tee "$dir/collect.log" | grep -v '^sdbench \['
    [ "$(sed -n 's/^collect exit //p' "$dir/collect.log" | tail -1)" = 0 ] || rc=1
  done
  python3 -m pytest_sdbench.cli validate "$out"/side-by-side/tp*/sdbench-*.json || rc=1
  python3 - "$out"/side-by-side/tp1/sdbench-*.json "$out"/side-by-side/tp2/sdbench-*.json \
    <<'PY' | tee "$out/side-by-side/table.md"
import sys
from pytest_sdbench.artifact import validate_path
one, two = (validate_path(p).artifact for p in sys.argv[1:3])
assert one.integrity.grid_digest == two.integrity.grid_digest, "different grids"
labels = {("prefill", i): f"prefill B={p.batch_size} new={p.new_tokens} "
          f"prefix={p.cached_prefix_tokens}" for i, p in enumerate(one.grid.prefill)}
labels.update({("decode", i): f"decode B={p.batch_size} ctx={p.context_tokens} "
               f"K={p.draft_depth} AL={p.acceptance_length}"
               for i, p in enumerate(one.grid.decode)})
m1, m2 = ({(s.phase, s.point_index): s.median_seconds for s in a.summaries} for a in (one, two))
print(f"{one.identity.device_name.value}; TP=2: {two.identity.communication.value}; median of "
      f"{one.measurement_policy.repeats} repeats; at TP=2 the slowest rank's step")
print()
print("| point | TP1 ms | TP2 ms | TP2/TP1 |")
print("|---|---:|---:|---:|")
for key in labels:
    if key in m1 and key in m2:
        print(f"| {labels[key]} | {m1[key] * 1e3:.3f} | {m2[key] * 1e3:.3f} | "
              f"{m2[key] / m1[key]:.2f} |")
PY
  ;;
*) echo "unknown part $part (oracle or side-by-side)" >&2; exit 2 ;;
esac
echo "gpu-tp $part: exit $rc, $(( $(date +%s) - start )) s wall" | tee -a "$out/gpu-tp-$part.txt"
exit "$rc"
