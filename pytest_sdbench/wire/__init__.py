"""The wire format, at the bottom of the package: contract facts (contract), the strict
JSON codec (typed), every serialised dataclass (points, records, identity, model) and the
shape rules (shape). It imports nothing above it, and nothing that runs an engine, so that
the validator and the schema run where vLLM is not installed; tests/test_layers.py keeps it
so. Producers (engine, observer, collector) import it; it never imports them."""
