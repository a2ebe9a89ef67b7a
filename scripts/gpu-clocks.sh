#!/usr/bin/env bash
# The GPU's own speed beside a run on a CUDA host: nvidia-smi reads the SM and memory clocks,
# temperature, power, utilization and clock event reasons (0x1 idle, 0x4 SW power cap, ...)
# once a second into FILE (CSV) until killed. Read only: nothing is set.
#   bash scripts/gpu-clocks.sh FILE & clocks=$!; ...; kill "$clocks"
exec nvidia-smi --format=csv -lms 1000 \
  --query-gpu=timestamp,clocks.sm,clocks.mem,temperature.gpu,power.draw,utilization.gpu,clocks_event_reasons.active \
  > "${1:?FILE}" 2>&1
