"""MCMC diagnostics through ArviZ: ESS of independent and AR(1) chains, R-hat of stuck
chains, MCSE, autocorrelation, InferenceData, summary, bad inputs; posterior plots."""

import math

import arviz as az
import matplotlib.pyplot as plt
import numpy as np
import pytest

from jcalib import plotting
from jcalib.bayes import diagnostics
from jcalib.bayes.result import PosteriorResult

N_CHAINS, N_DRAWS = 4, 2000


def _ar1(rho: float, seed: int = 0, n_params: int = 2) -> np.ndarray:
    rng = np.random.default_rng(seed)
    eps = rng.normal(size=(N_CHAINS, N_DRAWS, n_params)) * math.sqrt(1 - rho**2)
    x = np.zeros_like(eps)
    x[:, 0] = rng.normal(size=(N_CHAINS, n_params))
    for t in range(1, N_DRAWS):
        x[:, t] = rho * x[:, t - 1] + eps[:, t]
    return x


def test_independent_draws():
    x = np.random.default_rng(0).normal(size=(N_CHAINS, N_DRAWS, 3))
    d = diagnostics.chain_diagnostics(x)
    n = N_CHAINS * N_DRAWS
    assert np.all(np.abs(d.ess_bulk / n - 1) < 0.15)
    assert np.all(d.rhat < 1.01)
    np.testing.assert_allclose(d.mcse_mean, x.reshape(-1, 3).std(0) / np.sqrt(n), rtol=0.15)


def test_ar1_ess_and_autocorrelation():
    """AR(1) with ρ = 0.8: ESS ≈ N (1 - ρ)/(1 + ρ), lag-k autocorrelation ρ^k."""
    rho = 0.8
    x = _ar1(rho)
    expected = N_CHAINS * N_DRAWS * (1 - rho) / (1 + rho)
    ess = diagnostics.ess(x)
    assert np.all(np.abs(ess / expected - 1) < 0.25), (ess, expected)
    np.testing.assert_array_equal(ess, [float(az.ess(x[:, :, i])) for i in range(2)])
    np.testing.assert_array_equal(diagnostics.rhat(x), [float(az.rhat(x[:, :, i])) for i in range(2)])
    np.testing.assert_array_equal(diagnostics.mcse(x, "sd"), [float(az.mcse(x[:, :, i], method="sd"))
                                                              for i in range(2)])
    assert np.all(diagnostics.ess(x, "tail") > 0)
    acf = diagnostics.autocorrelation(x, max_lag=5)
    assert acf.shape == (N_CHAINS, 6, 2)
    np.testing.assert_allclose(acf[:, 0], 1.0)
    np.testing.assert_allclose(acf[:, 1:4].mean(axis=0), np.outer([rho, rho**2, rho**3], [1, 1]), atol=0.06)


def test_rhat_flags_chains_that_disagree():
    x = np.random.default_rng(1).normal(size=(N_CHAINS, 500, 1))
    x[0] += 3.0  # one chain stuck elsewhere
    assert diagnostics.rhat(x)[0] > 1.1


def test_acceptance_inference_data_and_summary():
    accepted = np.array([[True, False, True, True], [False, False, True, False]])
    np.testing.assert_allclose(diagnostics.acceptance_rate(accepted), [0.75, 0.25])
    x = _ar1(0.3, n_params=2)
    lp = -0.5 * np.sum(x**2, axis=-1)
    idata = diagnostics.to_inference_data(x, ["k", "c"], logdensity=lp)
    assert set(idata.posterior.data_vars) == {"k", "c"}
    np.testing.assert_array_equal(idata.posterior["c"].values, x[:, :, 1])
    np.testing.assert_array_equal(idata.sample_stats["lp"].values, lp)
    table = diagnostics.summary(x, ["k", "c"])
    assert list(table.index) == ["k", "c"] and "ess_bulk" in table.columns and "r_hat" in table.columns


def test_bad_inputs():
    with pytest.raises(ValueError, match=r"samples must have shape \(n_chains, n_draws, n_params\)"):
        diagnostics.ess(np.zeros(10))
    with pytest.raises(ValueError, match="names must be 2 distinct strings"):
        diagnostics.to_inference_data(np.zeros((2, 10, 2)), ["a"])
    with pytest.raises(ValueError, match=r"logdensity must have shape \(n_chains, n_draws\)"):
        diagnostics.to_inference_data(np.zeros((2, 10, 2)), logdensity=np.zeros(10))
    with pytest.raises(ValueError, match=r"is_accepted must have shape \(n_chains, n_steps\)"):
        diagnostics.acceptance_rate(np.ones(5, dtype=bool))
    with pytest.raises(ValueError, match=r"max_lag must be an integer in \[0, n_draws=10\)"):
        diagnostics.autocorrelation(np.zeros((2, 10, 1)), max_lag=10)


@pytest.fixture(scope="module")
def posterior():
    z = _ar1(0.5, seed=3, n_params=3)[:, :400]
    z[..., 0] = -2.0 + 0.3 * z[..., 0]
    return PosteriorResult.from_chains(z, -0.5 * np.sum(z**2, -1), np.full(N_CHAINS, 0.6),
                                       samples=np.concatenate([np.exp(z[..., :1]), z[..., 1:]], -1),
                                       names=["k", "c", "d"], units=["1/s", "", "m"],
                                       log_scale=[True, False, False])


def test_posterior_plots(posterior):
    truth = {"k": 0.14, "c": 0.0}
    for fig in (plotting.plot_marginals(posterior, truth=truth),
                plotting.plot_marginals({"a": posterior, "b": posterior}, coordinates="internal", rule="scott"),
                plotting.plot_pair(posterior, truth=truth, coordinates="internal", n_grid=30),
                plotting.plot_trace(posterior),
                plotting.plot_autocorrelation(posterior, max_lag=20)):
        assert len(fig.axes) > 0
        plt.close(fig)
    with pytest.raises(ValueError, match=r"truth: expected 3 values \(k, c, d\)"):
        plotting.plot_marginals(posterior, truth=[1.0, 2.0])


def test_a_chain_that_never_moves_has_no_ess_or_rhat():
    """ArviZ gives a constant chain the ESS of its full length; a stalled sampler must not look mixed."""
    rng = np.random.default_rng(3)
    samples = rng.normal(size=(2, 200, 2))
    samples[1, :, 0] = 0.7  # chain 1 stuck in parameter 0
    d = diagnostics.chain_diagnostics(samples)
    assert np.isnan(d.ess_bulk[0]) and np.isnan(d.ess_tail[0]) and np.isnan(d.rhat[0])
    assert 100 < d.ess_bulk[1] < 600 and abs(d.rhat[1] - 1) < 0.05  # the moving parameter is unaffected


def _tick_label_boxes(fig, ax):
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    return [t.get_window_extent(renderer) for t in ax.get_xticklabels() if t.get_visible() and t.get_text()]


@pytest.mark.parametrize("spread", [2.0, 0.05])  # decades wide, and well inside one decade
def test_marginals_of_a_log_scale_parameter_stay_positive_with_readable_ticks(spread):
    """A log-scale parameter's KDE is drawn on a log axis (no density at or below zero), the
    tick labels of every panel do not overlap, and overlaid posteriors differ in line style."""
    rng = np.random.default_rng(0)
    z = np.stack([np.log(3e-5) + spread * rng.normal(size=(2, 300)), 1e-4 * rng.normal(size=(2, 300))], -1)
    posterior = PosteriorResult.from_chains(z, -0.5 * np.sum(z**2, -1), np.full(2, 0.6),
                                            samples=np.concatenate([np.exp(z[..., :1]), z[..., 1:]], -1),
                                            names=["k", "c"], units=["1/s", "m"], log_scale=[True, False])
    narrow = PosteriorResult.from_chains(0.5 * z, -0.5 * np.sum(z**2, -1), np.full(2, 0.6),
                                         samples=np.concatenate([np.exp(0.5 * z[..., :1] + 0.5 * np.log(3e-5)),
                                                                 0.5 * z[..., 1:]], -1),
                                         names=["k", "c"], units=["1/s", "m"], log_scale=[True, False])
    fig = plotting.plot_marginals({"wide": posterior, "narrow": narrow}, truth={"k": 3e-5, "c": 0.0})
    k_panel, c_panel = fig.axes[:2]
    assert k_panel.get_xscale() == "log" and c_panel.get_xscale() == "linear"
    curves = [line for line in k_panel.get_lines() if len(line.get_xdata()) > 2]
    assert len(curves) == 2 and all(np.all(np.asarray(line.get_xdata()) > 0) for line in curves)
    assert all(np.all(np.asarray(line.get_ydata()) >= 0) for line in curves)
    assert curves[0].get_linestyle() != curves[1].get_linestyle()
    for ax in (k_panel, c_panel):
        boxes = _tick_label_boxes(fig, ax)
        assert len(boxes) >= 2, [t.get_text() for t in ax.get_xticklabels()]
        for a, b in zip(boxes, boxes[1:]):
            assert not a.overlaps(b), [t.get_text() for t in ax.get_xticklabels()]
    plt.close(fig)


def test_marginals_of_a_positive_rate_sampled_in_k_get_a_log_axis():
    """A rate sampled in linear coordinates (log_scale False) whose draws are all positive but
    whose linear KDE would reach below zero is drawn like a log-scale one; a parameter with
    negative draws keeps its linear axis."""
    rng = np.random.default_rng(1)
    z = np.stack([rng.uniform(1e-6, 8e-5, size=(2, 400)), rng.normal(size=(2, 400))], -1)
    posterior = PosteriorResult.from_chains(z, -0.5 * np.sum(z**2, -1), np.full(2, 0.6), samples=z,
                                            names=["kac", "c"], units=["1/s", ""], log_scale=[False, False])
    fig = plotting.plot_marginals(posterior)
    rate, other = fig.axes[:2]
    assert rate.get_xscale() == "log" and other.get_xscale() == "linear"
    assert all(np.all(np.asarray(line.get_xdata()) > 0) for line in rate.get_lines())
    plt.close(fig)

