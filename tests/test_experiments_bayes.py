"""The Bayesian experiments run with --quick and keep the paper's structure (Wulkow et al.
2021, §3.1 and §3.2.2)."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jcalib
from jcalib.bayes import SamplingWarning
from jcalib.bayes.result import PosteriorResult
from tests.helpers import load_script


def test_unused_outputs_leave_the_a_only_posterior():
    """σ = UNUSED_SIGMA on B, C, D gives the A-only log posterior up to a constant."""
    script = load_script("experiments/reactions_bayesian.py")
    classical = load_script("experiments/reactions_classical.py")
    model = jcalib.models.get("four_substance_reactions")
    data = jcalib.synthetic_measurements(jax.random.key(0), model, jnp.asarray(model.parameters.nominal),
                                         sigma=0.1)
    shared = script.sampling_problem(model, data, "A", 0.1)
    a_only = classical._problem(model, data, "A")
    box = model.parameters
    points = jax.random.uniform(jax.random.key(1), (4, 3), dtype=jnp.float64,
                                minval=jnp.asarray(box.lower_internal), maxval=jnp.asarray(box.upper_internal))
    difference = [float(shared.log_posterior(z) - a_only.log_posterior(z)) for z in points]
    np.testing.assert_allclose(difference, difference[0], atol=1e-8)


def test_paper_model_samples_k_under_the_papers_uniform_prior():
    """The paper's prior is uniform in k on the box: the linear model's log prior is flat in k."""
    script = load_script("experiments/reactions_bayesian.py")
    model = jcalib.models.get("four_substance_reactions")
    linear = script.paper_model(model)
    assert not any(linear.parameters.log_scale) and linear.parameters.names == model.parameters.names
    data = jcalib.synthetic_measurements(jax.random.key(0), model, jnp.asarray(model.parameters.nominal), sigma=0.1)
    problem = script.sampling_problem(linear, data, "A", 0.1)
    inside = jnp.asarray([[1e-5, 1e-5, 1e-5], [9e-4, 9e-5, 2e-6]])
    assert float(problem.log_prior(inside[0])) == float(problem.log_prior(inside[1]))
    np.testing.assert_allclose(np.asarray(linear.simulate(inside[0])), np.asarray(model.simulate(inside[0])),
                               rtol=1e-10)


def test_convergence_check_refuses_chains_that_disagree():
    """R-hat <= 1.01 and bulk ESS >= 400 for every parameter; otherwise not converged, and a
    case reports the converged run with the larger ESS (or, none converged, the smaller R-hat)."""
    script = load_script("experiments/reactions_bayesian.py")
    rng = np.random.default_rng(0)
    mixed = rng.normal(size=(4, 1000, 2))
    apart = mixed + np.array([0.0, 0.0, 1.0, 1.0])[:, None, None]  # two chains sit elsewhere

    def result(z):
        return PosteriorResult.from_chains(z, -0.5 * np.sum(z**2, -1), np.full(4, 0.6), samples=z,
                                           names=["a", "b"], units=["", ""], log_scale=[False, False])

    with pytest.warns(SamplingWarning, match="R-hat above 1.05"), pytest.warns(SamplingWarning, match="bulk ESS"):
        bad = script.convergence(result(apart))
    good = script.convergence(result(mixed))
    assert good["converged"] and good["max_rhat"] <= 1.01 and good["min_ess_bulk"] >= 400
    assert not bad["converged"] and bad["max_rhat"] > 1.01
    assert script.reported_sampler({"x": bad, "y": good}) == "y"
    assert script.reported_sampler({"x": bad, "y": dict(bad, max_rhat=bad["max_rhat"] + 1)}) == "x"


@pytest.mark.slow  # ~70 s: three posteriors; tests/bayes and the CLI cover the sampler by default
def test_reactions_bayesian_quick(tmp_path):
    metrics = load_script("experiments/reactions_bayesian.py").main(["--out", str(tmp_path), "--quick"])
    assert json.loads((tmp_path / "metrics.json").read_text()) == metrics
    for name in ("marginals.png", "marginals_ABCD.png", "pair_A_sigma0.1.png", "bands_A_sigma0.1.png",
                 "bands_ABCD_sigma0.1.png", "bands_ABCD_sigma0.03.png", "trace_A_sigma0.1_paper_mala.png",
                 "trace_A_sigma0.1_mala_laplace.png"):
        assert (tmp_path / name).stat().st_size > 0
    posterior = PosteriorResult.load(tmp_path / "posterior_A_sigma0.1_paper_mala.npz")
    assert posterior.names == ("kab", "kac", "kad") and posterior.samples.shape == (2, 500, 3)
    assert PosteriorResult.load(tmp_path / "posterior_A_sigma0.1_mala_laplace.npz").samples.shape == (2, 400, 3)
    cases = metrics["cases"]
    for label, case in cases.items():  # the paper: 75 % (A only); 50-70 % is ideal
        acceptance = case["samplers"]["paper MALA"]["acceptance"]
        assert 0.4 <= acceptance <= 0.95, (label, acceptance)
        # every run's convergence check is recorded and the reported run is one of them
        assert set(case["samplers"]) == {"paper MALA", "MALA, Laplace metric"}
        assert case["reported_sampler"] in case["samplers"]
        assert case["converged"] == case["samplers"][case["reported_sampler"]]["converged"]
    # §3.1.1-3.1.2: with A alone kac and kad spread over decades; B, C, D pin them down
    ratio = metrics["sd_ratio_A_over_ABCD_sigma0.1"]  # posterior sd ratio (not a timing)
    assert ratio["kac"] >= 5 and ratio["kad"] >= 5, ratio
    # §3.1.3: sigma = 0.03 gives intervals around the truth, narrower than sigma = 0.1 (~0.3x)
    assert all(cases["ABCD, sigma=0.03"]["truth_in_interval90"].values())
    assert all(r < 0.6 for r in metrics["width_ratio_sigma0.03_over_sigma0.1"].values())
    # §3.1.4: D inside the band of the (wide) A-only forward simulations; with the noise
    # added (prediction band) most D points lie inside for the ABCD posterior too
    assert cases["A, sigma=0.1"]["band_D"]["confidence"]["fraction_inside"] >= 0.9
    assert cases["ABCD, sigma=0.1"]["band_D"]["prediction"]["fraction_inside"] >= 0.6
    table = (tmp_path / "paper_comparison.md").read_text().splitlines()
    assert len([line for line in table if line.startswith("|")][2:]) == 8  # claims of §3.1.1-3.1.4, convergence


@pytest.mark.slow  # ~100 s CPU: three compiled samplers of the stiff model
def test_polymerization_bayesian_quick(tmp_path):
    metrics = load_script("experiments/polymerization_bayesian.py").main(["--out", str(tmp_path), "--quick"])
    assert json.loads((tmp_path / "metrics.json").read_text()) == metrics
    for name in ("pair_test1.png", "pair_test2.png", "trace_test1.png", "marginals_tests12.png",
                 "recipe2_bands_sigma0.05.png", "recipe2_bands_sigma0.1.png", "posterior_test2.npz"):
        assert (tmp_path / name).stat().st_size > 0
    tests = metrics["tests"]
    assert set(tests) == {"Test 1", "Test 2"}
    for name, test in tests.items():  # warm-up recorded; the paper: 72 % and 57 %
        assert test["warmup"] == 300 and all(f > 0 for f in test["step_size_factor_per_chain"])
        assert 0.3 <= test["acceptance"] <= 0.95, (name, test["acceptance"])
    # Test 1 ([M] only): f and log ktc along one ridge (f against termination), wide;
    # Test 2 ([M] + Mw): much narrower
    test1, test2 = tests["Test 1"], tests["Test 2"]
    assert abs(test1["correlation_internal"][0][1]) > 0.95
    assert test1["sd_internal"]["f"] >= 4 * test2["sd_internal"]["f"]
    assert metrics["sd_ratio_test1_over_test2_internal"]["f"] >= 4
    # Figure 13: the simple model misses the real recipe-2 monomer, also with sigma = 0.1
    for sigma in ("0.05", "0.1"):
        monomer = metrics["recipe2"][f"sigma={sigma}"]["confidence"]["M"]
        assert monomer["fraction_outside"] > 0.5 and monomer["max_relative_miss"] > 0.2, monomer
    table = (tmp_path / "paper_comparison.md").read_text().splitlines()
    assert len([line for line in table if line.startswith("|")][2:]) == 10  # claims of Tests 1-4 and recipe 2
