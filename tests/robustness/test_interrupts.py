"""A Ctrl-C during a multistart (issue 35 §1.1): the finished starts are kept as they are, the others
say that they did not finish (never a plausible "stopped: max_steps reached" with loss 0), the
result says ``status: interrupted``, and ``jcalib`` exits with 130 and a line saying what it kept."""

import importlib
import json
import math

import jax
import numpy as np
import pytest
from typer.testing import CliRunner

from jcalib.bayes.result import PosteriorResult
from jcalib.cli import app
from jcalib.data import Measurements
from jcalib.estimation import levenberg_marquardt_batch, multistart, trust_region_batch
from jcalib.estimation.result import INTERRUPTED
from jcalib.problems import CalibrationProblem
from tests.estimation.linear_case import THETA_TRUE, TS, design, linear_model
from tests.helpers import interrupt_run
from tests.io.test_petab import _case

# the module (`jcalib.estimation.multistart` the attribute is the function of that name)
multistart_module = importlib.import_module("jcalib.estimation.multistart")
trust_region_module = importlib.import_module("jcalib.estimation.trust_region")


@pytest.fixture(scope="module")
def problem():
    y = (design() @ THETA_TRUE).reshape(TS.size, 2) + 0.05 * np.random.default_rng(2).standard_normal((TS.size, 2))
    return CalibrationProblem(linear_model(), Measurements(TS, y, sigma=np.full_like(y, 0.05),
                                                           output_names=("y1", "y2")), weighting="sigma")


STARTS = np.array([[5.0, 5.0, 5.0], [-5.0, 2.0, 1.0], [9.0, -9.0, 9.0], [-9.0, 9.0, -9.0]])


@pytest.mark.slow  # 9-16 s of compiling; moved out of make test to keep it under 10 min (2026-12-02)
def test_levenberg_marquardt_keeps_the_finished_blocks(problem, monkeypatch):
    """Blocks of two starts: a Ctrl-C in the second block's third step keeps the first block's
    results exactly, keeps the second block's iterates as 'interrupted ... not converged'."""
    full = levenberg_marquardt_batch(problem, STARTS, chunk_size=2)
    steps_first_block = max(r.n_steps for r in full.results[:2])
    interrupt_run(monkeypatch, compiled=False, n=steps_first_block + 3)  # the first block ends after its steps
    cut = levenberg_marquardt_batch(problem, STARTS, chunk_size=2)
    assert full.extra["status"] == "completed" and cut.extra["status"] == "interrupted"
    assert cut.extra["n_finished_starts"] == 2 and cut.extra["n_failed_starts"] == 0
    for k in (0, 1):
        np.testing.assert_array_equal(cut.results[k].theta_internal, full.results[k].theta_internal)
        assert cut.results[k].reason == full.results[k].reason and cut.results[k].converged
    for k in (2, 3):
        r = cut.results[k]
        assert r.reason.startswith(INTERRUPTED) and "not converged" in r.reason and not r.converged
        assert r.n_steps == 2 and math.isfinite(r.loss)
        assert r.loss == pytest.approx(float(problem.loss(r.theta_internal)), rel=1e-9)  # the iterate's own loss


def test_levenberg_marquardt_interrupted_before_any_step(problem, monkeypatch):
    interrupt_run(monkeypatch, compiled=False, n=1)
    cut = levenberg_marquardt_batch(problem, STARTS[:2])
    assert cut.extra["status"] == "interrupted" and cut.extra["n_finished_starts"] == 0
    assert "failure" not in cut.extra and cut.extra["n_failed_starts"] == 0
    for r, start in zip(cut.results, STARTS[:2]):
        assert r.reason == f"{INTERRUPTED} (KeyboardInterrupt) before this start ran"
        assert r.loss == math.inf and not r.converged and r.n_steps == 0
        np.testing.assert_allclose(r.theta, start)


def _interrupt_fides_step(monkeypatch, n: int) -> None:
    """A Ctrl-C at the ``n``-th vmapped iteration of `trust_region_batch` (its Python loop)."""
    calls, real = {"n": 0}, trust_region_module._tr_propose

    def interrupted(*args):
        calls["n"] += 1
        if calls["n"] == n:
            raise KeyboardInterrupt
        return real(*args)

    monkeypatch.setattr(trust_region_module, "_tr_propose", interrupted)


def test_fides_keeps_the_finished_starts_and_each_running_starts_best_point(problem, monkeypatch):
    """Two lanes over four starts; a Ctrl-C in the second iteration after the first start
    finished (its lane took the third start): the finished start is kept exactly, the running
    ones keep the best point they evaluated with its own loss ('interrupted ... not converged'),
    the start not begun says so."""
    full = trust_region_batch(problem, STARTS, lanes=2)
    for r in full.results:  # the singular values of the residual Jacobian at each start's result
        expected = np.linalg.svd(np.asarray(problem.jacobian(r.theta_internal)), compute_uv=False)
        np.testing.assert_allclose(r.singular_values, expected, rtol=1e-9)
        assert r.condition_number == pytest.approx(expected[0] / expected[-1], rel=1e-9)
    steps = [r.n_steps for r in full.results]
    first, other = int(np.argmin(steps[:2])), int(np.argmax(steps[:2]))
    assert steps[other] > steps[first] + 1  # still running when the Ctrl-C comes
    _interrupt_fides_step(monkeypatch, steps[first] + 2)
    cut = trust_region_batch(problem, STARTS, lanes=2)
    assert cut.extra["status"] == "interrupted" and cut.extra["n_finished_starts"] == 1
    np.testing.assert_array_equal(cut.results[first].theta_internal, full.results[first].theta_internal)
    assert cut.results[first].reason == full.results[first].reason and cut.results[first].converged
    for k, n_steps in ((other, steps[first] + 1), (2, 1)):
        r = cut.results[k]
        assert r.reason.startswith(INTERRUPTED) and "not converged" in r.reason and not r.converged
        assert r.n_steps == n_steps and math.isfinite(r.loss)
        assert r.loss == pytest.approx(float(problem.loss(r.theta_internal)), rel=1e-9)  # the point's own loss
    assert cut.results[3].reason == f"{INTERRUPTED} (KeyboardInterrupt) before this start ran"
    assert cut.results[3].loss == math.inf and not cut.results[3].converged and cut.results[3].n_steps == 0
    np.testing.assert_allclose(cut.results[3].theta, STARTS[3])


def _interrupt_second_trf_start(monkeypatch):
    """A Ctrl-C during the second start's `least_squares_trf` of `multistart`."""
    calls, real = {"n": 0}, multistart_module.least_squares_trf

    def interrupted_second(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(multistart_module, "least_squares_trf", interrupted_second)


def test_trf_multistart_keeps_the_finished_starts(problem, monkeypatch):
    key = jax.random.key(4)
    full = multistart(key, problem, 3, "trf", "uniform")
    _interrupt_second_trf_start(monkeypatch)
    cut = multistart(key, problem, 3, "trf", "uniform")
    assert cut.extra["status"] == "interrupted" and cut.extra["n_finished_starts"] == 1
    np.testing.assert_array_equal(cut.results[0].theta_internal, full.results[0].theta_internal)
    assert cut.results[1].reason == f"{INTERRUPTED} (KeyboardInterrupt) during this start's fit: its iterates are lost"
    assert cut.results[2].reason == f"{INTERRUPTED} (KeyboardInterrupt) before this start ran"
    assert all(r.loss == math.inf and not r.converged for r in cut.results[1:])
    assert cut.best_index == 0


@pytest.mark.slow  # 9-16 s of compiling; moved out of make test to keep it under 10 min (2026-12-02)
def test_cli_multistart_exits_130_and_keeps_what_finished(tmp_path, monkeypatch):
    """`jcalib petab --method multistart` (Fides's method, two lanes) interrupted in its first
    iteration: exit code 130, a line saying 0 of 2 starts finished, metrics.json with status
    'interrupted', no simulation table or plots of a 'fit'."""
    folder, _ = _case("0001")
    _interrupt_fides_step(monkeypatch, 1)
    out = tmp_path / "ms"
    result = CliRunner().invoke(app, ["petab", str(folder / "_0001.yaml"), "--method", "multistart", "--n-starts", "2",
                                      "--out", str(out)])
    assert result.exit_code == 130, result.output
    assert "interrupted (Ctrl-C): 0 of 2 starts had finished" in result.output
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["status"] == "interrupted" and metrics["multistart"]["extra"]["n_finished_starts"] == 0
    assert not (out / "simulation.tsv").exists() and not (out / "waterfall.png").exists()


def test_an_interrupted_filter_raises_instead_of_returning_its_start(monkeypatch):
    """`run_ekf` interrupted: no EKFResult with the start as its 'estimate' and success=True."""
    from jcalib.filters.ekf import run_ekf
    from tests.filters.test_ekf import DECAY_TS, decay_model

    ys = 2.0 * np.exp(-1.3 * DECAY_TS)[:, None]
    interrupt_run(monkeypatch, compiled=False, n=1)
    with pytest.raises(KeyboardInterrupt, match=rf"run_ekf: interrupted after 0 of {DECAY_TS.size} measurement times"):
        run_ekf(decay_model(), ys, [0.7], R=[[0.02**2]])


@pytest.fixture(scope="module")
def reactions_csv(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "reactions.csv"
    assert CliRunner().invoke(app, ["simulate", "four_substance_reactions", "--csv", str(path)]).exit_code == 0
    return path


@pytest.mark.slow  # Gauss-Newton and MALA on an ODE model through the CLI: compiles
def test_cli_calibrate_and_sample_interrupted_exit_130(tmp_path, reactions_csv, monkeypatch):
    """Gauss-Newton stopped after one step and MALA after two of its chunks: what they have is
    written and labelled (the estimate's reason, the posterior's status), the exit code is 130."""
    runner = CliRunner()
    interrupt_run(monkeypatch, compiled=False, n=2)
    gn = runner.invoke(app, ["calibrate", "four_substance_reactions", "--data", str(reactions_csv), "--free",
                             "kab,kac", "--start", "kab=2e-5", "--out", str(tmp_path / "gn")])
    assert gn.exit_code == 130, gn.output
    assert "interrupted (Ctrl-C): interrupted (KeyboardInterrupt) after 1 steps: the estimate above is the last " \
           "iterate, not converged" in gn.output
    result = json.loads((tmp_path / "gn" / "metrics.json").read_text())["result"]
    assert result["n_steps"] == 1 and not result["converged"]
    monkeypatch.undo()
    interrupt_run(monkeypatch, 3)
    options = ["sample", "four_substance_reactions", "--data", str(reactions_csv), "--sigma", "0.05", "--steps", "40",
               "--chains", "2", "--no-gauss-newton"]
    early = runner.invoke(app, [*options, "--out", str(tmp_path / "early")])  # in the burn-in: no draws
    assert early.exit_code == 130, early.output
    assert "interrupted (Ctrl-C): sample: interrupted during the warm-up or burn-in (no draws yet)" in early.output
    assert not (tmp_path / "early" / "posterior.npz").exists()
    monkeypatch.undo()
    interrupt_run(monkeypatch, 3)
    sampled = runner.invoke(app, [*options, "--warmup", "0", "--burn", "0", "--out", str(tmp_path / "s")])
    assert sampled.exit_code == 130, sampled.output
    assert "interrupted (Ctrl-C): kept the 4 draws per chain of the sampling steps that had finished" in sampled.output
    metrics = json.loads((tmp_path / "s" / "metrics.json").read_text())
    assert metrics["status"] == "interrupted" and metrics["posterior"]["extra"]["status"] == "interrupted"
    assert PosteriorResult.load(tmp_path / "s" / "posterior.npz").samples.shape == (2, 4, 3)
    assert not (tmp_path / "s" / "marginals.png").exists()
