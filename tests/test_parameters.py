import math

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jcalib.parameters import Parameter, ParameterSpace


@pytest.fixture(scope="module")
def space():
    return ParameterSpace([
        Parameter("kab", 1e-4, 1e-6, 1e-3, "L/(mol*s)", log_scale=True),
        Parameter("f", 0.5, 0.1, 1.0),
        Parameter("ktc", 1e7, 1e4, 1e9, log_scale=True),
    ])


def test_arrays_and_names(space):
    assert space.names == ("kab", "f", "ktc")
    np.testing.assert_array_equal(space.nominal, [1e-4, 0.5, 1e7])
    np.testing.assert_array_equal(space.lower, [1e-6, 0.1, 1e4])
    np.testing.assert_array_equal(space.upper, [1e-3, 1.0, 1e9])
    np.testing.assert_array_equal(space.log_scale, [True, False, True])
    assert space.nominal.dtype == np.float64


def test_internal_is_log_for_log_scale(space):
    z = np.asarray(space.to_internal(space.nominal))
    np.testing.assert_allclose(z, [np.log(1e-4), 0.5, np.log(1e7)], rtol=1e-15)


def test_unit_cube_maps(space):
    np.testing.assert_allclose(np.asarray(space.to_unit(space.lower)), 0.0, atol=1e-15)
    np.testing.assert_allclose(np.asarray(space.to_unit(space.upper)), 1.0, atol=1e-15)
    mid = np.asarray(space.from_unit(np.full(3, 0.5)))
    np.testing.assert_allclose(mid, [np.sqrt(1e-6 * 1e-3), 0.55, np.sqrt(1e4 * 1e9)], rtol=1e-12)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(0.0, 1.0), min_size=3, max_size=3))
def test_round_trips(u):
    space = ParameterSpace([
        Parameter("a", 1e-4, 1e-6, 1e-3, log_scale=True),
        Parameter("b", 0.5, 0.1, 1.0),
        Parameter("c", 1e7, 1e4, 1e9, log_scale=True),
    ])
    theta = np.asarray(space.from_unit(np.asarray(u)))
    assert bool(space.contains(theta))
    back = np.asarray(space.to_physical(space.to_internal(theta)))
    np.testing.assert_allclose(back, theta, rtol=1e-12, atol=0)
    np.testing.assert_allclose(np.asarray(space.to_unit(theta)), u, atol=1e-12)


@pytest.mark.parametrize("method", ["uniform", "lhs", "sobol"])
def test_samples_inside_bounds_and_reproducible(space, method):
    a = np.asarray(space.sample(jax.random.key(0), 64, method))
    b = np.asarray(space.sample(jax.random.key(0), 64, method))
    c = np.asarray(space.sample(jax.random.key(1), 64, method))
    assert a.shape == (64, 3) and a.dtype == np.float64
    assert np.all((a >= space.lower) & (a <= space.upper))
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, c)


def test_latin_hypercube_is_stratified(space):
    n = 50
    u = np.asarray(space.to_unit(space.sample(jax.random.key(3), n, "lhs")))
    strata = np.floor(u * n).astype(int)
    for j in range(3):  # every one of the n strata holds exactly one sample
        np.testing.assert_array_equal(np.sort(strata[:, j]), np.arange(n))


def test_sobol_is_balanced(space):
    u = np.asarray(space.to_unit(space.sample(jax.random.key(4), 256, "sobol")))
    # scrambled Sobol points fill each half of every axis exactly
    for j in range(3):
        assert np.sum(u[:, j] < 0.5) == 128


def test_subset_keeps_order(space):
    sub = space.subset(["ktc", "kab"])
    assert sub.names == ("ktc", "kab")
    np.testing.assert_array_equal(sub.nominal, [1e7, 1e-4])


def test_dict_round_trip(space):
    theta = space.to_vector({"f": 0.9})
    assert space.to_dict(theta) == {"kab": 1e-4, "f": 0.9, "ktc": 1e7}


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(name="k", nominal=1.0, lower=2.0, upper=1.0), "'k': lower < upper"),
        (dict(name="k", nominal=5.0, lower=0.0, upper=1.0), "'k': nominal 5.0 lies outside"),
        (dict(name="k", nominal=0.5, lower=-1.0, upper=1.0, log_scale=True), "need bounds >= 0"),
        (dict(name="k", nominal=float("nan"), lower=0.0, upper=1.0), "'k': nominal must be finite"),
        (dict(name="k", nominal=float("inf"), lower=0.0, upper=math.inf), "'k': nominal must be finite; got inf"),
        (dict(name="k", nominal=0.5, lower=math.inf, upper=1.0), "'k': lower must be finite or -inf; got inf"),
        (dict(name="k", nominal=0.5, lower=0.0, upper=-math.inf), "'k': upper must be finite or inf; got -inf"),
        (dict(name="k", nominal=0.5, lower=float("nan"), upper=1.0), "'k': lower must be finite or -inf; got nan"),
        (dict(name="k", nominal=0.0, lower=0.0, upper=math.inf, log_scale=True),
         r"'k': nominal 0.0 sits on the open bound 0.0, which the internal coordinate \('log' transform\)"),
        (dict(name="k", nominal=1.0, lower=1.0, upper=math.inf), "'k': nominal 1.0 sits on the open bound 1.0"),
        (dict(name="k", nominal=1.0, lower=-math.inf, upper=1.0), r"open bound 1.0.*'upper'"),
        (dict(name="k", nominal=0.5, lower=1e-310, upper=1.0), "'k': lower = 1e-310 is subnormal"),
        (dict(name="not valid", nominal=0.5, lower=0.0, upper=1.0), "must be an identifier"),
    ],
)
def test_parameter_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Parameter(**kwargs)


def test_space_validation(space):
    with pytest.raises(ValueError, match=r"duplicate parameter names \['a'\]"):
        ParameterSpace([Parameter("a", 1, 0, 2), Parameter("a", 1, 0, 2)])
    with pytest.raises(ValueError, match="unknown parameter 'kda'; known: 'kab', 'f', 'ktc'"):
        space.subset(["kda"])
    with pytest.raises(ValueError, match=r"theta must have shape \(n_params,\) with n_params=3"):
        space.to_dict(np.ones(2))
    with pytest.raises(ValueError, match="unknown method 'grid'"):
        space.sample(jax.random.key(0), 4, "grid")
    with pytest.raises(ValueError, match="n must be a positive integer"):
        space.sample(jax.random.key(0), 0)


# --- infinite bounds (issue 18 §6) --------------------------------------------------------
@pytest.fixture(scope="module")
def open_space():
    return ParameterSpace([
        Parameter("rate", 0.3, 0.0, math.inf, log_scale=True),   # (0, inf), log
        Parameter("loc", -1.0, -math.inf, math.inf),             # real line, identity
        Parameter("shift", 3.0, 1.0, math.inf),                  # (1, inf): log(theta - 1)
        Parameter("cap", -2.0, -math.inf, 5.0),                  # (-inf, 5): -log(5 - theta)
        Parameter("box", 0.5, 0.0, 1.0),                         # boxed, identity
    ])


def test_infinite_bounds_map_to_unconstrained_internal_coordinates(open_space):
    assert [p.transform for p in open_space] == ["log", "identity", "lower", "upper", "identity"]
    np.testing.assert_array_equal(open_space.lower_internal, [-np.inf, -np.inf, -np.inf, -np.inf, 0.0])
    np.testing.assert_array_equal(open_space.upper_internal, [np.inf, np.inf, np.inf, np.inf, 1.0])
    theta = np.array([0.3, -1.0, 3.0, -2.0, 0.5])
    z = np.asarray(open_space.to_internal(theta))
    np.testing.assert_allclose(z, [np.log(0.3), -1.0, np.log(2.0), -np.log(7.0), 0.5], rtol=1e-14)
    np.testing.assert_allclose(np.asarray(open_space.to_physical(z)), theta, rtol=1e-14)
    # internal vectors map inside the (open) bounds (far out, theta - a underflows against a)
    zs = np.array([[-10.0, -1e3, -10.0, -10.0, 0.2], [10.0, 1e3, 10.0, 10.0, 0.7]])
    thetas = np.asarray(open_space.to_physical(zs))
    assert bool(np.all(open_space.contains(thetas)))
    np.testing.assert_allclose(np.asarray(open_space.to_internal(thetas)), zs, rtol=1e-9, atol=1e-12)


def test_log_jacobian_is_the_log_derivative_of_to_physical(open_space):
    z = jax.numpy.array([0.4, -0.7, 1.3, -0.2, 0.6])
    jac = jax.jacfwd(open_space.to_physical)(z)
    expected = np.log(np.abs(np.linalg.det(np.asarray(jac))))
    np.testing.assert_allclose(float(open_space.log_jacobian(z)), expected, rtol=1e-12)
    batch = jax.numpy.stack([z, 2 * z])
    assert open_space.log_jacobian(batch).shape == (2,)


@pytest.mark.parametrize("call, method", [
    (lambda s: s.sample(jax.random.key(0), 4, "lhs"), r"ParameterSpace.sample\(method='lhs'\)"),
    (lambda s: s.sample(jax.random.key(0), 4), r"ParameterSpace.sample\(method='uniform'\)"),
    (lambda s: s.to_unit(s.nominal), "ParameterSpace.to_unit"),
    (lambda s: s.from_unit(np.full(s.n_params, 0.5)), "ParameterSpace.from_unit"),
])
def test_box_methods_refuse_infinite_bounds(open_space, call, method):
    with pytest.raises(ValueError, match=method + r" needs finite bounds, but parameter "
                       r"'rate' has bounds \[0.0, inf\] on a log scale; give it finite bounds"):
        call(open_space)
    assert open_space.subset(["box"]).has_box and not open_space.has_box
