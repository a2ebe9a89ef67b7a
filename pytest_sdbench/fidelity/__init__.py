"""`sdbench fidelity`: does the profile predict a serving run it never saw? A held-out
serving run on an engine configured as the profile's, every real step observed natively and
priced by the profile (our interpolation, and AISimulate's own loader), every request's
latencies beside `aisimulate predict`'s, in one report folder.

    workload.py         the seeded workload (arrivals, lengths); coverage.py: the default
    serve.py            the engine driven step by step, observed      (the engine)
    serving_records.py  the runs as recorded                          pure
    predict.py          our interpolation rule (RULE, Interpolator)   pure
    predict_phases.py   its prefill and decode steps; predict_mixed.py: its mixed steps
    (the engine rebuilt from the profile: pytest_sdbench.run.profile; AISimulate's
    predictions, in its environment: pytest_sdbench.aisimulate.fidelity)
    report.py           the figures;  report_text.py: Markdown, CSV;  plots.py: the PNGs
    run.py              measure / save / report into one folder;  command.py: the CLI

`sdbench serve` (vLLM's own server and client): serve_command.py (the CLI), served.py (the
run), served_settings.py (options, flags, command lines), bench_client.py (`vllm bench
serve`'s own code, every run in one process); `sdbench fidelity --served`:
served_compare.py, served_steps.py, served_windows.py. `sdbench crosscheck`: crosscheck.py.
"""
