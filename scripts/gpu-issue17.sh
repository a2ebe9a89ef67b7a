#!/usr/bin/env bash
# Issue 17's remaining H200 evidence in one lease (after `bash /root/wheelhouse/install.sh`),
# one stage after another in a session of its own (setsid: it outlasts a device command):
#   1-2. the qwen3-8b pair: scripts/gpu-repeatability.sh qwen3-8b a, then b (5 rounds each);
#   3.   the production profiles with rounds: scripts/gpu-production.sh "2 4 5 1"
#        (K=3 with rounds is the qwen3-0.6b pair of docs/evidence/h200/repeatability).
#   bash scripts/gpu-issue17.sh start [STAGE...]   # 8b, production (default: both)
#   bash scripts/gpu-issue17.sh wait [SECONDS]     # exit 0 all done, 3 still running
# `wait` copies into $OUT what finished since the last call (artifacts gzipped), at most 8
# files a call, so each device command brings back what is done even if the lease ends.
set -uo pipefail
verb=${1:?start or wait}; shift; root=${ISSUE17_ROOT:-/root/issue17}; out=${OUT:-gpu-out}; mkdir -p "$root" "$out"
if [ "$verb" = start ]; then
  stages=" ${*:-8b production} "
  setsid bash -c '
    if [[ "$1" == *" 8b "* ]]; then
      OUT='"$root"'/8b-a bash scripts/gpu-repeatability.sh qwen3-8b a > '"$root"'/8b-a.txt 2>&1
      OUT='"$root"'/8b-b bash scripts/gpu-repeatability.sh qwen3-8b b > '"$root"'/8b-b.txt 2>&1
    fi
    if [[ "$1" == *" production "* ]]; then
      OUT='"$root"' bash scripts/gpu-production.sh "2 4 5 1" > '"$root"'/production.txt 2>&1
    fi
    touch '"$root"'/done' _ "$stages" < /dev/null > /dev/null 2>&1 &
  echo "started:$stages in $root"; exit 0
fi
limit=${1:-540}; waited=0
while [ ! -e "$root/done" ] && [ "$waited" -lt "$limit" ]; do sleep 5; waited=$((waited + 5)); done
tail -n 3 "$root"/*.txt; ls "$root"/*/ 2>/dev/null
touch "$root/copied"; n=0
# finished files only: artifacts are written whole at the end; logs once their stage is over
for f in "$root"/8b-*/sdbench-agg-*.json "$root"/production/sdbench-agg-*.json \
         "$root"/8b-*/collect-*.log "$root"/8b-*/gpu-clocks-*.csv "$root"/8b-b/report-*.txt \
         "$root"/production/collect-k*.log "$root"/production/gpu-clocks-k*.csv; do
  [ -e "$f" ] || continue; grep -qxF "$f" "$root/copied" && continue
  case $f in
    *.partial.json) continue ;;   # a collection's checkpoint: its artifact comes when written
    */8b-a/*.log|*/8b-a/*.csv) [ -e "$root/8b-b.txt" ] || [ -e "$root/done" ] || continue ;;
    */8b-b/*.log|*/8b-b/*.csv) [ -e "$root/production.txt" ] || [ -e "$root/done" ] || continue ;;
    */production/*.log) grep -q "^collect exit" "$f" || continue ;;
    */production/gpu-clocks-k*.csv) k=${f##*-k}; k=${k%.csv}
      grep -qs "^collect exit" "$root"/production/collect-k"$k"-*.log || continue ;;
  esac
  [ "$n" -lt 8 ] || break
  case $f in *.json) gzip -c "$f" > "$out/$(basename "$(dirname "$f")")-$(basename "$f").gz" ;;
             *) cp "$f" "$out/$(basename "$(dirname "$f")")-$(basename "$f")" ;; esac
  echo "$f" >> "$root/copied"; n=$((n + 1))
done
[ -e "$root/done" ] || { echo "still running after $waited s of waiting"; exit 3; }
