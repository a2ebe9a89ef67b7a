#!/usr/bin/env bash
# The consumer test (tests/consumer): `sdbench export` on the committed artifacts, imported by
# AISimulate's own code. It runs in an environment of its own, because the consumer's wheel
# adds a top-level package named `collector` that must never reach the project's .venv:
#   ./scripts/consumer-test.sh [pytest arguments]
# The environment (.venv-consumer, or $SDBENCH_CONSUMER_VENV) is built once: python3.11, the
# pinned AISimulate wheel --no-deps (about 550 MB with the packages its import needs), pytest
# and this project --no-deps; it is rebuilt when requirements/consumer.txt or the pin changes.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv="${SDBENCH_CONSUMER_VENV:-$root/.venv-consumer}"
stamp="$venv/.sdbench-consumer-env"
pip=(-m pip install -q --disable-pip-version-check)
pin=$(sed -n 's/^CONSUMER_VERSION = "\(.*\)"$/\1/p' "$root/pytest_sdbench/aisimulate/export/vocabulary.py")
want=$(printf '%s\n' "$pin" | cat - "$root/requirements/consumer.txt" "$root/pyproject.toml" \
       | sha256sum | cut -c1-16)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "consumer-test: preparing $venv (aisimulate==$pin --no-deps and its import's packages) ..." >&2
  started=$(date +%s)
  rm -rf "$venv"
  python3.11 -m venv "$venv"
  "$venv/bin/python" "${pip[@]}" -r "$root/requirements/consumer.txt"
  "$venv/bin/python" "${pip[@]}" --no-deps "aisimulate==$pin"
  "$venv/bin/python" "${pip[@]}" --no-deps --no-build-isolation -e "$root"
  echo "$want" > "$stamp"
  echo "consumer-test: environment ready in $(( $(date +%s) - started )) s ($(du -sm "$venv" | cut -f1) MB)" >&2
fi
cd "$root"
# vLLM 0.26.0 is not among the versions the consumer's packaged h200_sxm data lists.
export SDBENCH_CONSUMER_TEST=1 AIC_ALLOW_UNLISTED_VERSIONS=1 PYTHONDONTWRITEBYTECODE=1
exec "$venv/bin/python" -m pytest tests/consumer "$@"
