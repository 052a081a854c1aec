"""thermal_office_r7c4: the spec's sanity checks, reference values and solver checks
(``shared/models/thermal_office_r7c4.md``).

Compile time dominates, so the tests share a few compiled functions: the state trajectory of
the default model (`STATES`), an exact matrix-exponential propagation used as the oracle
(`ORACLE`), and a simulation, a forward-mode jacobian and ``jax.jit(jax.vmap(simulate))`` of
a "tight" model (rtol = atol = 1e-11, for finite differences). Input-table variants (constant
inputs, TAC or ventilation off) differ only in array values: no recompilation.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jcalib
from jcalib.models import thermal_office_r7c4 as mod
from tests.helpers import central_differences
from tests.models.harness import JACOBIAN
from tests.models.harness import solve_states as STATES

# The second tier (make test-all): this model's reference checks compile programs no other fast test
# shares (~30 worker-seconds cold each); make test's budget went to the docstring examples and the
# shape check (issue 34).
pytestmark = pytest.mark.slow

NAME = "thermal_office_r7c4"
TIGHT = 1e-11
P = {name: k for k, name in enumerate(("C_W", "C_Air", "C_Int", "C_TAC", "R_TAC1", "R_TAC2",
                                       "R_W1", "R_W2", "R_G", "R_MV", "R_Int", "f_sol",
                                       "Q_int", "T_TAC0"))}
SPEC_PARAMETERS = [  # name, nominal, lower, upper, unit, log (spec table)
    ("C_W", 2.4e6, 4.8e5, 1.2e7, "J/K", True), ("C_Air", 3.6e5, 7.2e4, 1.8e6, "J/K", True),
    ("C_Int", 4.0e6, 8.0e5, 2.0e7, "J/K", True), ("C_TAC", 1.2e7, 2.4e6, 6.0e7, "J/K", True),
    ("R_TAC1", 5.0e-3, 1.0e-3, 2.5e-2, "K/W", True),
    ("R_TAC2", 6.0e-3, 1.2e-3, 3.0e-2, "K/W", True), ("R_W1", 0.60, 0.12, 3.0, "K/W", True),
    ("R_W2", 0.06, 0.012, 0.30, "K/W", True), ("R_G", 0.10, 0.02, 0.50, "K/W", True),
    ("R_MV", 0.025, 0.005, 0.125, "K/W", True), ("R_Int", 6.0e-3, 1.2e-3, 3.0e-2, "K/W", True),
    ("f_sol", 0.2, 0.04, 1.0, "-", True), ("Q_int", 300.0, 60.0, 1500.0, "W", True),
    ("T_TAC0", 22.5, 17.0, 28.0, "degC", False),
]
# spec reference at the nominal theta (Radau per interval, rtol 1e-10): k -> states [degC]
REFERENCE = {
    0: (19.1802, 21.0000, 21.0000, 22.5000),
    1: (19.1813, 21.1489, 21.0071, 22.4964),
    48: (19.6167, 21.5220, 22.0950, 22.1990),
    240: (19.6689, 21.1668, 21.6417, 22.0325),
    480: (20.2481, 21.8645, 22.5490, 22.6221),
    1008: (20.7489, 22.1063, 22.8920, 22.4929),
}
STEADY_STATE = (19.3443, 20.7787, 20.7787, 22.2429)  # spec sanity check 1 [degC]
# a second point inside the box, every parameter away from its nominal value
OTHER_POINT = {"C_W": 5.0e6, "C_Air": 2.0e5, "C_Int": 8.0e6, "C_TAC": 7.0e6, "R_TAC1": 3.0e-3,
               "R_TAC2": 1.5e-2, "R_W1": 1.5, "R_W2": 0.03, "R_G": 0.2, "R_MV": 0.05,
               "R_Int": 1.0e-2, "f_sol": 0.6, "Q_int": 800.0, "T_TAC0": 19.0}
# a stiff corner: small air capacity and small air-side resistances (air time constant ~50 s)
STIFF_POINT = {"C_W": 5.0e5, "C_Air": 7.2e4, "C_Int": 2.0e7, "C_TAC": 2.4e6, "R_TAC1": 1.0e-3,
               "R_TAC2": 1.2e-3, "R_W1": 3.0, "R_W2": 0.012, "R_G": 0.02, "R_MV": 0.005,
               "R_Int": 1.2e-3, "f_sol": 1.0, "Q_int": 1500.0, "T_TAC0": 28.0}


SIMULATE = eqx.filter_jit(lambda model, theta: model.simulate(theta))
VMAP_SIMULATE = eqx.filter_jit(lambda model, thetas: jax.vmap(model.simulate)(thetas))
TERMS = eqx.filter_jit(lambda model, t, y, theta: (
    model.vector_field(t, y, theta), model.capacities(theta), model.inputs(t)))
FLOW_MATRIX = eqx.filter_jit(lambda model, t, theta: (
    jax.jacfwd(model.heat_flows, argnums=1)(t, jnp.zeros(4), theta),
    model.heat_flows(t, jnp.zeros(4), theta)))


@jax.jit
def ORACLE(theta, table):
    """Exact propagation over each 1800 s interval, written from the spec's equations.

    On [t_k, t_{k+1}] the model is ``dx/dt = A_k x + b0_k + b1_k (t - t_k)`` (switches held,
    continuous inputs linear), so ``[x, t - t_k, 1]`` obeys a linear ODE with a constant 6 x 6
    matrix M_k and ``x_{k+1} = expm(M_k h)[:4, :] @ [x_k, 0, 1]``. Returns (1009, 4) [degC].
    """
    (c_w, c_air, c_int, c_tac, r_tac1, r_tac2, r_w1, r_w2, r_g, r_mv, r_int, f_sol, q_int,
     t_tac0) = theta
    a_win, fcs, fci, h = 6.0, 0.3, 0.5, mod.DT_GRID
    cap = jnp.stack([c_w, c_air, c_int, c_tac])

    def forcing(u, y_tac, y_mv):  # heat flows at x = 0 [W]
        t_a, t_a_eq, i_glob, occ, t_sup_tac, t_sup_mv = u
        q_sol, q_i = f_sol * a_win * i_glob, q_int * occ
        return jnp.stack([
            t_a_eq / r_w1,
            t_a / r_g + y_mv * t_sup_mv / r_mv + fcs * q_sol + fci * q_i,
            (1 - fcs) * q_sol + (1 - fci) * q_i,
            y_tac * t_sup_tac / r_tac2]) / cap

    def transition(row0, row1):
        y_tac, y_mv = row0[6], row0[7]
        g = jnp.array([
            [-(1 / r_w1 + 1 / r_w2), 1 / r_w2, 0.0, 0.0],
            [1 / r_w2, -(1 / r_w2 + 1 / r_g + y_mv / r_mv + 1 / r_int + 1 / r_tac1),
             1 / r_int, 1 / r_tac1],
            [0.0, 1 / r_int, -1 / r_int, 0.0],
            [0.0, 1 / r_tac1, 0.0, -(y_tac / r_tac2 + 1 / r_tac1)]])
        b0 = forcing(row0[:6], y_tac, y_mv)
        b1 = (forcing(row1[:6], y_tac, y_mv) - b0) / h
        m = jnp.zeros((6, 6)).at[:4, :4].set(g / cap[:, None]).at[:4, 4].set(b1)
        m = m.at[:4, 5].set(b0).at[4, 5].set(1.0)
        return jax.scipy.linalg.expm(m * h)[:4]

    e = jax.vmap(transition)(table[:-1], table[1:])  # (1008, 4, 6)
    t_w0 = 21.0 + (table[0, 1] - 21.0) * r_w2 / (r_w1 + r_w2)
    x0 = jnp.stack([t_w0, jnp.asarray(21.0), jnp.asarray(21.0), t_tac0])

    def step(x, e_k):
        x1 = e_k @ jnp.concatenate([x, jnp.array([0.0, 1.0])])
        return x1, x1

    return jnp.concatenate([x0[None], jax.lax.scan(step, x0, e)[1]])


# --- fixtures ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def office():
    return jcalib.models.get(NAME)


@pytest.fixture(scope="module")
def tight():
    return jcalib.models.get(NAME, rtol=TIGHT, atol=TIGHT, max_steps=100_000)


@pytest.fixture(scope="module")
def nominal(office):
    return jnp.asarray(office.parameters.nominal)


@pytest.fixture(scope="module")
def other(office):
    return jnp.asarray([OTHER_POINT[name] for name in office.parameters.names])


@pytest.fixture(scope="module")
def nominal_states(office, nominal):
    ys, ok = STATES(office, nominal)
    assert bool(ok)
    return np.asarray(ys)


@pytest.fixture(scope="module")
def nominal_jacobian(tight, nominal):
    return np.asarray(JACOBIAN(tight, nominal))  # (1008, 1, 14)


# --- parameters, options, bad input ---------------------------------------------------------
def test_parameters_outputs_experiment_and_constants(office):
    space = office.parameters
    assert space.names == tuple(row[0] for row in SPEC_PARAMETERS)
    for p, (name, nominal, lower, upper, unit, log) in zip(space.parameters, SPEC_PARAMETERS):
        assert (p.nominal, p.lower, p.upper, p.unit, p.log_scale) == (
            nominal, lower, upper, unit, log), name
    assert office.output_names == ("T_Air",)
    assert office.state_names == ("T_W", "T_Air", "T_Int", "T_TAC")
    np.testing.assert_array_equal(office.ts, 1800.0 * np.arange(1, 1009))
    assert float(office.experiment.t1) == 1_814_400.0
    assert office.constants() == {"A_win": (6.0, "m^2"), "f_c_sol": (0.3, "-"),
                                  "f_c_int": (0.5, "-"), "T_Air0": (21.0, "degC"),
                                  "T_Int0": (21.0, "degC")}
    assert NAME in jcalib.models.available()
    assert jcalib.models.describe(NAME).startswith("R7C4 office zone")


def test_synthetic_inputs_match_spec_ranges():
    u = mod.synthetic_inputs()
    assert u.shape == (1009, 8) and u.dtype == np.float64
    col = {name: u[:, k] for k, name in enumerate(mod.INPUT_NAMES)}
    # spec: T_A -3.9...8.7 degC, I_glob 0...409 W/m^2, T_Sup,TAC 22.1...25.0 degC (one
    # decimal; the grid maximum of T_A is 8.649 degC, so within one unit of the last digit)
    assert abs(col["T_A"].min() + 3.9) < 0.1 and abs(col["T_A"].max() - 8.7) < 0.1
    assert col["I_glob"].min() == 0.0 and np.round(col["I_glob"].max()) == 409.0
    assert np.round(col["T_Sup_TAC"].min(), 1) == 22.1 and col["T_Sup_TAC"].max() == 25.0
    hod = (np.arange(1009) * 0.5) % 24
    day = np.arange(1009) // 48
    weekend = np.isin(day, (3, 4, 10, 11, 17, 18))
    assert np.all(col["occ"][weekend] == 0.0) and np.all(col["y_MV"][weekend] == 0.0)
    np.testing.assert_array_equal(col["y_TAC"][weekend], (hod[weekend] >= 22) | (hod[weekend] < 6))
    assert np.all(col["occ"][(day == 0) & (hod >= 8) & (hod <= 11.5)] == 1.0)


def test_inputs_interpolate_and_hold(office, nominal):
    """Linear between grid points; y_TAC/y_MV held on (t_k, t_{k+1}], switching one ulp after
    the grid time (where the solver restarts)."""
    u = mod.synthetic_inputs()
    k = 11  # 05:30 -> 06:00 on a Wednesday: ventilation switches on after t_12
    assert u[k, 7] == 0.0 and u[k + 1, 7] == 1.0

    def inputs(t):
        return np.asarray(TERMS(office, jnp.asarray(t), jnp.zeros(4), nominal)[2])

    mid = inputs(1800.0 * k + 450.0)
    np.testing.assert_allclose(mid[:6], 0.75 * u[k, :6] + 0.25 * u[k + 1, :6], rtol=1e-14)
    np.testing.assert_array_equal(mid[6:], u[k, 6:])
    t_end = 1800.0 * (k + 1)
    end, after = inputs(t_end), inputs(np.nextafter(t_end, np.inf))
    np.testing.assert_allclose(end[:6], u[k + 1, :6], rtol=1e-14, atol=1e-12)
    np.testing.assert_array_equal(end[6:], u[k, 6:])
    np.testing.assert_array_equal(after[6:], u[k + 1, 6:])
    np.testing.assert_allclose(after[:6], u[k + 1, :6], rtol=1e-12, atol=1e-9)
    np.testing.assert_array_equal(inputs(0.0), u[0])


@pytest.mark.parametrize("options, match", [
    ({"inputs": np.zeros((1008, 8))}, "shape"),
    ({"inputs": np.full((1009, 8), np.nan)}, "NaN"),
    ({"inputs": mod.constant_inputs(y_TAC=0.5)}, "0 or 1"),
    ({"f_c_sol": 1.5}, "f_c_sol"),
    ({"A_win": "six"}, "A_win must be a number"),
    ({"rtol": 0.0}, "rtol"),
    ({"max_steps": 0}, "max_steps"),
])
def test_bad_options_raise(options, match):
    with pytest.raises(ValueError, match=match):
        jcalib.models.get(NAME, **options)


def test_bad_theta_raises(office):
    with pytest.raises(ValueError, match="theta"):
        office.simulate(jnp.ones(13))
    with pytest.raises(ValueError, match="theta"):
        office.simulate(jnp.ones((2, 14)))
    with pytest.raises(ValueError, match="with_inputs|shape"):
        office.with_inputs(np.zeros((10, 8)))


# --- reference values and the exact oracle --------------------------------------------------
def test_reference_values(office, nominal):
    """Spec table (abs 1e-3 K), states incl. k = 0, from the default model."""
    ys, ok = STATES(office.with_times(1800.0 * np.array(sorted(REFERENCE))), nominal)
    assert bool(ok)
    np.testing.assert_allclose(np.asarray(ys), np.array(list(REFERENCE.values())), rtol=0,
                               atol=1e-3)


def test_oracle_reproduces_reference(nominal):
    x = np.asarray(ORACLE(nominal, jnp.asarray(mod.synthetic_inputs())))
    for k, ref in REFERENCE.items():
        np.testing.assert_allclose(x[k], ref, rtol=0, atol=1e-3, err_msg=f"k = {k}")


@pytest.mark.parametrize("point", ["nominal", "other", "stiff"])
def test_default_model_matches_oracle(office, nominal, other, nominal_states, point):
    """All states at all 1008 times within 1e-3 K (the spec's accuracy) of the exact solution,
    also at another and at a stiff point (over 1,000 uniform samples the largest T_Air error
    of the default tolerances is 1.1e-4 K)."""
    theta = {"nominal": nominal, "other": other,
             "stiff": jnp.asarray([STIFF_POINT[name] for name in P])}[point]
    if point == "nominal":
        ys = nominal_states
    else:
        ys, ok = STATES(office, theta)
        assert bool(ok)
    exact = np.asarray(ORACLE(theta, jnp.asarray(mod.synthetic_inputs())))
    np.testing.assert_allclose(np.asarray(ys), exact[1:], rtol=0, atol=1e-3)


def test_expected_behaviour(nominal_states):
    """Spec: T_Air stays in 20.9...22.8 degC with mean 21.8 degC at the nominal point."""
    t_air = nominal_states[:, 1]
    assert t_air.min() > 20.85 and t_air.max() < 22.85
    assert abs(t_air.mean() - 21.8) < 0.05


# --- sanity checks ---------------------------------------------------------------------------
def test_steady_state_with_constant_inputs(office, nominal):
    """Check 1: the linear solve of heat_flows = 0 and the 21-day simulation both give the
    spec's equilibrium (slowest time constant ~43 h, so 21 days are ~12 time constants)."""
    model = office.with_inputs(mod.constant_inputs())
    g, b = FLOW_MATRIX(model, jnp.asarray(1000.0), nominal)
    x_eq = np.linalg.solve(np.asarray(g), -np.asarray(b))
    np.testing.assert_allclose(x_eq, STEADY_STATE, rtol=0, atol=1e-4)
    ys, ok = STATES(model, nominal)
    assert bool(ok)
    np.testing.assert_allclose(np.asarray(ys)[-1], x_eq, rtol=0, atol=1e-3)


def test_passive_equilibrium(office, nominal):
    """Check 2: without circuits and gains, T_A is the unique equilibrium (the flow matrix is
    nonsingular), and the stored energy sum_i C_i (T_i - T_A)^2 never increases."""
    t_a = 3.0
    model = office.with_inputs(mod.constant_inputs(T_A=t_a, y_TAC=0.0, y_MV=0.0))
    g, b = FLOW_MATRIX(model, jnp.asarray(1000.0), nominal)
    np.testing.assert_allclose(np.linalg.solve(np.asarray(g), -np.asarray(b)), np.full(4, t_a),
                               rtol=0, atol=1e-10)
    assert np.all(np.linalg.eigvals(np.asarray(g)).real < 0)
    ys, ok = STATES(model, nominal)
    assert bool(ok)
    energy = np.sum(np.asarray(nominal[:4]) * (np.asarray(ys) - t_a) ** 2, axis=1)
    assert np.all(np.diff(energy) <= 1e-9 * energy[:-1])
    assert energy[-1] < 0.5 * energy[0]


@pytest.mark.slow
def test_exact_zero_sensitivities(office, tight, nominal, nominal_jacobian):
    """Check 3: no solar/internal gain before the first sunrise/occupancy (k <= 14); R_TAC2
    has no effect with y_TAC = 0, R_MV none with y_MV = 0 (exactly zero, not just small)."""
    jac = nominal_jacobian[:, 0, :]
    assert np.all(jac[:14, P["f_sol"]] == 0.0) and np.all(jac[:14, P["Q_int"]] == 0.0)
    assert np.all(jac[14:, P["f_sol"]] != 0.0) and np.all(jac[14:, P["Q_int"]] != 0.0)
    table = mod.synthetic_inputs()
    for column, parameter in (("y_TAC", "R_TAC2"), ("y_MV", "R_MV")):
        off = table.copy()
        off[:, mod.INPUT_NAMES.index(column)] = 0.0
        jac_off = np.asarray(JACOBIAN(tight.with_inputs(off), nominal))[:, 0, :]
        assert np.all(jac_off[:, P[parameter]] == 0.0), parameter
        assert np.max(np.abs(jac_off[:, P["R_G"]])) > 0.0


@pytest.mark.parametrize("t", [0.0, 30_600.0, 52_000.0, 1_000_123.4])
def test_energy_balance(office, nominal, other, t):
    """Check 4: sum_i C_i dT_i/dt = boundary heat flows (internal exchanges cancel)."""
    y = jnp.array([18.0, 21.5, 22.0, 23.5])
    for theta in (nominal, other):
        dydt, cap, u = (np.asarray(v) for v in TERMS(office, jnp.asarray(t), y, theta))
        th = {name: float(theta[k]) for name, k in P.items()}
        t_a, t_a_eq, i_glob, occ, t_sup_tac, t_sup_mv, y_tac, y_mv = u
        y_ = np.asarray(y)
        boundary = ((t_a_eq - y_[0]) / th["R_W1"] + (t_a - y_[1]) / th["R_G"]
                    + y_mv * (t_sup_mv - y_[1]) / th["R_MV"]
                    + y_tac * (t_sup_tac - y_[3]) / th["R_TAC2"]
                    + th["f_sol"] * 6.0 * i_glob + th["Q_int"] * occ)
        total = np.sum(cap * dydt)
        assert abs(total - boundary) <= 1e-12 * np.sum(np.abs(cap * dydt)) + 1e-9


def sensitivity_rms(theta, jacobian):
    """rms over the horizon of dT_Air/d ln(theta) [K] (log-scale parameters) and of
    dT_Air/dT_TAC0 [K/K] (T_TAC0 is on a linear scale), shape (14,)."""
    scale = np.where([row[5] for row in SPEC_PARAMETERS], np.asarray(theta), 1.0)
    return np.sqrt(np.mean((jacobian[:, 0, :] * scale) ** 2, axis=0))


def test_sensitivity_ranking(nominal, nominal_jacobian):
    """Spec: R_G has by far the largest rms sensitivity (~2.3 K); C_W, R_W2 and C_Air are
    among the four smallest (~0.02-0.03 K)."""
    rms = sensitivity_rms(nominal, nominal_jacobian)
    order = np.argsort(rms)
    names = list(P)
    assert names[order[-1]] == "R_G" and rms[P["R_G"]] > 1.5 * rms[order[-2]]
    assert {"C_W", "R_W2", "C_Air"} <= {names[i] for i in order[:4]}
    assert 1.5 < rms[P["R_G"]] < 3.5


# --- solver checks ----------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("point", ["nominal", "other"])
def test_jacobian_matches_finite_differences(tight, nominal, other, nominal_jacobian, point):
    theta = nominal if point == "nominal" else other
    jac = nominal_jacobian if point == "nominal" else np.asarray(JACOBIAN(tight, theta))
    # rel_step 1e-3: the adaptive solve's step sequence changes with theta, which adds noise
    # of order the tolerance (1e-11 K) to every output; divided by the step, this stays far
    # below 1e-4 of the weakest parameter's largest derivative. The truncation error of the
    # central difference, O(rel_step^2) relative, is ~1e-7.
    fd = central_differences(lambda x: SIMULATE(tight, jnp.asarray(x)), np.asarray(theta),
                             rel_step=1e-3)
    # absolute floor: 1e-4 of the column's largest |derivative| (units differ by 1e9 between
    # parameters), so that entries where a derivative crosses zero are judged on its scale.
    floor = 1e-4 * np.max(np.abs(fd), axis=(0, 1), keepdims=True)
    assert np.all(np.abs(jac - fd) <= 1e-4 * np.abs(fd) + floor)


@pytest.fixture(scope="module")
def batch(office):
    thetas = office.parameters.sample(jax.random.key(0), 128, "uniform")
    return np.asarray(thetas), jcalib.simulate_batch(office, thetas, chunk_size=128)


@pytest.mark.slow
def test_simulate_batch_uniform_128_succeeds(batch):
    _, values = batch
    assert values.shape == (128, 1008, 1) and np.all(np.isfinite(values))


@pytest.mark.slow
def test_simulate_batch_uniform_1000_succeeds(office):
    thetas = office.parameters.sample(jax.random.key(0), 1000, "uniform")
    values = jcalib.simulate_batch(office, thetas)
    assert values.shape == (1000, 1008, 1) and np.all(np.isfinite(values))


@pytest.mark.slow
def test_jit_vmap_equals_single_simulations(tight, nominal, other, batch):
    thetas = jnp.stack([nominal, other, jnp.asarray(batch[0][0])])
    batched = np.asarray(VMAP_SIMULATE(tight, thetas))
    for theta, row in zip(thetas, batched):
        np.testing.assert_allclose(row, np.asarray(SIMULATE(tight, theta)), rtol=1e-12,
                                   atol=1e-12)
