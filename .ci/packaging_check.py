"""The installed package, as .ci/run's wheel step installed it (python packaging_check.py
CHECKOUT VENV, run in the venv, outside the checkout): imported from the venv and not the
checkout, `sdbench` on PATH, both entry points, the package data, the `python -m` modules,
no test suites shipped, and pytest loading the plugin. One line per problem; exit 1 if any."""

from __future__ import annotations

import importlib.metadata as md
import importlib.util
import json
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest_sdbench
from pytest_sdbench.artifact import schema


def problems(checkout: Path, venv: Path) -> list[str]:
    found = []

    def check(ok: object, what: str) -> None:
        if not ok:
            found.append(what)

    site = Path(sysconfig.get_paths()["purelib"]).resolve()
    package = Path(pytest_sdbench.__file__).resolve().parent
    check(package.parent == site, f"pytest_sdbench imported from {package}, not from {site}")
    dist = md.distribution("pytest-sdbench")
    check(Path(str(dist.locate_file(""))).resolve() == site,
          f"pytest-sdbench's metadata found in {dist.locate_file('')}, not in {site}")
    check(not any(Path(p or ".").resolve() == checkout for p in sys.path),
          f"the checkout is on sys.path: {sys.path}")
    script = shutil.which("sdbench")
    check(script is not None and Path(script).parent.resolve() == (venv / "bin").resolve(),
          f"`sdbench` on PATH is {script}, not the venv's")
    scripts = md.entry_points(group="console_scripts", name="sdbench")
    check([e.value for e in scripts] == ["pytest_sdbench.cli:console_main"],
          f"console script sdbench: {list(scripts)}")
    plugins = md.entry_points(group="pytest11", name="sdbench")
    check([e.value for e in plugins] == ["pytest_sdbench.plugin"],
          f"pytest11 entry point sdbench: {list(plugins)}")
    check((package / "py.typed").is_file(), "py.typed is not installed")
    check(schema.SCHEMA_PATH.is_file() and
          schema.SCHEMA_PATH.resolve() == package / "artifact" / "schema.json",
          f"artifact/schema.json is not installed with the package ({schema.SCHEMA_PATH})")
    check(schema.SCHEMA_PATH.is_file() and schema.load() == json.loads(schema.render()),
          "the installed schema.json is not the one the wire format generates")
    for module in ("pytest_sdbench.run.rank_server", "pytest_sdbench.cli"):  # python -m
        spec = importlib.util.find_spec(module)
        check(spec is not None and spec.origin is not None
              and Path(spec.origin).resolve().is_relative_to(package),
              f"python -m {module} does not find the installed module")
    check(not any(f.parts[0] in ("tests", "oracle_tests", "benchmarks")
                  for f in dist.files or ()), "the wheel ships a test suite or the benchmark")
    collect_help = subprocess.run(["sdbench", "collect", "--help"], capture_output=True,
                                  text=True, check=False)
    check(collect_help.returncode == 0 and "--artifact-dir DIR, --out DIR" in collect_help.stdout,
          f"sdbench collect --help: exit {collect_help.returncode} {collect_help.stderr[-300:]}")
    pytest_help = subprocess.run([sys.executable, "-m", "pytest", "--help"],
                                 capture_output=True, text=True, check=False)
    check("--sdbench-artifact-dir" in pytest_help.stdout, "pytest does not load the plugin")
    return found


def main() -> int:
    checkout, venv = (Path(p).resolve() for p in sys.argv[1:3])
    found = problems(checkout, venv)
    for problem in found:
        print(f".ci/run: packaging: {problem}", file=sys.stderr)
    if not found:
        print(f".ci/run: packaging checked: pytest-sdbench {md.version('pytest-sdbench')} "
              f"from {Path(pytest_sdbench.__file__).parent}, sdbench at "
              f"{shutil.which('sdbench')}, pytest11 and package data present")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
