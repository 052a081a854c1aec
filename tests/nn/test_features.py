"""IMPU features: time extrema against the analytic extrema of a damped sine and against
scipy.signal.find_peaks, FFT features against numpy.fft, frequency bins of interest, the
extractor's jit/vmap consistency, persistence and bad input."""

import jax
import numpy as np
import pytest
import scipy.signal

from jcalib.nn.features import (
    FEATURE_TYPES,
    FeatureExtractor,
    fft_magnitude_phase,
    fft_real_imaginary,
    frequency_bins_of_interest,
    prominences,
    time_extrema,
    time_samples,
)

N = 256
jit_prominences = jax.jit(prominences)
TS = np.arange(1, N + 1) * 2.0 / N  # the rigid double beam's grid: 2 s, t = 0 excluded
DT = TS[1] - TS[0]


def damped_sine(t, amplitude=1.0, decay=1.0, frequency=2.0):
    return amplitude * np.exp(-decay * t) * np.sin(2 * np.pi * frequency * t)


def two_outputs(rng=None, noise=0.0):
    x = np.stack([damped_sine(TS), 0.3 * np.cos(2 * np.pi * 0.75 * TS) + 0.1], axis=-1)
    if rng is not None:
        x = x + noise * rng.normal(size=x.shape)
    return x


def test_time_extrema_of_a_damped_sine_match_the_analytic_extrema():
    decay, frequency = 1.0, 2.0
    omega = 2 * np.pi * frequency
    x = damped_sine(TS, decay=decay, frequency=frequency)[:, None]
    n_te = 6
    features, count = time_extrema(TS, x, n_te, 0.15, return_count=True)
    heights, times = np.asarray(features)[:n_te], np.asarray(features)[n_te:]
    # dy/dt = 0 where tan(omega t) = omega / decay: extrema at (atan(omega / decay) + m pi) / omega
    t_true = (np.arctan(omega / decay) + np.pi * np.arange(n_te)) / omega
    h_true = damped_sine(t_true, decay=decay, frequency=frequency)
    assert np.all(np.abs(times - t_true) <= DT), (times, t_true)
    # "within one sample": no further from the analytic height than the signal moves in one sample
    fine = np.linspace(-DT, DT, 201)
    tolerance = [np.max(np.abs(damped_sine(t + fine, decay=decay, frequency=frequency) - h)) for t, h in
                 zip(t_true, h_true)]
    assert np.all(np.abs(heights - h_true) <= tolerance)
    assert np.all(np.sign(heights) == np.array([1, -1] * (n_te // 2)))  # maxima and minima alternate
    assert int(count[0]) >= n_te


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(6))
def test_prominence_and_extrema_match_scipy_find_peaks(seed):
    rng = np.random.default_rng(seed)
    y = damped_sine(TS, decay=0.8) + 0.05 * rng.normal(size=N) if seed % 2 else np.cumsum(rng.normal(size=N))
    peaks, _ = scipy.signal.find_peaks(y)
    np.testing.assert_allclose(np.asarray(jit_prominences(y))[peaks], scipy.signal.peak_prominences(y, peaks)[0],
                               rtol=1e-12, atol=1e-12)
    mpp = 0.15 * (y.max() - y.min())
    maxima, _ = scipy.signal.find_peaks(y, prominence=mpp)
    minima, _ = scipy.signal.find_peaks(-y, prominence=mpp)
    expected = np.sort(np.concatenate([maxima, minima]))
    n_te = max(1, expected.size)
    features, count = time_extrema(TS, y[:, None], n_te, return_count=True)
    assert int(count[0]) == expected.size
    features = np.asarray(features)
    k = expected.size
    np.testing.assert_array_equal(features[:k], y[expected])
    np.testing.assert_array_equal(features[n_te:n_te + k], TS[expected])


def test_missing_extrema_are_padded_with_the_last_sample():
    y = np.exp(-TS)[:, None]  # monotone: no extremum at all
    features, count = time_extrema(TS, y, 3, return_count=True)
    assert int(count[0]) == 0
    np.testing.assert_array_equal(np.asarray(features), np.r_[[y[-1, 0]] * 3, [TS[-1]] * 3])


def test_time_samples_stride_and_order():
    x = two_outputs()
    sparse = np.asarray(time_samples(x, 15))
    assert sparse.shape == (34,)  # the paper's 17 samples per output of 256
    np.testing.assert_array_equal(sparse[:17], x[14::15, 0])
    np.testing.assert_array_equal(sparse[17:], x[14::15, 1])
    np.testing.assert_array_equal(np.asarray(time_samples(x, 1)), x.T.reshape(-1))
    np.testing.assert_array_equal(np.asarray(time_samples(x, [0, 5])), [x[0, 0], x[5, 0], x[0, 1], x[5, 1]])


@pytest.mark.parametrize("n_times", [N, 101])
def test_fft_features_equal_numpy(n_times):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(3, n_times, 2))
    spectrum = np.fft.rfft(x, axis=1)
    no_imag = {0, n_times // 2} if n_times % 2 == 0 else {0}
    bins = np.arange(spectrum.shape[1])
    imag_bins = np.array([b for b in bins if b not in no_imag])
    ri = np.asarray(fft_real_imaginary(x))
    mp = np.asarray(fft_magnitude_phase(x))
    expect_ri = np.concatenate([np.concatenate([spectrum[:, bins, i].real, spectrum[:, imag_bins, i].imag], axis=1)
                                for i in range(2)], axis=1)
    expect_mp = np.concatenate([np.concatenate([np.abs(spectrum[:, bins, i]), np.angle(spectrum[:, imag_bins, i])],
                                               axis=1) for i in range(2)], axis=1)
    assert ri.shape == (3, 2 * n_times)  # a real signal's spectrum has as many real numbers as samples
    np.testing.assert_allclose(ri, expect_ri, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(mp, expect_mp, rtol=1e-12, atol=1e-12)
    few = [0, 3, 7]
    np.testing.assert_allclose(np.asarray(fft_real_imaginary(x[0], few)),
                               np.concatenate([np.r_[spectrum[0, few, i].real, spectrum[0, few[1:], i].imag]
                                               for i in range(2)]), rtol=1e-12, atol=1e-12)


def test_frequency_bins_of_interest():
    # the paper's FBoI for the rigid double beam: 0-4 Hz with 256 samples over 2 s (0.5 Hz bins)
    np.testing.assert_array_equal(frequency_bins_of_interest(TS, f_max=4.0), np.arange(9))
    np.testing.assert_array_equal(frequency_bins_of_interest(TS, f_max=4.0, f_min=1.0), np.arange(2, 9))
    # signals with energy in bins 3 (1.5 Hz) and 10 (5 Hz) only, plus a mean
    rng = np.random.default_rng(2)
    amplitudes = rng.uniform(0.5, 1.5, size=(20, 2, 1))
    phase = rng.uniform(0, 2 * np.pi, size=(20, 1, 1))
    x = 2.0 + amplitudes[:, :1] * np.sin(2 * np.pi * 1.5 * TS[None, :, None] + phase)
    x = x + 0.5 * amplitudes[:, 1:] * np.cos(2 * np.pi * 5.0 * TS[None, :, None])
    np.testing.assert_array_equal(frequency_bins_of_interest(TS, x, n_bins=3), [0, 3, 10])
    np.testing.assert_array_equal(frequency_bins_of_interest(TS, x, n_bins=2, include_dc=False), [3, 10])
    np.testing.assert_array_equal(frequency_bins_of_interest(TS, x, threshold=0.9), [0, 3])
    np.testing.assert_array_equal(frequency_bins_of_interest(TS, x, threshold=0.2), [0, 3, 10])
    extractor = FeatureExtractor.create("RI-FBoI", TS, training_trajectories=x, n_bins=3)
    assert extractor.bins == (0, 3, 10) and extractor.n_features == 5
    np.testing.assert_allclose(extractor.frequencies, [0.0, 1.5, 5.0])


@pytest.mark.slow
@pytest.mark.parametrize("kind", FEATURE_TYPES)
def test_extractor_jit_vmap_consistency_and_round_trip(kind):
    rng = np.random.default_rng(3)
    xs = np.stack([two_outputs(rng, 0.01) for _ in range(5)])
    options = {"f_max": 4.0} if kind.endswith("FBoI") else {}
    extractor = FeatureExtractor.create(kind, TS, training_trajectories=xs, **options)
    batch = np.asarray(extractor(xs))
    assert batch.shape == (5, extractor.n_features)
    assert len(extractor.labels(["a", "b"])) == extractor.n_features
    single = np.stack([np.asarray(extractor(x)) for x in xs])  # jitted one by one
    np.testing.assert_allclose(batch, single, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.asarray(jax.jit(jax.vmap(extractor.extract))(xs)), batch, rtol=1e-12, atol=1e-12)
    if kind != "TE":  # any leading axes (TE: the same code path, spare a compilation)
        np.testing.assert_array_equal(np.asarray(extractor(xs[None])), batch[None])
    again = FeatureExtractor.from_dict(extractor.to_dict())
    np.testing.assert_array_equal(np.asarray(again(xs)), batch)
    assert again.n_features == extractor.n_features


def test_extractor_settings_from_training_data():
    rng = np.random.default_rng(4)
    xs = np.stack([two_outputs(rng, 0.01) for _ in range(8)])
    extractor = FeatureExtractor.create("TE", TS, training_trajectories=xs)
    counts = np.asarray(time_extrema(TS, xs, 1, return_count=True)[1])
    assert extractor.n_extrema == tuple(int(c) for c in counts.min(axis=0))  # the paper's n_TE rule
    assert FeatureExtractor.create("TS-sparse", TS, n_outputs=2).indices == tuple(range(14, 256, 15))
    assert FeatureExtractor.create("TS-dense", TS, n_outputs=2).n_features == 2 * N
    assert FeatureExtractor.create("RI", TS, n_outputs=2).n_features == 2 * N


def test_bad_input():
    x = two_outputs()
    with pytest.raises(ValueError, match="unknown feature kind 'FFT'"):
        FeatureExtractor.create("FFT", TS, n_outputs=2)
    extractor = FeatureExtractor.create("RI-FBoI", TS, n_outputs=2, f_max=4.0)
    with pytest.raises(ValueError, match=r"shape \(\.\.\., n_times = 256, n_outputs = 2\); got \(256, 3\)"):
        extractor(np.zeros((N, 3)))
    with pytest.raises(ValueError, match="do not apply to 'TS-dense'"):
        FeatureExtractor.create("TS-dense", TS, n_outputs=2, f_max=4.0)
    with pytest.raises(ValueError, match="need n_extrema or training_trajectories"):
        FeatureExtractor.create("TE", TS, n_outputs=2)
    with pytest.raises(ValueError, match="pass n_outputs or training_trajectories"):
        FeatureExtractor.create("RI", TS)
    with pytest.raises(ValueError, match="exactly one of f_max, n_bins, threshold"):
        frequency_bins_of_interest(TS, x[None], f_max=4.0, n_bins=3)
    with pytest.raises(ValueError, match="needs x_training"):
        frequency_bins_of_interest(TS, n_bins=3)
    with pytest.raises(ValueError, match="equidistant"):
        frequency_bins_of_interest(TS ** 2, f_max=4.0)
    with pytest.raises(ValueError, match="no bin selected"):
        frequency_bins_of_interest(TS, f_max=0.2, f_min=0.1)
    with pytest.raises(ValueError, match=r"bins must lie in \[0, n_times // 2 = 128\]"):
        fft_real_imaginary(x, [0, 200])
    with pytest.raises(ValueError, match="must not repeat"):
        fft_magnitude_phase(x, [1, 1])
    with pytest.raises(ValueError, match=r"stride must lie in \[1, n_times = 256\]; got 0"):
        time_samples(x, 0)
    with pytest.raises(ValueError, match=r"x must have shape \(\.\.\., n_times, n_outputs\)"):
        time_samples(x[:, 0], 2)
    with pytest.raises(ValueError, match="one for all outputs or one per output"):
        time_extrema(TS, x, (1, 2, 3))
    with pytest.raises(ValueError, match=r"ts must have shape \(n_times,\)"):
        time_extrema(TS[:-1], x, 2)
    with pytest.raises(ValueError, match="prominence"):
        time_extrema(TS, x, 2, prominence=1.5)
    with pytest.raises(ValueError, match="contain NaN"):
        FeatureExtractor.create("TE", TS, training_trajectories=np.full((2, N, 2), np.nan))
