"""`sdbench export ARTIFACT... --to aisimulate --out DIR`: arguments and the loop over the
artifacts. Exit 0: every artifact written; 1: one or more refused (each reason names the
field and the value); 2: unusable input (no artifact, an option that cannot be used)."""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping
from pathlib import Path

from ..wire.files import out_dir_problem
from .export.exporting import export_artifact
from .export.facts import (
    FACTS,
    USER_FACT_NAMES,
    check_user_value,
    parse_graph_mode,
    parse_user_fact,
)
from .export.options import ExportOptions, KnownConfig
from .export.vocabulary import SYSTEM_PATTERN, Refused, UnusableInput

EXIT_OK, EXIT_REFUSED, EXIT_UNUSABLE = 0, 1, 2
TARGETS = ("aisimulate",)
HELP = ("write what a consumer (AISimulate) reads: native envelopes, profile and speculative "
        "FPM table")


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("artifacts", nargs="+", metavar="ARTIFACT",
                        help="artifacts to export, each to DIR/<run_id>/")
    parser.add_argument("--to", required=True, choices=TARGETS, help="the consumer")
    parser.add_argument("--out", required=True, metavar="DIR",
                        help="export folder; each artifact goes to DIR/<run_id>/")
    parser.add_argument("--system", metavar="NAME",
                        help="the consumer's system of the device (its systems/NAME.yaml), "
                             "e.g. h200_sxm; recorded with source 'user'")
    parser.add_argument("--target-revision", metavar="REV",
                        help="the target checkpoint's 40-hex commit, where the artifact has "
                             "none (dummy-weight presets); recorded with source 'user'")
    parser.add_argument("--draft-revision", metavar="REV",
                        help="the draft checkpoint's 40-hex commit, likewise")
    parser.add_argument("--fact", action="append", default=[], metavar="NAME=VALUE",
                        help="a fact the artifact leaves unresolved (legacy artifacts), one "
                             f"of {', '.join(USER_FACT_NAMES)}; repeatable; recorded with "
                             "source 'user'; it never overrides a resolved value")
    parser.add_argument("--target-config", type=Path, metavar="PATH",
                        help="the target's config.json (or its folder), when neither the "
                             "artifact's model path nor a preset holds it")
    parser.add_argument("--draft-config", type=Path, metavar="PATH",
                        help="the draft's config.json (or its folder), likewise")
    parser.add_argument("--graph-mode", action="append", default=[], metavar="PHASE=MODE",
                        help="export only the points of PHASE (prefill, decode) that ran in "
                             "CUDA-graph MODE (eager, piecewise, full): the consumer reads no "
                             "graph label, so a phase that ran in several modes exports one "
                             "at a time, to DIR/<run_id>[-al<AL>]-<phase>-<mode>/; repeatable")
    parser.add_argument("--acceptance-length", type=float, metavar="AL",
                        help="export only the decode points requested at this synthetic "
                             "acceptance length (the consumer has no AL axis: an AL sweep "
                             "exports one AL at a time, to DIR/<run_id>-al<AL>/)")
    parser.add_argument("--nextn-accepted", type=float, metavar="N",
                        help="the consumer's nextn_accepted (accepted drafts per request and "
                             "step, AL - 1) for the export's predict config; refused outside "
                             "the acceptance the decode rows ran at (default: their mean)")
    parser.add_argument("--repeats-from", action="append", default=[], type=Path,
                        metavar="ARTIFACT",
                        help="another engine start of the same identity and grid: its "
                             "observations are repeatability samples (one per round, else one "
                             "per start); repeatable")
    parser.add_argument("--envelope-only", action="store_true",
                        help="write the native envelopes and their provenance only, without "
                             "the profile and the table (the only export of a CPU artifact)")


def options_from(args, known_configs: Mapping[str, KnownConfig]) -> ExportOptions:
    """ExportOptions from parsed arguments; UnusableInput names a bad value."""
    facts: dict[str, object] = {}
    for text in args.fact:
        name, value = parse_user_fact(text)
        if name in facts and facts[name] != value:
            raise UnusableInput(f"--fact {name}: given twice ({facts[name]!r}, {value!r})")
        facts[name] = value
    for name in ("target_revision", "draft_revision"):
        value = getattr(args, name)
        if value is not None:
            facts[name] = check_user_value(name, value)
    assert set(facts) <= set(FACTS)
    graph_modes: dict[str, str] = {}
    for text in args.graph_mode:
        phase, mode = parse_graph_mode(text)
        if graph_modes.get(phase, mode) != mode:
            raise UnusableInput(f"--graph-mode {phase}: given twice ({graph_modes[phase]!r}, "
                                f"{mode!r})")
        graph_modes[phase] = mode
    if args.system is not None and not re.fullmatch(SYSTEM_PATTERN, args.system):
        raise UnusableInput(f"--system: {args.system!r} is not a system name (a consumer "
                            "systems/<name>.yaml, lower case)")
    return ExportOptions(system=args.system, user_facts=facts,
                         target_config=args.target_config, draft_config=args.draft_config,
                         acceptance_length=args.acceptance_length, graph_modes=graph_modes,
                         nextn_accepted=args.nextn_accepted,
                         repeats_from=tuple(args.repeats_from),
                         envelope_only=args.envelope_only, known_configs=known_configs)


def main(args) -> int:
    """The export, with the presets' configs as the configs the export knows by digest."""
    from ..engine.presets import config_texts
    return run(args, {digest: KnownConfig(text, source)
                      for digest, (text, source) in config_texts().items()})


def run(args, known_configs: Mapping[str, KnownConfig]) -> int:
    try:
        options = options_from(args, known_configs)
    except UnusableInput as exc:
        print(f"sdbench export: {exc}")
        return EXIT_UNUSABLE
    problem = out_dir_problem(args.out)
    if problem:
        print(f"sdbench export: --out: {problem}")
        return EXIT_UNUSABLE
    worst = EXIT_OK
    for text in args.artifacts:
        path = Path(text)
        try:
            done = export_artifact(path, Path(args.out), options)
        except UnusableInput as exc:
            print(f"UNUSABLE {path}: {exc}")
            worst = max(worst, EXIT_UNUSABLE)
            continue
        except OSError as exc:   # writable when checked; not any more (a full disk)
            print(f"UNUSABLE {path}: --out: cannot write {exc.filename or args.out} "
                  f"({exc.strerror}); nothing written")
            worst = max(worst, EXIT_UNUSABLE)
            continue
        except Refused as exc:
            print(f"REFUSED {path}: {len(exc.reasons)} reason(s); nothing written")
            for reason in exc.reasons:
                print(f"  - {reason}")
            worst = max(worst, EXIT_REFUSED)
            continue
        m = done.manifest
        what = (f"table of {m['table']['rows']} rows for nextn={m['nextn']}" if m["table"]
                else "envelopes only, no table")
        what += "".join(f"; {n['rows']} {phase} rows NOT exported (no {phase} phase in the "
                        "consumer)" for phase, n in m["phases_not_exported"].items())
        print(f"EXPORTED {path} -> {done.root} ({what})")
        if m["user_facts"]:
            print(f"  facts given by the user: {', '.join(m['user_facts'])}")
        r = m["repeatability"]
        print(f"  repeatability (the consumer's rule: {r['policy']['samples']} samples, CV <= "
              f"{r['policy']['cv_threshold']:.0%}, agreement <= "
              f"{r['policy']['source_agreement_threshold']:.0%}): {r['status']} "
              f"{r['point_counts']}")
        for warning in m["warnings"]:
            print(f"  warning: {warning}")
    return worst
