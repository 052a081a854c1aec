"""Sobol' indices: analytic references (Ishigami, additive linear), SALib equality, the two
samplers, bootstrap intervals, determinism, the model path, Algorithm 1 and bad input.

Functions go in as `FunctionSimulator`s: a scalar function gives indices of shape (D, 1, 1)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from SALib.analyze import sobol as salib_sobol

from jcalib.model import FunctionSimulator, SimulationError
from jcalib.parameters import Parameter, ParameterSpace
from jcalib.sensitivity.sobol import (
    Selection,
    SobolResult,
    _analyze,
    saltelli_design,
    select_identifiable,
    sobol_indices,
)

N_ISHIGAMI = 8192
# Ishigami a=7, b=0.1 on [-pi, pi]^3: V = a^2/8 + b pi^4/5 + b^2 pi^8/18 + 1/2
ISHIGAMI_S1 = np.array([0.3139, 0.4424, 0.0])
ISHIGAMI_ST = np.array([0.5576, 0.4424, 0.2437])
ISHIGAMI_S13 = 0.2437  # the only non-zero second-order index, S_13 = ST_3


def ishigami(theta):
    return (jnp.sin(theta[0]) + 7.0 * jnp.sin(theta[1]) ** 2
            + 0.1 * theta[2] ** 4 * jnp.sin(theta[0]))


@pytest.fixture(scope="module")
def ishigami_space():
    return ParameterSpace([Parameter(f"x{i}", 0.0, -math.pi, math.pi) for i in (1, 2, 3)])


@pytest.fixture(scope="module")
def ishigami_simulator(ishigami_space):
    return FunctionSimulator(ishigami, ishigami_space)


@pytest.fixture(scope="module")
def ishigami_result(ishigami_simulator):
    return sobol_indices(jax.random.key(0), ishigami_simulator, None, N_ISHIGAMI, second_order=True)


@pytest.fixture(scope="module")
def ishigami_scipy(ishigami_simulator):
    return sobol_indices(jax.random.key(1), ishigami_simulator, None, N_ISHIGAMI, sampler="scipy")


def _scalar(x):
    """The indices of a scalar function without its (1, 1) output axes."""
    return np.asarray(x)[..., 0, 0]


def _salib_problem(space):
    return {"num_vars": space.n_params, "names": list(space.names),
            "bounds": [[p.lower, p.upper] for p in space]}


# --- analytic references and SALib -------------------------------------------------------
def test_ishigami_analytic(ishigami_result):
    assert isinstance(ishigami_result, SobolResult)
    assert ishigami_result.first_order.shape == (3, 1, 1)
    np.testing.assert_allclose(_scalar(ishigami_result.first_order), ISHIGAMI_S1, atol=0.02)
    np.testing.assert_allclose(_scalar(ishigami_result.total_order), ISHIGAMI_ST, atol=0.02)
    assert abs(float(_scalar(ishigami_result.second_order)[0, 2]) - ISHIGAMI_S13) < 0.03
    assert ishigami_result.n_simulations == N_ISHIGAMI * 8
    assert ishigami_result.output_shape == (1, 1)
    assert ishigami_result.n_constant == 0
    # a scalar output: the averages (eq. 12) are the indices themselves
    np.testing.assert_array_equal(ishigami_result.averaged_first_order, _scalar(ishigami_result.first_order))


def test_bootstrap_intervals_contain_analytic(ishigami_result):
    r = ishigami_result
    assert np.all(np.abs(_scalar(r.first_order) - ISHIGAMI_S1) <= _scalar(r.first_order_conf))
    assert np.all(np.abs(_scalar(r.total_order) - ISHIGAMI_ST) <= _scalar(r.total_order_conf))
    assert abs(_scalar(r.second_order)[0, 2] - ISHIGAMI_S13) <= _scalar(r.second_order_conf)[0, 2]
    # half-widths of the order of the Monte Carlo error: positive and small
    assert np.all((np.asarray(r.first_order_conf) > 1e-4) & (np.asarray(r.first_order_conf) < 0.05))


def test_equals_salib_analyze(ishigami_space, ishigami_result):
    """Same samples and outputs: identical estimators (first, total and second order)."""
    design_key, _ = jax.random.split(jax.random.key(0))  # sobol_indices' own key split
    thetas = saltelli_design(design_key, ishigami_space, N_ISHIGAMI, second_order=True)
    y = np.asarray(jax.vmap(ishigami)(thetas))
    ref = salib_sobol.analyze(_salib_problem(ishigami_space), y, calc_second_order=True,
                              num_resamples=10, seed=1)
    np.testing.assert_allclose(_scalar(ishigami_result.first_order), ref["S1"], rtol=0, atol=1e-8)
    np.testing.assert_allclose(_scalar(ishigami_result.total_order), ref["ST"], rtol=0, atol=1e-8)
    np.testing.assert_allclose(_scalar(ishigami_result.second_order), ref["S2"], rtol=0, atol=1e-8)


def test_bootstrap_equals_salib_resampling(ishigami_space):
    """Given the same resampled rows, the half-widths are SALib's z * std(ddof=1)."""
    n, d, n_boot = 256, 3, 20
    thetas = saltelli_design(jax.random.key(3), ishigami_space, n, second_order=True)
    y = np.asarray(jax.vmap(ishigami)(thetas))
    r = np.asarray(jax.random.randint(jax.random.key(4), (n_boot, n), 0, n))
    z = 1.959963984540054
    ours = _analyze(y[:, None], d, True, r, z)
    yn = (y - y.mean()) / y.std()
    a, b, ab, ba = salib_sobol.separate_output_values(yn, d, n, True)
    ri = r.T  # SALib indexes A[r] with r of shape (N, n_resamples)
    for j in range(d):
        s1_conf = z * salib_sobol.first_order(a[ri], ab[ri, j], b[ri]).std(ddof=1)
        st_conf = z * salib_sobol.total_order(a[ri], ab[ri, j], b[ri]).std(ddof=1)
        assert abs(ours["s1_conf"][j, 0] - s1_conf) < 1e-8
        assert abs(ours["st_conf"][j, 0] - st_conf) < 1e-8
        for k in range(j + 1, d):
            s2_conf = z * salib_sobol.second_order(a[ri], ab[ri, j], ab[ri, k], ba[ri, j],
                                                   b[ri]).std(ddof=1)
            assert abs(ours["s2_conf"][j, k, 0] - s2_conf) < 1e-8


@pytest.mark.parametrize("sampler", ["salib", "scipy"])
@pytest.mark.parametrize("second_order", [False, True])
def test_design_layout(ishigami_space, sampler, second_order):
    n, d = 16, 3
    x = np.asarray(saltelli_design(jax.random.key(5), ishigami_space, n, sampler=sampler,
                                   second_order=second_order))
    step = 2 * d + 2 if second_order else d + 2
    assert x.shape == (n * step, d)
    assert np.all((x >= -math.pi) & (x <= math.pi))
    blocks = x.reshape(n, step, d)
    a, b = blocks[:, 0], blocks[:, -1]
    for i in range(d):
        expected = a.copy()
        expected[:, i] = b[:, i]
        np.testing.assert_array_equal(blocks[:, 1 + i], expected)
        if second_order:
            expected = b.copy()
            expected[:, i] = a[:, i]
            np.testing.assert_array_equal(blocks[:, 1 + d + i], expected)
    assert len(np.unique(a[:, 0])) == n  # a scrambled Sobol' sequence: no repeats


def test_salib_and_scipy_samplers_agree(ishigami_result, ishigami_scipy):
    """Different scrambled designs, the same indices within the bootstrap intervals."""
    a, b = ishigami_result, ishigami_scipy
    assert not np.array_equal(a.first_order, b.first_order)
    for field in ("first_order", "total_order"):
        diff = np.abs(np.asarray(getattr(a, field)) - np.asarray(getattr(b, field)))
        width = np.asarray(getattr(a, field + "_conf")) + np.asarray(getattr(b, field + "_conf"))
        assert np.all(diff <= width), (field, diff, width)


def test_determinism(ishigami_simulator):
    run = lambda key: sobol_indices(key, ishigami_simulator, None, 64, n_bootstrap=20)  # noqa: E731
    first, second, other = run(jax.random.key(7)), run(jax.random.key(7)), run(jax.random.key(8))
    for field in ("first_order", "total_order", "first_order_conf", "total_order_conf"):
        np.testing.assert_array_equal(getattr(first, field), getattr(second, field))
    assert not np.array_equal(first.first_order, other.first_order)


# --- vector outputs --------------------------------------------------------------------------
LINEAR_TS = np.linspace(0.0, 1.0, 6)


def _linear_coefficients():
    """a_i(t) of y_t = sum_i a_i(t) theta_i (first output); the second output is constant."""
    t = LINEAR_TS
    return np.stack([t, t**2, 2.0 * t * (1.0 - t)], axis=1)  # (n_times, 3); row 0 all zero


def linear_model(theta):
    y = jnp.asarray(_linear_coefficients()) @ theta
    return jnp.stack([y, jnp.full_like(y, 3.0)], axis=1)  # (n_times, 2)


def test_vector_output_linear_additive():
    space = ParameterSpace([Parameter("p", 0.0, -1.0, 1.0), Parameter("q", 1.0, 0.0, 3.0),
                            Parameter("r", 0.0, -0.5, 0.5)])
    result = sobol_indices(jax.random.key(11), FunctionSimulator(linear_model, space, ("y", "c"), LINEAR_TS),
                           None, 2048)
    assert result.output_shape == (6, 2)
    assert result.first_order.shape == (3, 6, 2)
    # constant elements: t = 0 (every a_i vanishes) and the whole second output
    expected_mask = np.zeros((6, 2), bool)
    expected_mask[0, 0] = True
    expected_mask[:, 1] = True
    np.testing.assert_array_equal(result.constant_mask, expected_mask)
    assert result.n_constant == 7
    s1, st = np.asarray(result.first_order), np.asarray(result.total_order)
    assert np.all(s1[:, expected_mask] == 0.0) and np.all(st[:, expected_mask] == 0.0)
    # analytic S_i(t) = a_i(t)^2 var_i / sum_j a_j(t)^2 var_j (= ST_i: no interactions)
    var = (space.upper - space.lower) ** 2 / 12.0
    contrib = _linear_coefficients()[1:] ** 2 * var
    analytic = (contrib / contrib.sum(axis=1, keepdims=True)).T  # (3, 5)
    np.testing.assert_allclose(s1[:, 1:, 0], analytic, atol=0.02)
    np.testing.assert_allclose(st[:, 1:, 0], analytic, atol=0.02)
    # eq. (12): the average runs over the 5 non-constant elements only
    np.testing.assert_allclose(result.averaged_first_order, s1[:, 1:, 0].mean(axis=1), atol=1e-12)
    np.testing.assert_allclose(result.averaged_first_order, analytic.mean(axis=1), atol=0.02)


# --- a jcalib model -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def model_result(model):
    return sobol_indices(jax.random.key(2), model, None, 64, n_bootstrap=50)


@pytest.mark.slow
def test_model_path(model, model_result):
    r = model_result
    assert r.names == model.parameters.names
    assert r.output_shape == (model.experiment.n_times, model.n_outputs)
    assert r.first_order.shape == (3, 22, 4)
    assert r.n_simulations == 64 * 5
    s1, st = np.asarray(r.first_order), np.asarray(r.total_order)
    assert np.all(np.isfinite(s1)) and np.all(st >= -1e-12)
    assert np.all(s1 <= st + np.asarray(r.first_order_conf) + np.asarray(r.total_order_conf))
    # kab drives B alone: it dominates the B output at late times
    b_late = s1[:, -1, model.output_names.index("B")]
    assert np.argmax(b_late) == model.parameters.index("kab")
    assert isinstance(r.select(), Selection)
    d = r.to_dict()
    assert d["n_simulations"] == 320 and len(d["first_order"]) == 3


@pytest.mark.slow
def test_model_path_equals_function_path(model, model_result):
    """The model or its simulate wrapped as a FunctionSimulator: same design, same indices."""
    wrapped = FunctionSimulator(model.simulate, model.parameters, model.output_names, model.ts)
    via_fn = sobol_indices(jax.random.key(2), wrapped, None, 64, n_bootstrap=50)
    np.testing.assert_allclose(via_fn.first_order, model_result.first_order, atol=1e-8)
    np.testing.assert_allclose(via_fn.total_order_conf, model_result.total_order_conf, atol=1e-8)


@pytest.mark.slow
def test_model_subset_space_fixes_the_others(model):
    space = model.parameters.subset(["kad", "kab"])
    r = sobol_indices(jax.random.key(3), model, space, 16, n_bootstrap=10)
    assert r.names == ("kad", "kab") and r.first_order.shape == (2, 22, 4)
    # kac stays at its nominal value: the same as varying kad, kab in a function
    full = model.parameters.nominal

    def fn(theta):
        return model.simulate(jnp.asarray(full).at[jnp.array([2, 0])].set(theta))

    ref = sobol_indices(jax.random.key(3), FunctionSimulator(fn, space, model.output_names, model.ts), None, 16,
                        n_bootstrap=10)
    np.testing.assert_allclose(r.first_order, ref.first_order, atol=1e-8)


# --- Algorithm 1 --------------------------------------------------------------------------
def test_select_stops_at_delta():
    # sorted: 0.4, 0.3, 0.2, 0.15, 0.0009; K = r(0,1) = log10(2.5) = 0.398
    sel = select_identifiable([0.15, 0.0009, 0.4, 0.2, 0.3], ["d", "e", "a", "c", "b"])
    assert sel.sorted_names == ("a", "b", "c", "d", "e")
    assert sel.selected == ("a", "b", "c", "d")
    assert sel.stop_reason == "below_delta" and sel.stop_index == 4
    np.testing.assert_allclose(sel.ratios[:4], np.log10([1 / 0.4, 0.4 / 0.3, 0.3 / 0.2, 0.2 / 0.15]))
    assert sel.K == pytest.approx(math.log10(2.5))
    # with a smaller delta the same list stops at the drop 0.15 -> 0.0009 (2.22 > K)
    assert select_identifiable([0.15, 0.0009, 0.4, 0.2, 0.3], "decab", delta=1e-4).stop_reason == \
        "drop_above_K"


def test_select_stops_at_drop_above_k():
    # r(0,1) = log10(1/0.3) = 0.523, r(1,2) = 0.176 -> K = 0.523; r(2,3) = log10(20) = 1.30 > K
    sel = select_identifiable([0.3, 0.2, 0.01, 0.005], ["a", "b", "c", "d"])
    assert sel.selected == ("a", "b")
    assert sel.stop_reason == "drop_above_K" and sel.stop_index == 2
    assert sel.K == pytest.approx(math.log10(1 / 0.3))
    # K is the larger of r(0,1) and r(1,2): a big first drop raises the tolerance
    sel = select_identifiable([0.9, 0.09, 0.02, 0.01], ["a", "b", "c", "d"])
    assert sel.K == pytest.approx(1.0)  # r(1,2) = log10(10)
    assert sel.selected == ("a", "b", "c", "d") and sel.stop_reason == "all_selected"


def test_select_paper_figure_4_shape():
    """Zhang & Mikelsons (2023), Fig. 4: 19 parameters, 15 above delta, K = r(0,1) = 0.56,
    four selected, the drop at the fifth (airExchangeFBT) exceeds K."""
    top = [0.275, 0.2, 0.12, 0.05]  # ratioFrontRear, ratioBottomUp, A_internal_mass, CF_alpha_int
    rest = list(np.geomspace(0.008, 0.0012, 11)) + [8e-4, 5e-4, 2e-4, 1e-4]
    names = [f"p{i}" for i in range(19)]
    values = top + rest
    perm = np.random.default_rng(0).permutation(19)
    sel = select_identifiable(np.array(values)[perm], [names[i] for i in perm])
    assert sel.sorted_names == tuple(names)
    assert sel.selected == ("p0", "p1", "p2", "p3")
    assert sel.K == pytest.approx(0.5607, abs=1e-4) and sel.K == pytest.approx(float(sel.ratios[0]))
    assert sel.stop_index == 4 and sel.stop_reason == "drop_above_K"
    assert float(sel.ratios[4]) == pytest.approx(math.log10(0.05 / 0.008))
    assert int(np.sum(np.asarray(sel.sorted_indices) > 1e-3)) == 15


def test_select_non_positive_indices():
    sel = select_identifiable([0.5, 0.4, -1e-4], ["a", "b", "c"])
    assert sel.selected == ("a", "b") and sel.stop_reason == "below_delta"
    assert math.isinf(float(sel.ratios[2]))
    sel = select_identifiable([0.5, 0.0, -1e-4], ["a", "b", "c"])
    assert sel.selected == ("a",) and sel.stop_index == 1 and math.isinf(sel.K)
    d = sel.to_dict()
    assert d["K"] is None and d["ratios"][1] is None and d["ratios"][2] is None


def test_select_nothing_above_delta():
    sel = select_identifiable([1e-4, 2e-5], ["a", "b"])
    assert sel.selected == () and sel.stop_index == 0 and sel.stop_reason == "below_delta"


# --- bad input ----------------------------------------------------------------------------
@pytest.mark.parametrize(("args", "match"), [
    (([0.5], ["a"]), "at least 2 parameters"),
    (([0.5, 0.2], ["a"]), "2 averaged_indices but 1 names"),
    (([0.5, np.nan], ["a", "b"]), "must be finite"),
    (([0.5, 0.2], ["a", "a"]), "duplicate names"),
    (([[0.5, 0.2]], ["a", "b"]), "must be 1-D"),
])
def test_select_errors(args, match):
    with pytest.raises(ValueError, match=match):
        select_identifiable(*args)


def test_select_delta_error():
    with pytest.raises(ValueError, match="delta must be a positive number"):
        select_identifiable([0.5, 0.2], ["a", "b"], delta=0.0)


def test_n_not_power_of_two_warns(ishigami_simulator):
    with pytest.warns(UserWarning, match="n=100 is not a power of 2.*use 128 or 64"):
        r = sobol_indices(jax.random.key(0), ishigami_simulator, None, 100, n_bootstrap=5)
    assert r.n_base == 100 and r.n_simulations == 500


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"n": 1}, "n must be an integer >= 2"),
    ({"n": 64.0}, "n must be an integer >= 2"),
    ({"n_bootstrap": 1}, "n_bootstrap must be an integer >= 2"),
    ({"confidence": 1.5}, r"confidence must lie in \(0, 1\)"),
    ({"sampler": "sobol"}, "unknown sampler 'sobol'"),
    ({"space": {"x1": (0, 1)}}, "space must be a jcalib ParameterSpace"),
    ({"simulator": 3.0}, r"sobol_indices: simulator must be a jcalib simulator \(an AbstractModel, .*got float$"),
    ({"simulator": ishigami}, r"simulator must be a jcalib simulator.*got function; wrap a plain function as "
                              r"jcalib.FunctionSimulator\(fn, space\)"),
])
def test_sobol_errors(ishigami_space, kwargs, match):
    call = {"simulator": FunctionSimulator(ishigami, ishigami_space), "space": ishigami_space, "n": 16,
            "key": jax.random.key(0)}
    call.update(kwargs)
    with pytest.raises(ValueError, match=match):
        sobol_indices(call.pop("key"), call.pop("simulator"), call.pop("space"), call.pop("n"), **call)


def test_constant_outputs(ishigami_space):
    with pytest.raises(ValueError, match="all 3 output elements are constant"):
        sobol_indices(jax.random.key(0), FunctionSimulator(lambda th: jnp.ones(3), ishigami_space), None, 16)


def test_function_with_nan_fails_like_a_solve(ishigami_space):
    nan_above_2 = FunctionSimulator(lambda th: jnp.where(th[0] > 2.0, jnp.nan, th[1]), ishigami_space)
    with pytest.raises(SimulationError, match=r"sobol_indices: \d+ of 80 simulations failed.*non-finite"):
        sobol_indices(jax.random.key(0), nan_above_2, None, 16)


def test_saltelli_design_errors(ishigami_space):
    with pytest.raises(ValueError, match="unknown sampler 'lhs'"):
        saltelli_design(jax.random.key(0), ishigami_space, 16, sampler="lhs")
    with pytest.raises(ValueError, match="n must be an integer >= 2"):
        saltelli_design(jax.random.key(0), ishigami_space, 0)


def test_infinite_bounds_are_refused(ishigami_space):
    # issue 18 §6: Sobol' designs are uniform on the box; a parameter without one is named
    open_space = ishigami_space.replace("x1", lower=-np.inf)
    simulator = FunctionSimulator(ishigami, open_space)
    box = (r"needs finite bounds, but parameter 'x1' has bounds \[-inf, "
           r"3.14159.*\]; give it finite bounds for this method")
    with pytest.raises(ValueError, match="sobol_indices " + box):
        sobol_indices(jax.random.key(0), simulator, None, 16)
    with pytest.raises(ValueError, match="saltelli_design " + box):
        saltelli_design(jax.random.key(0), open_space, 16)
    sobol_indices(jax.random.key(0), simulator, open_space.subset(["x2", "x3"]), 16, n_bootstrap=2)  # boxed


def test_model_space_mismatch(model):
    space = ParameterSpace([Parameter("kab", 1e-4, 1e-6, 1e-3), Parameter("kx", 1.0, 0.0, 2.0)])
    with pytest.raises(ValueError, match=r"parameters \['kx'\] that the simulator does not know"):
        sobol_indices(jax.random.key(0), model, space, 16)
    with pytest.raises(ValueError, match="needs at least 2 parameters to vary"):
        sobol_indices(jax.random.key(0), model, model.parameters.subset(["kab"]), 16)


def test_failed_solves(model):
    broken = model.with_solver(max_steps=2)
    with pytest.raises(SimulationError, match=r"sobol_indices: 10 of 10 simulations failed.*"
                                              r"maximum number of solver steps"):
        sobol_indices(jax.random.key(0), broken, None, 2, n_bootstrap=2)


# --- the cabin model (shared/models/cabin_thermal.md, sanity checks 1 and 6) --------------
@pytest.mark.slow
def test_cabin_grouping_spec():
    import jcalib

    model = jcalib.models.get("cabin_thermal")
    r = sobol_indices(jax.random.key(0), model, None, 1024, n_bootstrap=20, progress=False)
    avg = dict(zip(r.names, np.asarray(r.averaged_first_order)))
    # issue 19: the model's constants were changed so that the paper's four dominate (its Fig. 4;
    # the spec's check 6 named CF_heatUp instead of A_internal_mass, and CF_hull_insulation now
    # sits at 0.011, so CF_v_air_mass (0.0014) takes its place among the weak ones)
    for name in ("ratioFrontRear", "CF_alpha_internal", "ratioBottomUp", "A_internal_mass"):
        assert avg[name] > 0.08, (name, avg[name])
    for name in ("CF_airExchangeBFR", "CF_airExchangeLR", "CF_airExchangeTFR", "CF_v_air_mass"):
        assert avg[name] < 0.012, (name, avg[name])
    # CF_heatUp acts only after 3600 s: exactly zero indices on the 100 cool-down samples
    heat_up = model.parameters.index("CF_heatUp")
    assert np.all(np.asarray(r.first_order)[heat_up, :100] == 0.0)
    assert np.all(np.asarray(r.total_order)[heat_up, :100] == 0.0)


@pytest.mark.parametrize("second_order", [False, True])
def test_column_blocks_equal_one_block(monkeypatch, second_order):
    """Many output elements are estimated in padded column blocks: same numbers as one block."""
    import jcalib.sensitivity.sobol as sobol_module

    n, d, m = 32, 3, 7
    step = 2 * d + 2 if second_order else d + 2
    values = np.array(jax.random.normal(jax.random.key(9), (n * step, m)))
    values[:, 3] = 1.5  # a constant element
    r = np.asarray(jax.random.randint(jax.random.key(10), (10, n), 0, n))
    whole = _analyze(values, d, second_order, r, 2.0)
    monkeypatch.setattr(sobol_module, "_BLOCK_ELEMENTS", n * d * d * 3)  # blocks of 3 (or 1)
    blocked = _analyze(values, d, second_order, r, 2.0)
    assert whole.keys() == blocked.keys()
    for name in whole:
        np.testing.assert_allclose(blocked[name], whole[name], rtol=0, atol=1e-12)
    assert whole["constant"].tolist() == [False, False, False, True, False, False, False]
