"""Digital-twin updating with an IMPU inverse mapping (jcalib.workflows.impu_updating).

A small RI (FBoI) mapping of the rigid double beam follows a system whose four parameters drift
away from the centre p_c: the twin's error against each new measurement must fall on average
with the update. The out-of-range policies are pinned with a stub mapping whose estimates and
flags are set by hand."""

import types

import jax
import numpy as np
import pytest

import jcalib
from jcalib.nn.data import simulate_training_set
from jcalib.nn.impu import InverseMapping, InverseMappingConfig, paper_noise
from jcalib.nn.training import TrainingConfig
from jcalib.probability import add_noise
from jcalib.workflows.impu_updating import DigitalTwin, TwinUpdatingResult, impu_updating, rmse_per_output

CHUNK = 16  # the twin's default chunk (TWIN_CHUNK): one compiled solve for the whole module
N_DRIFT = 8


@pytest.fixture(scope="module")
def beam():
    return jcalib.models.get("rigid_double_beam")


@pytest.fixture(scope="module")
def mapping(beam):
    """RI (FBoI), 400 Latin-hypercube training samples with the paper's noise (~10 s)."""
    config = TrainingConfig(epochs=100, batch_size=32, learning_rate=3e-3, patience=20, progress=False)
    noise = paper_noise(beam)[0]  # additive
    train = simulate_training_set(jax.random.key(0), beam, 400, sampler="lhs", noise=noise, chunk_size=CHUNK)
    val = simulate_training_set(jax.random.key(1), beam, 200, noise=noise, chunk_size=CHUNK)
    return InverseMapping(beam, InverseMappingConfig(hidden=(64, 64), training=config)).fit(jax.random.key(2), *train,
                                                                                           val=val)


@pytest.fixture(scope="module")
def drift(beam):
    """True parameters drifting linearly from p_c (unit-cube 0.5) to a corner region over 8
    experiments, then a jump of k2 to twice the box's upper bound (damage); noisy
    measurements with the paper's noise."""
    space = beam.parameters
    u = 0.5 + np.linspace(0.0, 1.0, N_DRIFT)[:, None] * (np.array([0.15, 0.8, 0.85, 0.25]) - 0.5)
    truth = np.asarray(space.from_unit(u))
    damaged = truth[-1].copy()
    damaged[3] = 2 * space.upper[3]
    truth = np.vstack([truth, damaged])
    clean = jcalib.simulate_batch(beam, truth, chunk_size=CHUNK, check_bounds=False)
    std = np.array([2e-4, 2e-2])  # the paper's sigma_y1 [m], sigma_y2 [rad]
    return truth, add_noise(jax.random.key(5), clean, std)


@pytest.fixture(scope="module")
def replay(mapping, drift):
    truth, measured = drift
    return impu_updating(mapping, measured, theta_true=truth)


@pytest.mark.slow
def test_the_update_lowers_the_twins_error_on_a_drifting_system(replay, drift):
    truth, measured = drift
    r = replay
    inside = slice(0, N_DRIFT)
    assert not r.outside_training_range[inside].any() and r.accepted[inside].all()
    # the claim: after the update the twin reproduces the new measurement better than before it
    before, after = r.rmse_before[inside].mean(0), r.rmse_after[inside].mean(0)
    assert np.all(after < before), (before, after)
    # ... and its parameters are closer to the truth than the never-updated twin's
    errors_after = np.abs(r.parameter_errors("after")[inside]).mean(0)
    errors_initial = np.abs(r.parameter_errors("initial")[inside]).mean(0)
    assert np.all(errors_after < errors_initial), (errors_after, errors_initial)
    # bookkeeping: before = previous after; the first "before" is the reference twin p_c
    np.testing.assert_array_equal(r.theta_before[1:], r.theta_after[:-1])
    beam_nominal = r.theta_initial
    np.testing.assert_array_equal(r.theta_before[0], beam_nominal)
    np.testing.assert_array_equal(r.rmse_before[0], r.rmse_reference[0])
    np.testing.assert_array_equal(r.theta_after[inside], r.theta_inferred[inside])
    np.testing.assert_array_equal(r.rmse_after[inside], r.rmse_inferred[inside])
    sim = jcalib.simulate_batch(jcalib.models.get("rigid_double_beam"), np.stack([beam_nominal, r.theta_after[3]]),
                                check_bounds=False)
    np.testing.assert_allclose(r.rmse_reference[5], rmse_per_output(sim[0], measured[5]), rtol=1e-10)
    np.testing.assert_allclose(r.rmse_after[3], rmse_per_output(sim[1], measured[3]), rtol=1e-10)


@pytest.mark.slow
def test_a_damaged_system_is_flagged_and_the_twin_keeps_its_parameters(replay):
    r = replay
    assert r.outside_training_range[-1] and not r.accepted[-1] and r.n_flagged == 1
    assert r.theta_inferred[-1, 3] > r.theta_after[-1, 3]  # the estimate left the box upwards in k2
    np.testing.assert_array_equal(r.theta_after[-1], r.theta_before[-1])
    np.testing.assert_array_equal(r.rmse_after[-1], r.rmse_before[-1])
    assert r.summary()["n_accepted"] == N_DRIFT


@pytest.mark.slow
def test_online_updates_equal_the_replay(mapping, drift, replay, tmp_path):
    truth, measured = drift
    twin = DigitalTwin(mapping)
    np.testing.assert_array_equal(twin.theta, mapping.space.nominal)
    for x, true in zip(measured, truth):
        step = twin.update(x, theta_true=true)
    assert step.index == N_DRIFT and len(twin.history) == N_DRIFT + 1
    online = twin.result()
    # batched and single inference may round differently in float32
    np.testing.assert_allclose(online.theta_inferred, replay.theta_inferred, rtol=1e-5)
    np.testing.assert_allclose(online.rmse_after, replay.rmse_after, rtol=1e-4)
    np.testing.assert_array_equal(online.outside_training_range, replay.outside_training_range)
    np.testing.assert_array_equal(twin.theta, online.theta)
    # JSON round trip
    path = tmp_path / "twin.json"
    online.save(path)
    loaded = TwinUpdatingResult.load(path)
    assert loaded.to_dict() == online.to_dict()
    np.testing.assert_array_equal(loaded.theta_after, online.theta_after)
    assert loaded.step(-1).outside_training_range and loaded.names == ("d1", "d2", "k1", "k2")


class StubMapping:
    """A mapping whose estimates and flags are set by hand per measurement (keyed by its bytes)."""

    feature = "stub"
    is_trained = True

    def __init__(self, model, table):
        self.simulator, self.space, self.names, self.ts = model, model.parameters, model.parameters.names, model.ts
        self.table = {np.asarray(x, np.float64).tobytes(): (np.asarray(t, np.float64), f) for x, t, f in table}

    def infer(self, x):
        x = np.asarray(x, np.float64)
        rows = [self.table[r.tobytes()] for r in (x if x.ndim == 3 else x[None])]
        theta = np.stack([t for t, _ in rows])
        flag = np.array([f for _, f in rows])
        if x.ndim == 2:
            theta, flag = theta[0], flag[0]
        return types.SimpleNamespace(theta=theta, outside_training_range=flag, features_outside=flag,
                                     theta_outside=np.zeros_like(flag))


@pytest.mark.parametrize("policy", ["keep", "accept", "clip"])
def test_policies_for_flagged_estimates(beam, drift, policy):
    _, measured = drift
    space = beam.parameters
    a, c = np.asarray(space.nominal) * 1.1, np.asarray(space.nominal) * 0.9
    b = np.asarray(space.nominal) * np.array([1.0, 1.0, 1.0, 2.0])  # k2 = 0.2 > 0.15: outside the box
    failing = np.array([-50.0, 5e-4, 40.0, 0.1])  # negative damping: the solve blows up
    stub = StubMapping(beam, [(measured[0], a, False), (measured[1], b, True), (measured[2], c, False),
                              (measured[3], failing, True)])
    r = impu_updating(stub, measured[:4], policy=policy)
    expected_second = {"keep": a, "accept": b, "clip": np.clip(b, space.lower, space.upper)}[policy]
    np.testing.assert_array_equal(r.theta_after[0], a)
    np.testing.assert_array_equal(r.theta_after[1], expected_second)
    np.testing.assert_array_equal(r.theta_after[2], c)
    np.testing.assert_array_equal(r.outside_training_range, [False, True, False, True])
    np.testing.assert_array_equal(r.accepted, [True, policy != "keep", True, policy == "clip"])
    # a failing simulation is never taken; clip moves d1 = -50 to the box (1.5) and simulates
    assert r.simulation_failed[3] and np.all(np.isnan(r.rmse_inferred[3]))
    if policy == "clip":
        np.testing.assert_array_equal(r.theta_after[3], np.clip(failing, space.lower, space.upper))
    else:
        np.testing.assert_array_equal(r.theta_after[3], c)
        np.testing.assert_array_equal(r.rmse_after[3], r.rmse_before[3])
    # before/after bookkeeping of the flagged step
    if policy == "keep":
        np.testing.assert_array_equal(r.rmse_after[1], r.rmse_before[1])
    if policy == "accept":
        np.testing.assert_array_equal(r.rmse_after[1], r.rmse_inferred[1])
    # the online twin takes the same decisions
    twin = DigitalTwin(stub, policy=policy)
    for x in measured[:4]:
        twin.update(x)
    np.testing.assert_array_equal(twin.result().theta_after, r.theta_after)
    np.testing.assert_array_equal(twin.result().accepted, r.accepted)


def test_bad_input(beam, drift, tmp_path):
    _, measured = drift
    stub = StubMapping(beam, [])
    with pytest.raises(ValueError, match=r"unknown policy 'reject'; use one of \('keep', 'accept', 'clip'\)"):
        DigitalTwin(stub, policy="reject")
    with pytest.raises(ValueError, match=r"theta must be 4 finite values \(d1, d2, k1, k2\); got shape \(3,\)"):
        DigitalTwin(stub, np.ones(3))
    twin = DigitalTwin(stub)
    with pytest.raises(ValueError, match=r"must have shape \(n_times=256, n_outputs=2\) each; got \(1, 255, 2\)"):
        twin.update(measured[0][:255])
    bad = measured[0].copy()
    bad[3, 1] = np.nan
    with pytest.raises(ValueError, match=r"measurements \[0\] contain NaN or inf"):
        twin.update(bad)
    with pytest.raises(ValueError, match="theta_true must be 4 finite values"):
        twin.update(measured[0], theta_true=[1.0, 2.0])
    with pytest.raises(ValueError, match=r"theta_true must have shape \(n_steps=2, n_params=4\)"):
        impu_updating(stub, measured[:2], theta_true=np.ones((3, 4)))
    with pytest.raises(ValueError, match="measurements is empty"):
        impu_updating(stub, np.zeros((0, 256, 2)))
    with pytest.raises(ValueError, match="observed at 128 times but the mapping was trained on 256"):
        DigitalTwin(stub, model=beam.with_times(np.asarray(beam.ts)[::2]))
    untrained = types.SimpleNamespace(is_trained=False, infer=None)
    with pytest.raises(ValueError, match="mapping must be a trained InverseMapping"):
        DigitalTwin(untrained)
    data = jcalib.Measurements(beam.ts, measured[0], mask=np.arange(512).reshape(256, 2) != 7)
    with pytest.raises(ValueError, match="measurement 0 has missing entries"):
        impu_updating(stub, [data])
    with pytest.raises(ValueError, match="the true parameters are unknown"):
        twin.result().parameter_errors()
    path = tmp_path / "other.json"
    path.write_text('{"format": "something else"}')
    with pytest.raises(ValueError, match="is not a twin-updating history"):
        TwinUpdatingResult.load(path)


@pytest.mark.slow
def test_a_loaded_mapping_needs_the_model(mapping, beam, tmp_path):
    """A saved mapping keeps no simulator: the twin is told which model to simulate."""
    path = tmp_path / "impu.msgpack"
    mapping.save(path)
    loaded = InverseMapping.load(path)
    assert mapping.simulator is beam and loaded.simulator is None
    with pytest.raises(ValueError, match=r"DigitalTwin: the twin needs a model to simulate; pass model=\.\.\. \(a "
                                         r"loaded mapping keeps no simulator\)"):
        DigitalTwin(loaded)
    twin = DigitalTwin(loaded, model=beam)
    np.testing.assert_array_equal(twin.theta, beam.parameters.nominal)
