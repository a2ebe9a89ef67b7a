"""The fail-closed validator. It reads an artifact's JSON, refuses what it cannot trust, and
names the field and the value of every violation, one message each; it never repairs or
guesses. docs/artifact.md lists every rule.

    report = validate_data(json.load(open(path)))
    report.ok, report.errors, report.flags, report.legacy

Digests are unkeyed sha256: anyone can recompute them, so they only prove that the parts
agree with each other. Each rule below therefore checks one fact against another the
artifact also states (the device against its name, backend and graph modes; the sums
against their steps; the grid against the KV capacity; ...), so that a forgery that
changes one fact coherently, digests recomputed, still contradicts another.

One module per rule section, each importing only helpers (what they share), observations
also by_phase (the rules of each phase's steps); report runs them all: helpers, header,
identity, kv, grid, environment, observations, by_phase, summaries, report.
"""
