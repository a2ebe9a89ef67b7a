"""Export an artifact into what AISimulate (aisimulate==0.13.0.dev202610270000000085) reads:
the per-phase native rank envelopes (Dynamo's schema_version 2) with their collector
provenance sidecar, the checkpoint configs, the FpmModelProfile with a speculative
execution profile, and the speculative FPM table (parquet and its commit record) that the
consumer's Rust loader takes at nextn=K. docs/export.md holds the field mapping and every
refusal; a refusal names the field and the value.

This package reads artifacts through pytest_sdbench.artifact and the wire types only: it
imports no vLLM and no AISimulate. The consumer's vocabulary (vocabulary.py) is written there
once and checked against the consumer's own code by tests/consumer/test_aisimulate_import.py.
Only the parquet writer needs pyarrow (the `export` extra), imported when a table is written.

One module per step, each importing only those above it in this list: vocabulary, facts,
options, selecting, checks, deployment, round_identity, envelopes, table, fpm_profile,
manifest, exporting. Each name is imported from the module that defines it; this file
re-exports none.
"""
