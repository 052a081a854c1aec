"""jcalib.benchmark.problems: the analytic suite's references hold on the problems as built."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jcalib.benchmark import BenchmarkProblem, get_problem, register_problem, suite
from jcalib.benchmark import problems as problems_module

OPTIMA = {"rosenbrock-4": [1.0, 1.0, 1.0, 1.0], "gaussian-2": None, "gaussian-8": None, "banana-2": [0.0, 0.0]}


@pytest.mark.parametrize("problem_id", sorted(OPTIMA))
def test_the_reference_value_is_the_likelihood_s_maximum(problem_id):
    spec = get_problem(problem_id)
    problem = spec.build()
    optimum = jnp.asarray(OPTIMA[problem_id] if OPTIMA[problem_id] is not None else spec.reference_mean)
    z = problem.to_internal(optimum)
    assert float(problem.log_likelihood(z)) == pytest.approx(spec.reference_value, rel=1e-12, abs=1e-12)
    np.testing.assert_allclose(jax.grad(problem.log_likelihood)(z), 0.0, atol=1e-10)  # a stationary point
    centre = jnp.asarray(0.5 * (problem.space.lower_internal + problem.space.upper_internal))
    half_sum = [0.5 * float(jnp.sum(problem.residuals(x) ** 2)) for x in (z, centre)]
    # the residuals are the likelihood's: |r|^2 / 2 + log-likelihood is one constant (least squares = ML)
    assert half_sum[0] + spec.reference_value == pytest.approx(half_sum[1] + float(problem.log_likelihood(centre)),
                                                               rel=1e-12, abs=1e-12)
    assert np.all(np.linalg.eigvalsh(jax.hessian(problem.log_likelihood)(z)) < 0)  # ... and a maximum


@pytest.mark.parametrize("problem_id", ["gaussian-2", "banana-2"])
def test_the_reference_moments_are_the_posterior_s(problem_id):
    """Mean and sd of each parameter from the problem's own log-posterior on a fine grid."""
    spec = get_problem(problem_id)
    problem = spec.build()
    mean, sd = np.asarray(spec.reference_mean), np.asarray(spec.reference_sd)
    lower = np.maximum(mean - 9 * sd, problem.space.lower)
    upper = np.minimum(mean + 9 * sd * np.array([1.0, 3.0]), problem.space.upper)  # the banana's long right tail
    axes = [np.linspace(lo, hi, 601) for lo, hi in zip(lower, upper)]
    grid = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, 2)
    log_p = np.asarray(jax.jit(jax.vmap(lambda x: problem.log_posterior(problem.to_internal(x))))(jnp.asarray(grid)))
    weights = np.exp(log_p - log_p.max())
    weights /= weights.sum()
    grid_mean = weights @ grid
    grid_sd = np.sqrt(weights @ (grid - grid_mean) ** 2)
    np.testing.assert_allclose(grid_mean, mean, atol=2e-3 * sd.max())
    np.testing.assert_allclose(grid_sd, sd, rtol=2e-3)


@pytest.mark.parametrize("problem_id", ["gaussian-2", "gaussian-8", "banana-2", "linear-gaussian-ode"])
def test_the_reference_draws_have_the_reference_moments(problem_id):
    """200,000 exact draws: means within 5 standard errors, sds within 1 % (their standard error
    is under 0.4 % here); the banana's draws lie on its ridge x1 = b x0^2."""
    spec = get_problem(problem_id)
    draws = spec.reference_draws(np.random.default_rng(0), 200_000)
    mean, sd = np.asarray(spec.reference_mean), np.asarray(spec.reference_sd)
    assert draws.shape == (200_000, mean.size)
    np.testing.assert_allclose(draws.mean(axis=0), mean, atol=5 * sd.max() / np.sqrt(200_000))
    np.testing.assert_allclose(draws.std(axis=0), sd, rtol=0.01)
    if problem_id == "banana-2":
        residual = draws[:, 1] - problems_module._BANANA_B * draws[:, 0] ** 2
        assert abs(residual.mean()) < 0.01
        assert residual.std() == pytest.approx(problems_module._BANANA_SIGMA[1], rel=0.01)


def test_problems_are_registered_once_and_found_by_suite():
    assert [p.id for p in suite("analytic")] == ["banana-2", "gaussian-2", "gaussian-8", "rosenbrock-4"]
    mine = BenchmarkProblem("my-problem", problems_module._rosenbrock, ("mine",))
    try:
        assert register_problem(mine, "mine") is mine and suite("mine") == [mine] and get_problem("my-problem") is mine
        with pytest.raises(ValueError, match="is in suite 'mine' already"):
            register_problem(BenchmarkProblem("my-problem", problems_module._banana))
    finally:
        problems_module._SUITES.pop("mine")
    with pytest.raises(ValueError, match="unknown suite 'mine'"):
        suite("mine")
    with pytest.raises(ValueError, match="no problem 'nope'"):
        get_problem("nope")
    with pytest.raises(ValueError, match="callable build"):
        register_problem(BenchmarkProblem("x", None))
    build = problems_module._banana
    for bad, match in [(BenchmarkProblem(5, build), "non-empty string"), (BenchmarkProblem("x", build, "ode"), "tuple"),
                       (BenchmarkProblem("x", build, reference_value=float("nan")), "finite or None"),
                       (BenchmarkProblem("x", build, reference_mean=(0.0,), reference_sd=(-1.0,)), "sds > 0")]:
        with pytest.raises(ValueError, match=match):
            register_problem(bad)


@pytest.mark.parametrize("problem_id", ["linear-gaussian-ode", "gaussian-8"])
def test_a_linear_model_s_references_are_its_likelihood_s(problem_id):
    """The outputs are linear in the parameters (the ODE's x0 + v0 t), so with residuals ``r``
    (noise-weighted) and their Jacobian ``J``: at the reference mean the log-likelihood is the
    reference value and stationary
    (``J^T r = 0``), and ``(J^T J)^-1`` is the posterior covariance, whose sds are the reference
    sds (flat prior, coordinates = physical values)."""
    spec = get_problem(problem_id)
    problem = spec.build()
    z = problem.to_internal(jnp.asarray(spec.reference_mean))
    np.testing.assert_allclose(problem.to_physical(z), spec.reference_mean, rtol=1e-14)  # linear coordinates
    assert float(problem.log_likelihood(z)) == pytest.approx(spec.reference_value, rel=1e-9)
    r, jac = np.asarray(problem.residuals(z)), np.asarray(problem.jacobian(z))
    np.testing.assert_allclose(jac.T @ r, 0.0, atol=1e-6)
    np.testing.assert_allclose(np.sqrt(np.diag(np.linalg.inv(jac.T @ jac))), spec.reference_sd, rtol=1e-6)
    assert [p.id for p in suite("ode")] == ["four-substance-reactions", "linear-gaussian-ode"]
    assert np.all(np.abs(np.asarray(spec.reference_mean)) > 1e-3)  # not a trivial optimum at 0


def test_a_petab_collection_registers_its_problems_without_importing_them(tmp_path):
    for name in ("Alpha_2020", "Beta_2021"):
        (tmp_path / name).mkdir()
        (tmp_path / name / f"{name}.yaml").write_text("format_version: 1\n")
    (tmp_path / "Gamma_2022").mkdir()  # its only YAML file, named otherwise
    (tmp_path / "Gamma_2022" / "problem.yaml").write_text("format_version: 1\n")
    (tmp_path / "README").mkdir()  # a folder without a YAML file is not a problem, nor one with two
    (tmp_path / "Delta").mkdir()
    for name in ("a.yaml", "b.yaml"):
        (tmp_path / "Delta" / name).write_text("format_version: 1\n")
    try:
        entries = problems_module.register_petab_collection(tmp_path, suite_name="test-petab")
        assert [e.id for e in entries] == ["Alpha_2020", "Beta_2021", "Gamma_2022"]
        assert all(e.reference_at_nominal and e.reference_value is None for e in entries)
        with pytest.raises(ValueError, match=r"no PEtab problem \['Delta'\]"):
            problems_module.register_petab_collection(tmp_path, ["Delta"], suite_name="other")
    finally:
        problems_module._SUITES.pop("test-petab", None)
    with pytest.raises(ValueError, match="is not a folder of PEtab problems"):
        problems_module.register_petab_collection(tmp_path / "nowhere")
