"""`sdbench validate | show | compare` on real and broken artifacts, and on a K sweep's
index; exit codes; every argument's --help."""

import dataclasses
import errno
import hashlib
import json
import lzma
import os
import signal
import subprocess
import sys
import sysconfig
import time
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from pytest_sdbench import cli
from pytest_sdbench.artifact import validate_path
from pytest_sdbench.cli import main
from pytest_sdbench.commands.show import SUMMARY_HEADER
from pytest_sdbench.commands.terminal import EXIT_INTERRUPTED
from pytest_sdbench.wire.contract import SETTLED_STEPS

from .conftest import FIXTURES

REAL = FIXTURES / "cpu-agg-v4.json"
ROUNDS = FIXTURES / "cpu-agg-v6.json"   # 3 rounds, host canary, CPU placement


def test_validate_exit_codes(tmp_path, capsys):
    assert main(["validate", str(REAL)]) == 0
    assert "VALID" in capsys.readouterr().out
    broken = json.loads(REAL.read_text())
    broken["decode"][0]["timing"]["source"] = "cuda_event"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(broken))
    assert main(["validate", str(bad)]) == 1
    out = capsys.readouterr().out
    assert "INVALID" in out
    assert "decode[0].timing.source: 'cuda_event'" in out
    (tmp_path / "text.json").write_text("not json")
    assert main(["validate", str(tmp_path / "text.json")]) == 2
    assert main(["validate", str(tmp_path / "absent.json")]) == 2
    assert "no such file" in capsys.readouterr().out


def test_validate_prints_every_violation(tmp_path, capsys):
    broken = json.loads(REAL.read_text())
    broken["prefill"][0]["graph_mode"] = "full"
    broken["decode"][1]["snapshot"]["booking"] = "warmup"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(broken))
    assert main(["validate", str(bad)]) == 1
    out = capsys.readouterr().out
    assert "2 violation(s)" in out
    assert "prefill[0].graph_mode" in out
    assert "decode[1].snapshot.booking" in out


def test_validate_flags_k_outside_window(capsys):
    assert main(["validate", str(REAL), "--k-window", "4-5"]) == 0
    assert "flag: speculative.draft_depth: K=3 lies outside" in capsys.readouterr().out


def test_validate_marks_legacy(capsys):
    assert main(["validate", str(FIXTURES / "legacy-v1-autoregressive.json")]) == 0
    assert "(legacy v1-autoregressive)" in capsys.readouterr().out


def test_show_prints_a_row_per_sample_with_its_round(capsys):
    assert main(["show", str(ROUNDS)]) == 0
    points, _summaries = capsys.readouterr().out.split(SUMMARY_HEADER)
    assert points.count("prefill[") == 8 * 3
    assert points.count("decode[") == 4 * 3 * SETTLED_STEPS   # settled steps, each a row
    assert "KV capacity: " in points
    rows = [line.split() for line in points.splitlines()
            if line.startswith(("prefill[", "decode["))]
    data = json.loads(ROUNDS.read_text())
    taken = {o["native_iteration_id"]: (f"{phase}[{o['point_index']}]", o["round"])
             for phase in ("prefill", "decode") for o in data[phase]}
    # each row: its point, its round and its native ID as the artifact holds them, in the
    # order measured (native IDs rise), so that every round lists the whole grid
    shown = [(row[0], int(row[-6]), int(row[-5])) for row in rows]   # then ms, graph, step, MHz
    assert [iid for _, _, iid in shown] == sorted(taken)
    assert all(taken[iid] == (name, rnd) for name, rnd, iid in shown)
    assert [rnd for _, rnd, _ in shown] == sorted(rnd for _, rnd, _ in shown)


def test_show_states_the_repeats_the_host_canary_and_the_cpu_placement(capsys):
    assert main(["show", str(ROUNDS)]) == 0
    out = capsys.readouterr().out
    data = json.loads(ROUNDS.read_text())
    canary = data["host_canary"]
    assert "repeats: 3 round(s) of the grid, each in a fresh order drawn from seed 0" in out
    assert (f"host canary: python loop {1e3 * canary['python_median_seconds']:.3f} ms median "
            f"over {canary['samples']} readings, spread {100 * canary['python_spread']:.1f}%"
            ) in out
    main_cpus = data["environment"]["cpu_placement"]["main_thread_allowed_cpus"]
    assert f"CPU placement: main thread on CPUs {main_cpus[0]}-{main_cpus[-1]}" in out
    assert main(["show", str(REAL)]) == 0     # a legacy (v4) artifact says what it lacks
    out = capsys.readouterr().out
    assert "taken back to back (legacy artifact: no rounds and no host canary recorded)" in out
    assert "host canary: none recorded (legacy artifact)" in out


def _summary_rows(out: str) -> dict[str, list[str]]:
    """The point-summary rows `sdbench show` printed: point -> n, median ms, CI half width
    %, cv %, min ms, max ms, stop, canary spread %."""
    rows = out.split(SUMMARY_HEADER, 1)[1].splitlines()[1:]
    return {name: values for name, *values in (row.split() for row in rows if row.strip())}


def _printed(summary: dict) -> list[str]:
    """A summary of the artifact as show rounds it."""
    def pct(value, digits=2):
        return "-" if value is None else f"{100 * value:.{digits}f}"
    return [str(summary["samples"]), f"{summary['median_seconds'] * 1e3:.3f}",
            pct(summary["median_half_width"]),
            pct(summary["cv"] if summary["samples"] > 1 else None),   # one sample: no spread
            f"{summary['min_seconds'] * 1e3:.3f}", f"{summary['max_seconds'] * 1e3:.3f}",
            summary["stop"], pct(summary["canary_spread"], 1)]


@pytest.mark.parametrize("path", [ROUNDS, REAL], ids=["v5-rounds", "v4-legacy"])
def test_show_prints_each_points_summary(path, capsys):
    assert main(["show", str(path)]) == 0
    rows = _summary_rows(capsys.readouterr().out)
    summaries = validate_path(path).artifact.summaries
    assert len(rows) == len(summaries) == 12
    for s in summaries:
        assert rows[f"{s.phase}[{s.point_index}]"] == _printed(dataclasses.asdict(s))


def test_show_prints_the_dispersion_across_rounds(capsys):
    """Three rounds of unequal times: median, min and max differ, the CV and the median's
    CI are not 0, and the point says why it stopped."""
    assert main(["show", str(ROUNDS)]) == 0
    rows = _summary_rows(capsys.readouterr().out)
    n, median, ci, cv, low, high, stop, canary = rows["decode[1]"]
    assert n == "3"
    assert float(low) < float(median) < float(high)
    assert float(cv) > 0
    assert float(ci) > 0
    assert stop == "fixed_rounds"
    assert float(canary) >= 0


def test_compare_fails_on_regression(tmp_path, capsys):
    from .test_compare import _controlled, _write
    base = _write(tmp_path, "base.json", _controlled())
    slower = _write(tmp_path, "slower.json", _controlled(scale=1.5))
    assert main(["compare", str(base), str(slower), "--fail-above", "10"]) == 1
    assert "median change +50.0%" in capsys.readouterr().out
    assert main(["compare", str(base), str(base), "--fail-above", "10"]) == 0


def _sdbench() -> str:
    """The `sdbench` console script that installing the package wrote beside this Python."""
    script = Path(sysconfig.get_path("scripts")) / "sdbench"
    assert script.is_file(), f"no console script at {script}: is pytest-sdbench installed?"
    return str(script)


def test_sdbench_entry_point_is_cli_console_main():
    (entry,) = entry_points(group="console_scripts", name="sdbench")
    assert entry.value == "pytest_sdbench.cli:console_main"
    assert entry.load() is cli.console_main


def _writer_once_read(fifo: Path, proc: subprocess.Popen, seconds: float = 60) -> int:
    """Open the FIFO for writing once the command has opened it for reading (it then
    blocks reading it); fail naming what it waited for."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:   # ENXIO: no reader yet
            if exc.errno != errno.ENXIO:
                raise
        if proc.poll() is not None:
            pytest.fail(f"the command ended (exit {proc.returncode}) before it opened {fifo}: "
                        f"{proc.stderr.read()[-2000:]}")
        if time.monotonic() > deadline:
            pytest.fail(f"waited {seconds:.0f} s for the command to open {fifo} for reading")
        time.sleep(0.05)


@pytest.mark.parametrize("signum, launcher", [
    (signal.SIGINT, "script"), (signal.SIGTERM, "python -m")], ids=["SIGINT", "SIGTERM"])
def test_kill_interrupts_a_command_started_in_the_background(tmp_path, signum, launcher):
    """`kill -INT PID` and `kill PID` end a command that a shell started in the background
    (its jobs start with SIGINT ignored) as a Ctrl-C at a terminal does: exit 130 and
    `sdbench: interrupted`, no traceback (a collection keeps what it measured on that path).
    The command here blocks reading a FIFO, so the signal comes while it works. The FIFO is
    then closed: a signal that lands between the command's open() and its read() is taken
    by Python's C handler, but the handler's exception waits for the next bytecode, and
    read() would block for ever (seen once in a CI run). At the end of the file the
    exception is raised, where a handler is installed; an ignored signal leaves a read of
    nothing, refused as no JSON (exit 2), and the test fails."""
    fifo = tmp_path / "artifact.json"
    os.mkfifo(fifo)
    command = [_sdbench()] if launcher == "script" else [sys.executable, "-m",
                                                         "pytest_sdbench.cli"]
    # SIGINT ignored as a background job gets it: through sh's trap, which exec keeps
    proc = subprocess.Popen(["/bin/sh", "-c", "trap '' INT; exec \"$@\"", "sh", *command,
                             "show", str(fifo)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    writer = None
    try:
        writer = _writer_once_read(fifo, proc)
        proc.send_signal(signum)
        os.close(writer)
        writer = None
        try:
            out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the command did not end within 60 s of signal {signum.name}")
    finally:
        if writer is not None:
            os.close(writer)
        proc.kill()
        proc.wait()
    assert proc.returncode == EXIT_INTERRUPTED, err
    assert err.rstrip().splitlines()[-1] == "sdbench: interrupted", err
    assert "Traceback" not in err
    assert out == ""


def test_the_installed_sdbench_script_runs_and_passes_exit_codes_through(tmp_path):
    ok = subprocess.run([_sdbench(), "validate", str(REAL)], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert f"VALID {REAL}" in ok.stdout
    broken = json.loads(REAL.read_text())
    broken["decode"][0]["timing"]["source"] = "cuda_event"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(broken))
    refused = subprocess.run([_sdbench(), "validate", str(bad)], capture_output=True, text=True)
    assert refused.returncode == 1, refused.stderr
    assert f"INVALID {bad}" in refused.stdout


def test_bad_k_window_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as excinfo:
        main(["validate", str(REAL), "--k-window", "five"])
    assert excinfo.value.code == 2
    assert "--k-window: expected LOW-HIGH, got 'five'" in capsys.readouterr().err


def test_collect_refuses_a_model_directory_without_config(tmp_path, capsys):
    (tmp_path / "draft").mkdir()
    code = main(["collect", "--model", str(tmp_path), "--draft", str(tmp_path / "draft")])
    assert code == 2
    err = capsys.readouterr().err
    assert f"--model: '{tmp_path}' is not a checkpoint directory with a config.json" in err


class EngineNotStarted(RuntimeError):
    """The sentinel a fake start_engine raises once it has seen the spec."""


def test_collect_tp_reaches_the_engine_spec(tmp_path, monkeypatch, capsys):
    """`sdbench collect --tp 2` asks the engine start for two ranks (no engine starts: the
    start is replaced by one that keeps the spec and refuses)."""
    from pytest_sdbench.engine import launch
    from pytest_sdbench.engine.spec import MODEL_ROOT_ENV
    from pytest_sdbench.run import inputs
    started = []

    def start_engine(spec):
        started.append(spec)
        raise EngineNotStarted("the test stops here")
    monkeypatch.setattr(launch, "start_engine", start_engine)
    monkeypatch.setattr(inputs, "check_vllm_installed", lambda: None)
    monkeypatch.setenv(MODEL_ROOT_ENV, str(tmp_path / "models"))
    code = main(["collect", "--tp", "2", "--preset", "tiny", "--out", str(tmp_path / "out")])
    assert code == 1
    assert "the engine did not start: " in capsys.readouterr().err
    (spec,) = started
    assert spec.tensor_parallel_size == 2
    assert spec.preset == "tiny"
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
@pytest.mark.sdbench_engine
def test_collect_writes_a_valid_artifact_from_user_checkpoints(tmp_path, real_checkpoints,
                                                               capsys):
    """`sdbench collect` on the user's own target and draft: real checkpoints in a Hugging
    Face cache (random weights, safetensors, a draft vocabulary smaller than the target's
    with its d2t mapping; tests/checkpoints.py), loaded by vLLM's own loader, with a grid
    manifest, an output folder and engine arguments (vLLM's defaults apply to a user's
    checkpoint but for the arguments given; these reach the engine and the artifact; eager
    among them: torch.compile took 44 s of the 69 s command on this CPU, eager runs it in
    25). The identity reads both revisions from the snapshot folders and digests the
    configs on disk, and `sdbench export` takes the revisions from the artifact: the user
    passes none."""
    target, draft = real_checkpoints
    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps({
        "prefill": [{"batch_size": 1, "new_tokens": 48, "cached_prefix_tokens": 0}],
        "decode": [{"batch_size": 2, "context_tokens": 64, "draft_depth": 3,
                    "acceptance_length": None}]}))
    result = subprocess.run(
        [_sdbench(), "collect", "--mode", "agg", "--model", str(target.path),
         "--draft", str(draft.path), "--grid", str(grid), "--out", str(tmp_path / "out"),
         "--engine-arg", "max_model_len=1024", "--engine-arg", "kv_cache_memory_bytes=268435456",
         "--engine-arg", "block_size=32", "--engine-arg", "enforce_eager=true"],
        capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    (artifact,) = (tmp_path / "out").glob("sdbench-agg-*.json")
    assert f"wrote {artifact}" in result.stdout
    assert "sdbench [4/4] done" in result.stderr   # 2 points: a warm-up and a sample each
    assert main(["validate", str(artifact)]) == 0
    data = json.loads(artifact.read_text())
    identity = data["identity"]
    for role, snapshot in (("target", target), ("draft", draft)):
        facts = identity[role]
        assert facts["model"]["value"] == str(snapshot.path)
        assert facts["revision"] == {"status": "resolved", "value": snapshot.commit,
                                     "source": f"hf cache snapshot folder name "
                                               f"({snapshot.path})", "reason": None}
        on_disk = hashlib.sha256((snapshot.path / "config.json").read_bytes()).hexdigest()
        assert facts["config_digest"]["value"] == f"sha256:{on_disk}"
        assert facts["load_format"]["value"] == "auto"   # vLLM's loader, no dummy weights
    assert identity["acceptance_control"]["value"] == "natural"
    assert len(data["decode"]) == SETTLED_STEPS   # one work item, its settled steps
    for decode in data["decode"]:   # natural acceptance: whatever the random draft hits
        assert len(decode["accepted_tokens"]) == 2
        assert all(0 <= n <= 3 for n in decode["accepted_tokens"])
    settings = identity["settings"]
    assert settings["user_engine_args"] == {"block_size": "32", "enforce_eager": "true",
                                            "kv_cache_memory_bytes": "268435456",
                                            "max_model_len": "1024"}
    assert settings["enforce_eager"]["value"] is True
    assert settings["max_model_len"] == {"status": "resolved", "value": 1024, "source":
                                         "vllm_config.model_config.max_model_len",
                                         "reason": None}
    assert settings["kv_cache_memory_bytes"]["value"] == 268435456
    capsys.readouterr()
    exported = tmp_path / "export"
    assert main(["export", str(artifact), "--to", "aisimulate", "--out", str(exported),
                 "--envelope-only"]) == 0, capsys.readouterr().out
    assert "facts given by the user" not in capsys.readouterr().out
    (manifest,) = exported.glob("*/import-manifest.json")
    facts = json.loads(manifest.read_text())["facts"]
    for role, snapshot in (("target", target), ("draft", draft)):
        assert facts[f"{role}_revision"] == {
            "value": snapshot.commit,
            "source": f"artifact identity.{role}.revision (hf cache snapshot folder name "
                      f"({snapshot.path}))"}
    assert main(["validate", str(artifact)]) == 0


def test_every_argument_of_every_command_says_what_it_is():
    """`sdbench COMMAND --help` describes each option and positional argument, and
    validate's names its exit codes."""
    parser = cli.build_parser()
    for name, command in cli.subparsers(parser).items():
        bare = [a.option_strings or [a.dest] for a in command._actions if not a.help]
        assert bare == [], name
    validate_help = cli.subparsers(parser)["validate"].format_help()
    assert "exit status: 0 every PATH valid" in " ".join(validate_help.split())


# ---- a K sweep's index -------------------------------------------------------------------

PRODUCTION = Path(__file__).resolve().parents[1] / "docs/evidence/h200/production/rounds"
SWEEP = {1: "sdbench-agg-k1-0137686ad29a.json", 2: "sdbench-agg-k2-95498796f39d.json"}


@pytest.fixture
def sweep(tmp_path):
    """The H200 production sweep's K=1 and K=2 artifacts in rounds (committed xz, inflated here),
    and an index of them beside them (written as `sdbench collect --k 1-2` writes it)."""
    from pytest_sdbench.artifact.sweep import write_sweep_index
    written = []
    for name in SWEEP.values():
        (tmp_path / name).write_bytes(lzma.decompress((PRODUCTION / f"{name}.xz").read_bytes()))
        written.append((validate_path(tmp_path / name).artifact, tmp_path / name))
    return write_sweep_index(written, tmp_path)


def test_validate_reads_a_sweep_index_beside_its_artifacts(sweep, capsys):
    assert sweep.name.startswith("sdbench-sweep-agg-k1-2-")
    paths = sorted(str(p) for p in sweep.parent.glob("*.json"))
    assert main(["validate", *paths]) == 0
    out = capsys.readouterr().out
    assert (f"VALID {sweep}: K-sweep index, mode agg, K=1,2: 2 artifacts, each present beside "
            "it, valid and the one it describes") in out.splitlines()
    assert out.count("VALID ") == 3


def test_show_lists_the_artifacts_of_a_sweep_index(sweep, capsys):
    assert main(["show", str(sweep)]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert rows[0].startswith(f"{sweep}: K-sweep index, created ")
    assert rows[1].startswith("shared grid (K taken out): ")
    table = [row.split() for row in rows[3:]]
    assert [(r[0], r[-1]) for r in table] == [("1", SWEEP[1]), ("2", SWEEP[2])]
    assert [r[3] for r in table] == ["94/94", "64/64"]


def test_a_sweep_index_that_does_not_match_its_artifacts_is_invalid(sweep, capsys):
    index = json.loads(sweep.read_text())
    index["artifacts"][0]["run_id"] = "0" * 32
    index["artifacts"][1]["draft_depth"] = 3
    sweep.write_text(json.dumps(index))
    (sweep.parent / SWEEP[2]).unlink()
    assert main(["validate", str(sweep)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"INVALID {sweep} (K-sweep index): 3 violation(s)"
    assert out[1] == "  - draft_depths: [1, 2], but the artifacts are of K [1, 3]"
    assert out[2].startswith(f"  - artifacts[0].run_id: '{'0' * 32}', but {SWEEP[1]} says ")
    assert out[3] == f"  - artifacts[1].path: {sweep.parent / SWEEP[2]}: no such file"
    assert main(["show", str(sweep)]) == 1
    assert capsys.readouterr().err.strip() == (f"sdbench: {sweep} is not a valid K-sweep "
                                               f"index; run `sdbench validate {sweep}`")


def test_commands_that_take_an_artifact_refuse_an_index_in_one_line(sweep, tmp_path, capsys):
    said = f"{sweep}: a K-sweep index, not an artifact; `sdbench show {sweep}` lists its artifacts"
    assert main(["compare", str(sweep), str(REAL)]) == 2
    assert capsys.readouterr().err.strip() == f"sdbench: {said}"
    assert main(["plot", str(sweep), "--out", str(tmp_path / "plots")]) == 2
    assert capsys.readouterr().err.strip() == f"sdbench: {said}"
    assert main(["export", str(sweep), "--to", "aisimulate", "--out", str(tmp_path / "e")]) == 2
    assert capsys.readouterr().out.strip() == f"UNUSABLE {sweep}: {said}"
