# ruff: noqa  (kept as it ran, beside the evidence it made)
"""Turn a `vllm bench serve --save-detailed` result into one Weka play for the consumer.

Reuses pytest_sdbench.fidelity.served_compare (served_requests, trace_requests): the
requests that succeeded, arrival = start_times - min(start_times), in send order, with
their input/output lengths. Written as ONE Weka play (one JSON object) whose requests are
the served requests:
  t        = arrival seconds from the first send (nested_timestamp_basis: absolute)
  in, out  = the request's input/output token counts (vLLM's input_lens / output_lens)
  api_time = the request's measured E2E seconds on the served run (TTFT + sum(ITLs)),
             a real recorded API duration
  type     = "n" (an ordinary request; no subagent)
  model    = the served run's own model_id (vLLM's result; qwen3-8b), as the client sent it
No hash_ids: vLLM's random dataset shares no prefix, and the consumer generates hashes
for each prompt when a request carries none (aisimulate/resources.py _scan_weka).
Play fields: id (the source file name), models (the served model_id), block_size 16
(vLLM's default KV block size, the profile's), hash_id_scope "local" (AIPerf/AgentX Weka:
one hash namespace per play).

With --distinct-hashes, each request also carries hash_ids: ceil(in / 16) block ids, all
distinct across the play (no block shared between any two requests), which is what the
random dataset sent (no --random-prefix-len: no shared prefix). Without it, no hash_ids.

usage: python make_weka_trace.py SERVED.json OUT.json [--distinct-hashes]
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from pytest_sdbench.fidelity.served_compare import served_requests, trace_requests


BLOCK = 16


def main(src: str, out: str, distinct_hashes: bool = False) -> None:
    result = json.loads(Path(src).read_text())
    served = served_requests(result)
    arrived = trace_requests(served)
    # trace_requests sorts by start; recover each one's served E2E in the same order.
    ordered = sorted(served, key=lambda r: r.start)
    requests = []
    next_id = 1
    for planned, r in zip(arrived, ordered, strict=True):
        assert planned.input_tokens == r.input_tokens and planned.output_tokens == r.output_tokens
        requests.append({"type": "n", "model": result["model_id"],
                         "t": round(planned.arrival_seconds, 6),
                         "in": planned.input_tokens, "out": planned.output_tokens,
                         "api_time": round(r.e2e, 6)})
        if distinct_hashes:
            blocks = -(-planned.input_tokens // BLOCK)
            requests[-1]["hash_ids"] = list(range(next_id, next_id + blocks))
            next_id += blocks
    play = {"id": f"vllm-bench-serve:{Path(src).name}", "models": [result["model_id"]],
            "block_size": BLOCK, "hash_id_scope": "local", "requests": requests}
    Path(out).write_text(json.dumps(play) + "\n")
    span = requests[-1]["t"] if requests else 0.0
    print(f"{out}: 1 play, {len(requests)} requests of {len(result['ttfts'])} sent; "
          f"arrivals over {span:.2f} s; in {sorted({q['in'] for q in requests})}; "
          f"out {sorted({q['out'] for q in requests})}; "
          f"request_rate {result.get('request_rate')}; model {result.get('model_id')}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], "--distinct-hashes" in sys.argv[3:])
