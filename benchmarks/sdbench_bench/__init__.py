"""Performance and fidelity of pytest-sdbench's native observation, measured in one process
and printed as one table, each figure beside its goal. A benchmark, not a test: with
--gate it exits 1 when a goal is missed (always 2 when a measurement fails).

    python -m benchmarks.sdbench_bench all --preset tiny --rounds 1            # CPU smoke
    python -m benchmarks.sdbench_bench overhead --preset qwen3-0.6b --cuda-graphs \\
        --acceptance-length 2.78 --rounds 12 --gate

Subcommands (each a module of this package; `all` runs them in this order):
  overhead       decode tokens/s with the observer attached vs detached, alternated; the
                 same ratio between identical detached sides (the noise floor); the host
                 time the observer adds a step, from probes beneath and above it (median
                 over rounds, each round's figure, the split by wrapped method); the
                 start-up probe (pytest_sdbench.measure.observer_cost.measure) on the same engine;
                 on CUDA the syncs added a step (as `syncs`)
  breakdown      the observer's wrappers replayed hot on captured real steps, split by
                 part (replay.py); cProfile of the observer's functions over attached runs;
                 on CUDA the event calls timed bare
  ablation       observer variants (no window, host timer, no dispatch wrapper, GC off),
                 host time split by engine method
  syncs          host-device synchronisations added a step, with the observer recording
                 (torch's sync debug mode; CUDA only)
  fidelity       per decode point, native step time vs a torch.profiler trace's interval,
                 the kernel span alone, and scheduler wall time (trace.py parses the trace)
  repeatability  one grid collected twice, back to back or on two independent engine starts
                 (--starts 2), both artifacts written (--out): per-point agreement of the
                 medians, CV of the repeats (--repeats), and the share of points the
                 consumer's policy imports
  cost           wall time and duty cycle of those two collections; --suite CMD times a
                 test-suite command
The goals are data, in goals.py.
"""
