"""Property-based fuzzing (issue 17): `Measurements.from_csv` on arbitrary text and bytes gives
valid `Measurements` or a `ValueError`, never another exception, and `to_csv`/`from_csv` round
trips valid data exactly; `ParameterSpace` maps invert each other, the unit cube maps stay in
[0, 1] and samples stay inside the bounds, for random spaces with linear and log-scale
parameters."""

import math
import string

import jax
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from jcalib.data import Measurements
from jcalib.parameters import Parameter, ParameterSpace

FUZZ = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
EPS = np.finfo(np.float64).eps


# --- Measurements.from_csv ------------------------------------------------------------------
def _parse(path, content):
    if isinstance(content, str):
        path.write_text(content, encoding="utf-8", newline="")
    else:
        path.write_bytes(content)
    try:
        m = Measurements.from_csv(path)
    except ValueError as err:
        assert str(err), "a ValueError without a message"
        return None
    # whatever loads is a valid object: sorted finite times, finite measured values
    ts, values, mask = np.asarray(m.ts), np.asarray(m.values), np.asarray(m.mask)
    assert ts.ndim == 1 and values.shape == mask.shape == (ts.size, len(m.output_names)) and mask.any()
    assert np.all(np.isfinite(ts)) and np.all(np.diff(ts) >= 0) and np.all(np.isfinite(values))
    return m


CSV_CELLS = st.one_of(
    st.sampled_from(["t", "A", "B", "sigma_A", "sigma_B", "", " ", "0", "1", "-1", "2.5", "1e3", "1e999", "nan", "inf",
                     "-inf", "0x10", "1_0", "abc", '"', '"1,2"', "\ufeff", "\ufefft", "\x00", "١"]),
    st.text(alphabet="0123456789.-+eE ,tAB\"", max_size=6),
)
CSV_TEXT = st.lists(st.lists(CSV_CELLS, min_size=0, max_size=5).map(",".join), max_size=6).flatmap(
    lambda lines: st.sampled_from(["\n", "\r\n", "\r"]).map(lambda eol: eol.join(lines)))


@FUZZ
@given(content=st.one_of(CSV_TEXT, st.text(max_size=200), st.binary(max_size=200)))
def test_from_csv_gives_measurements_or_value_error(tmp_path, content):
    _parse(tmp_path / "fuzz.csv", content)


NUMBER_CELLS = st.one_of(st.floats(min_value=0.0, max_value=1e3).map(repr), st.integers(0, 9).map(str),
                         st.sampled_from(["", " 1 ", "+2", "1e-3", ".5", "5.", "1E2"]), CSV_CELLS)


@st.composite
def csv_with_header(draw):
    header = draw(st.sampled_from(["t,A,B", "\ufefft,A,B", "t,A,B,sigma_A,sigma_B", "t , A"]))
    n_cells = header.count(",") + 1
    rows = draw(st.lists(st.lists(NUMBER_CELLS, min_size=n_cells, max_size=n_cells).map(",".join), min_size=1,
                         max_size=5))
    if draw(st.booleans()):  # mostly sorted times, so that some files are valid
        rows = sorted(rows, key=lambda r: (len(r.split(",")[0]), r))
    return "\n".join([header, *rows]) + draw(st.sampled_from(["", "\n", "\n\n"]))


@FUZZ
@given(content=csv_with_header())
def test_from_csv_with_a_valid_header_gives_measurements_or_value_error(tmp_path, content):
    _parse(tmp_path / "fuzz.csv", content)


FINITE = st.floats(allow_nan=False, allow_infinity=False, width=64)
NAMES = st.lists(st.text(alphabet=string.ascii_letters, min_size=1, max_size=4), min_size=1, max_size=3,
                 unique=True)


@st.composite
def measurements(draw):
    names = draw(NAMES)
    n_times, n_outputs = draw(st.integers(1, 5)), len(names)
    ts = np.sort(np.array(draw(st.lists(FINITE, min_size=n_times, max_size=n_times))))
    values = np.array(draw(st.lists(FINITE, min_size=n_times * n_outputs, max_size=n_times * n_outputs)))
    mask = np.array(draw(st.lists(st.booleans(), min_size=n_times * n_outputs, max_size=n_times * n_outputs)))
    assume(mask.any())
    shape = (n_times, n_outputs)
    positive = st.floats(min_value=1e-300, max_value=1e300, allow_nan=False, allow_infinity=False)
    sigma = draw(st.one_of(
        st.none(), positive,
        st.lists(positive, min_size=n_outputs, max_size=n_outputs).map(np.array),
        st.lists(positive, min_size=n_times * n_outputs, max_size=n_times * n_outputs).map(
            lambda s: np.array(s).reshape(shape))))
    return Measurements(ts, values.reshape(shape), mask.reshape(shape), sigma, tuple(names))


@FUZZ
@given(m=measurements(), bom=st.booleans())
def test_csv_round_trip_is_exact(tmp_path, m, bom):
    path = tmp_path / "round.csv"
    m.to_csv(path)
    if bom:  # as a spreadsheet program saves it
        path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    back = Measurements.from_csv(path)
    assert back.output_names == m.output_names
    mask = np.asarray(m.mask)
    np.testing.assert_array_equal(np.asarray(back.ts), np.asarray(m.ts))
    np.testing.assert_array_equal(np.asarray(back.mask), mask)
    np.testing.assert_array_equal(np.asarray(back.values)[mask], np.asarray(m.values)[mask])
    if m.sigma is None:
        assert back.sigma is None
    else:
        np.testing.assert_array_equal(np.asarray(back.sigma_full())[mask], np.asarray(m.sigma_full())[mask])


# --- ParameterSpace maps ----------------------------------------------------------------------
@st.composite
def parameter(draw, name):
    log_scale = draw(st.booleans())
    if log_scale:  # positive bounds spanning up to 12 decades
        lo_exp = draw(st.floats(-10, 5))
        hi_exp = lo_exp + draw(st.floats(0.01, 12))
        lower, upper = 10.0**lo_exp, 10.0**hi_exp
    else:  # any sign; the width at least 1e-6 of the magnitude
        lower = draw(st.floats(-1e6, 1e6, allow_subnormal=False))  # subnormal bounds are refused
        upper = lower + max(abs(lower), 1.0) * draw(st.floats(1e-6, 1e3))
    assume(lower < upper)
    return Parameter(name, lower, lower, upper, log_scale=log_scale)


@st.composite
def spaces(draw):
    n = draw(st.integers(1, 4))
    return ParameterSpace(draw(parameter(f"p{i}")) for i in range(n))


def _internal_tolerance(space):
    """Round-off of the maps, in unit-cube coordinates: a few ulps of the internal bounds'
    magnitude relative to the internal width (plus the exp/log round-off on log scale)."""
    lo, hi = space.lower_internal, space.upper_internal
    return 16 * EPS * np.maximum(np.maximum(abs(lo), abs(hi)), 1.0) / (hi - lo)


@FUZZ
@given(space=spaces(), u=st.lists(st.floats(0.0, 1.0), min_size=4, max_size=4))
def test_internal_and_unit_maps_invert_each_other(space, u):
    n = space.n_params
    u = np.array(u[:n])
    lo, hi = space.lower_internal, space.upper_internal
    z = lo + u * (hi - lo)
    theta = np.clip([math.exp(zi) if log else zi for zi, log in zip(z, space.log_scale)],
                    space.lower, space.upper)  # a point inside the bounds
    back = np.asarray(space.to_physical(space.to_internal(theta)))
    np.testing.assert_allclose(back, theta, rtol=8 * EPS, atol=0)
    unit = np.asarray(space.to_unit(theta))
    tol = _internal_tolerance(space)
    assert np.all((unit >= -tol) & (unit <= 1 + tol)), (unit, theta)
    again = np.asarray(space.from_unit(unit))
    assert np.all((again >= space.lower) & (again <= space.upper))
    np.testing.assert_allclose(space.to_unit(again), unit, rtol=0, atol=float(np.max(4 * tol)))
    assert bool(space.contains(theta))


@FUZZ
@given(space=spaces(), u=st.lists(st.floats(0.0, 1.0), min_size=4, max_size=4))
def test_from_unit_stays_inside_the_bounds(space, u):
    theta = np.asarray(space.from_unit(np.array(u[: space.n_params])))
    assert np.all(np.isfinite(theta)) and np.all((theta >= space.lower) & (theta <= space.upper))


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:The balance properties of Sobol:UserWarning")
@settings(max_examples=30, deadline=None)
@given(space=spaces(), seed=st.integers(0, 2**31 - 1), n=st.integers(1, 9),
       method=st.sampled_from(["uniform", "lhs", "sobol"]))
def test_samples_stay_inside_the_bounds(space, seed, n, method):
    theta = np.asarray(space.sample(jax.random.key(seed), n, method))
    assert theta.shape == (n, space.n_params)
    assert np.all((theta >= space.lower) & (theta <= space.upper))
    assert bool(np.all(np.asarray(space.contains(theta))))


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_non_finite_theta_is_never_inside(value):
    space = ParameterSpace([Parameter("a", 1.0, 0.1, 10.0, log_scale=True), Parameter("b", 0.0, -1.0, 1.0)])
    assert not bool(space.contains(np.array([value, 0.0])))
    assert not bool(space.contains(np.array([1.0, value])))
