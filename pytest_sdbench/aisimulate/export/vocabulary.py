"""The consumer's vocabulary: AISimulate's names, schema versions, files and identity
columns, written here once and checked against the consumer's own code by
tests/consumer/test_aisimulate_import.py; and the two ways an export is refused.
scripts/consumer-test.sh reads CONSUMER_VERSION from this file."""

from __future__ import annotations

from collections.abc import Sequence

from ... import __version__
from ...wire.contract import (
    GRAPH_EAGER,
    GRAPH_FULL,
    GRAPH_PIECEWISE,
    KV_SEED_NONE,
    KV_SEED_REAL,
    PACKAGE_NAME,
    PHASE_DECODE,
)

# --- The consumer's vocabulary (aisimulate 0.13.0.dev202610270000000085) -------------------
CONSUMER = "aisimulate"
CONSUMER_VERSION = "0.13.0.dev202610270000000085"
ENVELOPE_SCHEMA_VERSION = 2                         # aisimulate.fpm_contract
PROVENANCE_SCHEMA = ("aic_fpm_collector_provenance", 1)
PROVENANCE_FILE = "collector-provenance.json"
ENVELOPE_FILE = "benchmark.json"                    # matches FPM_BENCHMARK_RESULT_GLOB
TABLE_SCHEMA = ("aic_fpm_forward_perf", 7)
TABLE_FILE, TABLE_METADATA_FILE = "fpm_forward_perf.parquet", "fpm_forward_perf.metadata.json"
TABLE_COORDINATES = "iteration_totals_balanced_v1"
# The Rust loader binds a speculative-round identity to this policy and scope, and both to
# single-sample rows; the collector's own table (dynamo_native_single_sample_v1) is refused.
TABLE_POLICY = "vllm_native_fpm_model_step_cuda_v1"
TIMING_SCOPE = "model_step_cuda"
REDUCTION = "single_sample"
EXECUTION_COLUMNS = ("model_config_sha256", "execution_profile", "engram_residency",
                     "input_modality")
SELECTOR_PREFIX = "speculative_round_v1:"
# The consumer's autoregressive (legacy) identity: its execution_profile column reads "full".
# Written for a K>0 profile it is imported silently and loads at nextn=0; never written here.
AUTOREGRESSIVE_EXECUTION_PROFILE = "full"
# The backend identity columns: the attention backend the engine resolved (identity
# .attention_backend) where the artifact has it, else the consumer's "auto" (engine decided).
AUTO_BACKEND = "auto"


def backend_columns(attention_backend: str) -> dict[str, object]:
    return {"moe_backend": AUTO_BACKEND, "attention_backend": attention_backend,
            "enable_wideep": False, "enable_eplb": False}
POINT_SOURCE = "dynamo_native_self_benchmark"


def topology(tp: int) -> dict[str, int]:
    """The consumer's topology of a dense engine of tensor-parallel size tp: its plain "tp"
    preset (data, pipeline and context parallel 1, no expert axes)."""
    return {"tp": tp, "pp": 1, "dp": 1, "moe_tp": 1, "moe_ep": 1, "cp": 1}


def parallel_strategy(tp: int) -> str:
    """The consumer's topology_strategy of a dense topology."""
    return "single" if tp == 1 else "tp"
PARTITION_POLICY = "balanced_v1"
# Dynamo's names of CUDA-graph modes and of KV seeding (point-injection stamps).
GRAPH_MODE_NAME = {GRAPH_EAGER: "NONE", GRAPH_PIECEWISE: "PIECEWISE", GRAPH_FULL: "FULL"}
ROW_SEED_REGIME = {KV_SEED_NONE: "not_applicable", KV_SEED_REAL: "real_prefix"}
SEED_STAMP = {KV_SEED_REAL: "prefill_real_seed", PHASE_DECODE: "kvwarm_real_kv"}
DECODE_SEED_REGIME = "real_kv"
TABLE_SEED_REGIME = {True: "real_kv", False: "n/a"}   # by "the row reads cached KV"
# The consumer's precision names for an unquantized bfloat16 checkpoint (its capability
# rules: gemm = moe = fmha = the checkpoint dtype, collectives in half, fmha resolution
# checkpoint_native), and its KV cache dtype for vLLM's cache_dtype values mapped here.
PRECISION_DTYPES = ("bfloat16",)
KV_CACHE_DTYPE = {"auto": None, "bfloat16": "bfloat16"}   # None: the model's dtype (vLLM "auto")
COMM_QUANT_MODE = "half"
FMHA_RESOLUTION = "checkpoint_native"
MOE_CONFIG_KEYS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")
# vLLM releases the consumer's packaged h200_sxm data does not list (0.26.0 among them)
# load only with this variable set; the manifest names it.
CONSUMER_ENVIRONMENT = {"AIC_ALLOW_UNLISTED_VERSIONS": "1"}

AIC_REVISION = f"{PACKAGE_NAME} {__version__} export"   # the collector source of a plan/table
MANIFEST_KIND = "pytest-sdbench/aisimulate-export"
MANIFEST_VERSION = 1
MANIFEST_FILE, PROFILE_FILE = "import-manifest.json", "fpm_profile.json"
PREDICT_FILE = "predict.json"   # a consumer predict config (JSON is YAML) for the export
REPEATABILITY_FILE = "repeatability.json"
SYSTEM_PATTERN = r"^[a-z0-9][a-z0-9_.-]*$"   # a consumer systems/<name>.yaml, path-safe


class Refused(Exception):
    """The consumer cannot take this artifact truthfully; every reason names a field."""

    def __init__(self, reasons: Sequence[str]):
        self.reasons = list(reasons)
        super().__init__("; ".join(self.reasons))


class UnusableInput(ValueError):
    """The input is no artifact, or an option's value cannot be used."""

