"""The oracle suite runs on whatever device the engine runs on: the real vLLM CPU engine in
CI, the H200 for the GPU gate (`pytest --sdbench-mode=agg oracle_tests/`)."""
