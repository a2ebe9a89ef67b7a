#!/usr/bin/env bash
# Real weights against dummy weights on a CUDA host (issue 25; after scripts/gpu-oracle.sh's
# install, or `bash /root/wheelhouse/install.sh`): the qwen3-0.6b preset's shape written as a
# real checkpoint with random weights (transformers' Qwen3 + an EAGLE3 head of the preset's
# shape, safetensors, in a Hugging Face cache layout; tests/checkpoints.py), collected by
# `sdbench collect --model --draft` through vLLM's own loader, and the same grid on the
# dummy-weight preset with the same engine settings; then each point's median step time side
# by side with the ratio real/dummy. A dense model's cost does not depend on its weights'
# values, so the ratios should sit within the noise (docs/performance.md: 3-9% per point
# between engine starts on this host).
#   bash scripts/gpu-real-checkpoint.sh [extra sdbench collect args]
# The draft vocabulary is the target's (DRAFT_VOCAB=151936, the preset's shape, no mapping);
# DRAFT_VOCAB=32000 writes a smaller one with its d2t mapping (its lm_head is then smaller
# than the preset draft's, so its steps are not the same shape).
# Artifacts, checkpoints and logs go to $OUT/real-checkpoint (default ./gpu-out/...).
set -uo pipefail
out=${OUT:-gpu-out}/real-checkpoint; mkdir -p "$out"
export PYTHONPATH=/tmp/site:$PWD VLLM_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
grid="$out/grid.json"
cat > "$grid" <<'EOF'
{"prefill": [
  {"batch_size": 1, "new_tokens": 256, "cached_prefix_tokens": 0},
  {"batch_size": 1, "new_tokens": 1024, "cached_prefix_tokens": 0},
  {"batch_size": 4, "new_tokens": 1024, "cached_prefix_tokens": 0},
  {"batch_size": 4, "new_tokens": 1024, "cached_prefix_tokens": 1024}],
 "decode": [
  {"batch_size": 1, "context_tokens": 1024, "draft_depth": 3, "acceptance_length": 2.78},
  {"batch_size": 8, "context_tokens": 1024, "draft_depth": 3, "acceptance_length": 2.78},
  {"batch_size": 32, "context_tokens": 1024, "draft_depth": 3, "acceptance_length": 2.78},
  {"batch_size": 8, "context_tokens": 4096, "draft_depth": 3, "acceptance_length": 2.78},
  {"batch_size": 32, "context_tokens": 4096, "draft_depth": 3, "acceptance_length": 2.78}]}
EOF
start=$(date +%s)
python3 -m tests.checkpoints --preset qwen3-0.6b --root "$out/hf-cache" \
    --draft-vocab "${DRAFT_VOCAB:-151936}" > "$out/checkpoints.json" || exit 1
echo "checkpoints written in $(( $(date +%s) - start )) s: $(cat "$out/checkpoints.json")"
target=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['target'])" "$out/checkpoints.json")
draft=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['draft'])" "$out/checkpoints.json")
# The same settings on both sides: vLLM's defaults (CUDA graphs), these caps, synthetic AL.
common=(collect --mode agg --k 3 --acceptance-length 2.78 --repeats 5 --grid "$grid"
        --engine-arg max_num_seqs=32 --engine-arg max_model_len=8448 "$@")
rc=0
for side in real dummy; do
  if [ "$side" = real ]; then which=(--model "$target" --draft "$draft")
  else which=(--preset qwen3-0.6b --vllm-defaults); fi
  t0=$(date +%s)
  { echo "\$ python3 -m pytest_sdbench.cli ${common[*]} ${which[*]} --out $out/$side"
    python3 -m pytest_sdbench.cli "${common[@]}" "${which[@]}" --out "$out/$side" 2>&1
    echo "collect exit $?"; } | tee "$out/collect-$side.log" | grep -v '^sdbench \[' | tail -4
  echo "$side: $(( $(date +%s) - t0 )) s wall"
  [ "$(sed -n 's/^collect exit //p' "$out/collect-$side.log" | tail -1)" = 0 ] || rc=1
done
[ "$rc" = 0 ] || exit "$rc"
python3 - "$out/real" "$out/dummy" <<'EOF' | tee "$out/side-by-side.txt"
import statistics, sys
from pathlib import Path
from pytest_sdbench.artifact import validate_path

def load(folder):
    (path,) = Path(folder).glob("sdbench-agg-*.json")
    report = validate_path(path)
    assert report.ok, report.errors
    return report.artifact

real, dummy = load(sys.argv[1]), load(sys.argv[2])
for side, a in (("real", real), ("dummy", dummy)):
    t, d = a.identity.target, a.identity.draft
    print(f"{side}: load_format {t.load_format.value}; revisions {t.revision.value} / "
          f"{d.revision.value}; {a.coverage.completed}/{a.coverage.expected} points")
summary = {side: {(s.phase, s.point_index): s for s in a.summaries}
           for side, a in (("real", real), ("dummy", dummy))}
print(f"{'point':<12} {'coordinates':<34} {'dummy ms':>9} {'real ms':>9} {'real/dummy':>10}"
      f" {'cv d/r %':>10}")
ratios = {}
for phase in ("prefill", "decode"):
    for i, point in enumerate(getattr(real.grid, phase)):
        r, d = summary["real"][(phase, i)], summary["dummy"][(phase, i)]
        ratio = r.median_seconds / d.median_seconds
        ratios.setdefault(phase, []).append(ratio)
        coords = (f"B={point.batch_size} new={point.new_tokens} "
                  f"prefix={point.cached_prefix_tokens}" if phase == "prefill" else
                  f"B={point.batch_size} ctx={point.context_tokens} K={point.draft_depth} "
                  f"AL={point.acceptance_length}")
        print(f"{phase}[{i}]".ljust(12), coords[:34].ljust(34),
              f"{d.median_seconds * 1e3:9.3f} {r.median_seconds * 1e3:9.3f} {ratio:10.3f}"
              f" {d.cv * 100:4.1f}/{r.cv * 100:4.1f}")
for phase, values in ratios.items():
    print(f"{phase}: median ratio real/dummy {statistics.median(values):.3f} "
          f"(range {min(values):.3f}-{max(values):.3f}, {len(values)} points)")
EOF
echo "total: $(( $(date +%s) - start )) s wall"
