# ruff: noqa  (kept as it ran, beside the evidence it made)
"""validate-fpm's own verdict (aisimulate/support/validation.py lines 201-224), applied to a
predict output directory: the consumer's _completion_issues on prediction.json, and
fpm-coverage.json status == "covered". Uses the consumer's function, not a copy of it."""
import json, sys
from pathlib import Path
from aisimulate.support.validation import _completion_issues

out, exit_code = Path(sys.argv[1]), int(sys.argv[2])
issues = []
if exit_code != 0:
    issues.append(f"predict exited with status {exit_code}; replay coverage is incomplete")
pred = out / "prediction.json"
if pred.is_file():
    issues.extend(_completion_issues(json.loads(pred.read_text())))
else:
    issues.append("no completed prediction report was produced")
cov_path = out / "fpm-coverage.json"
cov = json.loads(cov_path.read_text()) if cov_path.is_file() else None
if not cov or cov.get("status") != "covered":
    issues.append("native direct-FPM query coverage did not pass; inspect the coverage report for missing coordinates")
status = "covered" if not issues else "incomplete"
print(f"coverage.status={cov and cov.get('status')} queries={cov and cov.get('queries')} "
      f"prefill={cov and cov['roles'][0]['coverage']['prefill']} decode={cov and cov['roles'][0]['coverage']['decode']} "
      f"gaps={cov and cov['roles'][0]['coverage']['gaps']}")
print(f"validate-fpm verdict logic: status={status}; issues={issues}")
