"""The layers hold: the wire format imports nothing above it, the validator pulls in no
engine, observer or collector and no vLLM, torch or jsonschema, and `sdbench validate`
runs in a Python environment where none of the third-party packages is installed; every
name has one import path (no package __init__ re-exports, no `import *`)."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import pytest_sdbench

from . import forge

# The package under test, wherever it is imported from: the checkout, or the installed wheel
# (CI's wheel step runs a copy of these tests against it).
PACKAGE = Path(pytest_sdbench.__file__).resolve().parent
ROOT = PACKAGE.parent   # the folder that holds the package: on the bare venv's path below
WIRE = PACKAGE / "wire"
THIRD_PARTY = ("vllm", "torch", "jsonschema", "hypothesis", "numpy", "pytest")
ABOVE_THE_VALIDATOR = ("pytest_sdbench.engine", "pytest_sdbench.observer",
                       "pytest_sdbench.measure.collector", "pytest_sdbench.run.collect",
                       "pytest_sdbench.plugin", "pytest_sdbench.engine.host")


def _imports(path: Path):
    """(module, level) of every import in a file, wherever it is (functions included)."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, 0
        elif isinstance(node, ast.ImportFrom):
            yield node.module or "", node.level


@pytest.mark.parametrize("path", sorted(WIRE.glob("*.py")), ids=lambda p: p.name)
def test_wire_imports_nothing_above_it(path):
    for module, level in _imports(path):
        where = f"{path.name} imports {'.' * level}{module}"
        assert level <= 1, f"{where}: above pytest_sdbench.wire"
        if level == 0:
            top = module.split(".")[0]
            assert top in sys.stdlib_module_names, f"{where}: not the standard library"


def _modules_after(statement: str) -> set[str]:
    code = f"import sys; {statement}; print('\\n'.join(sorted(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            cwd=ROOT, timeout=120, check=True)
    return set(result.stdout.split())


@pytest.mark.parametrize("statement", [
    "import pytest_sdbench.artifact.validate",
    "from pytest_sdbench.artifact import validate_path",
    "from pytest_sdbench.artifact.store import read_json",
    "import pytest_sdbench.wire.model, pytest_sdbench.wire.shape",
])
def test_the_validator_pulls_in_no_engine(statement):
    loaded = _modules_after(statement)
    banned = [m for m in loaded if m.split(".")[0] in THIRD_PARTY
              or m.startswith(ABOVE_THE_VALIDATOR)]
    assert not banned, f"{statement} loads {banned}"


def test_sdbench_validate_runs_without_vllm(tmp_path):
    """A venv of the bare interpreter (no pip, no site-packages of the project's
    environment), the checkout on its path through a .pth file: vLLM, torch, jsonschema and
    pytest are absent there, and `sdbench validate` still gives its verdicts."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    venv = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    python = venv / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; "
                           "print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    (Path(site) / "sdbench-checkout.pth").write_text(str(ROOT) + "\n")
    probe = subprocess.run([str(python), "-c", "import importlib.util as u; print([m for m in "
                            f"{list(THIRD_PARTY)!r} if u.find_spec(m)])"],
                           capture_output=True, text=True, check=True, cwd=tmp_path, env=env)
    assert probe.stdout.strip() == "[]", f"the bare venv has {probe.stdout}"
    broken = forge.load("cpu-v4")
    broken["decode"][0]["timing"]["source"] = "cuda_event"
    (tmp_path / "broken.json").write_text(json.dumps(broken))
    (tmp_path / "deep.json").write_text("[" * 10_000 + "]" * 10_000)
    for path, code, verdict in ((forge.BASES["cpu-v4"], 0, "VALID "),
                                (forge.BASES["h200-graph-v3"], 0, "VALID "),
                                (tmp_path / "broken.json", 1, "INVALID "),
                                (tmp_path / "deep.json", 2, "UNUSABLE ")):
        result = subprocess.run([str(python), "-m", "pytest_sdbench.cli", "validate", str(path)],
                                capture_output=True, text=True, cwd=tmp_path, env=env,
                                timeout=120)
        assert result.returncode == code, result.stdout + result.stderr
        assert result.stdout.startswith(verdict), result.stdout
        assert not result.stderr, result.stderr


# ---- the package's floors: what engine/ may import, no circles, no oversized module ------
ABOVE_THE_ENGINE = ("measure", "run", "plugin", "cli", "commands", "fidelity", "aisimulate",
                    "readers", "artifact", "grid")
LONGEST_MODULE = 400   # lines: a module past it is split along its sections


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _package_imports(path: Path) -> set[str]:
    """The package's modules a file imports (functions included), as dotted names: an
    import of a package names its __init__, `from X import name` names X.name when that is a
    module of the package."""
    here = _module_name(path).split(".")
    if path.name != "__init__.py":
        here = here[:-1]
    modules = {_module_name(p) for p in PACKAGE.rglob("*.py")}
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(here[:len(here) - node.level + 1] + ([base] if base else []))
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                     for alias in node.names]
        else:
            continue
        found.update(n for n in names if n in modules)
    return found


def _import_graph() -> dict[str, set[str]]:
    return {_module_name(p): _package_imports(p) for p in PACKAGE.rglob("*.py")}


def test_engine_imports_nothing_above_it():
    above = tuple(f"pytest_sdbench.{name}" for name in ABOVE_THE_ENGINE)
    graph = _import_graph()
    wrong = sorted(f"{module} imports {target}" for module, targets in graph.items()
                   if module.startswith("pytest_sdbench.engine") for target in targets
                   if target == above or target.startswith(above))
    assert not wrong, "; ".join(wrong)


# The consumer's wing (AISimulate) and the core that collects and checks a profile: the core
# imports nothing from the wing; `--grid aisimulate` reaches it as a plain grid.
CONSUMER_WING = "pytest_sdbench.aisimulate"
CORE = ("grid", "engine", "measure", "artifact", "wire", "run.collect")


def test_the_core_imports_nothing_from_the_consumer_wing():
    graph = _import_graph()
    core = tuple(f"pytest_sdbench.{name}" for name in CORE)
    wrong = sorted(f"{module} imports {target}" for module, targets in graph.items()
                   if module == core or module.startswith(core) for target in targets
                   if target == CONSUMER_WING or target.startswith(CONSUMER_WING + "."))
    assert not wrong, "; ".join(wrong)
    assert CONSUMER_WING in graph, "the wing moved: name it here"


def test_everything_that_knows_the_consumer_lives_in_its_wing():
    """Outside the wing, no module's name says it is the consumer's (consumer*.py, an
    aisimulate folder): a consumer version bump touches one folder."""
    outside = sorted(str(p.relative_to(ROOT)) for p in PACKAGE.rglob("*.py")
                     if not _module_name(p).startswith(CONSUMER_WING)
                     and ("consumer" in p.stem or "aisimulate" in p.parts))
    assert not outside, ", ".join(outside)


# The emulation (`sdbench emulate`, issue 54): the floor above fidelity. It imports the
# floors below it (and the package's root, for where it lives); below it, nothing imports it.
EMULATION = "pytest_sdbench.emulate"
BELOW_THE_EMULATION = ("wire", "artifact", "engine", "run", "fidelity")
ABOVE_THE_EMULATION = ("pytest_sdbench.cli", "pytest_sdbench.plugin")


def test_the_emulation_is_the_floor_above_fidelity():
    graph = _import_graph()
    below = tuple(f"pytest_sdbench.{name}" for name in BELOW_THE_EMULATION)
    inside = [f"{module} imports {target}" for module, targets in graph.items()
              if module == EMULATION or module.startswith(EMULATION + ".")
              for target in targets
              if target not in ("pytest_sdbench", EMULATION)
              and not target.startswith((*below, EMULATION + "."))]
    assert not inside, "; ".join(sorted(inside))
    outside = [f"{module} imports {target}" for module, targets in graph.items()
               if not module.startswith((EMULATION, *ABOVE_THE_EMULATION))
               for target in targets if target.startswith(EMULATION)]
    assert not outside, "; ".join(sorted(outside))
    assert EMULATION in graph, "the emulation moved: name it here"


PLUGIN_LINES = 200   # plugin/__init__.py: options, hooks, fixtures; the state: plugin/session.py


def test_the_plugin_is_wiring():
    lines = len((PACKAGE / "plugin" / "__init__.py").read_text().splitlines())
    assert lines <= PLUGIN_LINES, f"plugin/__init__.py is {lines} lines, over {PLUGIN_LINES}"


def test_no_two_modules_import_each_other():
    """A package's __init__ that re-exports its own submodules is no circle with them."""
    graph = _import_graph()
    pairs = sorted({tuple(sorted((a, b))) for a, targets in graph.items() for b in targets
                    if a != b and a in graph.get(b, ())
                    and not (b.startswith(a + ".") or a.startswith(b + "."))})
    assert not pairs, "; ".join(f"{a} <-> {b}" for a, b in pairs)


def test_no_module_is_longer_than_the_limit():
    long = sorted(f"{p.relative_to(ROOT)} ({n} lines)" for p in PACKAGE.rglob("*.py")
                  if (n := len(p.read_text().splitlines())) > LONGEST_MODULE)
    assert not long, f"over {LONGEST_MODULE} lines, split along its sections: {', '.join(long)}"


# ---- one import path per name: a package's __init__ re-exports nothing -------------------
def _reexports(path: Path) -> list[str]:
    """The names an __init__ imports from another module of the package and never uses
    itself (a submodule imported through its package is a module, not a re-export)."""
    tree = ast.parse(path.read_text(), str(path))
    here = _module_name(path).split(".")
    modules = {_module_name(p) for p in PACKAGE.rglob("*.py")}
    used = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        base = node.module or ""
        if node.level:
            base = ".".join(here[:len(here) - node.level + 1] + ([base] if base else []))
        if base.split(".")[0] != PACKAGE.name:
            continue
        found.extend(f"{alias.asname or alias.name} (from {base})" for alias in node.names
                     if f"{base}.{alias.name}" not in modules
                     and (alias.asname or alias.name) not in used)
    return found


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("__init__.py")),
                         ids=lambda p: str(p.relative_to(PACKAGE)))
def test_a_package_init_reexports_nothing(path):
    """Each name is imported from the module that defines it: an __init__ that imports a
    name only to hand it on gives the name a second import path."""
    reexported = _reexports(path)
    assert not reexported, f"{path.relative_to(ROOT)} re-exports {', '.join(reexported)}"


def test_no_module_imports_star():
    starred = sorted(f"{p.relative_to(ROOT)}: from {'.' * node.level}{node.module or ''} import *"
                     for p in PACKAGE.rglob("*.py")
                     for node in ast.walk(ast.parse(p.read_text(), str(p)))
                     if isinstance(node, ast.ImportFrom)
                     and any(alias.name == "*" for alias in node.names))
    assert not starred, "; ".join(starred)


# ---- the tracked tree travels with every GPU call: it stays light --------------------------
CHECKOUT = Path(__file__).resolve().parents[1]
# large evidence is committed xz (docs/evidence/README.md); a 49 MiB wheelhouse part
# (51,380,224 bytes, docs/gpu.md) and the tree fit one device call (64 MiB; counted in
# 64,000,000 bytes, a margin kept for blocks). The largest file is the plan-grade profile
# (xz, 1.6 MB).
TRACKED_TREE_BYTES = 9_000_000


@pytest.mark.skipif(not (CHECKOUT / ".git").exists(), reason="not a git checkout (the wheel "
                    "step runs a copy of the tests)")
def test_the_tracked_tree_stays_under_its_budget():
    """`git ls-files -z | xargs -0 du -cb | tail -1`, in Python: the tracked files' bytes."""
    listed = subprocess.run(["git", "ls-files", "-z"], capture_output=True, check=True,
                            cwd=CHECKOUT, timeout=60).stdout.split(b"\0")
    sizes = {name.decode(): (CHECKOUT / name.decode()).stat().st_size for name in listed
             if name and (CHECKOUT / name.decode()).is_file()}
    total = sum(sizes.values())
    largest = ", ".join(f"{n} ({s})" for n, s in sorted(sizes.items(), key=lambda i: -i[1])[:5])
    assert total <= TRACKED_TREE_BYTES, (f"the tracked tree is {total} bytes, over "
                                         f"{TRACKED_TREE_BYTES}; largest: {largest}")
