"""Docs that run (issue 38 item 6): every shell command in the fenced ```bash blocks of
README.md and docs/*.md either runs here as it is written (on CPU, in seconds, its --out
redirected into a temporary folder so the checkout stays clean), or the doc marks why not:

- "on a CUDA host": needs a GPU. In the paragraph right above the block (the whole block),
  in a comment line of the block (the lines after it), or in the line's own comment.
- "starts an engine": slow, starts a vLLM engine (or the whole suite). Same places.
- "installs into": changes a Python environment (pip). Same places.
- "with AISimulate installed": the consumer's own tools, not this project's. Same places.
- `<!-- ci: NAME -->` right above the block: `.ci/run` runs the block as written.

A command that is not run is still checked: an `sdbench` (or `python -m pytest_sdbench.cli`)
command is parsed by the CLI's own parser, a `benchmarks.sdbench_bench` one by the
benchmark's, and a `pytest` one's `--sdbench-*` options by the plugin's, so a doc that names
a removed option or a bad value fails here. An unmarked command that this test cannot run
fails too: mark it, or make it runnable."""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from pytest_sdbench import cli

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

MARKERS = {"on a cuda host": "gpu", "starts an engine": "engine",
           "installs into": "install", "with aisimulate installed": "consumer"}
# placeholders the docs write for a value, and what the parse check gives for them
PLACEHOLDERS = {"K": "3", "AL": "2.78", "N": "1", "S": "1"}


@dataclass
class Command:
    doc: str
    line: int
    text: str
    kind: str   # run, gpu, engine, install, consumer, ci:NAME

    @property
    def id(self) -> str:
        return f"{self.doc}:{self.line}"


def _marker(text: str) -> str | None:
    low = text.lower()
    for phrase, kind in MARKERS.items():
        if phrase in low:
            return kind
    return None


def _comment(line: str) -> str:
    """The line's trailing comment (outside quotes), '' if none."""
    try:
        lex = shlex.shlex(line, posix=True, punctuation_chars=False)
        lex.whitespace_split = True
        lex.commenters = ""
        tokens = list(lex)
    except ValueError:   # an apostrophe in the comment itself: its first " #" then
        found = re.search(r"\s#.*$", line, flags=re.S)
        return found.group(0) if found else ""
    for i, token in enumerate(tokens):
        if token.startswith("#"):
            return " ".join(tokens[i:])
    return ""


def parse_doc(path: Path) -> list[Command]:
    lines = path.read_text().splitlines()
    doc = str(path.relative_to(ROOT))
    out: list[Command] = []
    i = 0
    while i < len(lines):
        if not lines[i].startswith("```bash"):
            i += 1
            continue
        # the paragraph right above the fence (skipping blank lines and a ci marker)
        above, j, ci = [], i - 1, None
        while j >= 0 and not lines[j].strip():
            j -= 1
        if j >= 0 and (m := re.fullmatch(r"<!-- ci: (\S+) -->", lines[j].strip())):
            ci = m.group(1)
            j -= 1
            while j >= 0 and not lines[j].strip():
                j -= 1
        while j >= 0 and lines[j].strip() and not lines[j].startswith(("```", "#")):
            above.insert(0, lines[j])
            j -= 1
        block_kind = f"ci:{ci}" if ci else _marker(" ".join(above))
        i += 1
        pending: list[str] = []
        start = 0
        heredoc: str | None = None
        while i < len(lines) and not lines[i].startswith("```"):
            line = lines[i]
            i += 1
            if heredoc is not None:
                pending.append(line)
                if line.strip() == heredoc:
                    heredoc = None
                else:
                    continue
            elif not pending:
                if not line.strip():
                    continue
                if line.lstrip().startswith("#"):
                    block_kind = _marker(line) or block_kind
                    continue
                start = i
                pending = [line]
                if m := re.search(r"<<-?'?(\w+)'?", line):
                    heredoc = m.group(1)
                    continue
            else:
                pending.append(line)
            if pending[-1].rstrip().endswith("\\"):
                continue
            text = "\n".join(pending)
            own = _marker(_comment(text.replace("\\\n", " ")))
            kind = own or block_kind or "run"
            out.append(Command(doc, start, text, kind))
            pending = []
        i += 1
    return out


def all_commands() -> list[Command]:
    return [c for path in DOCS for c in parse_doc(path)]


def argv_of(text: str) -> list[str]:
    """The command's words, comments and line continuations dropped, optional [--x]
    brackets opened, placeholders given a value."""
    words = shlex.split(text.split("<<")[0].replace("\\\n", " "), comments=True)
    words = [w.strip("[]") for w in words]
    return [PLACEHOLDERS.get(w, w) for w in words if w]


def sdbench_argv(words: list[str]) -> list[str] | None:
    """The CLI arguments of an sdbench command, however the doc starts it; None if it is
    not one."""
    if words[:1] == ["./scripts/with-cpu-env"]:
        words = words[1:]
    if words[:1] == ["sdbench"]:
        return words[1:]
    if words[:1] in (["python3"], ["python"]) and words[1:3] == ["-m", "pytest_sdbench.cli"]:
        return words[3:]
    return None


def _bench_argv(words: list[str]) -> list[str] | None:
    if words[:1] == ["./scripts/with-cpu-env"]:
        words = words[1:]
    if words[1:3] == ["-m", "benchmarks.sdbench_bench"]:
        return words[3:]
    return None


def _pytest_argv(words: list[str]) -> list[str] | None:
    if words[:1] == ["./scripts/with-cpu-env"]:
        words = words[1:]
    if words[:1] == ["pytest"]:
        return words[1:]
    if words[1:3] == ["-m", "pytest"]:
        return words[3:]
    return None


class _Refused(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise _Refused(message)


def _pytest_options() -> argparse.ArgumentParser:
    from pytest_sdbench.run.options import add_pytest_options
    parser = _Parser(add_help=False)

    class Group:
        def addoption(self, *names, **kwargs):
            parser.add_argument(*names, **kwargs)

    add_pytest_options(Group())
    return parser


def _parses(parser: argparse.ArgumentParser, args: list[str], what: str) -> None:
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            parser.parse_args(args)
    except SystemExit as exit_:
        pytest.fail(f"{what} {' '.join(args)}: exit {exit_.code}: {err.getvalue().strip()}")


def check_syntax(command: Command) -> None:
    """Parse a command that is not run: the parser that would run it refuses a removed
    option or a bad value."""
    words = argv_of(command.text)
    if (args := sdbench_argv(words)) is not None:
        _parses(cli.build_parser(), cli.split_passthrough(args)[0], f"{command.id}: sdbench")
    elif (args := _bench_argv(words)) is not None:
        from benchmarks.sdbench_bench.__main__ import parser
        _parses(parser(), args, f"{command.id}: python -m benchmarks.sdbench_bench")
    elif (args := _pytest_argv(words)) is not None:
        try:
            _, rest = _pytest_options().parse_known_args(args)
        except _Refused as refused:
            pytest.fail(f"{command.id}: pytest {' '.join(args)}: {refused}")
        unknown = [a for a in rest if a.startswith("--sdbench")]
        assert not unknown, f"{command.id}: the plugin has no option {unknown}"


COMMANDS = all_commands()


def test_the_docs_have_commands():
    """The extraction finds the docs' blocks (a parse that finds nothing checks nothing)."""
    assert len(COMMANDS) > 40
    kinds = {c.kind.split(":")[0] for c in COMMANDS}
    assert {"run", "gpu", "engine", "ci"} <= kinds


@pytest.mark.parametrize("command", [c for c in COMMANDS if c.kind != "run"],
                         ids=lambda c: f"{c.id}-{c.kind}")
def test_a_command_not_run_is_marked_and_parses(command):
    if command.kind.startswith("ci:"):
        name = command.kind[3:]
        assert f"readme_block.py {name}" in (ROOT / ".ci/run").read_text(), \
            f"{command.id}: marked <!-- ci: {name} --> but .ci/run does not run that block"
    check_syntax(command)


def _redirect_out(args: list[str], tmp: Path) -> list[str]:
    """--out (and --artifact-dir) into the temporary folder: the checkout stays clean."""
    args = list(args)
    for i, arg in enumerate(args[:-1]):
        if arg in ("--out", "--artifact-dir"):
            args[i + 1] = str(tmp / args[i + 1].replace("/", "_"))
    return args


@pytest.mark.parametrize("command", [c for c in COMMANDS if c.kind == "run"],
                         ids=lambda c: c.id)
def test_a_command_runs_as_written(command, tmp_path, monkeypatch, capsys):
    words = argv_of(command.text)
    monkeypatch.chdir(ROOT)
    args = sdbench_argv(words)
    if args is not None and args[:1] in (["collect"], ["fidelity"], ["crosscheck"], ["serve"]):
        pytest.fail(f"{command.id}: sdbench {args[0]} starts an engine: the doc marks it so "
                    "(this test does not start one)")
    if args is not None and "|" not in words:
        if args[:1] == ["export"] and "--envelope-only" not in args:
            pytest.importorskip("pyarrow", reason="the export's table needs pyarrow "
                                "(pytest-sdbench[export]), as docs/export.md says")
        try:
            code = cli.main(_redirect_out(args, tmp_path))
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 1
        captured = capsys.readouterr()
        assert code == 0, (f"{command.id}: sdbench {' '.join(args)} exited {code}:\n"
                           f"{captured.out[-1000:]}{captured.err[-2000:]}")
        return
    if words[:1] == ["source"] or "|" in words:
        # a shell line (source, a pipe): run by bash in the checkout, the venv's bin first
        if words[:1] == ["source"] and not (ROOT / words[1]).exists():
            pytest.skip(f"{words[1]} is made by the Quickstart's first command")
        env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}"
                   f"{os.environ.get('PATH', '')}")
        done = subprocess.run(["bash", "-c", "set -o pipefail; " + command.text], cwd=ROOT,
                              env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, f"{command.id}: {command.text}:\n{done.stderr[-2000:]}"
        return
    pytest.fail(f"{command.id}: {command.text!r} is not marked (on a CUDA host, starts an "
                "engine, installs into, with AISimulate installed, <!-- ci: NAME -->) and "
                "this test cannot run it")
