"""vLLM's own request metrics around each served run: the server's Prometheus /metrics read
right before and right after a `vllm bench serve` run, and the difference of each
histogram's sum and count (the run's requests only). They split a TTFT by the engine's own
clock: queued (arrival at the engine core to its first schedule), prefill (first schedule
to the first token), and the engine's whole TTFT; the rest of the client's TTFT is the API
server's (HTTP, tokenizer, detokenizer, streaming)."""

from __future__ import annotations

import re
import urllib.request

# vLLM's histograms (seconds) read around each run; names as vLLM 0.26 and 0.32 publish them
HISTOGRAMS = ("vllm:time_to_first_token_seconds", "vllm:request_queue_time_seconds",
              "vllm:request_prefill_time_seconds", "vllm:request_decode_time_seconds",
              "vllm:e2e_request_latency_seconds", "vllm:inter_token_latency_seconds",
              "vllm:request_time_per_output_token_seconds")
_LINE = re.compile(r"^(?P<name>[a-zA-Z_:][\w:]*)(?:\{[^}]*\})?\s+(?P<value>\S+)")


def read_metrics(url: str, timeout: float = 10.0) -> dict[str, float]:
    """Each histogram's _sum and _count (summed over their label sets), from /metrics."""
    with urllib.request.urlopen(url, timeout=timeout) as answer:
        text = answer.read().decode("utf-8", "replace")
    return parse_metrics(text)


def parse_metrics(text: str) -> dict[str, float]:
    wanted = {f"{h}{suffix}" for h in HISTOGRAMS for suffix in ("_sum", "_count")}
    found: dict[str, float] = {}
    for line in text.splitlines():
        match = _LINE.match(line)
        if match and match["name"] in wanted:
            try:
                found[match["name"]] = found.get(match["name"], 0.0) + float(match["value"])
            except ValueError:
                continue
    return found


def run_means(before: dict[str, float], after: dict[str, float]) -> dict[str, float | None]:
    """The run's mean of each histogram, in milliseconds (None: no request of the run)."""
    means: dict[str, float | None] = {}
    for name in HISTOGRAMS:
        count = after.get(f"{name}_count", 0.0) - before.get(f"{name}_count", 0.0)
        total = after.get(f"{name}_sum", 0.0) - before.get(f"{name}_sum", 0.0)
        short = name.removeprefix("vllm:").removesuffix("_seconds")
        means[short] = round(1e3 * total / count, 4) if count > 0 else None
    return means
