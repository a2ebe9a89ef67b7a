"""What the README states of the code, read from the code: the schema version it writes,
the legacy versions it reads, and the sdbench_collect fixture's signature."""

import inspect
import re
from pathlib import Path

from pytest_sdbench.plugin.session import SdbenchCollect
from pytest_sdbench.wire.contract import LEGACY_SCHEMA_VERSIONS, SCHEMA_VERSION

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def test_the_schema_version_and_the_legacy_versions_are_the_codes():
    (stated,) = re.findall(r"Schema version (\d+), published as", README)
    assert int(stated) == SCHEMA_VERSION
    (older,) = re.findall(r"Older artifacts \(([^)]*)\) are read", README, flags=re.S)
    assert [int(v) for v in re.findall(r"\bv(\d+)\b", older)] == sorted(LEGACY_SCHEMA_VERSIONS)


def test_the_collect_fixtures_signature_is_the_codes():
    collect = SdbenchCollect(None, None, None)   # builds, runs nothing
    params = ", ".join(p.name if p.default is inspect.Parameter.empty else
                       f"{p.name}={p.default!r}"
                       for p in inspect.signature(collect).parameters.values())
    assert f"| `sdbench_collect` | `collect({params}) -> CollectionRun`" in README
