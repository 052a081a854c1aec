"""IMPU on rigid_double_beam (quick size): accuracy with RI (FBoI) features, deterministic
estimates and training, the outside-the-training-range flag, excluded training zones, the
error metrics (eqs. 18-21), save/load and bad input."""

import jax
import numpy as np
import pytest

import jcalib
from jcalib.nn.data import network_metrics, simulate_training_set
from jcalib.nn.impu import IMPUEstimate, InverseMapping, InverseMappingConfig, paper_noise, paper_training
from jcalib.nn.training import TrainingConfig
from jcalib.probability import add_noise

N_TRAIN, N_VAL, N_TEST = 400, 112, 128
CHUNK = 128  # one compiled simulate_batch shape for every data set of this module
# The paper's 200 epochs are 4,000 Adam steps with its 1,000 samples in batches of 50; with 400
# samples the quick run needs more epochs for as many steps (early stopping still ends it).
QUICK = InverseMappingConfig(training=TrainingConfig(epochs=600, batch_size=50, learning_rate=1e-3, patience=40,
                                                    progress=False))
FAR = np.array([9.0, 2e-3, 150.0, 0.4])  # d1, d2, k1, k2: 2-4x the upper bounds (25-60 N*s/m, ...)


@pytest.fixture(scope="module")
def beam():
    return jcalib.models.get("rigid_double_beam")


def noisy(key, beam, n, **kwargs):
    """`simulate_training_set` with the paper's noise of rigid_double_beam (additive)."""
    std, _ = paper_noise(beam)
    return simulate_training_set(key, beam, n, noise=std, chunk_size=CHUNK, **kwargs)


@pytest.fixture(scope="module")
def data(beam):
    return {"train": noisy(jax.random.key(0), beam, N_TRAIN, sampler="lhs"),
            "val": noisy(jax.random.key(10), beam, N_VAL)}


@pytest.fixture(scope="module")
def impu(beam, data):
    return InverseMapping(beam, QUICK).fit(jax.random.key(0), *data["train"], val=data["val"])


@pytest.fixture(scope="module")
def metrics(beam, impu):
    return impu.evaluate(*noisy(jax.random.key(1), beam, N_TEST))


@pytest.fixture(scope="module")
def measurements(beam, impu):
    """Noisy measurements at the centre p_c and at FAR (far outside the training box)."""
    far = beam.with_bounds_check(False).simulate(FAR)  # deliberate extrapolation (outside the bounds)
    clean = np.stack([np.asarray(beam.simulate(np.asarray(beam.parameters.nominal))), np.asarray(far)])
    return add_noise(jax.random.key(2), clean, paper_noise(beam)[0])


@pytest.mark.slow
def test_quick_accuracy_with_ri_fboi_features(impu, metrics):
    assert impu.n_features == 34  # 0-4 Hz: 9 real + 8 imaginary parts per output, as in the paper
    assert impu.extractor.bins == tuple(range(9))
    mare = np.asarray(metrics.mare)
    print("quick MARE % (d1, d2, k1, k2):", np.round(100 * mare, 2), "n_epochs", impu.training.n_epochs)
    assert np.all(mare < 0.10), dict(zip(impu.names, mare))
    # eqs. 18-21 from the raw errors
    errors = (np.asarray(metrics.prediction) - np.asarray(metrics.truth)) / np.asarray(metrics.truth)
    np.testing.assert_allclose(metrics.relative_errors, errors, rtol=1e-12)
    np.testing.assert_allclose(mare, np.abs(errors).mean(0), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(metrics.sd), errors.std(0, ddof=1), rtol=1e-12)
    assert metrics.n_test == N_TEST and len(metrics.table()) == 4
    # in-box test measurements are rarely flagged (1 of 128 in the quick run)
    assert np.mean(np.asarray(metrics.outside)) <= 0.05
    assert impu.timings["features_s"] > 0 and impu.timings["training_s"] > 0 and impu.n_train == N_TRAIN


@pytest.mark.slow
def test_estimates_are_deterministic_and_batched(impu, measurements):
    first, second = impu.infer(measurements[0]), impu.infer(measurements[0])
    assert isinstance(first, IMPUEstimate) and first.theta.shape == (4,) and first.theta.dtype == np.float64
    np.testing.assert_array_equal(np.asarray(first.theta), np.asarray(second.theta))
    batch = impu.infer(measurements)
    assert batch.theta.shape == (2, 4) and batch.outside_training_range.shape == (2,)
    np.testing.assert_allclose(np.asarray(batch.theta[0]), np.asarray(first.theta), rtol=1e-6)
    theta, outside, _, _ = impu.inference_fn()(measurements[0])
    np.testing.assert_array_equal(np.asarray(theta), np.asarray(first.theta))
    assert first.to_dict()["theta_by_name"].keys() == {"d1", "d2", "k1", "k2"}


@pytest.mark.slow
def test_same_key_gives_the_same_network(beam, data):
    thetas, trajectories = data["train"]
    tiny = InverseMappingConfig(training=TrainingConfig(epochs=5, batch_size=50, progress=False))
    untrained = InverseMapping(beam, tiny)

    def train(seed):
        return untrained.fit(jax.random.key(seed), thetas[:100], trajectories[:100]).infer(trajectories[100:103]).theta

    np.testing.assert_array_equal(np.asarray(train(3)), np.asarray(train(3)))
    assert not np.allclose(np.asarray(train(3)), np.asarray(train(4)))
    assert untrained.training is None and not untrained.is_trained  # fit returns a new mapping


@pytest.mark.slow
def test_outside_training_range_flag(impu, measurements):
    estimate = impu.infer(measurements)
    centre, far = (bool(v) for v in np.asarray(estimate.outside_training_range))
    assert not centre and far
    assert bool(np.asarray(estimate.features_outside)[1])
    # the centre estimate is close to p_c (4 % of each value: several times the quick MARE)
    np.testing.assert_allclose(np.asarray(estimate.theta[0]), impu.space.nominal, rtol=0.04 * 3)


@pytest.mark.slow
def test_evaluate_beyond_the_training_box(beam, impu):
    region = beam.parameters.replace("k1", lower=75.0, upper=90.0, nominal=80.0)
    beyond = impu.evaluate(*noisy(jax.random.key(5), beam, 16, sampler=lambda k, n: region.sample(k, n)))
    assert np.all(np.asarray(beyond.truth)[:, 2] >= 75.0)
    assert np.mean(np.asarray(beyond.outside)) >= 0.5  # extrapolation is recognised


@pytest.mark.slow
@pytest.mark.parametrize("form", ["box", "callable"])
def test_excluded_training_zone(beam, form):
    box = {"d1": (2.5, 3.5), "d2": (4e-4, 6e-4)}
    if form == "box":
        exclude = box
    else:
        def exclude(thetas):
            return (np.abs(thetas[:, 0] - 3.0) <= 0.5) & (np.abs(thetas[:, 1] - 5e-4) <= 1e-4)
    thetas, trajectories = simulate_training_set(jax.random.key(3), beam, 24, sampler="lhs", exclude=exclude,
                                                 chunk_size=CHUNK)
    inside = (np.abs(thetas[:, 0] - 3.0) <= 0.5) & (np.abs(thetas[:, 1] - 5e-4) <= 1e-4)
    assert not inside.any() and thetas.shape == (24, 4) and trajectories.shape == (24, 256, 2)
    np.testing.assert_allclose(trajectories[0], np.asarray(beam.simulate(thetas[0])), rtol=1e-10)


@pytest.mark.slow
def test_save_load_round_trip(tmp_path, beam, impu, measurements):
    path = tmp_path / "impu.msgpack"
    impu.save(path)
    loaded = InverseMapping.load(path)
    for a, b in zip(impu.infer(measurements).to_dict().values(), loaded.infer(measurements).to_dict().values()):
        assert a == b
    assert loaded.extractor == impu.extractor and loaded.config == impu.config and loaded.training is None
    assert loaded.space == impu.space and loaded.output_names == impu.output_names and loaded.n_train == N_TRAIN
    np.testing.assert_array_equal(loaded.ts, impu.ts)
    thetas, trajectories = noisy(jax.random.key(6), beam, 8)
    np.testing.assert_array_equal(loaded.evaluate(thetas, trajectories).mare, impu.evaluate(thetas, trajectories).mare)
    assert impu.to_dict()["n_features"] == 34
    with pytest.raises(ValueError, match="not an IMPU file of this jcalib"):
        jcalib.nn.save_model(tmp_path / "other.msgpack", impu.network, {"format": "jcalib-impu-1"})
        InverseMapping.load(tmp_path / "other.msgpack")


def test_network_metrics_by_hand():
    true = np.array([[1.0, 2.0], [2.0, 4.0], [4.0, 8.0]])
    estimate = true * np.array([[1.1, 1.0], [0.9, 1.0], [1.3, 0.7]])
    m = network_metrics(true, estimate, ("a", "b"), scale=[2.0, 4.0])
    eps = np.array([[0.1, 0.0], [-0.1, 0.0], [0.3, -0.3]])
    np.testing.assert_allclose(np.asarray(m.bias), [0.1, -0.1], rtol=1e-12)
    np.testing.assert_allclose(np.asarray(m.sd), [np.sqrt(((eps[:, 0] - 0.1) ** 2).sum() / 2),
                                                  np.sqrt(((eps[:, 1] + 0.1) ** 2).sum() / 2)], rtol=1e-12)
    np.testing.assert_allclose(np.asarray(m.mare), [0.5 / 3, 0.1], rtol=1e-12)
    np.testing.assert_allclose(np.asarray(m.max_are), [0.3, 0.3], rtol=1e-12)
    np.testing.assert_allclose(m.mae, [(0.1 + 0.2 + 1.2) / 3, 2.4 / 3], rtol=1e-12)
    np.testing.assert_allclose(m.scaled_mae, m.mae / [2.0, 4.0], rtol=1e-12)
    np.testing.assert_allclose(m.rmse, np.sqrt(((estimate - true) ** 2).mean(0)), rtol=1e-12)
    assert m.to_dict()["names"] == ["a", "b"] and m.table()[0]["mare_%"] == pytest.approx(100 * 0.5 / 3)
    zero = network_metrics(true * 0, estimate, ("a", "b"))  # relative errors undefined: NaN, the rest stands
    assert np.all(np.isnan(zero.mare)) and np.all(np.isfinite(zero.mae))
    with pytest.raises(ValueError, match=r"truth and prediction must both have shape \(n, \.\.\., 2\)"):
        network_metrics(true, estimate[:, :1], ("a", "b"))
    with pytest.raises(ValueError, match="needs at least 2 test samples; got 1"):
        network_metrics(true[:1], estimate[:1], ("a", "b"))
    with pytest.raises(ValueError, match=r"scale must be positive; got \[0.0, 1.0\]"):
        network_metrics(true, estimate, ("a", "b"), scale=[0.0, 1.0])
    with pytest.raises(ValueError, match="must be finite"):
        network_metrics(true * np.nan, estimate, ("a", "b"))


def test_noise_models():
    beam, roll = jcalib.models.get("rigid_double_beam"), jcalib.models.get("roll_plane")
    std, relative = paper_noise(beam)
    np.testing.assert_array_equal(std, [2e-4, 2e-2])
    assert not relative
    std, relative = paper_noise(roll)
    np.testing.assert_array_equal(std, [0.01] * 4)
    assert relative
    y = np.full((2000, 10, 2), 3.0)
    noisy = add_noise(jax.random.key(0), y, [0.01, 0.1], "multiplicative")
    # 20,000 draws per output: the sample sd of sd 0.03 / 0.3 is within 5 standard errors (0.5 %)
    np.testing.assert_allclose((noisy - y).reshape(-1, 2).std(0), [0.03, 0.3], rtol=5 * 0.005)
    noisy = add_noise(jax.random.key(0), y, [0.01, 0.1])
    np.testing.assert_allclose((noisy - y).reshape(-1, 2).std(0), [0.01, 0.1], rtol=5 * 0.005)
    assert paper_training().patience == 40 and paper_training().batch_size == 50


class _OwnModel(jcalib.AbstractSimulator):
    """A simulator of one's own that brings its IMPU settings (what InverseMapping reads of it)."""

    beam: jcalib.AbstractModel
    noise_std: tuple = (1e-3, 5e-3)

    @property
    def parameters(self):
        return self.beam.parameters

    @property
    def output_names(self):
        return self.beam.output_names

    @property
    def ts(self):
        return self.beam.ts

    def simulate_with_status(self, theta):
        return self.beam.simulate_with_status(theta)

    def impu_settings(self):
        return {"noise_std": self.noise_std, "relative_noise": True, "fboi_options": {"n_bins": 3}}


def test_paper_settings_come_from_the_model(beam):
    """paper_noise and the FBoI defaults are the model's impu_settings(), for any model."""
    own = _OwnModel(beam)
    std, relative = paper_noise(own)
    np.testing.assert_array_equal(std, [1e-3, 5e-3])
    assert relative
    assert InverseMapping(own)._options == {"n_bins": 3}
    assert InverseMapping(own, InverseMappingConfig(feature_options={"f_max": 2.0}))._options == {"f_max": 2.0}
    assert InverseMapping(own, InverseMappingConfig(feature="RI"))._options == {}
    assert InverseMapping(beam, InverseMappingConfig(feature="MP-FBoI"))._options == {"f_max": 4.0}
    assert InverseMapping(jcalib.models.get("roll_plane"))._options == {}


@pytest.mark.slow
def test_bad_input(beam, impu):
    with pytest.raises(ValueError, match="unknown feature kind 'FFT'"):
        InverseMappingConfig(feature="FFT")
    with pytest.raises(ValueError, match="hidden must be positive layer widths"):
        InverseMappingConfig(hidden=(64, 0))
    with pytest.raises(ValueError, match="feature_margin must be finite and >= 0; got -1"):
        InverseMappingConfig(feature_margin=-1)
    with pytest.raises(ValueError, match=r"InverseMapping: simulator must be a jcalib simulator \(an AbstractModel, "
                                         r"a PELS-VAE Surrogate or a FunctionSimulator.*got function; wrap a plain"):
        InverseMapping(lambda theta: beam.simulate(theta))
    with pytest.raises(ValueError, match="config must be an InverseMappingConfig; got dict"):
        InverseMapping(beam, {"feature": "RI"})
    fresh = InverseMapping(beam)
    with pytest.raises(ValueError, match=r"InverseMapping: not trained yet; call InverseMapping\(simulator, config\)"):
        fresh.infer(np.zeros((256, 2)))
    with pytest.raises(ValueError, match="not trained yet"):
        fresh.save("never.msgpack")
    with pytest.raises(ValueError, match=r"shape \(n_times = 256, n_outputs = 2\) or \(n, 256, 2\); got \(256, 3\)"):
        impu.infer(np.zeros((256, 3)))
    bad = np.zeros((256, 2))
    bad[3, 1] = np.nan
    with pytest.raises(ValueError, match="measured contains NaN"):
        impu.infer(bad)
    with pytest.raises(ValueError, match="unknown parameter 'd3'"):
        simulate_training_set(jax.random.key(0), beam, 10, exclude={"d3": (0.0, 1.0)})
    with pytest.raises(ValueError, match="needs at least 2 test samples"):
        impu.evaluate(np.ones((1, 4)), np.ones((1, 256, 2)))
    with pytest.raises(ValueError, match=r"InverseMapping\.fit: trajectories have 100 times, the model 256"):
        fresh.fit(jax.random.key(0), np.ones((4, 4)), np.ones((4, 100, 2)))
    with pytest.raises(ValueError, match=r"InverseMapping\.fit: trajectories must have shape \(n, n_times, "
                                         r"n_outputs\) with n = 4"):
        fresh.fit(jax.random.key(0), np.ones((4, 4)), np.ones((3, 256, 2)))
    with pytest.raises(ValueError, match=r"InverseMapping\.fit: needs at least 2 training samples; got 1"):
        fresh.fit(jax.random.key(0), np.ones((1, 4)), np.ones((1, 256, 2)))
    with pytest.raises(ValueError, match=r"paper_noise: needs a model with the paper's settings \(a method "
                                         r"impu_settings\(\), as rigid_double_beam and roll_plane have\); got "
                                         "FourSubstanceReactions"):
        paper_noise(jcalib.models.get("four_substance_reactions"))
    with pytest.raises(AttributeError, match="InverseMapping is immutable"):
        impu.network = None
