"""cabin_thermal: the spec's sanity checks, reference values and solver checks
(``shared/models/cabin_thermal.md``).

Compile time dominates, so the tests share five compiled functions: a single simulation and
``jax.jit(jax.vmap(simulate))`` of the default model, its ``simulate_batch``, and a solve and
a forward-mode jacobian of a "probe" model that observes all 20 states at the 200 default
times plus 600, 1200 and 1800 s with tight tolerances (1e-10, for finite differences).
Factory variants (symmetric load, no load) differ only in array values: no recompilation.
"""

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jcalib
from jcalib.models import cabin_thermal as mod
from tests.helpers import central_differences
from tests.models.harness import JACOBIAN, states

# The second tier (make test-all): this model's reference checks compile programs no other fast test
# shares (~30 worker-seconds cold each); make test's budget went to the docstring examples and the
# shape check (issue 34).
pytestmark = pytest.mark.slow

NAME = "cabin_thermal"
TIGHT = 1e-10
PROBE_TIMES = np.union1d(np.asarray(mod.OBSERVATION_TIMES), [600.0, 1200.0, 1800.0])
SENSOR_STATES = [mod.STATE_NAMES.index(mod.SENSORS[s]) for s in ("T1", "T3", "T5", "T7")]

SPEC_PARAMETERS = [  # name, nominal, lower, upper, unit (spec table; all linear scale)
    ("CF_alpha_internal", 1, 0.5, 1.5, "-"), ("CF_alpha_external", 1, 0.5, 1.5, "-"),
    ("CF_hull_insulation", 1, 0.5, 1.5, "-"), ("CF_hull_capacity", 1, 0.5, 1.5, "-"),
    ("CF_airExchangeFBT", 1, 0.5, 1.5, "-"), ("CF_airExchangeRBT", 1, 0.5, 1.5, "-"),
    ("CF_airExchangeTFR", 1, 0.5, 1.5, "-"), ("CF_airExchangeBFR", 1, 0.5, 1.5, "-"),
    ("CF_airExchangeLR", 1, 0.5, 1.5, "-"), ("A_internal_mass", 4.0, 2.0, 6.0, "m^2"),
    ("CF_alpha_mass", 1, 0.5, 1.5, "-"), ("CF_v_air_mass", 1, 0.5, 1.5, "-"),
    ("CF_zeta_dash", 1, 0.5, 1.5, "-"), ("CF_zeta_foot", 1, 0.5, 1.5, "-"),
    ("CF_zeta_rear", 1, 0.5, 1.5, "-"), ("ratioBottomUp", 0.5, 0.2, 0.8, "-"),
    ("ratioFrontRear", 0.65, 0.4, 0.9, "-"), ("CF_coolDown", 1, 0.9, 1.1, "-"),
    ("CF_heatUp", 1, 0.9, 1.1, "-"),
]  # issue 19: CF_coolDown / CF_heatUp narrowed from the spec's 0.8-1.2 (see the model docstring)
# reference, nominal theta, [T1, T3, T5, T7] in degC, by (series, j): scipy Radau (rtol = atol
# = 1e-10, exact jacobian, restarted at 1800 s and 3600 s) on the vector field with the issue-19
# constants (the spec's table belongs to its original constants; see the model docstring)
REFERENCE = {
    ("cool", 1): (47.5424, 55.3895, 47.3980, 54.5899),
    ("cool", 10): (39.2104, 46.4720, 40.1401, 47.5048),
    ("cool", 50): (29.2613, 34.4156, 30.6847, 36.3420),
    ("cool", 100): (26.0818, 30.3720, 27.3415, 32.1414),
    ("heat", 1): (30.0378, 32.1992, 30.4173, 32.9982),
    ("heat", 10): (36.9532, 36.3634, 36.6151, 36.2436),
    ("heat", 50): (44.9053, 46.7605, 43.7877, 45.1866),
    ("heat", 100): (49.4685, 52.7342, 48.1432, 50.8826),
}
PHASE_ONLY = ("CF_zeta_dash", "CF_zeta_foot", "CF_zeta_rear", "CF_coolDown", "CF_v_air_mass",
              "CF_heatUp")  # act only when the blower runs (phases 1, 2)
# a second point inside the box, away from the nominal one
OTHER_POINT = {
    "CF_alpha_internal": 1.3, "CF_alpha_external": 0.7, "CF_hull_insulation": 1.2,
    "CF_hull_capacity": 0.8, "CF_airExchangeFBT": 0.6, "CF_airExchangeRBT": 1.4,
    "CF_airExchangeTFR": 0.9, "CF_airExchangeBFR": 1.1, "CF_airExchangeLR": 0.7,
    "A_internal_mass": 5.0, "CF_alpha_mass": 0.6, "CF_v_air_mass": 1.3, "CF_zeta_dash": 0.7,
    "CF_zeta_foot": 1.4, "CF_zeta_rear": 0.9, "ratioBottomUp": 0.3, "ratioFrontRear": 0.8,
    "CF_coolDown": 0.95, "CF_heatUp": 1.07,
}


def _row(j, series):
    """Row of ``simulate`` for the spec's (series, j)."""
    return j - 1 if series == "cool" else 99 + j


SIMULATE = eqx.filter_jit(lambda model, theta: model.simulate(theta))
BALANCE_TERMS = eqx.filter_jit(lambda model, t, y, theta: (
    model.vector_field(t, y, theta), model.capacities(theta), model.heat_flows(t, y, theta)))


def probe_model(**options):
    return jcalib.models.get(NAME, outputs=mod.STATE_NAMES, rtol=TIGHT, atol=TIGHT,
                             **options).with_times(PROBE_TIMES)


@pytest.fixture(scope="module")
def cabin():
    return jcalib.models.get(NAME)


@pytest.fixture(scope="module")
def nominal(cabin):
    return cabin.parameters.nominal


@pytest.fixture(scope="module")
def other(cabin):
    return cabin.parameters.to_vector(OTHER_POINT)


@pytest.fixture(scope="module")
def probe():
    return probe_model()


@pytest.fixture(scope="module")
def probe_nominal(probe, nominal):
    return states(probe, nominal)


@pytest.fixture(scope="module")
def probe_jacobian(probe, nominal):
    return np.asarray(JACOBIAN(probe, jnp.asarray(nominal)))


def rows(ts, lo, hi):
    """Boolean rows with lo < t <= hi."""
    ts = np.asarray(ts)
    return (ts > lo) & (ts <= hi)


# --- construction and options -------------------------------------------------------------
def test_parameters_outputs_experiment_and_constants(cabin):
    space = cabin.parameters
    assert space.names == tuple(p[0] for p in SPEC_PARAMETERS)
    np.testing.assert_array_equal(space.nominal, [p[1] for p in SPEC_PARAMETERS])
    np.testing.assert_array_equal(space.lower, [p[2] for p in SPEC_PARAMETERS])
    np.testing.assert_array_equal(space.upper, [p[3] for p in SPEC_PARAMETERS])
    assert space.units == tuple(p[4] for p in SPEC_PARAMETERS)
    assert not space.log_scale.any()
    assert cabin.output_names == ("T1", "T3", "T5", "T7")
    assert len(cabin.state_names) == 20 and cabin.observed == (0, 1, 4, 5)
    ts = np.asarray(cabin.ts)
    j = np.arange(1, 101)
    np.testing.assert_array_equal(ts, np.concatenate([1800 + 18.0 * j, 3600 + 18.0 * j]))
    assert float(cabin.experiment.t0) == 0.0 and float(cabin.experiment.t1) == 5400.0
    np.testing.assert_array_equal(np.asarray(cabin.controller.jump_ts),
                                  np.nextafter([1800.0, 3600.0], np.inf))
    consts = cabin.constants()
    assert consts["C_a_front"][0] == pytest.approx(1431.66, abs=0.005)
    assert consts["C_a_rear"][0] == pytest.approx(1171.36, abs=0.005)
    assert consts["Q_L0"] == (1200.0, "W") and consts["lambda_L"] == (0.6, "-")
    assert consts["T_amb"] == (35.0, "degC") and consts["g_fcd_TFR"] == (0.02, "kg/s")
    assert consts["Q_hs_top"][0] == 50.0 and consts["Q_hs_bottom"][0] == 0.0
    assert jcalib.models.describe(NAME).startswith("Car cabin")


def test_options_change_constants_and_outputs():
    variant = jcalib.models.get(NAME, outputs=("T1", "T_h_RRB", "T_m_FR"), load=900.0,
                                load_left_share=0.5, hull_sun=0.0, ambient=30.0)
    assert variant.output_names == ("T1", "T_h_RRB", "T_m_FR")
    assert variant.observed == (0, 15, 17)
    c = variant.consts
    assert float(c.Q_L0) == 900.0 and float(c.lambda_L) == 0.5 and float(c.T_amb) == 30.0
    assert np.all(np.asarray(c.hull_sun) == 0.0)
    assert np.all(np.asarray(variant.initial_state(jnp.asarray(variant.parameters.nominal)))
                  == 30.0)


@pytest.mark.parametrize("options, match", [
    ({"outputs": ("T1", "T2")}, r"unknown outputs \['T2'\]"),
    ({"outputs": ()}, "unknown outputs"),
    ({"load_left_share": 1.5}, r"load_left_share must lie in \[0.0, 1.0\]; got 1.5"),
    ({"load": -1.0}, r"load must lie in \[0.0, inf\]"),
    ({"hull_sun": "strong"}, "hull_sun must be a number; got 'strong'"),
    ({"rtol": 0.0}, "rtol must lie in"),
    ({"ambient": float("nan")}, "ambient must lie in"),
    ({"max_steps": 0}, "max_steps must be a positive integer"),
])
def test_bad_options_raise(options, match):
    with pytest.raises(ValueError, match=match):
        jcalib.models.get(NAME, **options)


def test_bad_theta_and_layout_raise(cabin):
    with pytest.raises(ValueError, match=r"theta must have shape \(n_params,\) with n_params=19"):
        cabin.simulate(jnp.ones(18))
    with pytest.raises(ValueError, match="theta must have shape"):
        cabin.simulate(jnp.ones((2, 19)))
    with pytest.raises(ValueError, match=r"paper_layout: expected shape \(..., 200, 4\)"):
        mod.paper_layout(np.zeros((100, 8)))


# --- reference values and expected behaviour (spec check 5) -------------------------------
@pytest.fixture(scope="module")
def default_nominal(cabin, nominal):
    return np.asarray(SIMULATE(cabin, jnp.asarray(nominal)))


def test_reference_values_at_default_tolerances(default_nominal):
    assert default_nominal.shape == (200, 4)
    for (series, j), expected in REFERENCE.items():
        np.testing.assert_allclose(default_nominal[_row(j, series)], expected, rtol=0, atol=1e-3,
                                   err_msg=f"{series} j={j}")


@pytest.mark.slow
def test_reference_values_tight(probe, probe_nominal):
    # tight tolerances reproduce the 4-decimal table to its rounding (5e-5) plus a margin
    ts = np.asarray(probe.ts)
    for (series, j), expected in REFERENCE.items():
        t = (1800.0 if series == "cool" else 3600.0) + 18.0 * j
        row = int(np.flatnonzero(ts == t)[0])
        np.testing.assert_allclose(probe_nominal[row, SENSOR_STATES], expected, rtol=0,
                                   atol=6e-5, err_msg=f"{series} j={j}")


def test_paper_layout(default_nominal):
    paper = np.asarray(mod.paper_layout(default_nominal))
    assert paper.shape == (100, 8)
    np.testing.assert_array_equal(paper[:, :4], default_nominal[:100])
    np.testing.assert_array_equal(paper[:, 4:], default_nominal[100:])
    batched = np.asarray(mod.paper_layout(np.stack([default_nominal, default_nominal + 1.0])))
    np.testing.assert_array_equal(batched[1], paper + 1.0)


def test_expected_behaviour(probe, probe_nominal):
    """Spec "Expected behaviour", on the sensors T1, T3, T5, T7 (the left side)."""
    ts = np.asarray(probe.ts)
    at = {t: probe_nominal[int(np.flatnonzero(ts == t)[0])] for t in (1800.0, 3600.0, 5400.0)}
    soak, cooled, heated = (at[t][SENSOR_STATES] for t in (1800.0, 3600.0, 5400.0))
    # the spec's ranges belong to its original constants; with the issue-19 constants (model
    # docstring) the soak ends at 54-60 degC, the cool-down at 26-32.2, the heat-up at 48-52.8
    assert np.all((soak > 53.0) & (soak < 61.0)), soak
    air = at[1800.0][:8]
    left = np.array([z[1] == "L" for z in mod.ZONES])
    front = np.array([z[0] == "F" for z in mod.ZONES])
    # load biased to the front and the left: a front-left zone is the warmest (the bottom one
    # since issue 19: less sun on the glazed top hull)
    assert mod.ZONES[int(np.argmax(air))] in ("FLT", "FLB")
    # each left zone warmer than its right twin, each front zone than its rear twin
    assert np.all(air[left] > air[~left]) and np.all(air[front] > air[~front])
    assert np.all((cooled > 25.0) & (cooled < 33.0)), cooled
    t1, t3, t5, t7 = cooled
    assert t1 < t5 and t3 < t7  # front cooler than rear
    assert t1 < t3 and t5 < t7  # top cooler than bottom: the cold air enters at the top
    assert np.all((heated > 47.0) & (heated < 54.0)), heated
    # "fast drop within ~2 min": with the spec's constants more than half of the cool-down's drop
    # by t = 1926 s; with the issue-19 constants (the seats' heat store is coupled fast to the
    # air and slows the drop) 53 / 39 / 47 / 28 % for T1 / T3 / T5 / T7: T1, next to the dash
    # outlets, drops fastest, the rear bottom zone without an outlet slowest
    drop_2min = probe_nominal[ts == 1926.0][0, SENSOR_STATES] - soak
    share = drop_2min / (cooled - soak)
    assert np.all(share > 0.25) and share[0] > 0.5 and np.argmin(share) == 3, share


# --- exact zeros, energy balance, symmetry, equilibrium (spec checks 1-4) ------------------
@pytest.mark.slow
def test_exact_zero_sensitivities(probe, probe_jacobian):
    names = probe.parameters.names
    ts = np.asarray(probe.ts)
    soak_rows = ts <= 1800.0
    assert soak_rows.sum() == 3 and ts[soak_rows][-1] == 1800.0
    phase_only = [names.index(n) for n in PHASE_ONLY]
    # the full state up to t = 1800 s does not depend on the blower/process parameters ...
    assert np.all(probe_jacobian[soak_rows][:, :, phase_only] == 0.0)
    # ... but on the others (so the check can fail)
    assert np.all(np.any(probe_jacobian[soak_rows][-1] != 0.0, axis=0)[
        [i for i in range(19) if i not in phase_only]])
    heat_up = names.index("CF_heatUp")
    cool_rows, heat_rows = rows(ts, 1800.0, 3600.0), rows(ts, 3600.0, 5400.0)
    assert np.all(probe_jacobian[cool_rows][:, :, heat_up] == 0.0)  # incl. t = 3600 s
    assert np.all(probe_jacobian[cool_rows][:, :, phase_only[:-1]].any(axis=(0, 1)))
    assert np.all(np.abs(probe_jacobian[heat_rows][:, SENSOR_STATES, heat_up]) > 1e-3)


def _boundary_heat_flows(cabin, t, y, theta):
    """Right side of the spec's energy balance, from the spec's formulas (NumPy)."""
    c = {f.name: np.asarray(getattr(cabin.consts, f.name))
         for f in dataclasses.fields(cabin.consts)}
    p = dict(zip(cabin.parameters.names, np.asarray(theta)))
    phase = 0 if t <= 1800.0 else 1 if t <= 3600.0 else 2
    t_air, t_hull = y[:8], y[8:16]
    supply, t_sup = np.zeros(8), c["T_amb"]
    if phase:
        flows = np.asarray(mod.outlet_flows(
            [p["CF_zeta_dash"], p["CF_zeta_foot"], p["CF_zeta_rear"]],
            c["m_nom"] if phase == 1 else c["m_low"], c["outlet_shares"], c["beta_fan"]))
        for zone, outlet in (("FLT", 0), ("FRT", 0), ("FLB", 1), ("FRB", 1), ("RLT", 2),
                             ("RRT", 2)):
            supply[mod.ZONES.index(zone)] = flows[outlet] / 2
    if phase == 1:
        t_in = c["phi_fresh"] * c["T_amb"] + (1 - c["phi_fresh"]) * (c["volume_fraction"] @ t_air)
        t_sup = t_in - (1 - np.exp(-c["NTU0"] * p["CF_coolDown"])) * (t_in - c["T_evap"])
    g_out = c["hull_area"] / (p["CF_hull_insulation"] * c["hull_insulation"]
                              + 1 / (p["CF_alpha_external"] * c["alpha_ext0"]))
    load = c["Q_L0"] * (p["CF_heatUp"] if phase == 2 else 1.0)
    return (np.sum(supply * c["c_p"] * (t_sup - t_air)) + np.sum(g_out * (c["T_amb"] - t_hull))
            + np.sum(c["hull_sun"]) + load)


@pytest.mark.parametrize("t", [900.0, 2700.0, 4500.0])
def test_energy_balance(cabin, nominal, other, t):
    rng = np.random.default_rng(int(t))
    for theta in (nominal, other):
        y = rng.uniform(10.0, 70.0, 20)
        dydt, capacities, heat = (np.asarray(a) for a in BALANCE_TERMS(
            cabin, jnp.asarray(t), jnp.asarray(y), jnp.asarray(theta)))
        stored = np.sum(capacities * dydt)
        expected = _boundary_heat_flows(cabin, t, y, theta)
        # internal couplings cancel up to round-off of terms of ~1e3-1e4 W
        assert abs(stored - expected) <= 1e-11 * np.sum(np.abs(heat)), (stored, expected)


@pytest.mark.slow
def test_symmetric_load_gives_symmetric_cabin(nominal, other, probe_jacobian):
    symmetric = probe_model(load_left_share=0.5)
    names = mod.STATE_NAMES  # T_a_FLT ... T_m_RR: the position is the last part
    left = [i for i, n in enumerate(names) if n.split("_")[-1][1] == "L"]
    right = [names.index(names[i].replace("FL", "FR").replace("RL", "RR")) for i in left]
    assert len(left) == 10 and sorted(left + right) == list(range(20))
    for theta in (nominal, other):
        x = states(symmetric, theta)
        np.testing.assert_allclose(x[:, left], x[:, right], rtol=0, atol=1e-9)
    jac = np.asarray(JACOBIAN(symmetric, jnp.asarray(nominal)))
    lr = symmetric.parameters.index("CF_airExchangeLR")
    scale = np.abs(jac).max()
    assert np.abs(jac[:, :, lr]).max() <= 1e-9 * scale
    # with the default 60/40 load the left-right exchange matters
    assert np.abs(probe_jacobian[:, SENSOR_STATES, lr]).max() > 1e-2 * scale


def test_equilibrium_without_loads(nominal):
    quiet = probe_model(load=0.0, hull_sun=0.0)
    x = states(quiet, nominal)
    soak = np.asarray(quiet.ts) <= 1800.0
    assert np.all(x[soak] == 35.0)  # the vector field is exactly zero at T_amb
    assert np.all(x[~soak][:, :8] < 35.0)  # the A/C cools once it runs


def test_outlet_flows():
    nominal_zetas = np.ones(3)
    np.testing.assert_allclose(mod.outlet_flows(nominal_zetas, 0.10), [0.055, 0.015, 0.030],
                               rtol=1e-14)
    np.testing.assert_allclose(mod.outlet_flows(nominal_zetas, 0.025),
                               [0.01375, 0.00375, 0.0075], rtol=1e-14)
    np.testing.assert_allclose(mod.outlet_flows([0.5, 1.0, 1.0], 0.10),
                               [0.069465, 0.013396, 0.026792], rtol=0, atol=5e-7)


def test_blower_by_phase(cabin, nominal):
    theta = jnp.asarray(cabin.parameters.to_vector({"CF_zeta_dash": 0.5}))
    flows = [np.asarray(cabin.blower(cabin.phase(jnp.asarray(t)), theta))
             for t in (1800.0, 1800.5, 3600.0, 3600.5)]
    np.testing.assert_array_equal(flows[0], 0.0)  # t = 1800 s still belongs to the soak
    # the model's beta_fan = 5 (issue 19; the spec's 1 gives 0.069465, 0.013396, 0.026792):
    # sigma = 0.55 / sqrt(0.5) + 0.45 = 1.22782, m_g = 0.1 (s_g / sqrt(z_g)) sqrt(6 / (1 + 5 sigma^2))
    np.testing.assert_allclose(flows[1], [0.065205, 0.012575, 0.025149], atol=5e-7)
    np.testing.assert_array_equal(flows[2], flows[1])
    np.testing.assert_allclose(flows[3], flows[1] / 4, rtol=1e-14)  # m_low / m_nom


# --- derivatives and batches --------------------------------------------------------------
@pytest.mark.parametrize("point", ["nominal", "other"])
def test_jacobian_matches_finite_differences(probe, probe_jacobian, nominal, other, point):
    theta = nominal if point == "nominal" else other
    jac = probe_jacobian if point == "nominal" else np.asarray(
        JACOBIAN(probe, jnp.asarray(theta)))
    # step 1e-4 relative: the tight solve is accurate to ~rtol * 50 K = 5e-9 K, so FD noise
    # is ~5e-9 / 2e-4 = 2.5e-5 (with the default 1e-6 step it would be 2.5e-3), truncation ~1e-8
    fd = central_differences(lambda th: states(probe, th), theta, rel_step=1e-4)
    assert np.all(np.isfinite(jac)) and jac.shape == (203, 20, 19)
    # absolute floor per output (state): entries far below an output's largest sensitivity
    # are limited by the solve's round-off and tolerance (~1e-10 K / 1e-6 step), not by
    # the derivative; exact zeros are compared exactly in test_exact_zero_sensitivities
    floor = 1e-4 * np.abs(fd).max(axis=(0, 2))[None, :, None]
    excess = np.abs(jac - fd) - (1e-4 * np.abs(fd) + floor)
    worst = np.unravel_index(np.argmax(excess), excess.shape)
    assert excess.max() <= 0.0, (worst, jac[worst], fd[worst])


@pytest.mark.slow
def test_reverse_mode_gradient_is_finite_and_matches_forward_mode(cabin, nominal):
    """jax.grad through simulate (what MALA and NUTS use) crosses the phase switches, where
    rejected trial steps run far off; their softplus used to overflow there and turn the whole
    reverse-mode gradient into NaN (the forward-mode jacobian stayed finite). Both modes
    differentiate the same discrete solve, so they agree to round-off."""
    theta = jnp.asarray(nominal)
    grad = np.asarray(jax.jit(jax.grad(lambda th: jnp.sum(cabin.simulate(th))))(theta))
    forward = np.asarray(cabin.jacobian(theta)).sum(axis=(0, 1))
    assert np.all(np.isfinite(grad)), grad
    np.testing.assert_allclose(grad, forward, rtol=0, atol=1e-6 * np.abs(forward).max())


@pytest.fixture(scope="module")
def batch_1000(cabin):
    thetas = np.asarray(cabin.parameters.sample(jax.random.key(0), 1000, "uniform"))
    values, status = jcalib.simulate_batch(cabin, thetas, throw=False, return_status=True,
                                           progress=False)
    return thetas, values, status


@pytest.mark.slow
def test_simulate_batch_uniform_1000_succeeds(batch_1000):
    _thetas, values, status = batch_1000
    assert values.shape == (1000, 200, 4)
    assert np.all(status == 0) and np.all(np.isfinite(values))
    # physically plausible everywhere in the box: between the evaporator and ~100 degC
    assert values.min() > 4.0 and values.max() < 100.0


@pytest.mark.slow
def test_jit_vmap_equals_single_simulations(cabin, batch_1000):
    """Batched and single solves agree to the solver's accuracy, not bit for bit: they are
    compiled differently (reduction order in dot products and the error norm), and in the
    first steps from the uniform initial state the error estimate is close to round-off, so
    the step sequences part after a few steps (e.g. 150 + 9 rejected vs. 151 + 13) and the
    results differ by up to ~1e-4 K, within the ~3e-4 K error of either (1e-6 tolerances)."""
    thetas = jnp.asarray(batch_1000[0][:3])
    batched = np.asarray(jax.jit(jax.vmap(cabin.simulate))(thetas))
    for k in range(3):
        single = np.asarray(SIMULATE(cabin, thetas[k]))
        np.testing.assert_allclose(batched[k], single, rtol=0, atol=1e-3)  # spec accuracy
        np.testing.assert_allclose(batch_1000[1][k], single, rtol=0, atol=1e-3)


# --- Sobol' structure for the paper's outputs (issue 19) ----------------------------------
PAPER_DOMINANT = ("ratioFrontRear", "ratioBottomUp", "A_internal_mass", "CF_alpha_internal")


@pytest.mark.slow
def test_sobol_structure_matches_the_paper(cabin):
    """Zhang & Mikelsons (2023), Fig. 4: on the 4 left sensors x (cool-down, heat-up), first-order
    indices averaged over all 200 x 4 elements single out four dominant parameters -- the paper's
    by name -- behind a drop that Algorithm 1 detects (r(4,5) > K), and the indices spread over
    about two orders of magnitude. N = 128 (2,688 solves): the ranking, the drop and the spread
    hold for keys 0-3 (N = 1024, key 0: 0.332, 0.189, 0.145, 0.114 | 0.030, ...; K = 0.479 <
    r(4,5) = 0.581; smallest 0.0009)."""
    from jcalib.sensitivity.sobol import sobol_indices

    r = sobol_indices(jax.random.key(0), cabin, None, 128, n_bootstrap=2, progress=False)
    s = np.asarray(r.averaged_first_order)
    order = np.argsort(-s)
    top = {r.names[i] for i in order[:4]}
    assert top == set(PAPER_DOMINANT), [(r.names[i], round(float(s[i]), 4)) for i in order]
    # a clear drop: the 4th index is at least 2.5x the 5th (1024 samples: 3.8x)
    assert s[order[3]] > 2.5 * s[order[4]]
    sel = r.select(1e-3)
    assert set(sel.selected) == set(PAPER_DOMINANT) and sel.stop_reason == "drop_above_K"
    assert float(sel.ratios[4]) > sel.K
    # the spread: the largest is over 100x the smallest few (five below 1/30 of the largest)
    assert s[order[0]] > 100 * s[order[-1]]
    assert np.sum(s < s[order[0]] / 30) >= 5
