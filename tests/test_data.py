"""Measurements, synthetic data and CSV/NPZ I/O, on four_substance_reactions."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jcalib
from jcalib.data import MISSING_FILL, Measurements, synthetic_measurements
from jcalib.model import Experiment, SimulationError


@pytest.fixture(scope="module")
def ragged(model, clean):
    """Measurements with missing entries (NaN there) and per-entry sigma."""
    mask = np.ones(clean.shape, dtype=bool)
    mask[3, 1] = mask[7, 0] = mask[21, 3] = False
    values = np.where(mask, clean, np.nan)
    sigma = np.linspace(0.01, 0.05, clean.size).reshape(clean.shape)
    return Measurements(model.ts, values, mask=mask, sigma=sigma, output_names=model.output_names)


def _assert_same(a: Measurements, b: Measurements):
    for field in ("ts", "values", "mask"):
        np.testing.assert_array_equal(np.asarray(getattr(a, field)), np.asarray(getattr(b, field)))
    assert a.output_names == b.output_names
    if a.sigma is None:
        assert b.sigma is None
    else:
        assert np.asarray(a.sigma).shape == np.asarray(b.sigma).shape
        np.testing.assert_array_equal(np.asarray(a.sigma), np.asarray(b.sigma))


def test_properties_and_fill(ragged, clean):
    assert (ragged.n_times, ragged.n_outputs, ragged.n_observed) == (22, 4, 85)
    assert ragged.values.dtype == jnp.float64 and ragged.mask.dtype == jnp.bool_
    values = np.asarray(ragged.values)
    assert values[3, 1] == MISSING_FILL and np.all(np.isfinite(values))
    np.testing.assert_array_equal(values[0], clean[0])
    # per-entry sigma is filled where masked out too
    assert float(ragged.sigma_full()[3, 1]) == MISSING_FILL


@pytest.mark.parametrize("sigma, expected", [
    (None, None),
    (0.1, np.full((3, 2), 0.1)),
    (np.array([0.1, 0.2]), np.array([[0.1, 0.2]] * 3)),
    (np.arange(1.0, 7.0).reshape(3, 2), np.arange(1.0, 7.0).reshape(3, 2)),
])
def test_sigma_full(sigma, expected):
    m = Measurements([0.0, 1.0, 2.0], np.ones((3, 2)), sigma=sigma)
    full = m.sigma_full()
    if expected is None:
        assert full is None
    else:
        np.testing.assert_array_equal(np.asarray(full), expected)


def test_is_a_pytree_field_and_jittable(ragged):
    leaves = jax.tree_util.tree_leaves(ragged)
    assert len(leaves) == 4  # ts, values, mask, sigma; names are static
    total = jax.jit(lambda m: jnp.sum(jnp.where(m.mask, m.values, 0.0)))(ragged)
    np.testing.assert_allclose(float(total), np.sum(np.where(np.asarray(ragged.mask),
                                                             np.asarray(ragged.values), 0.0)))


def test_validation_errors():
    ts = [0.0, 1.0, 2.0]
    ok = np.ones((3, 2))
    with pytest.raises(ValueError, match=r"NaN in measured entry \(t=44.0, output 'M'\); "
                                         r"mark missing entries with mask=False"):
        Measurements([1.0, 44.0], np.array([[1.0, 1.0], [1.0, np.nan]]), output_names=("L", "M"))
    with pytest.raises(ValueError, match=r"inf in measured entry \(t=1.0, output 0\)"):
        Measurements(ts, np.array([[1.0, 1.0], [np.inf, 1.0], [1.0, 1.0]]))
    with pytest.raises(ValueError, match=r"ts must be a non-empty 1-D array \(n_times,\); "
                                         r"got shape \(3, 1\)"):
        Measurements(np.ones((3, 1)), ok)
    with pytest.raises(ValueError, match="ts contains NaN or inf"):
        Measurements([0.0, np.nan, 2.0], ok)
    with pytest.raises(ValueError, match=r"ts must be non-decreasing; got ts\[1\]=2.0 > ts\[2\]=1.0"):
        Measurements([0.0, 2.0, 1.0], ok)
    with pytest.raises(ValueError, match=r"values must have shape \(n_times, n_outputs\) with "
                                         r"n_times=3; got shape \(2, 2\)"):
        Measurements(ts, np.ones((2, 2)))
    with pytest.raises(ValueError, match=r"got shape \(3,\) \(use values\[:, None\]"):
        Measurements(ts, np.ones(3))
    with pytest.raises(ValueError, match=r"mask must have the shape of values \(3, 2\); "
                                         r"got shape \(3, 3\)"):
        Measurements(ts, ok, mask=np.ones((3, 3), dtype=bool))
    with pytest.raises(ValueError, match="mask must be boolean"):
        Measurements(ts, ok, mask=np.full((3, 2), 2))
    with pytest.raises(ValueError, match=r"no measured entries \(mask is all False\)"):
        Measurements(ts, ok, mask=np.zeros((3, 2), dtype=bool))
    with pytest.raises(ValueError, match=r"sigma must be a scalar, shape \(n_outputs,\) = \(2,\) "
                                         r"or \(n_times, n_outputs\) = \(3, 2\); got shape \(3,\)"):
        Measurements(ts, ok, sigma=np.ones(3))
    with pytest.raises(ValueError, match="sigma must be positive and finite; got -0.1 at output 'b'"):
        Measurements(ts, ok, sigma=np.array([0.1, -0.1]), output_names=("a", "b"))
    with pytest.raises(ValueError, match="sigma must be positive and finite; got 0.0"):
        Measurements(ts, ok, sigma=0.0)
    with pytest.raises(ValueError, match=r"output_names has 1 names \('a',\) but values has 2"):
        Measurements(ts, ok, output_names=("a",))
    with pytest.raises(ValueError, match=r"duplicate output_names \['a'\]"):
        Measurements(ts, ok, output_names=("a", "a"))


def test_nan_allowed_where_masked_out_and_sigma_ignored_there():
    values = np.array([[1.0, np.nan], [2.0, 3.0]])
    sigma = np.array([[0.1, np.nan], [0.1, 0.2]])
    m = Measurements([0.0, 1.0], values, mask=~np.isnan(values), sigma=sigma)
    assert m.n_observed == 3
    assert np.all(np.isfinite(np.asarray(m.values))) and np.all(np.isfinite(np.asarray(m.sigma)))


@pytest.mark.parametrize("sigma_kind", ["none", "scalar", "per_output", "per_entry"])
def test_csv_round_trip_is_exact(tmp_path, ragged, sigma_kind):
    sigma = {"none": None, "scalar": 0.0123456789012345,
             "per_output": np.array([0.1, 1 / 3, 0.2, np.pi / 100]),
             "per_entry": np.asarray(ragged.sigma)}[sigma_kind]
    m = Measurements(ragged.ts, np.asarray(ragged.values) * (1 + 1e-13 / 3), mask=ragged.mask,
                     sigma=sigma, output_names=ragged.output_names)
    path = tmp_path / "data.csv"
    m.to_csv(path)
    lines = path.read_text().splitlines()
    expected = "t,A,B,C,D" + ("" if sigma is None else ",sigma_A,sigma_B,sigma_C,sigma_D")
    assert lines[0] == expected
    assert len(lines) == 23
    assert lines[4].split(",")[2] == ""  # the missing entry (t index 3, output B)
    _assert_same(m, Measurements.from_csv(path))


def test_csv_without_names_and_bad_files(tmp_path):
    m = Measurements([0.0, 1.0], np.array([[1.5, 2.5], [3.5, 4.5]]))
    path = tmp_path / "plain.csv"
    m.to_csv(path)
    back = Measurements.from_csv(path)
    assert back.output_names == ("y0", "y1")
    np.testing.assert_array_equal(np.asarray(back.values), np.asarray(m.values))
    bad = tmp_path / "bad.csv"
    bad.write_text("time,A\n0,1\n")
    with pytest.raises(ValueError, match="the first column must be 't'"):
        Measurements.from_csv(bad)
    bad.write_text("t,A\n0,1\n1,2,3\n")
    with pytest.raises(ValueError, match="line 3 of .* has 3 cells; expected 2"):
        Measurements.from_csv(bad)


@pytest.mark.parametrize("with_extras", [True, False])
def test_npz_round_trip_is_exact(tmp_path, ragged, with_extras):
    m = ragged if with_extras else Measurements(ragged.ts, ragged.values)
    path = tmp_path / "data.npz"
    m.to_npz(path)
    _assert_same(m, Measurements.from_npz(path))


def test_synthetic_reproducible_and_key_dependent(model, theta):
    a = synthetic_measurements(jax.random.key(0), model, theta, 0.05)
    b = synthetic_measurements(jax.random.key(0), model, theta, 0.05)
    c = synthetic_measurements(jax.random.key(1), model, theta, 0.05)
    np.testing.assert_array_equal(np.asarray(a.values), np.asarray(b.values))
    assert not np.allclose(np.asarray(a.values), np.asarray(c.values))
    assert a.output_names == model.output_names
    np.testing.assert_array_equal(np.asarray(a.ts), np.asarray(model.ts))
    assert float(a.sigma) == 0.05


@pytest.mark.parametrize("noise", ["multiplicative", "additive"])
def test_noise_statistics(model, theta, clean, noise):
    """Standardised noise is N(0, 1): 50 data sets x 88 entries; 5 Monte-Carlo SEs."""
    sigma = np.array([0.02, 0.01, 0.03, 0.05])
    keys = jax.random.split(jax.random.key(42), 50)
    eps = []
    for key in keys:
        x = np.asarray(synthetic_measurements(key, model, theta, sigma, noise=noise).values)
        eps.append((x / clean - 1) / sigma if noise == "multiplicative" else (x - clean) / sigma)
    eps = np.concatenate([e.reshape(-1) for e in eps])
    n = eps.size
    assert abs(eps.mean()) < 5 / np.sqrt(n)
    assert abs(eps.std() - 1) < 5 / np.sqrt(2 * n)


def test_synthetic_mask_and_errors(model, theta, clean):
    mask = np.ones(clean.shape, dtype=bool)
    mask[:5, 1] = False
    m = synthetic_measurements(jax.random.key(3), model, theta, 0.01, mask=mask)
    assert m.n_observed == 83
    assert np.all(np.asarray(m.values)[:5, 1] == MISSING_FILL)
    exp = model.experiment
    masked_model = model.with_experiment(Experiment(
        exp.ts, t0=float(exp.t0), t1=float(exp.t1), conditions={"A0": 10.0}, mask=mask))
    m2 = synthetic_measurements(jax.random.key(3), masked_model, theta, 0.01)
    np.testing.assert_array_equal(np.asarray(m2.mask), mask)
    np.testing.assert_array_equal(np.asarray(m2.values), np.asarray(m.values))

    with pytest.raises(ValueError, match="noise must be 'multiplicative' or 'additive'; got 'poisson'"):
        synthetic_measurements(jax.random.key(0), model, theta, 0.01, noise="poisson")
    with pytest.raises(ValueError, match=r"mask must have shape \(n_times, n_outputs\) = \(22, 4\)"):
        synthetic_measurements(jax.random.key(0), model, theta, 0.01, mask=np.ones((22, 3), bool))
    with pytest.raises(ValueError, match=r"sigma must be a scalar"):
        synthetic_measurements(jax.random.key(0), model, theta, np.ones(3))
    blow_up = jnp.asarray([1e-4, -1e-2, -1e-2])  # A explodes in finite time
    with pytest.raises(SimulationError, match="synthetic_measurements: the simulation failed"):
        synthetic_measurements(jax.random.key(0), model, blow_up, 0.01)


def test_needs_float64(monkeypatch):
    monkeypatch.setattr(jcalib.data, "_x64_enabled", lambda: False)
    with pytest.raises(ValueError, match="Measurements need float64"):
        Measurements([0.0], np.ones((1, 1)))
