#!/usr/bin/env bash
# The fidelity run on a CUDA host (after scripts/gpu-oracle.sh's install, or
# `bash /root/wheelhouse/install.sh`): a held-out serving workload at two Poisson arrival rates,
# on one engine rebuilt from PROFILE (its preset, K, AL, engine arguments) and checked against
# it field by field; every real step observed natively, every request host-timed; the report
# (ours) written with the run into one folder. AISimulate's side (not on this host) is added
# afterwards where its environment is: sdbench fidelity --report DIR --consumer-python PY.
#   bash scripts/gpu-fidelity.sh PROFILE.json [extra sdbench fidelity args]
# Everything goes to $OUT/fidelity/<profile stem> (default ./gpu-out/fidelity/...), with the
# GPU's clocks, power and event reasons read once a second beside the run (gpu-clocks.csv;
# nvidia-smi, read only), to set the served steps' clock beside the profile's.
# H200 time: the engine start (45-160 s), 8 warm-up requests, then 2 x (30 s of arrivals +
# the last requests' drain): about 70-90 s past the start for qwen3-0.6b.
set -uo pipefail
profile=${1:?PROFILE.json}; shift
out=${OUT:-gpu-out}/fidelity/$(basename "$profile" .json); mkdir -p "$out"
export PYTHONPATH=/tmp/site:$PWD VLLM_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
args=(fidelity "$profile" --rate 4 --rate 16 --duration 30 --input-len 1024-3072
      --output-len 64-256 --seed 0 --out "$out" "$@")
python3 -c "import matplotlib" 2>/dev/null || args+=(--no-plots)   # drawn at --report time
bash scripts/gpu-clocks.sh "$out/gpu-clocks.csv" &
smi=$!
start=$(date +%s)
{ echo "\$ python3 -m pytest_sdbench.cli ${args[*]}"
  nvidia-smi --query-gpu=name,memory.used,memory.total,driver_version --format=csv
  python3 -m pytest_sdbench.cli "${args[@]}" 2>&1; echo "fidelity exit $?"; } \
  | tee "$out/fidelity.log"
kill "$smi" 2>/dev/null
rc=$(sed -n 's/^fidelity exit //p' "$out/fidelity.log" | tail -1)
echo "fidelity: exit $rc, $(( $(date +%s) - start )) s wall" | tee -a "$out/fidelity.log"
exit "$rc"
