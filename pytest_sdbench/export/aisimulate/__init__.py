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
options, selecting, checks, deployment, identity, envelopes, table, profile, manifest,
exporting. Here: the names the rest of the project and its tests import.
"""

from .checks import _mode_crossings
from .exporting import export_artifact
from .facts import FACTS, USER_FACT_NAMES, check_user_value, parse_graph_mode, parse_user_fact
from .identity import assert_speculative, cell_id, execution_profile, speculative_identity
from .options import Exported, ExportOptions, KnownConfig
from .selecting import Selected, export_name
from .vocabulary import (
    CONSUMER,
    CONSUMER_ENVIRONMENT,
    CONSUMER_VERSION,
    ENVELOPE_FILE,
    MANIFEST_FILE,
    PREDICT_FILE,
    PROFILE_FILE,
    PROVENANCE_FILE,
    SELECTOR_PREFIX,
    SYSTEM_PATTERN,
    TABLE_POLICY,
    Refused,
    UnusableInput,
    parallel_strategy,
    topology,
)

__all__ = [
    "CONSUMER", "CONSUMER_ENVIRONMENT", "CONSUMER_VERSION", "ENVELOPE_FILE", "FACTS",
    "MANIFEST_FILE", "PREDICT_FILE", "PROFILE_FILE", "PROVENANCE_FILE", "SELECTOR_PREFIX",
    "SYSTEM_PATTERN", "TABLE_POLICY", "USER_FACT_NAMES", "ExportOptions", "Exported",
    "KnownConfig", "Refused", "Selected", "UnusableInput", "_mode_crossings",
    "assert_speculative", "cell_id", "check_user_value", "execution_profile", "export_artifact",
    "export_name", "parallel_strategy", "parse_graph_mode", "parse_user_fact",
    "speculative_identity", "topology",
]
