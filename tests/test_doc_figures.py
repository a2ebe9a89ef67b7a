"""The figures the docs state, read from the evidence files they cite (issue 55, item 8): the
plan-grade efficiency and what it is against, the observer's cost on the H200, the time a
plan-grade collection takes, the GPU gate's last results, the scripts the docs run, the
production profiles named as legacy wherever the docs or the consumer tests use them, and the
layout's floors. Pure file reading: no engine, no GPU."""

from __future__ import annotations

import ast
import json
import lzma
import re
from pathlib import Path

import pytest

from pytest_sdbench.wire.contract import LEGACY_SCHEMA_VERSIONS, POLICY_STEADY_STEP

ROOT = Path(__file__).resolve().parents[1]
EVIDENCE = ROOT / "docs" / "evidence"
H200 = EVIDENCE / "h200"
PLAN_GRADE = H200 / "plan-grade"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _text(path: Path) -> str:
    data = path.read_bytes()
    return (lzma.decompress(data) if path.suffix == ".xz" else data).decode()


def _flat(text: str) -> str:
    """The text with every run of whitespace one space, markdown's emphasis dropped: a
    statement reads the same however the doc wraps it."""
    return re.sub(r"\s+", " ", text.replace("**", ""))


def _section(text: str, heading: str) -> str:
    """The body of the `## heading...` section (up to the next heading of that level)."""
    match = re.search(rf"^## {re.escape(heading)}.*?$(.*?)(?=^## |\Z)", text, flags=re.M | re.S)
    assert match, f"no section '## {heading}'"
    return match.group(1)


def _time_line(text: str) -> tuple[float, float, float]:
    """(collection s, retained steps s, wall : retained) of the one `time:` line in text."""
    ((collection, retained, ratio),) = re.findall(
        r"time: collection ([\d.]+) s, retained steps ([\d.]+) s \(wall : retained steps = "
        r"([\d.]+)\)", text)
    return float(collection), float(retained), float(ratio)


# ---- the plan-grade efficiency: against what it says -----------------------------------

def test_the_plan_grade_efficiency_states_what_it_is_against():
    """The sixth try's efficiency (wall : retained steps) against the first try's (2026-12-04)
    and against the 1-round planning profile of 2026-12-02: each ratio from the `time:`
    lines and the table the plan-grade README quotes (its logs are in git only)."""
    readme = (PLAN_GRADE / "README.md").read_text()
    sixth = _section(readme, "Sixth try")
    collection, retained, stated_ratio = _time_line(sixth)
    first_collection, first_retained, _ = _time_line(_section(readme, "First try"))
    (row,) = re.findall(r"^\| wall : retained steps \| ([\d.]+) : ([\d.]+) = \*\*([\d.]+)\*\* "
                        r"\|[^|]*\| ([\d.]+) : ([\d.]+) = ([\d.]+) \|$",
                        _section(readme, "Where the time went"), flags=re.M)
    first = (float(row[0]), float(row[1]), float(row[2]))
    one_round = (float(row[3]), float(row[4]), float(row[5]))
    assert first[0] == first_collection
    assert abs(first[1] - first_retained) < 0.06    # the table's 181.6 is 181.65 cut
    assert f"{first[0] / first[1]:.2f}" == row[2]
    assert f"{one_round[0] / one_round[1]:.2f}" == row[5]

    (claim,) = re.findall(
        r"Efficiency: wall : retained steps ([\d.]+) \(([\d.]+) : ([\d.]+)\), against the first "
        r"try's ([\d.]+) \(2026-12-04, ([\d.]+) : ([\d.]+);[^)]*\): ([\d.]+)x\. Against the "
        r"1-round planning profile of 2026-12-02 \(([\d.]+) : ([\d.]+) = ([\d.]+),[^)]*\), "
        r"([\d.]+)x\.", _flat(sixth))
    assert float(claim[0]) == stated_ratio
    assert (float(claim[1]), float(claim[2])) == (collection, retained)
    assert (float(claim[4]), float(claim[5])) == (first_collection, first_retained)
    assert float(claim[3]) == first[2]
    assert (float(claim[7]), float(claim[8]), float(claim[9])) == one_round
    ratio = collection / retained
    assert f"{first[2] / ratio:.1f}" == claim[6]            # about 1.4x the first try's
    assert f"{one_round[2] / ratio:.1f}" == claim[10]       # 5.7x the 1-round profile's
    assert "the first try's 18.26" not in _flat(readme)


# ---- the observer's cost on the H200 ----------------------------------------------------

OBSERVER_COST = {   # the newest H200 artifacts (2026-12-05), each measured on its own engine
    "docs/evidence/h200/aisimulate/sdbench-agg-k3-7747be92372d.json.xz": "qwen3-0.6b",
    "docs/evidence/h200/settled/same-machine/sdbench-decode-k3-4c4a50436c67.json.xz": "qwen3-8b",
}


def _observer_cost(path: Path) -> tuple[dict, str, str]:
    """The artifact's `observer_cost`, device name and start, read without parsing the whole
    document (the planning profile is 82 MB of JSON)."""
    text = _text(path)
    decoder = json.JSONDecoder()
    fields = {}
    for name in ("observer_cost", "device_name", "started_at"):
        at = text.index(":", text.index(f'"{name}"')) + 1
        while text[at].isspace():
            at += 1
        fields[name], _ = decoder.raw_decode(text, at)
    return fields["observer_cost"], fields["device_name"]["value"], fields["started_at"]


@pytest.mark.parametrize("doc", ["README.md", "docs/reference.md", "docs/performance.md"])
def test_the_observer_cost_on_the_h200_is_the_artifacts(doc):
    """Each doc that states the H200 observer cost states each artifact's own
    `observer_cost.host_seconds_per_step`, in microseconds, beside the file it cites; the
    figure is no longer 'to be measured'."""
    text = _flat((ROOT / doc).read_text())
    for relative, model in OBSERVER_COST.items():
        cost, device, started = _observer_cost(ROOT / relative)
        assert device == "NVIDIA H200"
        assert started.startswith("2026-12-05")
        figure = round(cost["host_seconds_per_step"] * 1e6)
        stated = re.findall(r"(\d+) us[^`]{0,40}`" + re.escape(relative) + "`", text)
        assert stated, f"{doc} does not cite {relative} beside a figure in us"
        assert {int(s) for s in stated} == {figure}, (doc, relative, model, stated, figure)
        assert model in text
    assert "to be re-measured" not in text
    assert "The H200 figure is to be measured" not in text


# ---- the time a plan-grade collection takes ---------------------------------------------

def test_export_md_states_the_measured_collection_time():
    """docs/export.md: warm-up and 5 rounds of the consumer's grid, measured: the H200's
    from collect-p35b.log.xz (its `time:` line), the H100's from the sixth try's `time:` line
    the plan-grade README quotes; the minutes are those seconds, not the old projection."""
    text = _flat((ROOT / "docs/export.md").read_text())
    log = _text(PLAN_GRADE / "collect-p35b.log.xz")
    h200, _, _ = _time_line(log)
    (h200_start,) = re.findall(r"engine started in ([\d.]+) s on cuda", log)
    readme = _section((PLAN_GRADE / "README.md").read_text(), "Sixth try")
    h100, _, _ = _time_line(readme)
    (h100_start,) = re.findall(r"engine started in ([\d.]+) s on cuda", readme)
    assert f"took {h200} s on the H200 (2026-12-05, the `time:` line of " \
           "`docs/evidence/h200/plan-grade/collect-p35b.log.xz`, `collection`)" in text
    assert f"and {h100} s on an H100 (the sixth try's `time:` line in " \
           "`docs/evidence/h200/plan-grade/README.md`)" in text
    assert f"plus the engine start ({h200_start} s and {h100_start} s)" in text
    (low, high) = re.findall(r"it is measured at (\d+)-(\d+) minutes", text)[0]
    assert (int(low), int(high)) == (round(min(h200, h100) / 60), round(max(h200, h100) / 60))
    assert "Warm-up + 5 rounds is about 25" not in text


# ---- the GPU gate's last results ---------------------------------------------------------

def _gate(log: Path) -> tuple[int, int, str]:
    (found,) = re.findall(r"=+ (\d+) passed, (\d+) skipped, \d+ warnings? in ([\d.]+)s",
                          log.read_text())
    return int(found[0]), int(found[1]), found[2]


def test_the_gate_results_the_docs_state_are_the_logs():
    readme = _flat((ROOT / "README.md").read_text())
    passed, skipped, _ = _gate(PLAN_GRADE / "gate-p35b.log")
    assert (f'"{passed} passed, {skipped} skipped" (the CPU-only host-timer check; '
            "`docs/evidence/h200/plan-grade/gate-p35b.log`)") in readme
    gpu = _flat((ROOT / "docs/gpu.md").read_text())
    for log, device in (("gate-p35b.log", "the H200"), ("gate-plan9-h100.log", "an H100")):
        passed, skipped, seconds = _gate(PLAN_GRADE / log)
        assert re.search(rf"{device}[^\"]*`{re.escape(log)}`[^\"]*: \"{passed} passed, "
                         rf"{skipped} skipped\" in {re.escape(seconds)} s", gpu), log


# ---- the scripts the docs run -------------------------------------------------------------

def _gone_drivers() -> set[str]:
    """The one-off GPU drivers scripts/README.md maps to their plans (its 'was' column)."""
    table = (ROOT / "scripts" / "README.md").read_text()
    return {name for row in re.findall(r"^\| `plans/[^|]*\|[^|]*\| ([^|]*) \|$", table, flags=re.M)
            for name in re.findall(r"`([\w.-]+\.sh)`", row)}


def _bash_blocks(text: str) -> str:
    return "\n".join(re.findall(r"^```bash\n(.*?)^```$", text, flags=re.M | re.S))


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_script_and_module_a_doc_names_exists(doc):
    """A command a doc gives runs a script that exists (docs/gpu.md ran the gone
    scripts/gpu-oracle.sh); a gone driver is named only as what scripts/README.md maps to a
    plan, never run. Every pytest_sdbench/ path a doc names exists."""
    text = doc.read_text()
    gone = _gone_drivers()
    assert "gpu-oracle.sh" in gone
    for path in re.findall(r"scripts/[\w./-]*\w", _bash_blocks(text)):
        assert (ROOT / path).exists(), f"{doc.name} runs {path}, which is gone"
    for path in set(re.findall(r"(?<![\w/.])scripts/[\w./-]*\w", text)):
        assert (ROOT / path).exists() or Path(path).name in gone, f"{doc.name}: {path}"
    for path in set(re.findall(r"(?<![\w/.])pytest_sdbench/[\w./-]*\w", text)):
        assert (ROOT / path).exists() or (ROOT / f"{path}.py").exists(), f"{doc.name}: {path}"


# ---- the production profiles are legacy, and named so ------------------------------------

PRODUCTION = H200 / "production"


@pytest.mark.parametrize("path", sorted(PRODUCTION.rglob("sdbench-*.json.xz")),
                         ids=lambda p: str(p.relative_to(PRODUCTION)))
def test_the_production_profiles_are_legacy(path):
    """Every production profile is of a legacy schema and retained the first decode step."""
    data = json.loads(_text(path))
    assert data["schema_version"] in LEGACY_SCHEMA_VERSIONS
    assert data["measurement_policy"]["decode"] == POLICY_STEADY_STEP


def _paragraphs(text: str):
    """(section heading, paragraph) of a markdown text; a fenced block belongs to the
    paragraph right above it."""
    heading, lines, out = "", [], []
    fenced = False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        if not fenced and line.startswith("#") and not line.startswith("#!"):
            out.append((heading, "\n".join(lines)))
            heading, lines = line, []
        elif not fenced and not line.strip() and lines and not lines[-1].startswith("```"):
            out.append((heading, "\n".join(lines)))
            lines = []
        else:
            lines.append(line)
    out.append((heading, "\n".join(lines)))
    return [(h, p) for h, p in out if p.strip()]


NAMES_THE_PRODUCTION_PROFILES = re.compile(
    r"h200/production|production (profile|artifact|export|start)", re.I)


@pytest.mark.parametrize("doc", [*DOCS, PRODUCTION / "README.md"],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_a_doc_names_the_production_profiles_as_legacy(doc):
    """Wherever a doc shows or uses the production profiles, its paragraph or its section
    says they are legacy."""
    unnamed = [paragraph.strip()[:120] for heading, paragraph in _paragraphs(doc.read_text())
               if NAMES_THE_PRODUCTION_PROFILES.search(_flat(paragraph))
               and "legacy" not in heading.lower() and "legacy" not in paragraph.lower()]
    assert not unnamed, f"{doc.name}: the production profiles, not named legacy: {unnamed}"


def _legacy_users(tree: ast.Module) -> dict[str, ast.AST]:
    """The module's names (assigned at module level, or functions) that reach a production
    profile: a path of h200/production or the 'h200-production-*' base, or a name (or a
    fixture, by its parameter name) that does."""
    assigned = {target.id: node for node in tree.body if isinstance(node, ast.Assign)
                for target in node.targets if isinstance(target, ast.Name)}
    functions = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
    found: dict[str, ast.AST] = {
        name: node for name, node in assigned.items()
        if any(isinstance(c, ast.Constant) and isinstance(c.value, str)
               and ("h200/production" in c.value or "h200-production" in c.value)
               for c in ast.walk(node.value))}
    grew = True
    while grew:
        grew = False
        for name, node in {**assigned, **functions}.items():
            if name in found:
                continue
            used = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
            if isinstance(node, ast.FunctionDef):
                used |= {a.arg for a in node.args.args}
            if used & set(found):
                found[name] = node
                grew = True
    return found


@pytest.mark.parametrize("path", sorted((ROOT / "tests" / "consumer").glob("test_*.py")),
                         ids=lambda p: p.name)
def test_the_consumer_tests_that_use_a_production_profile_say_legacy(path):
    """A consumer test (or its fixture, helper or constant) that exports a production profile
    says 'legacy' in its name or docstring."""
    tree = ast.parse(path.read_text())
    silent = [name for name, node in _legacy_users(tree).items()
              if "legacy" not in name.lower()
              and "legacy" not in ((ast.get_docstring(node) or "")
                                   if isinstance(node, ast.FunctionDef) else "").lower()]
    assert not silent, f"{path.name}: {silent} use a production profile without saying legacy"


# ---- the layout's floors are the imports' -------------------------------------------------

def test_the_layouts_floors_are_the_packages_imports():
    """docs/layout.md names every folder of the package (and cli.py) with its floor; each
    imports only folders on floors below its own."""
    from .test_layers import PACKAGE, _import_graph
    block = (ROOT / "docs" / "layout.md").read_text()
    floors = {name: int(floor) for name, floor in
              re.findall(r"^  (\w+)(?:/|\.py)\s+floor (\d+)", block, flags=re.M)}
    folders = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    assert set(floors) == folders | {"cli"}, set(floors) ^ (folders | {"cli"})
    wrong = sorted(
        f"{module} (floor {floors[source]}) imports {target} (floor {floors[top]})"
        for module, targets in _import_graph().items()
        if (source := module.split(".")[1] if "." in module else "") in floors
        for target in targets
        if (top := target.split(".")[1] if "." in target else "") in floors
        and top != source and floors[top] >= floors[source])
    assert not wrong, "; ".join(wrong)


# ---- issue 54: the emulation on a GPU host against real `vllm serve` -----------------------
EMULATED_ON_GPU = EVIDENCE / "h100" / "emulated-on-gpu"


def test_the_emulation_figures_are_the_reports():
    """The README's table is emulation.json's summary (host B's emulation against host A's
    real server), rounded as printed; and its NVML claim is the CSVs': no compute process,
    at most 4 MiB used, 0% utilization at every read."""
    readme = (EMULATED_ON_GPU / "README.md").read_text()
    summary = json.loads(_text(EMULATED_ON_GPU / "emulation.json.xz"))["summary"]
    for name in ("TTFT", "TPOT", "step gap", "E2E"):
        figure = summary[name]
        row = (f"| {name} | {figure['runs']} | {100 * figure['median_abs_error']:.1f}% | "
               f"{100 * figure['max_abs_error']:.1f}%")
        assert row in readme, row
        assert readme.split(row, 1)[1].split("\n", 1)[0].endswith(
            f"| {figure['within_goal_every']} |")
    assert summary["goal"] == {"TTFT": False, "TPOT": True}
    top = _flat((ROOT / "README.md").read_text())
    assert (f"read TPOT {100 * summary['TPOT']['median_abs_error']:.1f}% and TTFT "
            f"{100 * summary['TTFT']['median_abs_error']:.1f}% median abs error") in top
    apps = (EMULATED_ON_GPU / "compute-apps.csv").read_text().strip().splitlines()
    assert apps == ["timestamp, pid, process_name, used_gpu_memory [MiB]"]
    _no_gpu_taken(EMULATED_ON_GPU, reads=98)


ONE_HOST_06B = EVIDENCE / "h100" / "one-host-06b"


def test_the_06b_emulation_figures_are_its_report():
    """one-host-06b's table (the qwen3-0.6b profile emulated on the CPU host against the
    H100's real runs) is emulation-cpu-host.json's summary, AISimulate's columns its
    consumer summary, rounded as printed."""
    summary = _emulation_table_is_its_summary(ONE_HOST_06B / "README.md",
                                              ONE_HOST_06B / "emulation-cpu-host.json.xz")
    assert summary["goal"] == {"TTFT": False, "TPOT": False}


ONE_HOST_06B_GRADE = EVIDENCE / "h100" / "one-host-06b-plan-grade"


def test_the_06b_plan_grade_emulation_figures_are_its_report():
    """one-host-06b-plan-grade's table (emulated against real `vllm serve` on one H100, one
    lease) is its emulation.json's summary; the NVML reads during the emulation show no GPU
    memory taken and no process."""
    summary = _emulation_table_is_its_summary(ONE_HOST_06B_GRADE / "README.md",
                                              ONE_HOST_06B_GRADE / "emulation.json.xz")
    assert summary["goal"] == {"TTFT": False, "TPOT": True}
    _no_gpu_taken(ONE_HOST_06B_GRADE, reads=26)


BOTH_PRESETS = EVIDENCE / "h100" / "both-presets-one-host"


@pytest.mark.parametrize("preset, folder, reads", [("qwen3-0.6b", "06b", 28),
                                                   ("qwen3-8b", "8b", 35)])
def test_the_both_presets_emulation_figures_are_their_reports(preset, folder, reads):
    """both-presets-one-host's tables (each preset emulated against real `vllm serve` on one
    H100, one lease) are their emulation.json's summaries; the folder's README and the top
    README state the two medians; the NVML reads show no GPU memory taken and no process."""
    summary = _emulation_table_is_its_summary(BOTH_PRESETS / folder / "README.md",
                                              BOTH_PRESETS / folder / "emulation.json.xz")
    assert summary["goal"] == {"TTFT": False, "TPOT": True}
    ttft, tpot = (f"{100 * summary[n]['median_abs_error']:.1f}%" for n in ("TTFT", "TPOT"))
    assert f"| {preset} | {ttft} |" in (BOTH_PRESETS / "README.md").read_text()
    assert f"read TTFT {ttft}, TPOT {tpot} median" in _flat((ROOT / "README.md").read_text())
    _no_gpu_taken(BOTH_PRESETS / folder, reads=reads)


def _no_gpu_taken(folder: Path, reads: int) -> None:
    """nvidia-smi's reads during an emulation (gpu-memory.csv): `reads` of them, each at most
    4 MiB used and 0% utilisation; compute-apps.csv lists no process."""
    lines = (folder / "gpu-memory.csv").read_text().strip().splitlines()[1:]
    assert len(lines) == reads
    for line in lines:
        _, used, util = (x.strip() for x in line.split(","))
        assert int(used.split()[0]) <= 4, line
        assert util == "0 %", line
    assert (folder / "compute-apps.csv").read_text().splitlines()[1:] == []


def _emulation_table_is_its_summary(readme_path: Path, report: Path) -> dict:
    """The README's table of figures (ours: median, max, runs within 25%; AISimulate's:
    median, runs within 25%) against the `sdbench fidelity --emulated` report's summary,
    rounded as printed; the summary."""
    readme = readme_path.read_text()
    summary = json.loads(_text(report))["summary"]
    for name in ("TTFT", "TPOT", "step gap", "E2E"):
        ours, theirs = summary[name], summary["consumer"][name]
        row = next(line for line in readme.splitlines() if line.startswith(f"| {name} | "))
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        assert cells[1] == f"{100 * ours['median_abs_error']:.1f}%", row
        assert cells[2].startswith(f"{100 * ours['max_abs_error']:.1f}%"), row
        assert cells[3] == f"{ours['within_goal_every']} of {ours['runs']}", row
        assert cells[4] == f"{100 * theirs['median_abs_error']:.1f}%", row
        assert cells[5] == f"{theirs['within_goal_every']} of {theirs['runs']}", row
    return summary
