"""Predictive bands: collapse onto simulate, analytic quantiles of a linear model, other
experiments, prediction (noise) bands, result object, errors and plot."""

import json

import diffrax as dfx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

import jcalib
from jcalib.bayes.predictive import (
    PredictiveBands,
    expand_draws,
    output_bands,
    prediction_bands,
)
from jcalib.probability.likelihoods import LogNormalLikelihood
from jcalib.problems import CalibrationProblem, initial_state_from_parameters

N_DRAWS = 4000
MEAN, STD = np.array([1.0, 5.0]), np.array([0.2, 0.5])  # of (a, y0)
TS = np.array([0.5, 1.0, 2.0, 4.0])


class Drift(jcalib.AbstractModel):
    """dy/dt = a, y(0) = y0: y(t) = y0 + a t, linear in θ = (a, y0)."""

    def vector_field(self, t, y, theta):
        return theta[:1]

    def initial_state(self, theta):
        return initial_state_from_parameters(self, theta, jnp.zeros(1))

    def observe(self, t, y, theta):
        return y


def drift(ts=TS, t0=0.0, name="fit"):
    space = jcalib.ParameterSpace([jcalib.Parameter("a", 1.0, -5.0, 5.0),
                                   jcalib.Parameter("y0", 5.0, 0.1, 20.0)])
    return Drift(parameters=space, output_names=("y",), state_names=("y",),
                 experiment=jcalib.Experiment(ts, t0=t0, name=name), solver=dfx.Tsit5(),
                 controller=dfx.PIDController(rtol=1e-10, atol=1e-10),
                 adjoint=dfx.RecursiveCheckpointAdjoint(), dt0=None, max_steps=256)


@pytest.fixture(scope="module")
def linear():
    return drift()


@pytest.fixture(scope="module")
def draws():
    """Gaussian draws of (a, y0), physical, (N_DRAWS, 2)."""
    return MEAN + STD * np.random.default_rng(5).standard_normal((N_DRAWS, 2))


@pytest.fixture(scope="module")
def problem(linear):
    data = jcalib.Measurements(TS, (5.0 + TS)[:, None] * np.array([[1.02], [0.97], [1.05], [0.99]]),
                               output_names=("y",))
    return CalibrationProblem(linear, data, weighting="absolute", likelihood=LogNormalLikelihood(sigma=0.1))


def _analytic(q, ts=TS):
    mean = MEAN[1] + MEAN[0] * ts
    sd = np.sqrt(STD[1] ** 2 + (STD[0] * ts) ** 2)
    return mean + sd * stats.norm.ppf(q), sd


def test_linear_model_matches_analytic_quantiles(problem, draws):
    bands = output_bands(problem, draws)  # physical draws (the default)
    assert isinstance(bands, PredictiveBands) and bands.kind == "confidence"
    assert bands.values.shape == (3, 4, 1) and bands.n_draws == N_DRAWS and bands.n_failed == 0
    for k, q in enumerate((0.05, 0.5, 0.95)):
        expected, sd = _analytic(q)
        # standard error of a sample quantile: sqrt(q(1-q)/n) / pdf at the quantile
        se = sd * np.sqrt(q * (1 - q) / N_DRAWS) / stats.norm.pdf(stats.norm.ppf(q))
        np.testing.assert_array_less(np.abs(np.asarray(bands.values[k, :, 0]) - expected), 5 * se)
    sample = MEAN[1] + MEAN[0] * TS
    np.testing.assert_array_less(np.abs(np.asarray(bands.mean[:, 0]) - sample),
                                 5 * _analytic(0.5)[1] / np.sqrt(N_DRAWS))
    lo, hi = bands.band()
    np.testing.assert_array_equal(np.asarray(lo), np.asarray(bands.quantile(0.05)))
    np.testing.assert_array_equal(np.asarray(hi), np.asarray(bands.values[2]))


@pytest.mark.slow
def test_equal_draws_collapse_onto_simulate(problem):
    z = problem.to_internal(jnp.asarray([0.7, 4.0]))
    bands = output_bands(problem, np.tile(np.asarray(z), (2, 4, 1)), coordinates="internal")  # (chains, draws, n)
    assert bands.n_draws == 8
    expected = np.asarray(problem.simulate(z))
    for k in range(3):
        np.testing.assert_allclose(np.asarray(bands.values[k]), expected, rtol=1e-12)
    np.testing.assert_allclose(expected[:, 0], 4.0 + 0.7 * TS, rtol=1e-9)
    # physical draws of the free parameters give the same
    physical = output_bands(problem, np.tile([0.7, 4.0], (8, 1)), coordinates="physical")
    np.testing.assert_allclose(np.asarray(physical.values), np.asarray(bands.values), rtol=1e-12)
    full = expand_draws(problem, np.tile(np.asarray(z), (8, 1)), coordinates="internal")
    np.testing.assert_allclose(full, np.tile([0.7, 4.0], (8, 1)), rtol=1e-14)


@pytest.mark.slow
def test_other_experiment(problem, linear, model, theta):
    later = jcalib.Experiment([1.0, 3.0, 6.0], t0=0.0, name="later")
    z = problem.to_internal(jnp.asarray([0.7, 4.0]))
    bands = output_bands(problem, np.tile(np.asarray(z), (8, 1)), coordinates="internal", experiment=later)
    assert bands.experiment == "later"
    np.testing.assert_allclose(np.asarray(bands.ts), [1.0, 3.0, 6.0])
    np.testing.assert_allclose(np.asarray(bands.values[1, :, 0]), 4.0 + 0.7 * np.array([1, 3, 6]),
                               rtol=1e-9)
    # another model of the same family (here another initial concentration; for the
    # polymerization paper: jcalib.models.get("radical_polymerization_simple", recipe=2))
    other = jcalib.models.get("four_substance_reactions", a0=5.0)
    reactions = CalibrationProblem(model, jcalib.synthetic_measurements(jax.random.key(0), model, theta, sigma=0.05))
    bands = output_bands(reactions, np.tile(np.asarray(theta), (3, 1)), experiment=other)
    np.testing.assert_allclose(np.asarray(bands.values[2]), np.asarray(other.simulate(theta)),
                               rtol=1e-10)
    assert bands.output_names == ("A", "B", "C", "D")


def test_prediction_band_adds_noise(problem, linear):
    """Equal draws and log-normal noise σ: the q-band is F exp(σ Φ⁻¹(q))."""
    z = problem.to_internal(jnp.asarray([0.7, 4.0]))
    f = 4.0 + 0.7 * TS
    thetas = np.tile(np.asarray(z), (N_DRAWS, 1))
    bands = prediction_bands(jax.random.key(0), problem, thetas, coordinates="internal")
    assert bands.kind == "prediction"
    for k, q in enumerate((0.05, 0.5, 0.95)):
        se = 0.1 * np.sqrt(q * (1 - q) / N_DRAWS) / stats.norm.pdf(stats.norm.ppf(q))
        log_ratio = np.log(np.asarray(bands.values[k, :, 0]) / f)
        np.testing.assert_array_less(np.abs(log_ratio - 0.1 * stats.norm.ppf(q)), 5 * se)
    again = prediction_bands(jax.random.key(0), problem, thetas, coordinates="internal")
    np.testing.assert_array_equal(np.asarray(again.values), np.asarray(bands.values))
    # sampled σ: each draw's own noise level
    sampled = CalibrationProblem(linear, problem.measurements, weighting="absolute",
                                 likelihood="lognormal", noise_parameters=True)
    zs = np.tile(np.append(np.asarray(z), np.log(0.2)), (N_DRAWS, 1))
    wide = prediction_bands(jax.random.key(1), sampled, zs, coordinates="internal", quantiles=(0.05, 0.95))
    for k, q in enumerate((0.05, 0.95)):
        se = 0.2 * np.sqrt(q * (1 - q) / N_DRAWS) / stats.norm.pdf(stats.norm.ppf(q))
        log_ratio = np.log(np.asarray(wide.values[k, :, 0]) / f)
        np.testing.assert_array_less(np.abs(log_ratio - 0.2 * stats.norm.ppf(q)), 5 * se)
    # coverage of the fitted data by the prediction band
    assert 0.0 <= bands.coverage(problem.measurements) <= 1.0


def test_to_dict_and_plot(problem, draws):
    bands = output_bands(problem, draws[:8], quantiles=(0.1, 0.9))
    d = bands.to_dict()
    json.dumps(d)
    assert d["kind"] == "confidence" and d["quantiles"] == [0.1, 0.9] and d["n_draws"] == 8
    assert np.asarray(d["values"]).shape == (2, 4, 1)
    from jcalib.plotting import plot_bands

    fig = plot_bands(bands, data=problem.measurements)
    assert len(fig.axes) == 1
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_errors(problem, linear, model, draws):
    with pytest.raises(ValueError, match=r"quantiles must be increasing probabilities in \(0, 1\)"):
        output_bands(problem, draws, quantiles=(0.5, 0.05))
    with pytest.raises(ValueError, match=r"quantiles must be increasing probabilities"):
        output_bands(problem, draws, quantiles=(0.0, 0.5))
    with pytest.raises(ValueError, match=r"thetas must have shape \(n_draws, 2\)"):
        output_bands(problem, draws[:, :1])
    with pytest.raises(ValueError, match=r"thetas must have shape \(n_draws, 2\)"):
        output_bands(problem, draws[0])
    with pytest.raises(ValueError, match="thetas has NaN or inf in draws"):
        output_bands(problem, np.array([[1.0, np.nan]]))
    with pytest.raises(ValueError, match="output_bands: coordinates must be 'physical' or 'internal'; got 'unit'"):
        output_bands(problem, draws, coordinates="unit")
    with pytest.raises(ValueError, match="expand_draws: coordinates must be 'physical' or 'internal'"):
        expand_draws(problem, draws, coordinates="log")
    with pytest.raises(ValueError, match=r"experiment: the other model's parameters \('kab', 'kac', "
                                         r"'kad'\) differ"):
        output_bands(problem, draws, experiment=model)
    with pytest.raises(ValueError, match="experiment must be None, an Experiment or a model"):
        output_bands(problem, draws, experiment="recipe 2")
    with pytest.raises(ValueError, match="output_bands: problem must be a CalibrationProblem; got ndarray"):
        output_bands(draws, draws)
    with pytest.raises(ValueError, match="output_bands: problem must be a CalibrationProblem; got Drift"):
        output_bands(linear, draws)
    with pytest.raises(ValueError, match="prediction_bands: problem must be a CalibrationProblem"):
        prediction_bands(jax.random.key(0), linear, draws)
    no_sigma = CalibrationProblem(linear, problem.measurements, weighting="absolute")
    with pytest.raises(ValueError, match="prediction_bands: measurements.sigma is None"):
        prediction_bands(jax.random.key(0), no_sigma, draws)
    bands = output_bands(problem, draws[:8])
    with pytest.raises(ValueError, match=r"quantile\(\): 0.25 is not among the computed quantiles"):
        bands.quantile(0.25)
