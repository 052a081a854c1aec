"""Prescaled MALA on the four-substance reaction posterior (Wulkow et al. 2021, §3.1):
acceptance with the paper's settings, coverage and narrowing with σ, the A-only posterior,
and a problem whose solver fails in part of the box."""

import jax
import numpy as np
import pytest

import jcalib
from jcalib.bayes import Prescaled, mala, nuts
from jcalib.problems import CalibrationProblem

# The paper: τ_i = 1/50 of the range, 2500 steps of which the first 500 are discarded. Fewer
# steps here (2 chains x 1000 after 300 burn-in) keep the suite fast; intervals need only a
# few hundred effective draws.
FRACTION, N_STEPS, BURN_IN, N_CHAINS = 1 / 50, 1000, 300, 2


def _posterior(observe: str, sigma: float, seed: int = 0):
    model = jcalib.models.get("four_substance_reactions", observe=observe)
    truth = model.parameters.nominal
    data = jcalib.synthetic_measurements(jax.random.key(seed), model, truth, sigma=sigma)
    problem = CalibrationProblem(model, data, weighting="relative")
    result = mala.sample(jax.random.key(1), problem, None, N_STEPS, n_chains=N_CHAINS, burn_in=BURN_IN,
                         preconditioner=Prescaled(FRACTION))
    return truth, result


@pytest.fixture(scope="module")
def runs():  # three posteriors, two compiled model structures: about a minute on 2 CPU cores
    return {(observe, sigma): _posterior(observe, sigma)
            for observe, sigma in (("ABCD", 0.03), ("ABCD", 0.1), ("A", 0.1))}


@pytest.mark.slow
def test_paper_settings_give_reasonable_acceptance(runs):
    for (observe, sigma), (_, result) in runs.items():
        assert 0.40 <= result.acceptance <= 0.85, (observe, sigma, result.acceptance_rate)
        assert np.all(np.isfinite(result.samples))
        assert result.names == ("kab", "kac", "kad") and result.log_scale == (True, True, True)


@pytest.mark.slow
def test_intervals_cover_the_truth_and_narrow_with_sigma(runs):
    truth, precise = runs[("ABCD", 0.03)]
    _, noisy = runs[("ABCD", 0.1)]
    lo, hi = precise.interval(0.9)
    assert np.all((lo <= truth) & (truth <= hi)), (lo, truth, hi)
    width_precise = np.diff(precise.interval(0.9, coordinates="internal"), axis=0)[0]
    width_noisy = np.diff(noisy.interval(0.9, coordinates="internal"), axis=0)[0]
    assert np.all(width_precise < width_noisy), (width_precise, width_noisy)
    # the posterior sd scales roughly like σ (ratio 0.3), well below 1
    assert np.all(np.std(precise.flat_samples("internal"), 0) < 0.6 * np.std(noisy.flat_samples("internal"), 0))


@pytest.mark.slow
def test_observing_a_only_leaves_kac_poorly_determined(runs):
    _, full = runs[("ABCD", 0.1)]
    _, a_only = runs[("A", 0.1)]
    sd_full = np.std(full.flat_samples(coordinates="internal"), axis=0)
    sd_a = np.std(a_only.flat_samples(coordinates="internal"), axis=0)
    assert sd_a[1] >= 5 * sd_full[1], (sd_a, sd_full)
    assert a_only.sd[1] >= 5 * full.sd[1]  # also in physical units


@pytest.mark.slow  # ~35 s of compilation; test_mala.py covers -inf/NaN regions analytically
def test_solver_failures_in_part_of_the_box_are_rejected():
    """With a step budget of 43 the solve fails for ~20 % of the points within 0.1 (log
    units) of the truth and for fast kinetics (large rates): the log posterior is -inf
    there, such prescaling draws get weight 0, such proposals are rejected, and the chain
    never stores a failed point."""
    model = jcalib.models.get("four_substance_reactions").with_solver(max_steps=43)
    truth = model.parameters.nominal
    data = jcalib.synthetic_measurements(jax.random.key(0), model, truth, sigma=0.1)
    problem = CalibrationProblem(model, data, weighting="relative")
    result = mala.sample(jax.random.key(2), problem, None, 1000, n_chains=2, preconditioner=Prescaled(FRACTION))
    assert result.names == ("kab", "kac", "kad")
    assert result.extra["prescaling_n_valid"] < 100
    assert np.any(result.extra["invalid_proposal_rate"] > 0)  # some proposals failed and were rejected
    assert np.all(np.isfinite(result.samples)) and np.all(np.isfinite(result.logdensity))
    assert result.acceptance > 0.2


@pytest.mark.slow
@pytest.mark.parametrize("kernel", ["mala", "nuts"])
def test_sample_on_an_ode_problem_compiles_its_loop_once(kernel):
    """A new problem of the same structure (other data, other σ) reuses the compiled sampling loop:
    the model's solver (diffrax, with lineax's norm) and the kernels hold no per-call closure."""
    from jcalib import algorithm

    size = algorithm._scan_chunk._cached._cache_size
    model = jcalib.models.get("four_substance_reactions")
    problems = [CalibrationProblem(model, jcalib.synthetic_measurements(jax.random.key(seed), model,
                                                                        model.parameters.nominal, sigma=sigma))
                for seed, sigma in ((3, 0.1), (4, 0.03))]
    before = size()
    sample = {"mala": mala.sample, "nuts": nuts.sample}[kernel]
    results = [sample(jax.random.key(5), p, None, 12, n_chains=2, warmup=3, progress=False)
               for p in problems]
    assert size() == before + 1
    assert not np.array_equal(results[0].samples, results[1].samples)
