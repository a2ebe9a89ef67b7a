"""`sdbench fidelity`: does the profile predict a serving run it never saw? A held-out
serving run on an engine configured as the profile's, every real step observed natively and
priced by the profile (our interpolation, and AISimulate's own loader), every request's
latencies beside `aisimulate predict`'s, in one report folder.

    workload.py   the seeded workload (arrivals, lengths)      pure
    match.py      the engine rebuilt from the profile, checked  (no vLLM import)
    serve.py      the engine driven step by step, observed      (the engine)
    records.py    the runs as recorded                          pure
    predict.py    our interpolation rule                        pure
    (AISimulate's predictions, in its environment: pytest_sdbench.aisimulate.fidelity)
    report.py     figures, Markdown, CSV;  plots.py: the PNGs
    run.py        measure / save / report into one folder;  command.py: the CLI
"""
