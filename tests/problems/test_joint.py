"""JointProblem: several experiments in one calibration (issue 20).

Pinned to the single-experiment `CalibrationProblem`: one experiment gives the same numbers
exactly, residuals and Jacobians stack the per-experiment ones, per-experiment parameters
only move their own experiment's rows, and the estimators and samplers run on it."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jcalib
from jcalib import bayes, estimation, sensitivity
from jcalib.data import Measurements
from jcalib.model import Experiment
from jcalib.problems import CalibrationProblem, JointProblem

TRUTH = {"kab": 1.0e-4, "kac": 2.0e-5, "kad": 5.0e-5}


@pytest.fixture(scope="module")
def base():
    return jcalib.models.get("four_substance_reactions")


def _experiment(base, k, n_times, a0, kad=TRUTH["kad"], mask=None, noise=0.0):
    """Experiment ``e<k>``: ``n_times`` times after t = 0, A0 = ``a0``, data at the truth."""
    ts = np.linspace(float(base.ts[1]), float(base.ts[-1]), n_times)
    model = base.with_experiment(Experiment(ts, t0=0.0, conditions={"A0": a0}, name=f"e{k}"))
    theta = model.parameters.to_vector({**TRUTH, "kad": kad})
    y = np.asarray(model.simulate(jnp.asarray(theta)))
    if noise:
        y = y + noise * np.asarray(jax.random.normal(jax.random.key(k), y.shape))
    return model, Measurements(ts, y, mask=mask, output_names=model.output_names)


@pytest.fixture(scope="module")
def ragged(base):
    """Three experiments: different time grids, initial concentrations, kad and a mask."""
    mask = np.ones((12, 4), dtype=bool)
    mask[::2, 1] = False  # B only every other time
    return [_experiment(base, 0, 10, 10.0, kad=4e-5),
            _experiment(base, 1, 12, 6.0, kad=5e-5, mask=mask),
            _experiment(base, 2, 15, 14.0, kad=7e-5)]


@pytest.fixture(scope="module")
def joint(ragged):
    return JointProblem(ragged, free=["kab", "kac"], per_experiment=["kad"], weighting="absolute")


@pytest.fixture(scope="module")
def z_off(joint):
    return joint.initial_internal() + jnp.linspace(-0.2, 0.3, joint.n_free)


def _single(pair, **settings):
    return CalibrationProblem(*pair, weighting="absolute", **settings)


@pytest.mark.slow
def test_names_and_layout(joint, ragged):
    assert joint.free_names == ("kab", "kac", "kad[e0]", "kad[e1]", "kad[e2]")
    assert joint.experiment_names == ("e0", "e1", "e2")
    assert joint.group_members == ((0, 1, 2),)  # one vmapped group despite ragged grids
    assert joint.n_observed == sum(int(np.asarray(d.mask).sum()) for _, d in ragged) == 10 * 4 + 42 + 15 * 4
    rows = joint.experiment_rows
    assert [r.stop - r.start for r in rows] == [40, 42, 60]
    est = joint.estimate_dict(joint.to_internal(jnp.asarray([1e-4, 2e-5, 4e-5, 5e-5, 7e-5])))
    assert est["kad[e2]"] == pytest.approx(7e-5, rel=1e-14)


@pytest.mark.slow
def test_one_experiment_equals_single_problem_exactly(ragged):
    pair = ragged[1]
    single = _single(pair, fixed={"kad": 5e-5})
    one = JointProblem([pair], free=["kab", "kac"], fixed={"kad": 5e-5}, weighting="absolute")
    z = single.initial_internal() + jnp.asarray([0.2, -0.1])
    for method in ("residuals", "jacobian", "loss", "log_prior"):
        np.testing.assert_array_equal(np.asarray(getattr(one, method)(z)), np.asarray(getattr(single, method)(z)))
    sigma = 0.05
    single_s = CalibrationProblem(*pair, weighting="absolute", fixed={"kad": 5e-5},
                                  likelihood=jcalib.probability.likelihoods.AbsoluteGaussian(sigma))
    one_s = JointProblem([pair], free=["kab", "kac"], fixed={"kad": 5e-5}, weighting="absolute",
                         likelihood=jcalib.probability.likelihoods.AbsoluteGaussian(sigma))
    assert float(one_s.log_posterior(z)) == float(single_s.log_posterior(z))


@pytest.mark.slow
def test_residuals_and_jacobian_stack_the_experiments(joint, ragged, z_off):
    r, jac = np.asarray(joint.residuals(z_off)), np.asarray(joint.jacobian(z_off))
    z_exp = joint.experiment_internal(z_off)
    for k, (pair, rows) in enumerate(zip(ragged, joint.experiment_rows)):
        single = _single(pair, free=["kab", "kac", "kad"])
        np.testing.assert_allclose(r[rows], np.asarray(single.residuals(z_exp[k])), rtol=1e-12, atol=1e-14)
        expected = np.zeros((rows.stop - rows.start, joint.n_free))
        expected[:, [0, 1, 2 + k]] = np.asarray(single.jacobian(z_exp[k]))
        np.testing.assert_allclose(jac[rows], expected, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(float(joint.loss(z_off)), np.mean(r**2), rtol=1e-14)


@pytest.mark.slow
def test_per_experiment_parameter_moves_only_its_experiment(joint, z_off):
    """Jacobian block structure: column kad[e_k] is zero outside experiment k's rows;
    the shared columns are not."""
    jac = np.asarray(joint.jacobian(z_off))
    for k, rows in enumerate(joint.experiment_rows):
        column = jac[:, 2 + k]
        assert np.abs(column[rows]).max() > 0
        outside = np.delete(column, np.arange(rows.start, rows.stop))
        assert np.all(outside == 0.0)
        assert np.abs(jac[rows, :2]).max() > 0
    # the same through residuals: moving kad[e1] changes only e1's rows
    dz = z_off.at[3].add(0.1)
    change = np.asarray(joint.residuals(dz)) - np.asarray(joint.residuals(z_off))
    rows = joint.experiment_rows[1]
    assert np.abs(change[rows]).max() > 0
    assert np.all(np.delete(change, np.arange(rows.start, rows.stop)) == 0.0)


@pytest.mark.slow
def test_identical_copies_repeat_the_residuals_and_keep_the_estimate(base):
    pair = _experiment(base, 0, 10, 10.0, noise=0.02)
    copies = [(pair[0].with_experiment(Experiment(np.asarray(pair[0].ts), t0=0.0, conditions={"A0": 10.0},
                                                  name=f"c{k}")), pair[1]) for k in range(3)]
    single = CalibrationProblem(*pair, weighting="absolute")
    triple = JointProblem(copies, free=["kab", "kac", "kad"], weighting="absolute")
    z = single.initial_internal() + 0.1
    r1, r3 = np.asarray(single.residuals(z)), np.asarray(triple.residuals(z)).reshape(3, -1)
    assert np.array_equal(r3[0], r3[1]) and np.array_equal(r3[0], r3[2])
    np.testing.assert_allclose(r3[0], r1, rtol=1e-12, atol=1e-15)
    fit1 = estimation.gauss_newton(single, None)
    fit3 = estimation.gauss_newton(triple, None)
    assert fit1.converged and fit3.converged
    np.testing.assert_allclose(fit3.theta, fit1.theta, rtol=1e-6)


@pytest.mark.slow
def test_fixed_per_experiment_and_conditions(base, ragged):
    """``fixed={name: {experiment: value}}`` sets each experiment's value; the experiments'
    conditions (A0) stay theirs."""
    joint = JointProblem(ragged, free=["kab", "kac"], fixed={"kad": {"e0": 4e-5, "e1": 5e-5, "e2": 7e-5}},
                         weighting="absolute")
    r = np.asarray(joint.residuals(joint.to_internal(jnp.asarray([TRUTH["kab"], TRUTH["kac"]]))))
    np.testing.assert_allclose(r, 0.0, atol=1e-9)  # every experiment at its own truth
    wrong = JointProblem(ragged, free=["kab", "kac"], fixed={"kad": 5e-5}, weighting="absolute")
    r_wrong = np.asarray(wrong.residuals(wrong.to_internal(jnp.asarray([TRUTH["kab"], TRUTH["kac"]]))))
    assert np.abs(r_wrong[wrong.experiment_rows[0]]).max() > 1e-6
    np.testing.assert_allclose(r_wrong[wrong.experiment_rows[1]], 0.0, atol=1e-9)


@pytest.mark.slow
def test_different_structures_form_separate_groups(ragged):
    """An experiment whose model differs in a static setting (here kab's bounds) cannot be
    stacked with the others: it is simulated on its own, with the same results."""
    model, data = ragged[2]
    other = dataclasses.replace(model, parameters=model.parameters.replace("kab", upper=2e-3))
    pairs = [ragged[0], ragged[1], (other, data)]
    mixed = JointProblem(pairs, free=["kab", "kac", "kad"], weighting="absolute")
    assert mixed.group_members == ((0, 1), (2,))
    z = mixed.initial_internal() + 0.05
    stacked = np.concatenate([np.asarray(_single(p).residuals(z)) for p in pairs])
    np.testing.assert_allclose(np.asarray(mixed.residuals(z)), stacked, rtol=1e-12, atol=1e-15)


@pytest.mark.slow
def test_jit_and_vmap_consistency(joint, z_off):
    zs = jnp.stack([z_off, z_off + 0.05, z_off - 0.05])
    batched = jax.vmap(lambda z: joint._loss_impl(z))(zs)
    looped = np.asarray([float(joint.loss(z)) for z in zs])
    np.testing.assert_allclose(np.asarray(batched), looped, rtol=1e-12)


@pytest.mark.parametrize("bad, message", [
    (dict(experiments=[]), "no experiments"),
    (dict(free=["nope"]), "unknown parameter 'nope'"),
    (dict(free=["kab", "kab"]), "duplicate names"),
    (dict(free=["kab"], fixed={"kab": 1e-4}), "both free and fixed"),
    (dict(fixed={"kad": {"e9": 1e-5}}), "unknown experiments"),
    (dict(fixed={"kad": float("nan")}), "finite number"),
    (dict(free=[], per_experiment=[]), "no free parameter"),
])
def test_bad_input_is_refused(ragged, bad, message):
    settings = dict(experiments=ragged, free=["kab", "kac"], weighting="absolute")
    settings.update(bad)
    with pytest.raises(ValueError, match=message):
        JointProblem(**settings)


def test_duplicate_names_and_unwrapped_pair_are_refused(base, ragged):
    with pytest.raises(ValueError, match="duplicate experiment names"):
        JointProblem([ragged[0], ragged[0]], free=["kab"], weighting="absolute")
    with pytest.raises(ValueError, match="list of"):
        JointProblem(ragged[0], free=["kab"], weighting="absolute")
    zero = _experiment(base, 5, 10, 10.0)
    with pytest.raises(ValueError, match="experiment 'e5'.*X = 0|experiment 'e5'"):
        y = np.asarray(zero[1].values).copy()
        y[0, 0] = 0.0
        JointProblem([(zero[0], Measurements(zero[1].ts, y, output_names=zero[0].output_names))],
                     free=["kab"], weighting="relative")


@pytest.fixture(scope="module")
def joint_fit(joint):
    return estimation.gauss_newton(joint, None)


@pytest.mark.slow  # ~55 s cold
def test_estimators_recover_the_truth_jointly(joint, joint_fit):
    """Gauss-Newton and the vmapped LM multistart on the joint problem reach the data's
    parameters (noise-free data), with per-experiment kad."""
    truth = np.asarray([TRUTH["kab"], TRUTH["kac"], 4e-5, 5e-5, 7e-5])
    fit = joint_fit
    assert fit.converged and fit.n_essential_directions == 5
    np.testing.assert_allclose(fit.theta, truth, rtol=1e-5)
    starts = estimation.sample_starts(jax.random.key(0), joint, 3)
    multi = estimation.levenberg_marquardt_batch(joint, starts)
    assert min(r.loss for r in multi.results) < 1e-14
    report = sensitivity.identifiability(joint, theta=truth)
    assert report.rank == 5
    trf = estimation.least_squares_trf(joint, None)
    np.testing.assert_allclose(trf.theta, truth, rtol=1e-5)
    cov = estimation.parameter_covariance(joint, fit, sigma=0.01)
    assert cov.names == joint.free_names and np.all(np.isfinite(cov.std))
    profile = estimation.profile_likelihood(joint, fit, "kad[e1]", 3, sigma=0.01)
    assert np.all(np.asarray(profile.delta_chi2) >= -1e-6)
    de = estimation.differential_evolution(jax.random.key(2), joint, max_steps=2, population_size=12)
    assert np.isfinite(de.loss) and de.names == joint.free_names


@pytest.mark.slow  # ~25 s of compiles; `jcalib sample` with two --data files runs MALA on a joint problem in CI
@pytest.mark.filterwarnings("ignore::jcalib.bayes.SamplingWarning")
def test_mala_on_the_joint_posterior(joint):
    problem = JointProblem(joint_pairs_with_sigma(joint), free=["kab", "kac"], per_experiment=["kad"],
                           weighting="absolute")
    fit = estimation.gauss_newton(problem, None)
    result = bayes.mala.sample(jax.random.key(0), problem, fit.theta, n_steps=40, n_chains=2, warmup=20,
                               preconditioner="laplace")
    assert result.samples.shape == (2, 40, 5)
    assert result.names == problem.free_names
    assert np.all(np.isfinite(result.logdensity))
    # the noise-free data's maximum (the Gauss-Newton estimate, uniform prior) bounds every draw
    assert result.logdensity.max() <= float(problem.log_posterior(jnp.asarray(fit.theta_internal))) + 1e-6
    draws = result.samples_internal.reshape(-1, 5)
    assert np.all(np.abs(draws.mean(0) - fit.theta_internal) < 5 * draws.std(0))


def joint_pairs_with_sigma(joint):
    """The joint fixture's experiments with sigma = 0.01 attached (the posterior needs it)."""
    out = []
    for p in joint.experiment_problems:
        d = p.measurements
        out.append((p.model, Measurements(d.ts, d.values, mask=d.mask, sigma=0.01, output_names=d.output_names)))
    return out


@pytest.mark.slow
def test_experiment_contributions_count_the_added_directions(base):
    """A only: each experiment alone identifies kab and kac + kad_k (rank 2); a second
    experiment with its own kad adds the direction kac + kad_2. With one shared kad no
    initial concentration adds anything: kac and kad enter A only through their sum. ABCD:
    each further experiment adds its own kad copy."""
    a_only = jcalib.models.get("four_substance_reactions", observe="A")
    pairs = [_experiment(a_only, k, 12, a0) for k, a0 in enumerate((10.0, 5.0, 20.0))]
    truth = [TRUTH["kab"], TRUTH["kac"], TRUTH["kad"], TRUTH["kad"], TRUTH["kad"]]
    joint = JointProblem(pairs, free=["kab", "kac"], per_experiment=["kad"], weighting="absolute")
    report = sensitivity.experiment_contributions(joint, truth, rank_rtol=1e-8)
    assert report.rank_alone == (2, 2, 2)
    assert report.rank_cumulative == (2, 3, 4)
    shared = JointProblem(pairs, free=["kab", "kac", "kad"], weighting="absolute")
    shared_report = sensitivity.experiment_contributions(shared, truth[:3], rank_rtol=1e-8)
    assert shared_report.rank_cumulative == (2, 2, 2)
    assert shared_report.added[1:] == (0, 0)
    abcd = JointProblem([_experiment(base, k, 12, a0) for k, a0 in enumerate((10.0, 5.0))],
                        free=["kab", "kac"], per_experiment=["kad"], weighting="absolute")
    abcd_report = sensitivity.experiment_contributions(abcd, truth[:4], rank_rtol=1e-8)
    assert abcd_report.rank_cumulative == (3, 4)
    assert abcd_report.to_dict()["experiment_names"] == ["e0", "e1"]
    with pytest.raises(ValueError, match="JointProblem"):
        sensitivity.experiment_contributions(CalibrationProblem(*pairs[0], weighting="absolute"))


def test_bands_per_experiment(joint):
    """Bands of a joint problem's draws are those of each experiment's own problem with that
    experiment's columns of the draws."""
    z = np.asarray(joint.initial_internal())[None, :] + 0.02 * np.asarray(
        jax.random.normal(jax.random.key(3), (20, joint.n_free)))
    bands = bayes.output_bands(joint, z, coordinates="internal", experiment="e1")
    own = bayes.output_bands(joint.experiment_problems[1], z[:, joint.experiment_columns("e1")],
                             coordinates="internal")
    np.testing.assert_array_equal(np.asarray(bands.values), np.asarray(own.values))
    assert np.asarray(bands.values).shape[1] == 12  # e1's own time grid
    with pytest.raises(ValueError, match="experiment=<name>"):
        bayes.output_bands(joint, z, coordinates="internal")
    with pytest.raises(ValueError, match="unknown experiment"):
        bayes.output_bands(joint, z, coordinates="internal", experiment="nope")
    with pytest.raises(ValueError, match="one parameter vector per experiment"):
        bayes.expand_draws(joint, z, coordinates="internal")


@pytest.mark.slow
def test_plots_have_one_row_per_experiment(joint, joint_fit):
    import matplotlib.pyplot as plt

    from jcalib.plotting import plot_fit, plot_residuals

    fig = plot_fit(joint, joint_fit, n_dense=None)
    visible = [ax for ax in fig.axes if ax.get_visible()]
    assert len(visible) == 3 * 4
    assert [fig.axes[4 * k].get_title(loc="left") for k in range(3)] == ["e0", "e1", "e2"]
    plt.close(fig)
    fig = plot_residuals(joint, joint_fit)
    assert len(fig.axes) == 3
    r = np.asarray(joint.residuals(jnp.asarray(joint_fit.theta_internal)))
    for ax, rows in zip(fig.axes, joint.experiment_rows):
        plotted = np.concatenate([line.get_ydata() for line in ax.lines[:-1]])
        np.testing.assert_allclose(np.sort(plotted), np.sort(r[rows]))
    plt.close(fig)


@pytest.mark.slow
def test_fix_a_shared_parameter_or_one_copy(joint, z_off):
    fixed = joint.fix({"kad[e1]": 5e-5, "kab": 1e-4})
    assert fixed.free_names == ("kac", "kad[e0]", "kad[e2]")
    assert fixed.fixed == {"kab": 1e-4, "kad": {"e1": 5e-5}}
    z_full = np.asarray(joint.to_physical(z_off)).copy()
    z_full[0], z_full[3] = 1e-4, 5e-5
    z_fixed = fixed.to_internal(jnp.asarray(z_full[[1, 2, 4]]))
    np.testing.assert_allclose(np.asarray(fixed.residuals(z_fixed)),
                               np.asarray(joint.residuals(joint.to_internal(jnp.asarray(z_full)))),
                               rtol=1e-9, atol=1e-12)  # e1 is now solved on its own: round-off only
    with pytest.raises(ValueError, match="not free"):
        joint.fix({"kad": 1e-5})


@pytest.mark.slow
def test_noise_model_per_experiment(ragged):
    """``likelihood={experiment: ...}``: the log-likelihood is the sum of each experiment's
    own, e.g. an absolute Gaussian of sigma 0.01 for e0 and 0.05 for e1 and e2."""
    from jcalib.probability.likelihoods import AbsoluteGaussian

    lik = {"e0": AbsoluteGaussian(0.01), "e1": AbsoluteGaussian(0.05), "e2": AbsoluteGaussian(0.05)}
    joint = JointProblem(ragged, free=["kab", "kac", "kad"], weighting="absolute", likelihood=lik)
    z = joint.initial_internal() + 0.02
    expected = sum(float(CalibrationProblem(*pair, weighting="absolute", likelihood=lik[f"e{k}"]).log_likelihood(z))
                   for k, pair in enumerate(ragged))
    np.testing.assert_allclose(float(joint.log_likelihood(z)), expected, rtol=1e-12)
    with pytest.raises(ValueError, match="unknown experiments"):
        JointProblem(ragged, free=["kab"], weighting="absolute", likelihood={"e9": AbsoluteGaussian(0.1)})


@pytest.mark.slow
def test_parameter_set_from_each_experiments_condition(ragged):
    """``fixed={"A0": "A0"}``: an initial-state parameter takes each experiment's condition A0,
    so the residuals are those of the experiments' own models."""
    from jcalib.parameters import Parameter
    from jcalib.problems import with_initial_state_parameters

    pairs = [(with_initial_state_parameters(m, [Parameter("A0", 10.0, 1.0, 30.0)]), d) for m, d in ragged]
    joint = JointProblem(pairs, free=["kab", "kac", "kad"], fixed={"A0": "A0"}, weighting="absolute")
    plain = JointProblem(ragged, free=["kab", "kac", "kad"], weighting="absolute")
    z = plain.initial_internal() + 0.03
    np.testing.assert_allclose(np.asarray(joint.residuals(z)), np.asarray(plain.residuals(z)), rtol=1e-12,
                               atol=1e-14)
    with pytest.raises(ValueError, match="has no condition 'B0'"):
        JointProblem(pairs, free=["kab"], fixed={"A0": "B0"}, weighting="absolute")
