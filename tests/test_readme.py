"""What the docs state of the code, read from the code: the schema version it writes and the
legacy versions it reads (docs/artifact.md, where the README's "The artifact" moved), and the
sdbench_collect fixture's signature (the README's fixtures at a glance, and docs/options.md)."""

import inspect
import re
from pathlib import Path

import pytest

from pytest_sdbench.plugin.session import SdbenchCollect
from pytest_sdbench.wire.contract import LEGACY_SCHEMA_VERSIONS, SCHEMA_VERSION

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
ARTIFACT_DOC = (ROOT / "docs" / "artifact.md").read_text()


def test_the_schema_version_and_the_legacy_versions_are_the_codes():
    (stated,) = re.findall(r"Schema version (\d+), published as", ARTIFACT_DOC)
    assert int(stated) == SCHEMA_VERSION
    (older,) = re.findall(r"Older artifacts \(([^)]*)\) are read", ARTIFACT_DOC, flags=re.S)
    assert [int(v) for v in re.findall(r"\bv(\d+)\b", older)] == sorted(LEGACY_SCHEMA_VERSIONS)


@pytest.mark.parametrize("doc", ["README.md", "docs/options.md"])
def test_the_collect_fixtures_signature_is_the_codes(doc):
    collect = SdbenchCollect(None, None, None)   # builds, runs nothing
    params = ", ".join(p.name if p.default is inspect.Parameter.empty else
                       f"{p.name}={p.default!r}"
                       for p in inspect.signature(collect).parameters.values())
    assert f"| `sdbench_collect` | `collect({params}) -> CollectionRun`" in (ROOT / doc).read_text()


def test_every_pytest_option_is_in_the_readme_and_in_docs_options():
    """The README's options at a glance and docs/options.md's table name every option of the
    plugin (one option table renders both parsers: pytest_sdbench/run/options.py)."""
    from pytest_sdbench.run.options import add_pytest_options
    names: list[str] = []

    class Group:
        def addoption(self, *option_names, **kwargs):
            names.extend(option_names)

    add_pytest_options(Group())
    options_doc = (ROOT / "docs" / "options.md").read_text()
    for doc, text in (("README.md", README), ("docs/options.md", options_doc)):
        rows = "\n".join(line for line in text.splitlines() if line.startswith("| `--sdbench-"))
        missing = [n for n in names if not re.search(re.escape(n) + r"[ =`]", rows)]
        assert not missing, f"{doc}'s options table lacks {missing}"
