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


@pytest.mark.slow  # ~150 s: three posteriors, two samplers each; tests/bayes and the CLI cover the sampler by default
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
    for label, case in cases.items():
        # the Laplace-metric MALA adapts its step towards 60 %; the paper's fixed-step MALA is
        # a measured outcome (the paper: 75 % with A only; ours 0.37 for ABCD, sigma 0.1, in k)
        acceptance = case["samplers"]["MALA, Laplace metric"]["acceptance"]
        assert 0.4 <= acceptance <= 0.8, (label, acceptance)
        assert 0.0 < case["samplers"]["paper MALA"]["acceptance"] < 1.0
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


def test_polymerization_samplers_keep_the_papers_priors():
    """Appendix B.2: the prior is uniform in f and ktc (MALA samples them linearly) and in
    log10 ktd, on [10, 1e8] in Test 4. NUTS samples log f, log ktc with priors uniform in f and
    ktc: its log prior is the linear one plus the log-Jacobians log f + log ktc."""
    from jcalib.bayes import Uniform

    script = load_script("experiments/polymerization_bayesian.py")
    model = jcalib.models.get("radical_polymerization_simple", recipe=1, outputs=("M",), qss=True)
    data = jcalib.Measurements(model.ts, np.ones((len(model.ts), 1)), output_names=("M",))
    paper = script.paper_model(model, "Test 1")
    assert [paper.parameters[n].log_scale for n in ("f", "ktc", "ktd")] == [False, False, True]
    assert script.paper_model(model, "Test 4").parameters["ktd"].lower == 10.0 == 10 * paper.parameters["ktd"].lower
    linear = script.sampling_problem(paper, data, ("M",), 0.05, free=("f", "ktc"), fixed={"ktd": 0.0})
    logs = script.sampling_problem(script.log_model(paper), data, ("M",), 0.05, free=("f", "ktc"),
                                   fixed={"ktd": 0.0}, prior={"f": Uniform(), "ktc": Uniform()})
    points = np.array([[0.12, 2e4], [0.3, 1e6], [0.95, 5e8]])
    lin = [float(linear.log_prior(jnp.asarray(x))) for x in points]
    log = [float(logs.log_prior(jnp.asarray(np.log(x)))) for x in points]
    np.testing.assert_allclose(np.subtract(log, lin) - np.log(points).sum(axis=1), 0.0, atol=1e-12)
    assert lin[0] == lin[1] == lin[2]  # uniform in f and ktc themselves
    assert float(logs.log_prior(jnp.asarray(np.log([0.09, 1e6])))) == -np.inf  # outside [0.1, 1]


def test_polymerization_convergence_check():
    """R-hat <= 1.01 and bulk ESS >= 400 for every parameter; chains that disagree fail and the
    converged run is the one reported."""
    script = load_script("experiments/polymerization_bayesian.py")
    z = np.random.default_rng(0).normal(size=(4, 1000, 2))
    mixed = PosteriorResult.from_chains(z, -0.5 * (z**2).sum(-1), np.full(4, 0.8), warn=False, wall_time_s=2.0)
    apart = PosteriorResult.from_chains(z + np.arange(4)[:, None, None], -0.5 * (z**2).sum(-1), np.full(4, 0.8),
                                        warn=False, wall_time_s=1.0)
    checks = {"mala": script.convergence(apart), "nuts": script.convergence(mixed)}
    assert checks["nuts"]["converged"] and checks["nuts"]["max_rhat"] <= 1.01 and checks["nuts"]["min_ess_bulk"] >= 400
    assert not checks["mala"]["converged"] and checks["mala"]["max_rhat"] > 1.5
    assert script.reported_sampler(checks) == "nuts"
    checks["nuts"]["converged"] = False
    assert script.reported_sampler(checks) == "nuts"  # neither: the smaller R-hat, flagged by converged=False


@pytest.mark.slow  # ~300 s CPU: Gauss-Newton, MALA and NUTS on Tests 1-2, recipe-2 bands
def test_polymerization_bayesian_quick(tmp_path):
    metrics = load_script("experiments/polymerization_bayesian.py").main(["--out", str(tmp_path), "--quick"])
    assert json.loads((tmp_path / "metrics.json").read_text()) == metrics
    for name in ("pair_test1.png", "pair_test2.png", "trace_test1_mala.png", "trace_test1_nuts.png",
                 "marginals_tests12.png", "recipe2_bands_sigma0.05.png", "recipe2_bands_sigma0.1.png",
                 "posterior_test2_nuts.npz", "posterior_test2_mala.npz"):
        assert (tmp_path / name).stat().st_size > 0
    tests = metrics["tests"]
    assert set(tests) == {"Test 1", "Test 2"}
    for test in tests.values():  # both samplers from the Gauss-Newton estimate, no chain dropped
        assert set(test["samplers"]) == {"mala", "nuts"}
        assert all(c["n_chains"] == 4 for c in test["samplers"].values())
        assert test["converged"] == test["samplers"][test["reported_sampler"]]["converged"]
        assert 0.0 < test["samplers"]["nuts"]["acceptance"] <= 1.0
    # Test 1 ([M] only): f and ktc along one ridge f / ktc ~ const (f against termination);
    # Test 2 ([M] + Mw): much narrower
    test1, test2 = tests["Test 1"], tests["Test 2"]
    assert abs(test1["correlation_internal"][0][1]) > 0.9
    assert test1["sd_internal"]["f"] >= 4 * test2["sd_internal"]["f"]
    # Figure 13: the simple model misses the real recipe-2 monomer, also with sigma = 0.1
    for sigma in ("0.05", "0.1"):
        monomer = metrics["recipe2"][f"sigma={sigma}"]["confidence"]["M"]
        assert monomer["fraction_outside"] > 0.5 and monomer["max_relative_miss"] > 0.2, monomer
    # the real model's efficiency falls much further at recipe 2 (7.6x the initiator) than at recipe 1
    diff = metrics["recipe2"]["model_difference"]
    assert diff["real_efficiency_recipe2"]["5000 s"] < diff["real_efficiency_recipe1"]["5000 s"] - 0.1
    table = (tmp_path / "paper_comparison.md").read_text().splitlines()
    rows = [line for line in table if line.startswith("|")][2:]
    assert len(rows) == 14  # convergence and acceptance of Tests 1-4, their claims, recipe 2
    for name, test in tests.items():  # a posterior that did not converge is flagged where it is used
        if not test["converged"]:
            assert any("NOT CONVERGED (" in row and name in row for row in rows)
