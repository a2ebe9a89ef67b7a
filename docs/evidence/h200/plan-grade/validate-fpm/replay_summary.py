# ruff: noqa  (kept as it ran, beside the evidence it made)
"""Arrivals and concurrency of the consumer's replay vs the Weka trace (seconds)."""
import json, sys
pred, trace = sys.argv[1], sys.argv[2]
d = json.load(open(pred)); t = json.load(open(trace))
rows = d["per_request"]
arr = sorted(r["arrival_time_ms"] / 1e3 for r in rows)
src = sorted(q["t"] for q in t["requests"])
dev = max(abs(a - b) for a, b in zip(arr, src))
ev = sorted([(r["arrival_time_ms"], 1) for r in rows] + [(r["terminal_time_ms"], -1) for r in rows])
cur = peak = 0
for _, k in ev:
    cur += k; peak = max(peak, cur)
print(f"requests {len(rows)}; completed {sum(r['terminal_status']=='completed' for r in rows)}; "
      f"max |replay arrival - trace t| = {dev*1e3:.3f} ms; peak in-flight {peak}; "
      f"lanes {set(r['agentic']['lane_id'] for r in rows)}; "
      f"sessions {len(set(r['session_id'] for r in rows))}; "
      f"median ttft {d['median_ttft_ms']:.2f} ms, median tpot {d['median_tpot_ms']:.3f} ms")
