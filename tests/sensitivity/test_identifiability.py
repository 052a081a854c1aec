"""Identifiability: rank and null columns of y = Aθ, the greedy σ_min order on a hand-made
matrix, the essential-direction rules, four_substance_reactions (Wulkow 2021 structure),
winding_process (Bastogne 2007: rank 14, zero dynamometer-gain sensitivities), bad input."""

import json

import diffrax as dfx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jcalib
from jcalib.model import AbstractModel, Experiment
from jcalib.parameters import Parameter, ParameterSpace
from jcalib.sensitivity.identifiability import (
    correlation_ranking,
    identifiability,
    jacobian_analysis,
    n_essential_directions,
    noise_rank_rtol,
    null_parameters,
    numerical_rank,
    rank_tolerance,
)

# Rank-deficient y = Aθ: 4 times x 2 outputs, 5 parameters; column p2 = p0 + p1,
# column p4 = 0 (structurally null), so the rank is 3.
_RNG = np.random.default_rng(0)
_BASE = _RNG.normal(size=(8, 3))
A_DEFICIENT = np.stack([_BASE[:, 0], _BASE[:, 1], _BASE[:, 0] + _BASE[:, 1], _BASE[:, 2],
                        np.zeros(8)], axis=1)


class MatrixModel(AbstractModel):
    """y(t_k) = A_k θ at t_k = k + 1 (A = A_DEFICIENT as (4 times, 2 outputs, 5 parameters)):
    an ODE model (one clock state) whose output sensitivities are exactly A."""

    def vector_field(self, t, y, theta):
        return jnp.ones_like(y)

    def initial_state(self, theta):
        return jnp.zeros(1, dtype=theta.dtype)

    def observe(self, t, y, theta):
        return jnp.asarray(A_DEFICIENT.reshape(4, 2, 5))[jnp.round(t).astype(int) - 1] @ theta


@pytest.fixture(scope="module")
def linear():
    """A data-free absolute-weighted problem on y = Aθ at θ = 1."""
    space = ParameterSpace(Parameter(f"p{j}", 1.0, -2.0, 3.0) for j in range(5))
    model = MatrixModel(parameters=space, output_names=("y0", "y1"), state_names=("clock",),
                        experiment=Experiment(np.arange(1.0, 5.0), t0=0.0), solver=dfx.Tsit5(),
                        controller=dfx.PIDController(rtol=1e-10, atol=1e-12),
                        adjoint=dfx.RecursiveCheckpointAdjoint(), dt0=None, max_steps=64)
    return jcalib.CalibrationProblem.from_simulation(model, weighting="absolute")


@pytest.fixture(scope="module")
def model_a():
    return jcalib.models.get("four_substance_reactions", observe="A")


@pytest.fixture(scope="module")
def winding():
    """winding_process identifiability at the nominal point from the residual Jacobian of a
    problem with absolute weighting (J = Σ eᵀe, Q = I) and dy/d ln θ columns: one forward-
    mode Jacobian (the expensive part) for the whole module. The data are constant signals
    near the operating point (1.0 V, 1.5 V): with absolute weighting the Jacobian does not
    depend on them, and no extra simulation needs compiling."""
    model = jcalib.models.get("winding_process")
    values = np.broadcast_to(np.array([1.0, 1.5]), (model.experiment.n_times, 2))
    data = jcalib.Measurements(model.ts, values, output_names=model.output_names)
    problem = jcalib.CalibrationProblem(model, data, weighting="absolute")
    return identifiability(problem, scaling="log", start="j_sensitivity")


@pytest.mark.slow
def test_rank_equals_numpy_matrix_rank_for_rank_deficient_a(linear):
    assert numerical_rank(A_DEFICIENT) == np.linalg.matrix_rank(A_DEFICIENT) == 3
    s = np.linalg.svd(A_DEFICIENT, compute_uv=False)
    assert rank_tolerance(A_DEFICIENT) == pytest.approx(8 * np.finfo(float).eps * s[0])
    assert numerical_rank(A_DEFICIENT, rtol=0.999) == 1
    # through a (data-free) problem: y = Aθ with A reshaped to (4 times, 2 outputs, 5 parameters)
    report = identifiability(linear, jnp.ones(5), scaling="absolute")
    assert report.rank == 3 and report.matrix_shape == (8, 5)
    np.testing.assert_allclose(report.matrix, -A_DEFICIENT, rtol=1e-13, atol=1e-14)  # r = x - y
    np.testing.assert_array_equal(report.j_sensitivity, np.zeros(5))  # its own data: r = 0
    assert report.null_parameters == ("p4",)
    assert report.identifiable_parameters == ("p0", "p1", "p2", "p3")
    assert report.rank_rtol == 8 * np.finfo(float).eps
    assert report.rank_tolerance == pytest.approx(rank_tolerance(A_DEFICIENT), rel=1e-12)
    assert report.correlation.excluded == ("p4",) and len(report.correlation.order) == 4
    # the dependent trio p0, p1, p2 leaves one exactly flat direction besides p4's
    assert report.jacobian.singular_values[3] < 1e-14 * report.jacobian.singular_values[0]


def test_noise_rank_rtol_counts_directions_above_sigma_over_delta():
    """Rank = #{s_k > σ/δ}: the directions whose Cramér-Rao sd σ/s_k is below δ."""
    rng = np.random.default_rng(1)
    u, _ = np.linalg.qr(rng.normal(size=(40, 4)))
    v, _ = np.linalg.qr(rng.normal(size=(4, 4)))
    m = u @ np.diag([50.0, 3.0, 0.2, 1e-4]) @ v.T
    rtol = noise_rank_rtol(m, 0.1, delta=1.0)
    assert rtol == pytest.approx(0.1 / 50.0, rel=1e-12)
    assert numerical_rank(m, rtol=rtol) == 3  # σ/s = 0.002, 0.033, 0.5 < 1 < 1000
    assert numerical_rank(m, rtol=noise_rank_rtol(m, 0.1, delta=0.1)) == 2  # 0.5 > 0.1
    assert noise_rank_rtol(m, 100.0) == pytest.approx(2.0)  # σ/δ above s_1: nothing determined
    with pytest.raises(ValueError, match="sigma must be a positive noise level; got 0.0"):
        noise_rank_rtol(m, 0.0)
    with pytest.raises(ValueError, match="delta must be a positive standard deviation; got -1"):
        noise_rank_rtol(m, 0.1, delta=-1)
    with pytest.raises(ValueError, match="all zero"):
        noise_rank_rtol(np.zeros((3, 2)), 0.1)


@pytest.mark.slow
def test_correlation_on_j_sensitivity_functions(linear):
    """correlation_columns='j_sensitivity' ranks the running-cost sensitivity functions
    (Bastogne §3.3.2) and refuses data the model fits exactly (all functions zero)."""
    data = linear.measurements
    shifted = jcalib.Measurements(data.ts, np.asarray(data.values) + np.linspace(0.5, -0.3, 8).reshape(4, 2))
    problem = jcalib.CalibrationProblem(linear.model, shifted, weighting="absolute")
    report = identifiability(problem, jnp.ones(5), scaling="absolute", start="j_sensitivity",
                             correlation_columns="j_sensitivity")
    assert report.correlation_columns == "j_sensitivity"
    functions = jcalib.sensitivity.local.j_sensitivity_functions(problem, jnp.ones(5))
    keep = [0, 1, 2, 3]
    expected = correlation_ranking(functions[:, keep], ["p0", "p1", "p2", "p3"],
                                   start=report.j_sensitivity_order[0])
    assert report.correlation.order == expected.order
    np.testing.assert_allclose(report.correlation.sigma_min, expected.sigma_min, rtol=1e-12)
    np.testing.assert_allclose(np.abs(functions[-1]), report.j_sensitivity, rtol=1e-12)
    assert identifiability(problem, jnp.ones(5)).correlation_columns == "outputs"
    with pytest.raises(ValueError, match="correlation_columns='j_sensitivity' needs non-zero cost"):
        identifiability(linear, jnp.ones(5), correlation_columns="j_sensitivity")
    with pytest.raises(ValueError, match=r"correlation_columns must be one of \('outputs', 'j_sensitivity'\)"):
        identifiability(linear, jnp.ones(5), correlation_columns="rows")


def test_null_parameters():
    names = ("a", "b", "c", "d", "e")
    assert null_parameters(A_DEFICIENT, names) == ("e",)
    small = A_DEFICIENT.copy()
    small[:, 3] *= 1e-12
    assert null_parameters(small, names, atol=1e-9) == ("d", "e")


def test_correlation_ranking_on_a_hand_made_matrix():
    # unit directions: u0 = e1 (norm 3, the largest), u1 at angle a from e1 in the e1-e2
    # plane, u2 = e3. Greedy: start u0; u2 is orthogonal to it (σ_min = 1) while u1 is not
    # (σ_min = sqrt(1 - cos a)), so u2 comes second; then u1, with σ_min of [u0, u2, u1]
    # = sqrt(1 - cos a) (Gram eigenvalues 1 ± cos a and 1).
    a = 0.5
    matrix = np.array([[3.0, 2 * np.cos(a), 0.0],
                       [0.0, 2 * np.sin(a), 0.0],
                       [0.0, 0.0, 0.5],
                       [0.0, 0.0, 0.0]])
    ranking = correlation_ranking(matrix, ["u0", "u1", "u2"], normalize=True)
    assert ranking.order == ("u0", "u2", "u1")
    np.testing.assert_array_equal(ranking.indices, [0, 2, 1])
    np.testing.assert_allclose(ranking.sigma_min, [1.0, 1.0, np.sqrt(1 - np.cos(a))],
                               rtol=1e-12)
    assert ranking.subset(0.5) == ("u0", "u2")
    # raw columns: magnitude counts too. After u0 (norm 3), u1 gives σ_min of [3 e1, 2 u1]
    # (0.82) and u2 gives 0.5 (orthogonal, but small): u1 wins.
    raw = correlation_ranking(matrix, ["u0", "u1", "u2"])
    s_u1 = np.linalg.svd(matrix[:, [0, 1]], compute_uv=False)[-1]
    assert s_u1 > 0.5 and raw.order == ("u0", "u1", "u2")
    np.testing.assert_allclose(raw.sigma_min[:2], [3.0, s_u1], rtol=1e-12)
    assert correlation_ranking(matrix, start=2, normalize=True).order == ("p2", "p0", "p1")
    assert correlation_ranking(matrix, n_select=2).order == ("p0", "p1")


@pytest.mark.parametrize("s, expected", [
    ([5.3, 4.7, 2.3], (3, "ratio")),              # A..D: well conditioned
    ([1.0, 0.13, 1e-8], (2, "ratio")),            # A only: the gap is the ratio rule's cut
    ([1.0, 0.5, 0.02, 0.015, 0.005], (2, "gap")),  # a clear 25x gap inside the <= 100 group
    ([1.0, 0.05], (2, "ratio")),                  # κ = 20 <= 100: a gap does not matter
    ([1.0, 0.5, 0.02, 0.015, 1e-4], (4, "ratio")),  # ... unless the 100 rule cuts a larger one
    ([1.0, 0.5, 0.3, 0.2, 0.005], (4, "ratio")),  # no clear gap: the 100 rule
    ([1.0, 0.0, 0.0], (1, "ratio")),
    # ... and a clear gap below the 100 rule's cut keeps a weak direction: the A-only
    # spectrum where kab is small (issue 39 §3), and a structural null below a weak one
    ([1.34, 5.5e-3, 1.3e-16], (2, "gap")),
    ([1.0, 5e-3, 0.0], (2, "gap")),
    ([1.0, 5e-3, 1e-3, 0.0], (3, "gap")),
    ([1.0, 1e-3, 5e-4, 1e-5], (1, "ratio")),  # the largest gap is the 100 rule's cut
    ([1.0, 1e-3, 1e-5, 0.0], (1, "ratio")),  # the null gap would keep s_1/s_3 = 1e5 > 100^2: not a cut
    ([1.0, 0.5, 0.02, 0.005], (2, "gap")),  # the docstring's gap that drops a direction
])
def test_n_essential_directions(s, expected):
    assert n_essential_directions(s) == expected
    assert n_essential_directions(s, gap_ratio=None)[1] == "ratio"


@pytest.mark.slow
def test_four_substance_a_only_has_two_essential_directions(model_a, theta):
    # Wulkow's setting: relative residuals, log parameters (the problem's internal
    # coordinates), noisy data (σ = 0.1) at the true point
    data = jcalib.synthetic_measurements(jax.random.key(1), model_a, theta, sigma=0.1)
    report = identifiability(jcalib.CalibrationProblem(model_a, data))
    jac = report.jacobian
    assert report.scaling == "internal"
    assert jac.n_essential == 2 and jac.condition_number > 1e4
    # kac and kad enter A(t) only through kac + kad: the flat direction keeps kac + kad
    # fixed, d ln kac : d ln kad = -kad : kac = -5 : 1, and leaves kab alone.
    (flat,) = jac.flat_directions
    components = dict(flat["components"])
    assert [name for name, _ in flat["components"]][:2] == ["kac", "kad"]
    np.testing.assert_allclose([components["kac"], components["kad"]],
                               np.array([5.0, -1.0]) / np.sqrt(26.0), atol=1e-6)
    assert abs(components["kab"]) < 1e-6
    assert report.rank == 2  # autodiff makes the two columns exactly proportional
    assert report.j_sensitivity.shape == (3,) and report.j_sensitivity_scaling == "absolute"


@pytest.mark.slow
def test_four_substance_abcd_has_three_essential_directions(model, theta):
    # no data: relative sensitivities d ln y / d ln θ of A, B, C, D
    problem = jcalib.CalibrationProblem.from_simulation(model, theta)
    report = identifiability(problem, theta, scaling="log", j_sensitivity_scaling="log")
    assert report.scaling == "log"
    # its own outputs as data: r = 0 up to solver round-off, so |dJ/d ln θ| = |(2/n) Jᵀ r| ~ 0
    assert np.all(report.j_sensitivity < 1e-12)
    via_internal = identifiability(problem, problem.to_internal(theta), coordinates="internal", scaling="log")
    np.testing.assert_array_equal(via_internal.matrix, report.matrix)
    assert report.jacobian.n_essential == 3 and report.jacobian.condition_number < 100
    assert report.rank == 3 and report.null_parameters == ()
    assert report.jacobian.flat_directions == []
    # spec sanity check 2: condition number about 2.3 with relative sensitivities
    assert 1.5 < report.jacobian.condition_number < 4.0
    json.dumps(report.to_dict())


@pytest.mark.slow
def test_winding_dynamometer_gains_are_null_and_rank_is_14(winding):
    names = winding.parameter_names
    beta = [names.index("beta1"), names.index("beta3")]
    assert len(names) == 16 and winding.matrix_shape == (1200, 16)
    assert np.all(winding.matrix[:, beta] == 0.0)  # exactly zero, not merely small
    assert np.all(winding.column_norms[beta] == 0.0)
    assert winding.null_parameters == ("beta1", "beta3")
    assert "beta1" not in winding.identifiable_parameters
    assert set(winding.correlation.excluded) == {"beta1", "beta3"}
    assert winding.rank == 14  # Bastogne 2007 §4.4, with numpy's default tolerance ...
    s = winding.jacobian.singular_values / winding.jacobian.singular_values[0]
    assert 1e-8 < s[13] < 1e-7 and np.all(s[14:] < 1e-15)  # ... and Jp's 6.6e-8 is not tiny
    assert np.all(winding.j_sensitivity[beta] == 0.0)
    assert winding.j_sensitivity_order[-2:] in (("beta1", "beta3"), ("beta3", "beta1"))
    assert winding.correlation.order[0] == winding.j_sensitivity_order[0]  # Bastogne eq. 13
    assert winding.correlation.order[-1] == "Jp"  # the least influential (spec check 2)
    assert np.all(np.diff(winding.correlation.sigma_min) <= 0)
    saved = json.loads(json.dumps(winding.to_dict()))
    assert saved["rank"] == 14 and saved["null_parameters"] == ["beta1", "beta3"]


@pytest.mark.slow
def test_report_is_frozen(winding):
    with pytest.raises(AttributeError):
        winding.rank = 3


def test_bad_inputs_raise(model, theta, linear):
    names = ["a", "b", "c", "d", "e"]
    with pytest.raises(ValueError, match="matrix must be a non-empty 2-D array"):
        numerical_rank(np.ones(3))
    with pytest.raises(ValueError, match="NaN or inf"):
        numerical_rank(np.array([[1.0, np.nan]]))
    with pytest.raises(ValueError, match=r"rtol must be in \[0, 1\)"):
        numerical_rank(A_DEFICIENT, rtol=-1.0)
    with pytest.raises(ValueError, match="names must be 5 strings"):
        null_parameters(A_DEFICIENT, ["a"])
    with pytest.raises(ValueError, match="names must be unique"):
        correlation_ranking(A_DEFICIENT, ["a", "a", "b", "c", "d"])
    with pytest.raises(ValueError, match="atol must be >= 0"):
        null_parameters(A_DEFICIENT, names, atol=-1.0)
    with pytest.raises(ValueError, match="start must be a parameter name or column index"):
        correlation_ranking(A_DEFICIENT, names, start="z")
    with pytest.raises(ValueError, match="start 'e' has a zero sensitivity column"):
        correlation_ranking(A_DEFICIENT, names, start="e")
    with pytest.raises(ValueError, match=r"n_select must be an integer in \[1, 4\]"):
        correlation_ranking(A_DEFICIENT, names, n_select=5)
    with pytest.raises(ValueError, match="every column of the matrix is zero"):
        correlation_ranking(np.zeros((3, 2)))
    with pytest.raises(ValueError, match="flat_ratio must be > 1"):
        n_essential_directions([1.0, 0.1], flat_ratio=0.5)
    with pytest.raises(ValueError, match="gap_ratio must be > 1 or None"):
        n_essential_directions([1.0, 0.1], gap_ratio=1.0)
    with pytest.raises(ValueError, match="not all zero"):
        jacobian_analysis(np.zeros((3, 2)))
    with pytest.raises(ValueError, match=r"identifiability: problem must be a CalibrationProblem; got "
                                         r"FourSubstanceReactions; for a model without data pass "
                                         r"CalibrationProblem.from_simulation\(model, theta\)"):
        identifiability(model, theta)
    with pytest.raises(ValueError, match=r"identifiability: coordinates must be one of \('physical', 'internal'\)"):
        identifiability(linear, jnp.ones(5), coordinates="log")
    with pytest.raises(ValueError, match="unknown start parameter 'q'"):
        identifiability(linear, jnp.ones(5), start="q")
    with pytest.raises(ValueError, match="start parameter 'p4' has a null sensitivity"):
        identifiability(linear, jnp.ones(5), start="p4")
    with pytest.raises(ValueError, match="sigma_min_threshold must be >= 0"):
        identifiability(linear, jnp.ones(5), sigma_min_threshold=-1.0)
    with pytest.raises(ValueError, match=r"rank_rtol must be in \[0, 1\)"):
        identifiability(linear, jnp.ones(5), rank_rtol=2.0)
    with pytest.raises(ValueError, match=r"identifiability: scaling must be one of"):
        identifiability(linear, scaling="relative")


@pytest.mark.slow
def test_plots(winding):
    from jcalib.plotting import plot_sensitivity_functions, plot_sigma_min_spectrum

    fig = plot_sigma_min_spectrum(winding)
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == list(winding.correlation.order)
    assert len(fig.axes[0].get_xticklabels()) == 14
    with pytest.raises(ValueError, match=r"plot_sigma_min_spectrum: report must be an IdentifiabilityReport "
                                         r"\(from jcalib.sensitivity.identifiability\); got list"):
        plot_sigma_min_spectrum([2.0, 1.0, 1e-3])
    s = np.zeros((5, 2, 3))
    fig = plot_sensitivity_functions(np.arange(5.0), s, ["y1", "y2"], ["a", "b", "c"],
                                     parameters=["c", "a"], reference=s)
    assert [ax.get_title() for ax in fig.axes if ax.get_visible()] == ["c", "a"]


@pytest.mark.slow
def test_profile_of_an_unbounded_null_parameter_needs_a_grid(linear):
    # p4 has a zero sensitivity column: no finite standard error, and on (-inf, inf) no box to span
    import dataclasses

    from jcalib.estimation import profile_likelihood

    space = linear.model.parameters.replace("p4", lower=-np.inf, upper=np.inf)
    model = dataclasses.replace(linear.model, parameters=space)
    problem = jcalib.CalibrationProblem.from_simulation(model, weighting="absolute")
    with pytest.raises(ValueError, match=r"profile_likelihood: 'p4' has no finite standard error and no finite "
                                         r"bounds to span; pass the grid as values=\[...\]"):
        profile_likelihood(problem, jnp.ones(5), "p4", sigma=0.1)
