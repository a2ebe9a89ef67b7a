#!/usr/bin/env bash
# The GPU gate on a CUDA host with the offline vLLM 0.26 wheelhouse gathered in
# /root/wheelhouse (../shared/gpu-runner/): installs it, installs this project without
# dependencies, and runs the oracle suite with the qwen3-0.6b preset in one engine mode.
#   bash scripts/gpu-oracle.sh eager|graph [extra pytest args]
# Logs and a tarball of the artifacts go to $OUT (default ./gpu-out).
set -uo pipefail
mode=${1:?eager or graph}; shift
out=${OUT:-gpu-out}; mkdir -p "$out"
bash /root/wheelhouse/install.sh > /tmp/install.log 2>&1 || { cat /tmp/install.log; exit 1; }
export PYTHONPATH=/tmp/site VLLM_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
python3 -m pip show -q pytest-sdbench >/dev/null 2>&1 || \
  python3 -m pip install -q --no-deps --no-build-isolation -e . > /tmp/pip.log 2>&1
# The gate's own defaults on CUDA (oracle_tests/gate.py): synthetic acceptance, CUDA graphs.
args=(--sdbench-mode=agg --sdbench-preset=qwen3-0.6b
      --sdbench-artifact-dir="$out/artifacts-$mode" -p no:cacheprovider -rA)
[ "$mode" = eager ] && args+=(--sdbench-engine-arg enforce_eager=true)
start=$(date +%s)
{ echo "\$ python3 -m pytest oracle_tests ${args[*]} $*"; tail -1 /tmp/install.log
  nvidia-smi --query-gpu=name,memory.used,memory.total,driver_version --format=csv
  python3 -m pytest oracle_tests "${args[@]}" "$@" 2>&1; echo "pytest exit $?"; } \
  | tee "$out/oracle-$mode.log"
rc=$(sed -n 's/^pytest exit //p' "$out/oracle-$mode.log" | tail -1)
echo "oracle $mode: exit $rc, $(( $(date +%s) - start )) s wall" | tee -a "$out/oracle-$mode.log"
tar czf "$out/artifacts-$mode.tgz" -C "$out" "artifacts-$mode" 2>/dev/null && rm -rf "$out/artifacts-$mode"
exit "$rc"
