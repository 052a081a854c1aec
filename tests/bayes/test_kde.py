"""Gaussian KDE: scipy.stats.gaussian_kde agreement (Scott, Silverman), the paper's
bandwidth rule (eq. A28), normalisation, a known density, and bad inputs."""

import math

import jax
import numpy as np
import pytest
from scipy import stats

from jcalib.bayes import kde


@pytest.fixture(scope="module")
def draws():
    rng = np.random.default_rng(0)
    cov = np.array([[1.0, 0.6], [0.6, 2.0]])
    return rng.multivariate_normal([0.5, -1.0], cov, size=1500)


@pytest.mark.parametrize("rule", ["scott", "silverman"])
def test_1d_matches_scipy(draws, rule):
    x = draws[:, 0]
    grid, density = kde.kde_1d(x, rule=rule)
    reference = stats.gaussian_kde(x, bw_method=rule)(grid)
    np.testing.assert_allclose(density, reference, rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("rule", ["scott", "silverman"])
def test_2d_matches_scipy(draws, rule):
    gx, gy, density = kde.kde_2d(draws, rule=rule, n_grid=40)
    xx, yy = np.meshgrid(gx, gy, indexing="ij")
    reference = stats.gaussian_kde(draws.T, bw_method=rule)(np.stack([xx.ravel(), yy.ravel()]))
    np.testing.assert_allclose(density, reference.reshape(gx.size, gy.size), rtol=1e-10, atol=1e-14)


def test_paper_bandwidth_rule(draws):
    """h_i = 1.06 v_i n^(-1/5) per coordinate (eq. A28), a diagonal kernel."""
    n = draws.shape[0]
    h = 1.06 * draws.std(axis=0, ddof=1) * n ** (-0.2)
    np.testing.assert_allclose(kde.kernel_covariance(draws, "paper"), np.diag(h**2), rtol=1e-14)
    grid, density = kde.kde_1d(draws[:, 1])
    reference = stats.gaussian_kde(draws[:, 1], bw_method=h[1] / draws[:, 1].std(ddof=1))(grid)
    np.testing.assert_allclose(density, reference, rtol=1e-10, atol=1e-14)
    # explicit bandwidths give the same, to round-off (the two paths square h in another order;
    # one run differed by 1.02e-14 relative)
    _, explicit = kde.kde_1d(draws[:, 1], grid, rule=float(h[1]))
    np.testing.assert_allclose(explicit, density, rtol=1e-12)


def test_normalised_and_close_to_the_true_density(draws):
    grid, density = kde.kde_1d(draws[:, 0], n_grid=400)
    assert abs(np.trapezoid(density, grid) - 1.0) < 1e-3
    truth = stats.norm(0.5, 1.0).pdf(grid)
    assert np.max(np.abs(density - truth)) < 0.05  # 1500 draws: a few % of the peak 0.4
    gx, gy, d2 = kde.kde_2d(draws, n_grid=80)
    assert abs(np.trapezoid(np.trapezoid(d2, gy, axis=1), gx) - 1.0) < 5e-3


def test_jit_and_batches_agree():
    """lax.map batches (256 points) and a single vmap give the same values."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(300, 1))
    pts = np.linspace(-3, 3, 700)[:, None]
    cov = kde.kernel_covariance(x, "scott")
    batched = np.asarray(kde.gaussian_kde(x, pts, cov))
    direct = np.asarray(jax.vmap(lambda p: kde.gaussian_kde(x, p[None, :], cov)[0])(pts))
    np.testing.assert_allclose(batched, direct, rtol=1e-13)
    h = math.sqrt(cov[0, 0])
    manual = np.mean(np.exp(-0.5 * ((pts - x[:, 0][None, :]) / h) ** 2), axis=1) / (h * math.sqrt(2 * math.pi))
    np.testing.assert_allclose(batched, manual, rtol=1e-12)


def test_bad_inputs():
    x = np.random.default_rng(2).normal(size=50)
    with pytest.raises(ValueError, match="rule must be one of"):
        kde.kde_1d(x, rule="cross-validation")
    with pytest.raises(ValueError, match="bandwidths must be positive"):
        kde.kde_1d(x, rule=-0.1)
    with pytest.raises(ValueError, match="zero variance"):
        kde.kde_1d(np.ones(10))
    with pytest.raises(ValueError, match="samples contain NaN"):
        kde.kde_1d(np.append(x, np.nan))
    with pytest.raises(ValueError, match="n >= 2"):
        kde.kde_1d(np.ones(1))
    with pytest.raises(ValueError, match="kde_1d: samples must be 1-D"):
        kde.kde_1d(np.ones((10, 2)))
    with pytest.raises(ValueError, match=r"kde_2d: samples must have shape \(n, 2\)"):
        kde.kde_2d(x)
