"""The speculative FPM table (parquet, through the optional pyarrow) and its commit
record; write_json, the writer of every JSON file of an export."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path

from ...wire.contract import PHASE_DECODE
from ...wire.model import Artifact
from .envelopes import RowIdentity, row_labels
from .round_identity import assert_speculative
from .selecting import Selected, coordinates
from .vocabulary import (
    EXECUTION_COLUMNS,
    FMHA_RESOLUTION,
    PARTITION_POLICY,
    REDUCTION,
    TABLE_FILE,
    TABLE_METADATA_FILE,
    TABLE_POLICY,
    TABLE_SEED_REGIME,
    TIMING_SCOPE,
    backend_columns,
    parallel_strategy,
    topology,
)

# --- The speculative FPM table --------------------------------------------------------------

def table_rows(a: Artifact, selected: Mapping[str, list[Selected]], *, identity: RowIdentity,
               cells: Mapping[str, str], run: Mapping[str, str]) -> list[dict]:
    """One row per point: the selected observation's time in ms at its coordinate, under the
    speculative identity, labelled single_sample / model_step_cuda."""
    k = a.speculative.draft_depth
    assert_speculative(identity.execution, k)
    rows = []
    for phase, chosen in selected.items():
        for item in chosen:
            obs = item.observation
            batch, new, kv = coordinates(phase, obs)
            rows.append({
                "cell_id": cells[phase], "model_path": identity.model_path,
                "system": identity.system, "backend": "vllm",
                "backend_version": identity.version,
                "runtime_backend_version": identity.version,
                "weight_quantization": identity.precision["gemm_quant_mode"],
                **identity.precision, "fmha_resolution": FMHA_RESOLUTION,
                "parallel_strategy": parallel_strategy(identity.tp),
                **topology(identity.tp), **backend_columns(identity.attention_backend),
                **dict(zip(EXECUTION_COLUMNS, identity.execution, strict=True)),
                "workload_kind": phase, "batch_size": batch, "total_prefill_tokens": new,
                "total_kv_read_tokens": kv, "partition_policy": PARTITION_POLICY,
                "kv_seed_regime": TABLE_SEED_REGIME[phase == PHASE_DECODE or kv > 0],
                "latency_ms": obs.timing.seconds * 1000.0,
                # the unbooked passes before this step; the row is one observation (the
                # median of the point's repeats: sdbench_repeats, sdbench_selection), so
                # the consumer's repeats and sample count of this row are 1
                "warmup_repeats": obs.warmup_passes,
                "measurement_repeats": 1,
                "measurement_policy": TABLE_POLICY, "timing_scope": TIMING_SCOPE,
                "measurement_reduction": REDUCTION, "source_sample_count": 1,
                **run, **row_labels(phase, item, k),
            })
    key = ("cell_id", "batch_size", "total_prefill_tokens", "total_kv_read_tokens")
    return sorted(rows, key=lambda r: tuple(r[name] for name in key))


def write_table(rows: list[dict], dest: Path, metadata: dict) -> dict:
    import importlib
    pa = importlib.import_module("pyarrow")       # the `export` extra, optional
    pq = importlib.import_module("pyarrow.parquet")
    dest.mkdir(parents=True, exist_ok=True)
    parquet = dest / TABLE_FILE
    pq.write_table(pa.Table.from_pylist(rows), parquet, compression="zstd")
    metadata = {**metadata, "row_count": len(rows),
                "parquet_sha256": hashlib.sha256(parquet.read_bytes()).hexdigest()}
    write_json(dest / TABLE_METADATA_FILE, metadata, sort_keys=True)
    return metadata


def pyarrow_missing() -> bool:
    import importlib.util
    return importlib.util.find_spec("pyarrow") is None


def write_json(path: Path, data: object, sort_keys: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, sort_keys=sort_keys) + "\n")

