"""Property: a random single mutation of a real artifact that breaks an invariant the
validator claims to check is never accepted.

The invariants are restated here independently of the validator, as the set of fields
whose change must be caught (joins, shapes, provenance, coverage, status, digests of the
identity, the KV capacity and the grid), plus types (an integer stays an integer) and
required keys."""

import copy
import json
import math
import re

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from pytest_sdbench.artifact.validate.report import validate_data

from .conftest import FIXTURES

REAL = json.loads((FIXTURES / "cpu-agg-v4.json").read_text())
OBS = r"^(prefill|decode)\[\d+\]\."
CHECKED = [re.compile(p) for p in (
    r"^(kind|schema_version|mode|status|time_unit|device)$",
    r"^measurement_policy\.", r"^integrity\.", r"^identity\.", r"^kv_capacity\.", r"^grid\.",
    r"^coverage\.(expected|completed|skipped)$",
    OBS + r"(point_index|native_iteration_id)$",
    OBS + r"point\.",
    OBS + r"timing\.(native_iteration_id|source|scope)$",
    OBS + r"provenance\.(device|timer)$",
    OBS + r"snapshot\.(native_iteration_id|booking|phase|total_scheduled_tokens)$",
    OBS + r"snapshot\.requests\[\d+\]\.(new_tokens|kv_tokens|draft_tokens)$",
)]
# Keys that may be absent because their default equals the value the real artifact holds.
OPTIONAL_WITH_DEFAULT = {"acceptance_length": None, "synthetic_acceptance_length": None,
                         "worker": None, "corrections": [], "skipped_points": [],
                         "value": None, "source": None, "reason": None}


def leaves(node, path=""):
    if isinstance(node, dict):
        for key, value in node.items():
            yield from leaves(value, f"{path}.{key}" if path else key)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from leaves(value, f"{path}[{i}]")
    else:
        yield path, node


LEAVES = list(leaves(REAL))


def set_path(data, path, value, delete=False):
    parts = re.findall(r"[^.\[\]]+|\[\d+\]", path)
    node = data
    for part in parts[:-1]:
        node = node[int(part[1:-1])] if part.startswith("[") else node[part]
    last = parts[-1]
    if last.startswith("["):
        node[int(last[1:-1])] = value
        return True
    if delete:
        del node[last]
        return True
    node[last] = value
    return True


def type_broken(old, new) -> bool:
    if isinstance(old, bool):
        return not isinstance(new, bool)
    if isinstance(old, int):
        return isinstance(new, bool) or not isinstance(new, int)
    if isinstance(old, float):
        return isinstance(new, bool) or not isinstance(new, (int, float))
    if isinstance(old, str):
        return not isinstance(new, str)
    return False


def breaks_an_invariant(path, old, new, deleted) -> bool | None:
    """True: the mutation breaks a checked invariant; None: this test makes no claim."""
    key = path.rsplit(".", 1)[-1]
    if deleted:
        if key in OPTIONAL_WITH_DEFAULT and OPTIONAL_WITH_DEFAULT[key] == old:
            return None
        return True
    if old is None:
        return True if any(p.search(path) for p in CHECKED) else None
    if type_broken(old, new):
        return True
    if path.endswith(".timing.seconds") and not (math.isfinite(new) and new > 0):
        return True
    if any(p.search(path) for p in CHECKED):
        return True
    return None


values = st.one_of(st.integers(-3, 10**6), st.floats(allow_nan=True, allow_infinity=True),
                   st.booleans(), st.text(max_size=6), st.none())


# derandomize: CI sees the same 400 mutations every run (a 6000-example random search found
# no counterexample either; widen max_examples locally to search further).
@settings(max_examples=400, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(index=st.integers(0, len(LEAVES) - 1), new=values, delete=st.booleans())
def test_a_mutation_that_breaks_an_invariant_is_rejected(index, new, delete):
    path, old = LEAVES[index]
    deleted = delete and not path.endswith("]")
    if not deleted:
        assume(type(new) is not type(old) or new != old or (isinstance(new, float) and
                                                             math.isnan(new)))
    claim = breaks_an_invariant(path, old, new, deleted)
    assume(claim is not None)
    data = copy.deepcopy(REAL)
    set_path(data, path, new, delete=deleted)
    report = validate_data(data)
    assert not report.ok, f"accepted {'deletion of' if deleted else 'mutation of'} {path}: " \
                          f"{old!r} -> {new!r}"


def test_the_unmutated_artifact_is_accepted():
    assert validate_data(copy.deepcopy(REAL)).ok
