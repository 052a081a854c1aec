"""SBC: ranks of exact posterior draws are uniform (conjugate normal model), overconfident and
biased posteriors are caught, the chi-square statistic by hand, the simultaneous ECDF band
has its coverage, bad input."""

import jax
import numpy as np
import pytest
import scipy.stats

from jcalib.bayes.sbc import ecdf_band, rank_ecdf, rank_histogram, sbc_ranks, sbc_result, sbc_uniformity

N_SIMS, N_DRAWS = 400, 99


def conjugate_draws(rng, scale=1.0, shift=0.0):
    """θ ~ N(0, 1), x ~ N(θ, 0.5²): posterior N(x/1.25, 0.2); draws with the sd times ``scale``
    and the mean plus ``shift`` posterior sds (1, 0: the exact posterior)."""
    theta = rng.standard_normal((N_SIMS, 2))
    x = theta + 0.5 * rng.standard_normal((N_SIMS, 2))
    mean, sd = x / 1.25, np.sqrt(0.2)
    draws = mean[:, None, :] + sd * (shift + scale * rng.standard_normal((N_SIMS, N_DRAWS, 2)))
    return draws, theta


def test_exact_posterior_ranks_are_uniform():
    draws, theta = conjugate_draws(np.random.default_rng(0))
    ranks = sbc_ranks(draws, theta)
    assert ranks.shape == (N_SIMS, 2) and ranks.min() >= 0 and ranks.max() <= N_DRAWS
    result = sbc_result(jax.random.key(0), ranks, N_DRAWS, ("a", "b"))
    assert np.all(result.p_values > 0.01) and np.all(result.in_band) and np.all(result.passed())
    assert np.all(sbc_uniformity(jax.random.key(1), ranks, N_DRAWS, method="ks") > 0.01)
    assert set(result.to_dict()) >= {"p_values", "in_band", "ranks", "n_bins"}


@pytest.mark.parametrize("scale,shift", [(0.5, 0.0), (1.0, 0.6)])
def test_miscalibrated_posteriors_fail(scale, shift):
    draws, theta = conjugate_draws(np.random.default_rng(1), scale, shift)  # overconfident; biased
    result = sbc_result(jax.random.key(0), sbc_ranks(draws, theta), N_DRAWS)
    assert np.all(result.p_values < 1e-6) and not np.any(result.in_band)
    assert np.all(sbc_uniformity(jax.random.key(1), result.ranks, N_DRAWS, method="ks") < 1e-6)


def test_chi_square_by_hand():
    ranks = np.array([0, 0, 1, 2, 3, 3, 3, 1])[:, None]  # L = 3: ranks 0..3, 4 bins of one value
    counts, expected = rank_histogram(ranks, 3, n_bins=4)
    np.testing.assert_array_equal(counts[:, 0], [2, 2, 1, 3])
    np.testing.assert_allclose(expected, 2.0)
    stat = (0 + 0 + 1 + 1) / 2.0
    assert sbc_uniformity(None, ranks, 3, n_bins=4)[0] == pytest.approx(scipy.stats.chi2.sf(stat, 3), rel=1e-12)
    counts, expected = rank_histogram(ranks, 3, n_bins=2)  # {0, 1}, {2, 3}
    np.testing.assert_array_equal(counts[:, 0], [4, 4])
    z, ecdf = rank_ecdf(ranks, 3)
    np.testing.assert_allclose(z, [0.25, 0.5, 0.75])
    np.testing.assert_allclose(ecdf[0], [2 / 8, 4 / 8, 5 / 8])


def test_ecdf_band_has_its_simultaneous_coverage():
    n_sims, n_draws = 100, 19
    band = ecdf_band(jax.random.key(1), n_sims, n_draws, 0.95)
    again = ecdf_band(jax.random.key(1), n_sims, n_draws, 0.95)
    assert band.gamma == again.gamma  # the same key, the same band
    assert np.all(band.lower <= band.z) and np.all(band.upper >= band.z)
    # wider than the pointwise 95 % binomial intervals (a simultaneous band)
    assert np.all(band.upper - band.lower >= (scipy.stats.binom.ppf(0.975, n_sims, band.z)
                                              - scipy.stats.binom.ppf(0.025, n_sims, band.z)) / n_sims)
    rng = np.random.default_rng(2)  # fresh uniform ranks: inside the band 95 % of the time
    ranks = rng.integers(0, n_draws + 1, size=(n_sims, 2000))
    inside = np.mean(band.contains(rank_ecdf(ranks, n_draws)[1]))
    assert inside == pytest.approx(0.95, abs=5 * np.sqrt(0.95 * 0.05 / 2000) + 0.01)  # + discreteness
    continuous = ecdf_band(jax.random.key(2), 50, None, 0.9, n_eval=20)
    assert continuous.z.shape == (19,) and continuous.confidence == 0.9


def test_bad_input():
    with pytest.raises(ValueError, match=r"draws must be \(n_sims, n_draws, n_params\)"):
        sbc_ranks(np.zeros((3, 4)), np.zeros((3, 1)))
    with pytest.raises(ValueError, match="must be finite"):
        sbc_ranks(np.full((3, 4, 1), np.nan), np.zeros((3, 1)))
    with pytest.raises(ValueError, match=r"ranks must be integers in 0..n_draws=3"):
        sbc_uniformity(None, np.array([[0], [4]]), 3)
    with pytest.raises(ValueError, match="method must be one of"):
        sbc_uniformity(None, np.array([[0], [1]]), 3, method="anderson")
    with pytest.raises(ValueError, match="method='ks' randomises the ranks; pass a jax.random key"):
        sbc_uniformity(None, np.array([[0], [1]]), 3, method="ks")
    with pytest.raises(ValueError, match=r"n_bins must lie in 2..n_draws\+1=4"):
        rank_histogram(np.array([[0], [1]]), 3, n_bins=9)
    with pytest.raises(ValueError, match="confidence must lie in"):
        ecdf_band(jax.random.key(0), 10, 3, confidence=1.0)
    with pytest.raises(ValueError, match="2 names for 1 parameters"):
        sbc_result(jax.random.key(0), np.array([[0], [1]]), 3, ("a", "b"))
