"""jcalib.benchmark.methods: configurations parse into a method and its options, bad ones are
refused by name, and a user's method is one call away."""

import pytest

from jcalib.benchmark import methods as methods_module
from jcalib.benchmark.methods import canonical_config, method_config, method_names, register_method


def test_configurations_parse_into_options_of_json_values_or_strings():
    method, options = method_config("trf:stop=fides,max_steps=50")
    assert (method.name, method.kind, options) == ("trf", "optimizer", {"stop": "fides", "max_steps": 50})
    assert method_config("adam:learning_rate=1e-3,xtol=0")[1] == {"learning_rate": 1e-3, "xtol": 0}
    assert method_config("nuts:n_steps=10,preconditioner=null")[1] == {"n_steps": 10, "preconditioner": None}
    assert method_config("lm")[1] == {}
    assert canonical_config("trf:stop=fides,max_steps=50") == canonical_config("trf:max_steps=50, stop=fides") \
        == "trf:max_steps=50,stop=fides"
    assert canonical_config("lm") == "lm" and canonical_config("nuts:preconditioner=null") == "nuts:preconditioner=null"


def test_the_built_in_methods_are_registered_by_kind():
    assert method_names("optimizer") == ["adam", "de", "fides", "gauss-newton", "lbfgs", "lm", "trf"]
    assert method_names("sampler") == ["hmc", "mala", "nuts"]
    assert method_names("amortized") == ["bayesflow"]


@pytest.mark.parametrize("config, message", [
    ("bfgs2", "unknown method 'bfgs2'"),
    ("trf:max_steps", "write options as"),
    ("trf:max_steps=1,max_steps=2", "write options as"),
    ("trf:tolerance=1e-3", r"takes no option \['tolerance'\]"),
    ("mala:stop=fides", r"takes no option \['stop'\]"),
    ("lm:max_steps=-1", "method 'lm': option max_steps=-1: must be an integer >= 1"),
    ("trf:stop=banana", "must be fides or scipy"),
    ("adam:learning_rate=abc", "must be a number > 0"),
    ("adam:max_steps=1.5", "must be an integer >= 1"),
    ("nuts:warmup=-2", "must be an integer >= 0"),
    ("bayesflow:n_simulations=1", "must be an integer >= 2"),
    ("bayesflow:summary=transformer", "must be lstm, gru, conv or mlp"),
])
def test_bad_configurations_are_refused_by_name(config, message):
    with pytest.raises(ValueError, match=message):
        method_config(config)


def test_a_user_method_is_registered_in_one_call_and_its_options_checked(monkeypatch):
    monkeypatch.setattr(methods_module, "_METHODS", dict(methods_module._METHODS))

    def descent(key, problem, start, rate=0.1):
        return start

    register_method("descent", descent, description="plain gradient descent")
    assert method_config("descent:rate=0.5")[1] == {"rate": 0.5}
    with pytest.raises(ValueError, match=r"takes no option \['step'\]"):
        method_config("descent:step=1")
    for name, fn, kind, message in [("descent", descent, "optimizer", "registered already"),
                                    ("has space", descent, "optimizer", "letters, digits"),
                                    ("other", 3, "optimizer", "callable"),
                                    ("other", descent, "posterior", "kind one of")]:
        with pytest.raises(ValueError, match=message):
            register_method(name, fn, kind)
    register_method("anything", lambda key, problem, start, **options: None)
    assert method_config("anything:whatever=1")[1] == {"whatever": 1}  # **options: any option goes through


@pytest.mark.slow  # trains a small BayesFlow network (compiling it takes most of half a minute)
def test_bayesflow_trains_on_its_simulation_budget_and_is_assessed(tmp_path):
    from jcalib.benchmark import run_grid

    config = "bayesflow:n_simulations=200,epochs=3,n_val=50,hidden=16,n_blocks=2"
    run = run_grid(["gaussian-2"], [config], 1, store=tmp_path, progress=False).iloc[0]
    assert run["status"] == "finished" and run["kind"] == "amortized"
    assert run["n_simulations"] == 3 * 200 + 50 == run["evaluations"]  # training and validation, nothing else
    assert 0.5 <= run["c2st_max"] <= 1.0 and 0.0 <= run["sbc_min_p"] <= 1.0 and run["sbc_in_band"] in (0.0, 1.0)


def test_a_built_in_sampler_starts_its_chains_apart_in_the_box_from_the_runs_key():
    """Not at the nominal values, which on the analytic posteriors are the posterior mean."""
    import types

    import jax
    import numpy as np

    from jcalib.benchmark.problems import get_problem

    problem = get_problem("gaussian-2").build()
    seen = []

    def sample(key, problem, theta0, n_steps, **options):
        seen.append(np.asarray(theta0))
        return types.SimpleNamespace(samples=np.zeros((options["n_chains"], 1, problem.n_free)))

    fn = methods_module._sampler(types.SimpleNamespace(sample=sample))
    for key in (0, 0, 1):
        fn(jax.random.key(key), problem, n_chains=4)
    first, again, other = seen
    z = np.asarray(problem.to_internal(first[0]))
    assert first.shape == (4, problem.n_free) and len(np.unique(first[:, 0])) == 4
    assert np.all((first >= problem.space.lower) & (first <= problem.space.upper))
    assert not np.allclose(z, problem.initial_internal()) and np.array_equal(first, again)
    assert not np.array_equal(first, other)
