"""`jcalib.algorithm`: the `Algorithm(init, step)` contract and the `run` driver.

References: a deterministic halving map (closed form x_k = x_0 / 2^k), a Gaussian random walk
whose increments are recomputed here from ``fold_in(key, i)``, and an AR(1) chain whose
stationary variance is known.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jcalib.algorithm import Algorithm, RunResult, run, vmap_chains

HALVE = Algorithm(init=lambda x: jnp.asarray(x, dtype=jnp.float64), step=lambda x: (x / 2, x))
WALK = Algorithm(init=lambda x: jnp.asarray(x, dtype=jnp.float64),
                 step=lambda key, x: (x + jax.random.normal(key, dtype=jnp.float64), x), stochastic=True)


def test_deterministic_run_matches_the_closed_form():
    out = run(None, HALVE, HALVE.init(8.0), 5)
    assert isinstance(out, RunResult)
    assert out.status == "completed" and out.n_steps == 5
    np.testing.assert_allclose(out.trace, 8.0 / 2.0 ** np.arange(5))
    assert float(out.state) == pytest.approx(8.0 / 32)


def test_step_keys_are_fold_in_of_the_step_index():
    key = jax.random.PRNGKey(3)
    out = run(key, WALK, WALK.init(0.0), 6)
    increments = [float(jax.random.normal(jax.random.fold_in(key, i), dtype=jnp.float64)) for i in range(6)]
    np.testing.assert_allclose(out.state, np.sum(increments), rtol=1e-12)
    np.testing.assert_allclose(out.trace, np.concatenate([[0.0], np.cumsum(increments)[:-1]]), rtol=1e-12)


@pytest.mark.parametrize("chunk_size, compiled", [(1, True), (4, True), (3, False)])
def test_chunking_and_the_python_loop_do_not_change_the_draws(chunk_size, compiled):
    key = jax.random.PRNGKey(0)
    reference = run(key, WALK, WALK.init(0.0), 10)
    out = run(key, WALK, WALK.init(0.0), 10, chunk_size=chunk_size, compiled=compiled)
    np.testing.assert_allclose(out.trace, reference.trace, rtol=1e-12)
    np.testing.assert_allclose(out.state, reference.state, rtol=1e-12)


def test_thinning_keeps_every_thin_th_step():
    key = jax.random.PRNGKey(1)
    full = run(key, WALK, WALK.init(0.0), 12)
    thinned = run(key, WALK, WALK.init(0.0), 12, thin=3, chunk_size=6)
    np.testing.assert_allclose(thinned.trace, full.trace[2::3], rtol=1e-12)


@pytest.mark.parametrize("compiled, chunk_size", [(True, 4), (True, None), (False, None)])
def test_stop_ends_the_run_after_the_first_step_that_satisfies_it(compiled, chunk_size):
    out = run(None, HALVE, HALVE.init(8.0), 50, stop=lambda x: x < 0.1, compiled=compiled, chunk_size=chunk_size)
    assert out.status == "converged" and out.n_steps == 7  # 8 / 2^7 = 0.0625 is the first below 0.1
    assert float(out.state) == pytest.approx(0.0625)
    np.testing.assert_allclose(out.trace, 8.0 / 2.0 ** np.arange(7))


def test_a_start_that_already_satisfies_stop_takes_no_step():
    out = run(None, HALVE, HALVE.init(0.01), 10, stop=lambda x: x < 0.1)
    assert out.n_steps == 0 and out.status == "converged" and out.trace.shape == (0,)


def test_trace_fn_records_what_it_returns():
    out = run(None, HALVE, HALVE.init(1.0), 3, trace_fn=lambda state, info: {"state": state, "twice": 2 * info})
    np.testing.assert_allclose(out.trace["state"], [0.5, 0.25, 0.125])
    np.testing.assert_allclose(out.trace["twice"], [2.0, 1.0, 0.5])


def test_vmapped_ar1_chains_reach_the_stationary_variance():
    rho = 0.5
    ar1 = Algorithm(init=lambda x: jnp.asarray(x, dtype=jnp.float64),
                    step=lambda key, x: (rho * x + jax.random.normal(key, dtype=jnp.float64), x), stochastic=True)
    chains = vmap_chains(ar1)
    out = run(jax.random.PRNGKey(0), chains, chains.init(jnp.zeros(400)), 200, thin=10, chunk_size=100)
    assert out.trace.shape == (20, 400)
    draws = np.asarray(out.trace[5:]).ravel()  # 3000 nearly independent draws after burn-in
    # stationary variance 1 / (1 - rho^2) = 4/3; the sample variance's sd is about 0.035
    assert np.var(draws) == pytest.approx(1 / (1 - rho**2), abs=0.15)
    assert abs(np.mean(draws)) < 0.1  # the mean's sd is about 0.03


def test_an_algorithm_of_partials_compiles_once():
    from jcalib import algorithm

    def scale(factor, x):
        return x * factor, x

    def build(factor):
        return Algorithm(init=jnp.asarray, step=jax.tree_util.Partial(scale, jnp.asarray(factor)))

    run(None, build(0.5), jnp.asarray(1.0), 4)
    before = algorithm._scan_chunk._cached._cache_size()
    out = run(None, build(0.25), jnp.asarray(1.0), 4)  # another factor: same structure, no new compile
    assert algorithm._scan_chunk._cached._cache_size() == before
    np.testing.assert_allclose(out.trace, 0.25 ** np.arange(4))


def test_closures_are_compiled_per_call_and_not_kept():
    from jcalib import algorithm

    before = algorithm._scan_chunk._cached._cache_size()
    for factor in (0.5, 0.25):
        halve = Algorithm(init=jnp.asarray, step=lambda x, f=factor: (x * f, x))
        out = run(None, halve, jnp.asarray(1.0), 3, stop=lambda x: x < 0.0)
        np.testing.assert_allclose(out.trace, factor ** np.arange(3))
    assert algorithm._scan_chunk._cached._cache_size() == before  # nothing that holds a closure stays cached


def test_deterministic_vmap_runs_each_start():
    out = run(None, vmap_chains(HALVE), jnp.array([1.0, 4.0]), 2)
    np.testing.assert_allclose(out.state, [0.25, 1.0])


def test_interrupting_between_chunks_keeps_the_finished_chunks(monkeypatch):
    import jcalib.algorithm as algorithm

    calls = {"n": 0}
    real = algorithm._compiled_chunk

    def interrupt_on_third(*args):
        chunk = real(*args)

        def wrapped(key, carry, length):
            calls["n"] += 1
            if calls["n"] == 3:
                raise KeyboardInterrupt
            return chunk(key, carry, length)

        return wrapped

    monkeypatch.setattr(algorithm, "_compiled_chunk", interrupt_on_third)
    out = run(None, HALVE, HALVE.init(8.0), 10, chunk_size=2)
    assert out.status == "interrupted" and out.n_steps == 4
    np.testing.assert_allclose(out.trace, [8.0, 4.0, 2.0, 1.0])
    assert float(out.state) == pytest.approx(0.5)


@pytest.mark.parametrize("kwargs, match", [
    (dict(key=None, algorithm=WALK), "stochastic; pass a jax.random key"),
    (dict(key=jax.random.PRNGKey(0), algorithm=HALVE), "deterministic; pass key=None"),
    (dict(key=None, algorithm=HALVE, n_steps=-1), "n_steps must be >= 0"),
    (dict(key=None, algorithm=HALVE, thin=0), "thin must be >= 1"),
    (dict(key=None, algorithm=HALVE, thin=2, chunk_size=3), "chunk_size must be a positive multiple of thin=2"),
    (dict(key=None, algorithm=(HALVE.init, HALVE.step)), "algorithm must be an Algorithm"),
])
def test_bad_arguments_are_refused(kwargs, match):
    kwargs = {"n_steps": 4, **kwargs}
    with pytest.raises(ValueError, match=match):
        run(kwargs.pop("key"), kwargs.pop("algorithm"), jnp.asarray(1.0), kwargs.pop("n_steps"), **kwargs)


def test_a_partial_over_a_lambda_is_compiled_per_call_and_not_kept():
    from jcalib import algorithm

    def apply(fn, x):
        return fn(x), x

    before = algorithm._scan_chunk._cached._cache_size()
    for factor in (0.5, 0.25):
        step = jax.tree_util.Partial(apply, lambda x, f=factor: x * f)
        out = run(None, Algorithm(init=jnp.asarray, step=step), jnp.asarray(1.0), 3)
        np.testing.assert_allclose(out.trace, factor ** np.arange(3))
    assert algorithm._scan_chunk._cached._cache_size() == before
