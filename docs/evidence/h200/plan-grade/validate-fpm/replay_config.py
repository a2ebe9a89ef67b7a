# ruff: noqa  (kept as it ran, beside the evidence it made)
"""validate-fpm's replay config, applied to the export's predict.json instead of a plan's
predict/pilot.yaml (which `onboard plan` refuses to write for a speculative-round profile).

Exactly the edits of aisimulate/support/validation.py _prediction_config (lines 66-84):
traffic = the Weka trace, trace_timestamps, one agentic lane, absolute nested timestamps;
evaluation = {}; timing: fpm_interpolation, fallback deny, method direct,
collect_coverage True. The one thing NOT applied is its check at line 77
(engine.speculation must be None): the export's engine keeps nextn=3 and nextn_accepted,
because the profile's rows are speculative rounds (K=3) and the consumer's native code
requires nextn == num_draft_tokens for such a profile.

The export's predict.json sets the timing keys on the engine (estimation_mode,
fallback_policy, estimator_config); they are set there, where that config has them.

usage: python replay_config.py EXPORT/predict.json TRACE.json OUT.yaml
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

from aisimulate.config import CorePredictionConfig


def main(predict: str, trace: str, out: str) -> None:
    prediction = json.loads(Path(predict).read_text())
    prediction["traffic"] = {
        "source": {"type": "trace", "paths": [str(Path(trace).resolve())], "format": "weka",
                   "nested_timestamp_basis": "absolute"},
        "load": {"type": "trace_timestamps", "agentic_lanes": 1},
    }
    prediction["evaluation"] = {}
    engine = prediction["engine"]
    assert engine["mode"] == "aggregated"
    engine["estimation_mode"] = "fpm_interpolation"
    engine["fallback_policy"] = "deny"
    engine.setdefault("estimator_config", {}).setdefault("fpm_interpolation", {}).update(
        method="direct", collect_coverage=True)
    CorePredictionConfig.model_validate(prediction)
    Path(out).write_text(yaml.safe_dump(prediction, sort_keys=False))
    print(f"{out}: nextn={engine.get('nextn')} nextn_accepted={engine.get('nextn_accepted')} "
          f"speculation={engine.get('speculation')}")


if __name__ == "__main__":
    main(*sys.argv[1:4])
