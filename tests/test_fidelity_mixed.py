"""Mixed steps priced from measured mixed rows (predict_mixed.MIXED_RULE; issue 53, "Prices from
rows"): the rule's three terms on constructed rows (pure pricing logic), the steps outside
what was measured named by the coordinate that fell outside, the old rule only where a
profile has no mixed rows and labelled so; then the real v7 CPU fixture's mixed points, a
served step priced exactly at one of them, and the reports' counts."""

from __future__ import annotations

import statistics

import pytest

from pytest_sdbench.fidelity.predict import Interpolator
from pytest_sdbench.fidelity.predict_mixed import (
    BASIS_ROWS,
    BASIS_RULE,
    OFF_DECODE_BATCH,
    OFF_DECODE_CONTEXT,
    OFF_GRAPH_EDGE,
    OFF_PREFILL_TOKENS,
    OFF_PROMPTS,
    MixedRow,
    lattice_of,
    mixed_rows,
)
from pytest_sdbench.fidelity.predict_phases import NO_MODE, NO_PHASE, MeasuredPoint
from pytest_sdbench.fidelity.report import OURS, StepRow, kind_figures, mixed_pricing
from pytest_sdbench.fidelity.served_compare import mixed_pricing as served_mixed_pricing
from pytest_sdbench.fidelity.served_steps import (
    ServedRequest,
    mixed_gaps,
    price_served_steps,
)
from pytest_sdbench.run.profile import read_profile

from .conftest import FIXTURES
from .fidelity_runs import step

V7 = FIXTURES / "cpu-agg-v7.json"
K, AL, C0 = 3, 2.78, 2048
READ = C0 + 1.0          # the context the lattice's decodes read (C0 + their first token)


def _row(i: int, mode: str, decode_batch: int, tokens: int, seconds: float, *,
         context: float = READ, prefill_batch: int = 1, cached: int = 0, asked: int = C0,
         al: float | None = AL) -> MixedRow:
    return MixedRow(point_index=i, graph_mode=mode, decode_batch=decode_batch, context=context,
                    prefill_batch=prefill_batch, prefill_tokens=tokens, cached_tokens=cached,
                    scheduled_tokens=decode_batch * (1 + K) + tokens, seconds=seconds,
                    context_tokens=asked, acceptance_length=al)


# The lattice at C0: decode batches 1 and 4, each on both sides of a piecewise-graph edge at
# 512 scheduled tokens (T = 512 - 4 B_d and one more), and the columns beside it.
LATTICE = [_row(0, "piecewise", 1, 128, 0.010), _row(1, "piecewise", 1, 508, 0.018),
           _row(2, "eager", 1, 509, 0.020), _row(3, "eager", 1, 2048, 0.050),
           _row(4, "piecewise", 4, 128, 0.013), _row(5, "piecewise", 4, 496, 0.022),
           _row(6, "eager", 4, 497, 0.024), _row(7, "eager", 4, 2048, 0.056)]
COLUMNS = [_row(8, "piecewise", 4, 128, 0.030, context=8193.0, asked=8192),    # context
           _row(9, "piecewise", 4, 128, 0.015, prefill_batch=2),             # split
           _row(10, "piecewise", 4, 128, 0.014, cached=64),                  # prefix
           _row(11, "piecewise", 4, 128, 0.500, al=2.0)]                     # another AL


def _points() -> list[MeasuredPoint]:
    """Prefill points (piecewise up to 512 tokens, eager above) and decode points (full)."""
    prefill = [("piecewise", 1, 128, 0, 0.008), ("piecewise", 1, 512, 0, 0.012),
               ("piecewise", 1, 256, 128, 0.011), ("piecewise", 2, 128, 0, 0.009),
               ("piecewise", 2, 512, 0, 0.014), ("eager", 1, 1024, 0, 0.020),
               ("eager", 1, 4096, 0, 0.050)]
    decode = [(1, 1024, 0.004), (1, 8192, 0.006), (4, 4096, 0.005), (4, 32800, 0.009)]
    return ([MeasuredPoint("prefill", i, m, b, t, p, s) for i, (m, b, t, p, s)
             in enumerate(prefill)]
            + [MeasuredPoint("decode", i, "full", b, 0, kv, s, AL)
               for i, (b, kv, s) in enumerate(decode)])


@pytest.fixture
def rule() -> Interpolator:
    return Interpolator(_points(), draft_depth=K, acceptance_length=AL, mixed=LATTICE + COLUMNS)


def _price(rule: Interpolator, decode_batch: int, context: float, prefill_batch: int,
           tokens: int, mode: str, cached: int = 0):
    return rule.price_mixed(decode_batch, prefill_batch, tokens, mode,
                            decode_kv_tokens=decode_batch * context, prefill_kv_tokens=cached)


def _lerp(x0: float, y0: float, x1: float, y1: float, x: float) -> float:
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


# ---- the rule on constructed rows ------------------------------------------------------------

def test_the_lattice_is_the_single_uncached_prompts_at_the_context_most_were_measured_at(rule):
    assert rule.lattice_context == C0
    assert rule.lattice == LATTICE      # not the columns, nor the rows of another AL
    # a tie of rows goes to more decode batches, then to the shorter context
    tie = [_row(0, "eager", 1, 64, 0.01, asked=512), _row(1, "eager", 2, 64, 0.01, asked=512),
           _row(2, "eager", 1, 64, 0.01, asked=128), _row(3, "eager", 1, 96, 0.01, asked=128),
           _row(4, "eager", 1, 64, 0.01, asked=64), _row(5, "eager", 2, 64, 0.01, asked=64)]
    assert lattice_of(tie) == (tie[4:], 64)
    assert lattice_of([_row(0, "eager", 1, 64, 0.01, prefill_batch=2)]) == ([], None)


@pytest.mark.parametrize("row", LATTICE, ids=lambda r: f"Bd{r.decode_batch}-T{r.prefill_tokens}")
def test_a_step_at_a_lattice_point_is_priced_exactly_by_its_row(rule, row):
    priced = _price(rule, row.decode_batch, row.context, 1, row.prefill_tokens, row.graph_mode)
    assert priced.seconds == row.seconds
    assert priced.basis == BASIS_ROWS
    assert priced.how == f"lattice (context {C0}) at decode batch {row.decode_batch}"


def test_at_a_measured_decode_batch_the_base_is_linear_in_the_new_tokens(rule):
    priced = _price(rule, 1, READ, 1, 318, "piecewise")
    assert priced.seconds == pytest.approx(_lerp(128, 0.010, 508, 0.018, 318), rel=1e-12)


def test_between_decode_batches_the_base_is_bilinear(rule):
    at_1 = _lerp(128, 0.010, 508, 0.018, 300)
    at_4 = _lerp(128, 0.013, 496, 0.022, 300)
    priced = _price(rule, 2, READ, 1, 300, "piecewise")
    assert priced.seconds == pytest.approx(_lerp(1, at_1, 4, at_4, 2), rel=1e-12)
    assert priced.how == f"lattice (context {C0}) between decode batches 1 and 4"


@pytest.mark.parametrize("mode, tokens, at_1, at_4", [
    # piecewise, S = 2 x 4 + 500 = 508: T = 500 at batch 4 (S 516) ran eager there, so both
    # neighbours are read at S: T = 504 at batch 1, 492 at batch 4
    ("piecewise", 500, _lerp(128, 0.010, 508, 0.018, 504), _lerp(128, 0.013, 496, 0.022, 492)),
    # eager, S = 514: T = 506 at batch 1 (S 510) ran piecewise there: 510 and 498 instead
    ("eager", 506, _lerp(509, 0.020, 2048, 0.050, 510), _lerp(497, 0.024, 2048, 0.056, 498)),
])
def test_at_the_graph_edge_both_neighbours_are_read_at_the_steps_own_scheduled_tokens(
        rule, mode, tokens, at_1, at_4):
    priced = _price(rule, 2, READ, 1, tokens, mode)
    assert priced.seconds == pytest.approx(_lerp(1, at_1, 4, at_4, 2), rel=1e-12)
    assert priced.how == (f"lattice (context {C0}) between decode batches 1 and 4 at the "
                          f"step's {2 * 4 + tokens} scheduled tokens (the graph edge)")


def test_the_decodes_context_adds_the_decode_rows_difference_at_the_decode_batch(rule):
    # D(4, C) from the decode points (full: the step's piecewise mode has none) at 4 x C KV
    def d(context: float) -> float:
        return _lerp(4096, 0.005, 32800, 0.009, 4 * context)
    priced = _price(rule, 4, 4096, 1, 128, "piecewise")
    assert priced.seconds == pytest.approx(0.013 + d(4096) - d(READ), rel=1e-12)
    assert "decodes' context 4096 against 2049" in priced.how
    # shorter than the lattice's context: a negative term, still inside the decode rows
    shorter = _price(rule, 4, 1500, 1, 128, "piecewise")
    assert shorter.seconds == pytest.approx(0.013 + d(1500) - d(READ), rel=1e-12)
    assert shorter.seconds < 0.013
    # not the context column's row (0.030 at 8193): it tests the rule, it is not the base
    assert _price(rule, 4, 8193, 1, 128, "piecewise").seconds == pytest.approx(
        0.013 + d(8193) - d(READ), rel=1e-12)


def test_the_prompts_add_the_prefill_rows_price_of_them_less_the_lattices_one_prompt(rule):
    # two prompts of 128 tokens together: Pf(2, 128, 0) - Pf(1, 128, 0) = 0.009 - 0.008
    split = _price(rule, 4, READ, 2, 128, "piecewise")
    assert split.seconds == pytest.approx(0.013 + 0.001, rel=1e-12)
    assert "2 prompt(s) over 0 cached KV: +1.0000 ms" in split.how
    # one prompt of 256 new tokens over 64 cached: halfway to the cached-prefix curve
    base = _lerp(128, 0.013, 496, 0.022, 256)
    uncached = _lerp(128, 0.008, 512, 0.012, 256)
    prefix = _price(rule, 4, READ, 1, 256, "piecewise", cached=64)
    assert prefix.seconds == pytest.approx(base + (0.011 - uncached) * 64 / 128, rel=1e-12)
    # both terms at once, added
    both = _price(rule, 4, 4096, 2, 128, "piecewise")
    assert both.seconds == pytest.approx(
        _price(rule, 4, 4096, 1, 128, "piecewise").seconds + 0.001, rel=1e-12)


@pytest.mark.parametrize("shape, mode, category, detail", [
    ((8, READ, 1, 128), "piecewise", OFF_DECODE_BATCH,
     "decode batch 8 outside the mixed lattice's decode batches measured piecewise: [1, 4]"),
    ((1, READ, 1, 100), "piecewise", OFF_PREFILL_TOKENS,
     "100 prefill tokens outside the [128, 508] measured piecewise at decode batch 1"),
    ((2, READ, 1, 3000), "eager", OFF_PREFILL_TOKENS,
     "3000 prefill tokens outside the [128, 2048] measured at decode batch 1"),
    ((2, READ, 1, 505), "piecewise", OFF_GRAPH_EDGE,
     "505 prefill tokens at decode batch 2 (513 scheduled, piecewise): decode batch 1 ran "
     "piecewise over [128, 508] prefill tokens, neither 505 nor 509 (the same scheduled "
     "tokens)"),
    ((4, 20000, 1, 128), "piecewise", OFF_DECODE_CONTEXT,
     "the decodes' context 20000 against the lattice's 2049: 80000 KV tokens at batch 4 "
     "outside the [4096, 32800] measured (full)"),
    ((4, READ, 8, 128), "piecewise", OFF_PROMPTS,
     "8 prompt(s) of 128 new tokens over 0 cached against the lattice's one uncached: batch "
     "8 outside the prefill batches measured piecewise: [1, 2]"),
    ((4, READ, 1, 128), "full", NO_MODE,
     "the step ran full; the profile's mixed lattice rows ran eager, piecewise"),
])
def test_a_step_outside_the_rows_is_not_priced_and_names_the_coordinate(rule, shape, mode,
                                                                        category, detail):
    decode_batch, context, prefill_batch, tokens = shape
    priced = _price(rule, decode_batch, context, prefill_batch, tokens, mode)
    assert (priced.seconds, priced.category, priced.detail) == (None, category, detail)
    assert priced.basis == BASIS_ROWS    # never handed to the rule


def test_the_rule_prices_a_mixed_step_only_where_the_profile_has_no_mixed_rows(rule):
    bare = Interpolator(_points(), draft_depth=K, acceptance_length=AL)
    # one prefill step of 1 + 1 requests and 128 + 1 x 4 tokens: the rule, labelled so
    ruled = bare.price_mixed(1, 1, 128, "piecewise")
    assert ruled.seconds == pytest.approx(_lerp(128, 0.009, 512, 0.014, 132), rel=1e-12)
    assert (ruled.how, ruled.basis) == ("same batch", BASIS_RULE)
    assert bare.mixed_basis == BASIS_RULE
    assert rule.mixed_basis == BASIS_ROWS
    # a step the rows do not reach stays unpriced: the rule is not a fallback for them
    assert rule.price_mixed(2, 1, 100, "piecewise", decode_kv_tokens=2 * READ).seconds is None
    # mixed rows at another AL only: no row for this run, and still not the rule
    other = Interpolator(_points(), K, AL, mixed=[COLUMNS[-1]])
    priced = other.price_mixed(4, 1, 128, "piecewise", decode_kv_tokens=4 * READ)
    assert (priced.category, priced.basis) == (NO_PHASE, BASIS_ROWS)
    # with rows, the decodes' KV must be given
    assert rule.price_mixed(4, 1, 128, "piecewise").category == OFF_DECODE_CONTEXT


def test_a_mixed_step_record_is_priced_as_its_totals(rule):
    bare = Interpolator(_points(), draft_depth=K, acceptance_length=AL)
    record = step(1, "mixed", "piecewise", 0.02, prefill=(2, 128, 0), decode=(4, 4 * 4096))
    from_rows = rule.price(record)
    assert from_rows.seconds == _price(rule, 4, 4096, 2, 128, "piecewise").seconds
    assert from_rows.basis == BASIS_ROWS
    by_rule = bare.price(record)
    assert by_rule.basis == BASIS_RULE
    assert by_rule.seconds is None      # 6 requests: no prefill batch above 2
    assert rule.price(step(2, "decode", "full", 0.005, decode=(4, 4096))).basis is None
    assert rule.price(step(3, "mixed", "unknown", 0.02, prefill=(1, 128, 0),
                           decode=(4, 4 * 2049))).basis == BASIS_ROWS


def test_a_mixed_steps_graph_mode_is_read_off_the_mixed_rows_scheduled_tokens(rule):
    assert [rule.mixed_mode(s) for s in (8, 132, 300, 512, 513, 2000, 99999)] == \
        ["piecewise", "piecewise", "piecewise", "piecewise", "eager", "eager", "eager"]
    bare = Interpolator(_points(), draft_depth=K, acceptance_length=AL)
    assert [bare.mixed_mode(s) for s in (300, 600)] == ["piecewise", "eager"]   # its prefills


# ---- the real v7 CPU fixture ----------------------------------------------------------------

@pytest.fixture(scope="module")
def v7():
    return read_profile(V7)


def test_the_fixtures_mixed_points_become_rows_at_the_shape_their_steps_read(v7):
    rows = mixed_rows(v7)
    assert len(rows) == len({o.point_index for o in v7.mixed}) == 3
    for row in rows:
        repeats = [o for o in v7.mixed if o.point_index == row.point_index]
        point = repeats[0].point
        assert row.seconds == statistics.median(o.timing.seconds for o in repeats)
        assert (row.decode_batch, row.prefill_batch) == (point.decode_batch_size,
                                                         point.prefill_batch_size)
        assert row.prefill_tokens == point.prefill_batch_size * point.prefill_tokens
        assert row.cached_tokens == point.prefill_batch_size * point.cached_prefix_tokens
        assert row.context == point.context_tokens + 1      # sync: C + its first token
        assert row.scheduled_tokens == point.scheduled_tokens
        assert row.graph_mode == "eager"


def _served_at_point_0() -> list[ServedRequest]:
    """Two requests of 128-token prompts decoding and a 64-token prompt admitted beside
    them: its prefill window (1.5, 5] overlaps their gap (1, 4], the longest one chunk
    before its first chunk at 5 (the lag), where each has read its prompt and one token:
    point 0's shape (2 decoding at 129, one prompt of 64)."""
    decoding = ServedRequest(0.0, 128, 7, 1.0, (3.0, 1.0, 1.0, 1.0, 1.0, 1.0))
    return [decoding, decoding, ServedRequest(1.5, 64, 3, 3.5, (1.0, 1.0))]


def test_a_served_step_at_a_measured_point_is_priced_exactly_by_its_row(v7):
    rule = Interpolator.from_artifact(v7)
    point_0 = next(r for r in mixed_rows(v7) if r.point_index == 0)
    gaps, waiting, lag = mixed_gaps(_served_at_point_0())
    assert waiting == 2                   # their gap (4, 5]: the lag step
    assert lag["lag_chunks"] == 1
    assert [(g.decoding, g.prompts, g.kv_tokens) for g in gaps] == [(2, (64,), 258)] * 2
    mixed = price_served_steps(v7, _served_at_point_0())["mixed"]
    assert (mixed["basis"], mixed["gaps"], mixed["priced_from_rows"],
            mixed["priced_by_rule"], mixed["unpriced"]) == (BASIS_ROWS, 2, 2, 0, {})
    assert mixed["graph_modes"] == {"eager": 2}
    assert mixed["steps_about"] == {BASIS_ROWS: 1.0, BASIS_RULE: 0.0, "outside": 0.0}
    assert mixed["overall"]["predicted_median_ms"] == pytest.approx(1e3 * point_0.seconds,
                                                                    rel=1e-12)
    assert mixed["overall"]["served_median_ms"] == pytest.approx(3e3)
    assert mixed["pricing_rule"].startswith("Mixed step (B_d decoding requests")
    assert served_mixed_pricing(mixed) == (
        "2 mixed gaps: 2 priced from the profile's mixed rows (about 1 steps), none by the "
        "rule, 0 outside what was measured (about 0 steps)")
    # the same step as the in-process fidelity records it: the row's median, exactly
    record = step(1, "mixed", "eager", 0.01, prefill=(1, 64, 0), decode=(2, 258))
    assert rule.price(record).seconds == point_0.seconds


def test_the_fixtures_other_points_lie_outside_its_lattice_and_say_so(v7):
    """The lattice is the single uncached prompts at one context: point 0 (C 128) and
    point 2 (C 512) tie at one row each, and the shorter context wins; point 1 (two cached
    prompts) and point 2 (decode batch 1) are outside it, named."""
    rule = Interpolator.from_artifact(v7)
    assert (rule.lattice_context, [r.point_index for r in rule.lattice]) == (128, [0])
    rows = {r.point_index: r for r in mixed_rows(v7)}
    for index in (1, 2):
        r = rows[index]
        priced = rule.price(step(1, "mixed", "eager", r.seconds,
                                 prefill=(r.prefill_batch, r.prefill_tokens, r.cached_tokens),
                                 decode=(r.decode_batch, round(r.decode_batch * r.context))))
        assert (priced.category, priced.basis) == (OFF_DECODE_BATCH, BASIS_ROWS)
        assert priced.detail == (f"decode batch {r.decode_batch} outside the mixed lattice's "
                                 "decode batches measured eager: [2]")


def test_the_in_process_report_counts_the_mixed_steps_by_how_they_were_priced(v7):
    rule = Interpolator.from_artifact(v7)
    rows = [StepRow(0, s, {OURS: rule.price(s)}) for s in (
        step(1, "mixed", "eager", 0.0087, prefill=(1, 64, 0), decode=(2, 258)),
        step(2, "mixed", "eager", 0.0090, prefill=(1, 64, 0), decode=(2, 2 * 300)),
        step(3, "mixed", "eager", 0.0100, prefill=(1, 64, 0), decode=(1, 129)),
        step(4, "mixed", "eager", 0.0100, prefill=(1, 200, 0), decode=(2, 258)),
        step(5, "decode", "eager", 0.0060, decode=(1, 300)))]
    mixed = kind_figures(rows, OURS)["mixed"]
    assert (mixed["steps"], mixed["priced_steps"]) == (4, 2)
    assert mixed["unpriced"] == {OFF_DECODE_BATCH: 1, OFF_PREFILL_TOKENS: 1}
    assert list(mixed["by_basis"]) == [BASIS_ROWS]
    assert (mixed["by_basis"][BASIS_ROWS]["steps"],
            mixed["by_basis"][BASIS_ROWS]["priced_steps"]) == (4, 2)
    assert mixed_pricing(mixed) == (
        "4 mixed step(s): from the profile's mixed rows, 2 of 4 priced; 2 not priced "
        "(1 off-grid: decode batch, 1 off-grid: prefill tokens)")
    # a profile with no mixed rows: the same steps by the rule, said so
    bare = Interpolator(rule.prefill + rule.decode, rule.draft_depth, None)
    ruled = kind_figures([StepRow(0, r.step, {OURS: bare.price(r.step)}) for r in rows],
                         OURS)["mixed"]
    assert list(ruled["by_basis"]) == [BASIS_RULE]
    assert mixed_pricing(ruled).startswith(
        "4 mixed step(s): by the rule (the profile has no mixed rows), ")
