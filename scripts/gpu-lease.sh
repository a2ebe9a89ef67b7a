#!/usr/bin/env bash
# One H200 lease's work, stage after stage, in a session of its own (setsid: it outlasts a
# device command), after `bash /root/wheelhouse/install.sh`. Each stage is one line of a
# plan file: NAME COMMAND... (run from the checkout, its output in $root/NAME.log, its files
# in $root/NAME/, exported as $STAGE_OUT); a line starting with # is skipped.
#   bash scripts/gpu-lease.sh start PLAN     # start the plan (returns at once)
#   bash scripts/gpu-lease.sh wait [SECONDS] # wait for the end, at most SECONDS (default 540)
# `wait` packs what finished since its last call (every file of a finished stage, and the
# logs so far) into $OUT/lease-N.tar.gz (one file: a device call brings back 8 at most), so
# each call brings back what is done even if the lease ends. Exit 0: the plan is done; 3:
# still running; 4: no plan started on this machine (it went back: a bare one).
set -uo pipefail
verb=${1:?start or wait}; shift
root=${LEASE_ROOT:-/root/lease}; out=${OUT:-gpu-out}; mkdir -p "$out"
export PYTHONPATH=/tmp/site:$PWD VLLM_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
if [ "$verb" = start ]; then
  plan=${1:?PLAN}; mkdir -p "$root"; cp "$plan" "$root/plan"
  setsid bash -c '
    root=$1
    while read -r name cmd; do
      case $name in ""|"#"*) continue ;; esac
      mkdir -p "$root/$name"; t0=$(date +%s)
      { echo "\$ $cmd"; echo "started $(date -u +%FT%T.%3NZ)"
        nvidia-smi --query-gpu=name,memory.used,clocks.sm,power.draw --format=csv,noheader
        bash scripts/gpu-clocks.sh "$root/$name/gpu-clocks.csv" & smi=$!
        STAGE_OUT=$root/$name bash -c "$cmd" 2>&1; rc=$?
        kill $smi 2>/dev/null
        echo "stage $name exit $rc, $(( $(date +%s) - t0 )) s"; } > "$root/$name.log" 2>&1
      touch "$root/$name.done"
    done < "$root/plan"
    touch "$root/done"' _ "$root" < /dev/null > /dev/null 2>&1 &
  echo "started $(grep -cv "^#" "$plan") stage(s) in $root"; exit 0
fi
[ -d "$root" ] || { echo "no plan on this machine (a bare one)"; exit 4; }
limit=${1:-540}; waited=0
while [ ! -e "$root/done" ] && [ "$waited" -lt "$limit" ]; do sleep 5; waited=$((waited + 5)); done
for log in "$root"/*.log; do tail -n 4 "$log"; done
n=$(ls "$out"/lease-*.tar.gz 2>/dev/null | wc -l); touch "$root/packed"
files=()
for done in "$root"/*.done; do
  [ -e "$done" ] || continue; name=$(basename "$done" .done)
  grep -qxF "$name" "$root/packed" && continue
  files+=("$name" "$name.log"); echo "$name" >> "$root/packed"
done
running=$(ls "$root"/*.log 2>/dev/null | while read -r l; do b=$(basename "$l" .log); [ -e "$root/$b.done" ] || echo "$b.log"; done)
(cd "$root" && tar czf "$out/lease-$n.tar.gz" "${files[@]}" $running 2>/dev/null)
echo "packed into lease-$n.tar.gz: ${files[*]} $running"
[ -e "$root/done" ] || { echo "still running after $waited s of waiting"; exit 3; }
