"""`jcalib.nn.data`: `check_training_data`, the one input check of the networks' training data, and
`simulate_training_set`, the one way to make it."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jcalib.model import FunctionSimulator
from jcalib.nn.data import TrainingSet, check_training_data, simulate_training_set
from jcalib.parameters import Parameter, ParameterSpace

SPACE = ParameterSpace([Parameter("a", 1.0, 0.0, 2.0), Parameter("b", 5.0, 1.0, 10.0)])
THETAS = np.array([[0.5, 2.0], [1.5, 9.0], [1.0, 5.0]])
XS = np.arange(3 * 4 * 2, dtype=np.float64).reshape(3, 4, 2)


def test_returns_float64_copies():
    thetas, xs = check_training_data(SPACE, THETAS.tolist(), XS.astype(np.float32), "fit", n_times=4,
                                     output_names=("y1", "y2"))
    assert thetas.dtype == xs.dtype == np.float64
    np.testing.assert_array_equal(thetas, THETAS)
    np.testing.assert_array_equal(xs, XS)


def test_messages():
    with pytest.raises(ValueError, match=r"PELSVAE\.fit: thetas must have shape \(n, n_params\)"):
        check_training_data(SPACE, THETAS[:, :1], XS, "PELSVAE.fit")
    with pytest.raises(ValueError, match=r"fit: trajectories must have shape \(n, n_times, n_outputs\) with n = 3 "
                                         r"\(the rows of thetas\); got \(2, 4, 2\)"):
        check_training_data(SPACE, THETAS, XS[:2], "fit")
    with pytest.raises(ValueError, match="fit: trajectories have 4 times, the model 5"):
        check_training_data(SPACE, THETAS, XS, "fit", n_times=5)
    with pytest.raises(ValueError, match=r"fit: trajectories have 2 outputs, expected 3 \(y1, y2, y3\)"):
        check_training_data(SPACE, THETAS, XS, "fit", output_names=("y1", "y2", "y3"))
    bad = THETAS.copy()
    bad[1, 0] = np.nan
    with pytest.raises(ValueError, match=r"fit: thetas has NaN or inf in rows \[1\]"):
        check_training_data(SPACE, bad, XS, "fit")
    bad = XS.copy()
    bad[2, 3, 1] = np.inf
    with pytest.raises(ValueError, match=r"fit: trajectories have NaN or inf in samples \[2\] \(1 of 3\); drop failed "
                                         r"simulations first"):
        check_training_data(SPACE, THETAS, bad, "fit")
    outside = THETAS.copy()
    outside[2, 1] = 11.0
    with pytest.raises(ValueError, match=r"fit: 1 samples lie outside the parameter bounds, first: row 2, b = 11\.0 "
                                         r"not in \[1\.0, 10\.0\]; widen the bounds"):
        check_training_data(SPACE, outside, XS, "fit")
    thetas, _ = check_training_data(SPACE, outside, XS, "fit", check_bounds=False)
    assert thetas[2, 1] == 11.0


# a = 0 fails (non-finite output): simulate_training_set redraws such samples
SIMULATOR = FunctionSimulator(lambda th: jnp.stack([th[1] / th[0] * jnp.arange(1.0, 5.0), jnp.ones(4) * th[1]], -1),
                              SPACE, ("y1", "y2"), ts=np.arange(4.0))


@pytest.mark.slow
def test_simulate_training_set():
    data = simulate_training_set(jax.random.key(0), SIMULATOR, 16, sampler="lhs")
    assert isinstance(data, TrainingSet) and data.thetas.shape == (16, 2) and data.trajectories.shape == (16, 4, 2)
    expected = np.stack([np.asarray(SIMULATOR.simulate(t)) for t in data.thetas])
    np.testing.assert_allclose(data.trajectories, expected, rtol=1e-12)
    again = simulate_training_set(jax.random.key(0), SIMULATOR, 16, sampler="lhs")
    np.testing.assert_array_equal(again.thetas, data.thetas)  # the same key, the same set
    noisy = simulate_training_set(jax.random.key(0), SIMULATOR, 16, sampler="lhs", noise=[0.0, 0.5])
    np.testing.assert_array_equal(noisy.thetas, data.thetas)
    np.testing.assert_array_equal(noisy.trajectories[..., 0], data.trajectories[..., 0])  # sigma 0 on y1
    assert np.all(noisy.trajectories[..., 1] != data.trajectories[..., 1])
    relative = simulate_training_set(jax.random.key(0), SIMULATOR, 16, sampler="lhs", noise=0.1,
                                     noise_model="multiplicative")
    ratio = relative.trajectories / data.trajectories - 1.0
    assert 0.05 < float(np.std(ratio)) < 0.2
    dropped = simulate_training_set(jax.random.key(1), SIMULATOR, 8, exclude={"a": (0.0, 1.0)})
    assert np.all(dropped.thetas[:, 0] > 1.0) and dropped.thetas.shape == (8, 2)


def test_simulate_training_set_replaces_failed_simulations():
    def sampler(key, n):  # every other draw of the first round fails (a = 0)
        thetas = np.array(SPACE.sample(key, n))
        if n == 4:
            thetas[::2, 0] = 0.0
        return thetas
    with pytest.warns(UserWarning, match="simulate_training_set: 2 simulations failed and were replaced"):
        data = simulate_training_set(jax.random.key(2), SIMULATOR, 4, sampler=sampler)
    assert np.all(data.thetas[:, 0] > 0) and np.all(np.isfinite(data.trajectories))
    with pytest.raises(ValueError, match=r"simulate_training_set: only 0 of 4 samples after 100 rounds"):
        simulate_training_set(jax.random.key(2), SIMULATOR, 4, sampler=lambda k, n: np.zeros((n, 2)))


def test_simulate_training_set_messages():
    with pytest.raises(ValueError, match="simulate_training_set: simulator must be a jcalib simulator"):
        simulate_training_set(jax.random.key(0), SPACE, 4)
    with pytest.raises(ValueError, match="n must be a positive integer; got 0"):
        simulate_training_set(jax.random.key(0), SIMULATOR, 0)
    with pytest.raises(ValueError, match="sampler must be 'uniform', 'lhs', 'sobol' or a callable"):
        simulate_training_set(jax.random.key(0), SIMULATOR, 4, sampler="grid")
    with pytest.raises(ValueError, match=r"noise must be .* one per output: 2\); got \[1.0, 2.0, 3.0\]"):
        simulate_training_set(jax.random.key(0), SIMULATOR, 4, noise=[1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="noise_model must be one of"):
        simulate_training_set(jax.random.key(0), SIMULATOR, 4, noise=1.0, noise_model="poisson")
    with pytest.raises(ValueError, match=r"exclude box for 'a' needs low < high; got \(1.0, 0.5\)"):
        simulate_training_set(jax.random.key(0), SIMULATOR, 4, exclude={"a": (1.0, 0.5)})
    with pytest.raises(ValueError, match="exclude must be a box"):
        simulate_training_set(jax.random.key(0), SIMULATOR, 4, exclude=[1.0])
    with pytest.raises(ValueError, match=r"exclude\(thetas\) must return one bool per sample"):
        simulate_training_set(jax.random.key(0), SIMULATOR, 4, exclude=lambda t: True)


def test_simulate_training_set_checks_the_sampler():
    with pytest.raises(ValueError, match=r"simulate_training_set: sampler\(key, 4\) returned 3 samples"):
        simulate_training_set(jax.random.key(0), SIMULATOR, 4, sampler=lambda k, n: np.ones((n - 1, 2)))
    with pytest.raises(ValueError, match=r"simulate_training_set: sampler\(key, n\) must have shape \(n, n_params\)"):
        simulate_training_set(jax.random.key(0), SIMULATOR, 4, sampler=lambda k, n: np.ones((n, 3)))


def test_network_configs_and_metrics_messages():
    from jcalib.nn import BayesFlowConfig, InverseMappingConfig, PELSVAEConfig, network_metrics

    for config in (PELSVAEConfig, BayesFlowConfig, InverseMappingConfig):
        with pytest.raises(ValueError, match=rf"{config.__name__}: training must be a TrainingConfig; got str"):
            config(training="fast")
        assert config.from_dict(config().to_dict()) == config()  # the JSON round trip
    with pytest.raises(ValueError, match="InverseMappingConfig: feature_options must be a mapping"):
        InverseMappingConfig(feature_options=[("f_max", 4.0)])
    with pytest.raises(ValueError, match=r"network_metrics: outside must have shape \(3,\); got \(2,\)"):
        network_metrics(THETAS, THETAS, ("a", "b"), outside=[True, False])
