"""IMPU on rigid_double_beam (quick size): accuracy with RI (FBoI) features, deterministic
estimates and training, the outside-the-training-range flag, excluded training zones, the
error metrics (eqs. 18-21), save/load and bad input."""

import jax
import numpy as np
import pytest

import jcalib
from jcalib.nn.impu import IMPUEstimate, InverseMapping, add_noise, paper_noise, paper_training, relative_error_metrics
from jcalib.nn.training import TrainingConfig

N_TRAIN, N_VAL, N_TEST = 400, 112, 128
CHUNK = 128  # one compiled simulate_batch shape for every data set of this module
# The paper's 200 epochs are 4,000 Adam steps with its 1,000 samples in batches of 50; with 400
# samples the quick run needs more epochs for as many steps (early stopping still ends it).
QUICK = TrainingConfig(epochs=600, batch_size=50, learning_rate=1e-3, patience=40, progress=False)
FAR = np.array([9.0, 2e-3, 150.0, 0.4])  # d1, d2, k1, k2: 2-4x the upper bounds (25-60 N*s/m, ...)


@pytest.fixture(scope="module")
def beam():
    return jcalib.models.get("rigid_double_beam")


@pytest.fixture(scope="module")
def impu(beam):
    return InverseMapping(beam, "RI-FBoI", training=QUICK).fit(jax.random.key(0), N_TRAIN, N_VAL, chunk_size=CHUNK)


@pytest.fixture(scope="module")
def metrics(impu):
    return impu.evaluate(jax.random.key(1), N_TEST, chunk_size=CHUNK)


@pytest.fixture(scope="module")
def measurements(beam, impu):
    """Noisy measurements at the centre p_c and at FAR (far outside the training box)."""
    far = beam.with_bounds_check(False).simulate(FAR)  # deliberate extrapolation (outside the bounds)
    clean = np.stack([np.asarray(beam.simulate(np.asarray(beam.parameters.nominal))), np.asarray(far)])
    return add_noise(jax.random.key(2), clean, impu.noise_std)


def test_quick_accuracy_with_ri_fboi_features(impu, metrics):
    assert impu.n_features == 34  # 0-4 Hz: 9 real + 8 imaginary parts per output, as in the paper
    assert impu.extractor.bins == tuple(range(9))
    mare = np.asarray(metrics.mare)
    print("quick MARE % (d1, d2, k1, k2):", np.round(100 * mare, 2), "n_epochs", impu.training.n_epochs)
    assert np.all(mare < 0.10), dict(zip(impu.names, mare))
    # eqs. 18-21 from the raw errors
    errors = (np.asarray(metrics.theta_estimate) - np.asarray(metrics.theta_true)) / np.asarray(metrics.theta_true)
    np.testing.assert_allclose(np.asarray(metrics.errors), errors, rtol=1e-12)
    np.testing.assert_allclose(mare, np.abs(errors).mean(0), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(metrics.sd), errors.std(0, ddof=1), rtol=1e-12)
    assert metrics.n_test == N_TEST and len(metrics.table()) == 4
    # in-box test measurements are rarely flagged (1 of 128 in the quick run)
    assert np.mean(np.asarray(metrics.outside)) <= 0.05
    assert impu.timings["simulate_s"] > 0 and impu.timings["training_s"] > 0
    assert impu.train_data[0].shape == (N_TRAIN, 4) and impu.train_data[1].shape == (N_TRAIN, 256, 2)


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


def test_same_seed_gives_the_same_network(beam, impu):
    thetas, signals = impu.train_data
    data = (thetas[:100], signals[:100])
    tiny = TrainingConfig(epochs=5, batch_size=50, progress=False)

    def train(seed):
        return InverseMapping(beam, "RI-FBoI", training=tiny, seed=seed).fit_data(*data).infer(signals[100:103]).theta

    np.testing.assert_array_equal(np.asarray(train(3)), np.asarray(train(3)))
    assert not np.allclose(np.asarray(train(3)), np.asarray(train(4)))


def test_outside_training_range_flag(impu, measurements):
    estimate = impu.infer(measurements)
    centre, far = (bool(v) for v in np.asarray(estimate.outside_training_range))
    assert not centre and far
    assert bool(np.asarray(estimate.features_outside)[1])
    # the centre estimate is close to p_c (4 % of each value: several times the quick MARE)
    np.testing.assert_allclose(np.asarray(estimate.theta[0]), impu.space.nominal, rtol=0.04 * 3)


def test_evaluate_beyond_the_training_box(impu):
    beyond = impu.evaluate(jax.random.key(5), 16, region={"k1": (75.0, 90.0)}, chunk_size=CHUNK)
    assert np.all(np.asarray(beyond.theta_true)[:, 2] >= 75.0)
    assert np.mean(np.asarray(beyond.outside)) >= 0.5  # extrapolation is recognised


@pytest.mark.parametrize("form", ["box", "callable"])
def test_excluded_training_zone(beam, form):
    box = {"d1": (2.5, 3.5), "d2": (4e-4, 6e-4)}
    if form == "box":
        exclude = box
    else:
        def exclude(thetas):
            return (np.abs(thetas[:, 0] - 3.0) <= 0.5) & (np.abs(thetas[:, 1] - 5e-4) <= 1e-4)
    tiny = TrainingConfig(epochs=2, batch_size=16, progress=False)
    impu = InverseMapping(beam, "RI-FBoI", training=tiny).fit(jax.random.key(3), 24, 8, exclude=exclude,
                                                              chunk_size=CHUNK)
    for thetas in (impu.train_data[0], impu.val_data[0]):
        inside = (np.abs(thetas[:, 0] - 3.0) <= 0.5) & (np.abs(thetas[:, 1] - 5e-4) <= 1e-4)
        assert not inside.any()
    assert impu.train_data[0].shape[0] == 24
    assert impu.exclude_box == ({"d1": [2.5, 3.5], "d2": [4e-4, 6e-4]} if form == "box" else None)


def test_save_load_round_trip(tmp_path, beam, impu, measurements):
    path = tmp_path / "impu.msgpack"
    impu.save(path)
    loaded = InverseMapping.load(path, model=beam)
    for a, b in zip(impu.infer(measurements).to_dict().values(), loaded.infer(measurements).to_dict().values()):
        assert a == b
    assert loaded.extractor == impu.extractor and loaded.hidden == impu.hidden
    np.testing.assert_array_equal(loaded.noise_std, impu.noise_std)
    bare = InverseMapping.load(path)
    np.testing.assert_array_equal(np.asarray(bare.infer(measurements).theta),
                                  np.asarray(impu.infer(measurements).theta))
    with pytest.raises(ValueError, match="needs the model"):
        bare.evaluate(jax.random.key(0), 4)
    with pytest.raises(ValueError, match="does not match the saved mapping"):
        InverseMapping.load(path, model=jcalib.models.get("roll_plane"))
    with pytest.raises(ValueError, match=r"InverseMapping.load: model must be a jcalib simulator .*got dict"):
        InverseMapping.load(path, model={"parameters": beam.parameters})
    assert impu.to_dict()["n_features"] == 34


def test_relative_error_metrics_by_hand():
    true = np.array([[1.0, 2.0], [2.0, 4.0], [4.0, 8.0]])
    estimate = true * np.array([[1.1, 1.0], [0.9, 1.0], [1.3, 0.7]])
    m = relative_error_metrics(true, estimate, ("a", "b"))
    eps = np.array([[0.1, 0.0], [-0.1, 0.0], [0.3, -0.3]])
    np.testing.assert_allclose(np.asarray(m.bias), [0.1, -0.1], rtol=1e-12)
    np.testing.assert_allclose(np.asarray(m.sd), [np.sqrt(((eps[:, 0] - 0.1) ** 2).sum() / 2),
                                                  np.sqrt(((eps[:, 1] + 0.1) ** 2).sum() / 2)], rtol=1e-12)
    np.testing.assert_allclose(np.asarray(m.mare), [0.5 / 3, 0.1], rtol=1e-12)
    np.testing.assert_allclose(np.asarray(m.max_are), [0.3, 0.3], rtol=1e-12)
    assert m.to_dict()["names"] == ["a", "b"]
    with pytest.raises(ValueError, match="relative errors are undefined"):
        relative_error_metrics(true * 0, estimate, ("a", "b"))


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
    """noise='paper' and the FBoI defaults are the model's impu_settings(), for any model."""
    own = _OwnModel(beam)
    impu = InverseMapping(own, "RI-FBoI")
    np.testing.assert_array_equal(impu.noise_std, [1e-3, 5e-3])
    assert impu.relative_noise
    assert impu._feature_defaults() == {"n_bins": 3}
    assert InverseMapping(own, "RI-FBoI", feature_options={"f_max": 2.0})._feature_defaults() == {}
    assert InverseMapping(own, "RI")._feature_defaults() == {}
    assert InverseMapping(beam, "MP-FBoI")._feature_defaults() == {"f_max": 4.0}
    assert InverseMapping(jcalib.models.get("roll_plane"), "RI-FBoI")._feature_defaults() == {}
    with pytest.raises(ValueError, match=r"noise needs one value or one per output \(2\); got 3"):
        InverseMapping(_OwnModel(beam, noise_std=(1e-3, 1e-3, 1e-3)))


def test_bad_input(beam, impu):
    with pytest.raises(ValueError, match="unknown feature kind 'FFT'"):
        InverseMapping(beam, "FFT")
    with pytest.raises(ValueError, match=r"InverseMapping: model must be a jcalib simulator \(an AbstractModel, a "
                                         r"PELS-VAE Surrogate or a FunctionSimulator.*got function; wrap a plain"):
        InverseMapping(lambda theta: beam.simulate(theta))
    fresh = InverseMapping(beam)
    with pytest.raises(ValueError, match="not trained yet"):
        fresh.infer(np.zeros((256, 2)))
    with pytest.raises(ValueError, match="not trained yet"):
        fresh.save("never.msgpack")
    with pytest.raises(ValueError, match=r"shape \(n_times = 256, n_outputs = 2\) or \(n, 256, 2\); got \(256, 3\)"):
        impu.infer(np.zeros((256, 3)))
    bad = np.zeros((256, 2))
    bad[3, 1] = np.nan
    with pytest.raises(ValueError, match="measured contains NaN"):
        impu.infer(bad)
    with pytest.raises(ValueError, match="n_train must be an integer >= 2; got 1"):
        fresh.fit(jax.random.key(0), 1, 10)
    with pytest.raises(ValueError, match="unknown parameter 'd3'"):
        fresh.fit(jax.random.key(0), 10, 10, exclude={"d3": (0.0, 1.0)})
    with pytest.raises(ValueError, match="n_test must be an integer >= 2"):
        impu.evaluate(jax.random.key(0), 1)
    with pytest.raises(ValueError, match=r"InverseMapping\.fit_data: signals have 100 times, the model 256"):
        fresh.fit_data(np.ones((4, 4)), np.ones((4, 100, 2)))
    with pytest.raises(ValueError, match=r"InverseMapping\.fit_data: signals must have shape \(n, n_times, n_outputs\) "
                                         r"with n = 4"):
        fresh.fit_data(np.ones((4, 4)), np.ones((3, 256, 2)))
    with pytest.raises(ValueError, match=r"noise='paper' needs a model with the paper's settings \(a method "
                                         r"impu_settings\(\), as rigid_double_beam and roll_plane have\); got "
                                         "FourSubstanceReactions"):
        InverseMapping(jcalib.models.get("four_substance_reactions"))
    with pytest.raises(ValueError, match="hidden must be positive layer widths"):
        InverseMapping(beam, hidden=(64, 0))
    with pytest.raises(ValueError, match="noise needs one value or one per output"):
        InverseMapping(beam, noise=[1.0, 2.0, 3.0])
