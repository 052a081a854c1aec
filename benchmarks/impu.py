"""IMPU timings: online inference latency and throughput, offline data generation and training.

Kessels, Fey & van de Wouw (2023) report for the rigid double beam (§4.2, single 2.60 GHz
core): generating the n_s = 1,000 training samples takes about 3 min, training the network
13 s, and inferring one parameter set from one measurement 3 ms (1.5 ms on the roll-plane
model, §5). The target here is a median of <= 50 µs per single measurement, warm and jitted.
In one run the benchmark

1. **offline, rigid_double_beam**: draws n_s = 1,000 Latin-hypercube training and 1,000
   uniform validation samples, times their simulation (`jcalib.simulate_batch`, the first
   call with compilation and a second warm call on the same samples), adds the paper's noise
   and trains the RI (FBoI) network with the paper's settings (`InverseMapping.fit`;
   the training time is `TrainingResult.wall_time_s`, compilation included, plus the
   feature extraction);
2. **online latency, one measurement** (256 x 2): ``InverseMapping.infer`` (the public call:
   input checks, a jitted call, an `IMPUEstimate`; the result is blocked on) and the bare
   jitted ``InverseMapping.inference_fn()`` (the lowest level: features, scaling, MLP,
   flags) with a device array as input and ``block_until_ready``; ``n_calls`` (>= 1,000)
   timed calls after warm-up, median and percentiles;
3. **throughput**: batches of ``batch`` measurements through both, measurements per second;
4. **roll plane, against the EKF**: an RI network on roll_plane (smaller training set; only
   the timing matters) and the latency of one inference next to the warm time of one
   `jcalib.filters.ekf.run_ekf` over the same measurement (10 updates with
   forward-mode Jacobians through the solves), as a ratio: what a user would otherwise run.

Writes JSON (default results/benchmarks/impu.json) with the machine's core count and load.
``--quick``: 64 training samples, 3 epochs, 200 timed calls (CI smoke run; numbers say
little).

Usage:
    python -m benchmarks.impu [--quick] [--n-calls 2000] [--batch 1000] [--seed 0] [--out PATH]
"""

from __future__ import annotations

import os
import platform
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import jcalib  # noqa: E402
from benchmarks import common  # noqa: E402
from jcalib.filters.ekf import RelativeMeasurementNoise, run_ekf  # noqa: E402
from jcalib.models.roll_plane import NOISE_FLOOR, NOISE_RELATIVE, P_REF  # noqa: E402
from jcalib.nn.impu import InverseMapping, InverseMappingConfig, paper_noise, paper_training  # noqa: E402
from jcalib.nn.training import TrainingConfig  # noqa: E402
from jcalib.probability import add_noise  # noqa: E402

PAPER = {"data_generation_s": 180.0, "training_s": 13.0, "inference_ms_rigid_double_beam": 3.0,
         "inference_ms_roll_plane": 1.5, "machine": "single core 2.60 GHz CPU (Kessels 2023, §4.2)"}
TARGET_MEDIAN_US = 50.0
# full / quick
SETTINGS = {
    "n_train": (1000, 64),  # the paper's n_s
    "n_val": (1000, 32),
    "n_calls": (2000, 200),
    "batch": (1000, 64),
    "batch_repeats": (20, 3),
    "roll_plane_n_train": (300, 64),
    "ekf_repeats": (20, 3),
}


def quick_training() -> TrainingConfig:
    return TrainingConfig(epochs=3, batch_size=16, learning_rate=1e-3, patience=None, progress=False)


def latency(fn, n_calls: int, n_warmup: int = 20) -> dict:
    """Wall time per call of ``fn()`` (which must block on its result) over ``n_calls`` calls
    after ``n_warmup`` untimed ones: median, mean, percentiles, in µs."""
    for _ in range(n_warmup):
        fn()
    times = np.empty(n_calls)
    clock = time.perf_counter
    for i in range(n_calls):
        t = clock()
        fn()
        times[i] = clock() - t
    us = 1e6 * times
    return {"n_calls": n_calls, "median_us": float(np.median(us)), "mean_us": float(us.mean()),
            "min_us": float(us.min()), "p5_us": float(np.percentile(us, 5)), "p95_us": float(np.percentile(us, 95)),
            "p99_us": float(np.percentile(us, 99)), "max_us": float(us.max())}


def throughput(fn, n: int, repeats: int) -> dict:
    """Median seconds of ``fn()`` on a batch of ``n`` measurements, after one warm-up call."""
    first, times, _ = common.time_repeated(fn, repeats)
    median = float(np.median(times))
    return {"batch": n, "first_call_s": first, "median_s": median, "min_s": float(np.min(times)),
            "measurements_per_s": n / median, "per_measurement_us": 1e6 * median / n}


def online(mapping: InverseMapping, one: np.ndarray, batch: np.ndarray, n_calls: int, repeats: int) -> dict:
    """Latency of one measurement and batch throughput, public `infer` and bare jitted fn."""
    fn = mapping.inference_fn()
    one_device = jax.device_put(jnp.asarray(one))
    batch_device = jax.device_put(jnp.asarray(batch))
    t = time.perf_counter()
    jax.block_until_ready(fn(one_device))
    first_bare = time.perf_counter() - t
    t = time.perf_counter()
    jax.block_until_ready(mapping.infer(one).theta)
    first_public = time.perf_counter() - t
    bare = latency(lambda: jax.block_until_ready(fn(one_device)), n_calls)
    public = latency(lambda: jax.block_until_ready(mapping.infer(one).theta), n_calls)
    # the bare function on a NumPy array (host-to-device transfer included)
    bare_numpy = latency(lambda: jax.block_until_ready(fn(one)), n_calls)
    # the floor: a trivial jitted function on the same input (dispatch + synchronisation only)
    trivial = jax.jit(lambda x: x + 1.0)
    floor = latency(lambda: jax.block_until_ready(trivial(one_device)), n_calls)
    return {
        "single": {"inference_fn_device_array": bare, "inference_fn_numpy_input": bare_numpy, "infer": public,
                   "dispatch_floor_trivial_jit": floor,
                   "first_call_s": {"inference_fn": first_bare, "infer": first_public}},
        "batch": {"inference_fn": throughput(lambda: jax.block_until_ready(fn(batch_device)), batch.shape[0], repeats),
                  "infer": throughput(lambda: jax.block_until_ready(mapping.infer(batch).theta), batch.shape[0],
                                      repeats)},
    }


def main(argv=None):
    parser = common.parser(__doc__, "impu", quick_help="tiny training sets, 200 timed calls (CI smoke run)")
    parser.add_argument("--n-calls", type=int, default=None, help="timed single-measurement calls (>= 1,000 full)")
    parser.add_argument("--batch", type=int, default=None, help="measurements per batch for throughput")
    args = common.parse_args(parser, argv)
    s = {k: v[1 if args.quick else 0] for k, v in SETTINGS.items()}
    n_calls = args.n_calls or s["n_calls"]
    n_batch = args.batch or s["batch"]
    load_at_start = common.load_average()
    start = time.perf_counter()
    training = quick_training() if args.quick else paper_training()
    key = jax.random.key(args.seed)
    k_train, k_val, k_noise, k_test, k_rp = jax.random.split(key, 5)
    k_fit = jax.random.fold_in(key, 99)  # the networks' initial weights and shuffling

    # --- 1. offline: rigid double beam, n_s = 1,000 --------------------------------------------
    beam = jcalib.models.get("rigid_double_beam")
    space = beam.parameters
    thetas_train = np.asarray(space.sample(k_train, s["n_train"], "lhs"))
    thetas_val = np.asarray(space.sample(k_val, s["n_val"], "uniform"))
    t = time.perf_counter()
    x_train = jcalib.simulate_batch(beam, thetas_train, progress=False)
    data_first_s = time.perf_counter() - t
    t = time.perf_counter()
    jcalib.simulate_batch(beam, thetas_train, progress=False)
    data_warm_s = time.perf_counter() - t
    t = time.perf_counter()
    x_val = jcalib.simulate_batch(beam, thetas_val, progress=False)
    val_s = time.perf_counter() - t
    noise_std, relative = paper_noise(beam)
    noise_model = "multiplicative" if relative else "additive"  # jcalib.probability.add_noise's noise
    k_n1, k_n2 = jax.random.split(k_noise)
    x_train_noisy = add_noise(k_n1, x_train, noise_std, noise_model)
    x_val_noisy = add_noise(k_n2, x_val, noise_std, noise_model)
    untrained = InverseMapping(beam, InverseMappingConfig(training=training))  # RI (FBoI)
    t = time.perf_counter()
    mapping = untrained.fit(k_fit, thetas_train, x_train_noisy, val=(thetas_val, x_val_noisy))
    fit_s = time.perf_counter() - t
    tr = mapping.training
    print(f"rigid_double_beam: {s['n_train']} training simulations {data_first_s:.2f} s with compile, "
          f"{data_warm_s:.3f} s warm; fit {fit_s:.2f} s ({tr.n_epochs} epochs, training "
          f"{tr.wall_time_s:.2f} s)", flush=True)

    # --- 2./3. online: one measurement and batches ----------------------------------------------
    thetas_test = np.asarray(space.sample(k_test, n_batch, "uniform"))
    x_test = add_noise(jax.random.fold_in(k_test, 1), jcalib.simulate_batch(beam, thetas_test, progress=False),
                       noise_std, noise_model)
    beam_online = online(mapping, x_test[0], x_test, n_calls, s["batch_repeats"])
    accuracy = mapping.evaluate(thetas_test, x_test)
    single = beam_online["single"]
    print(f"  one measurement: inference_fn median {single['inference_fn_device_array']['median_us']:.1f} µs "
          f"(p95 {single['inference_fn_device_array']['p95_us']:.1f}; trivial jit "
          f"{single['dispatch_floor_trivial_jit']['median_us']:.1f}), infer median "
          f"{single['infer']['median_us']:.1f} µs; batch of {n_batch}: "
          f"{beam_online['batch']['inference_fn']['measurements_per_s']:.3g} measurements/s", flush=True)

    # --- 4. roll plane: IMPU inference against one EKF run on the same measurement --------------
    rp = jcalib.models.get("roll_plane")
    k_rp_train, k_rp_val, k_rp_noise, k_rp_meas = jax.random.split(k_rp, 4)
    rp_thetas = np.concatenate([np.asarray(rp.parameters.sample(k_rp_train, s["roll_plane_n_train"], "lhs")),
                                np.asarray(rp.parameters.sample(k_rp_val, s["n_val"] // 4, "uniform"))])
    rp_noise_std, rp_relative = paper_noise(rp)
    rp_x = add_noise(k_rp_noise, jcalib.simulate_batch(rp, rp_thetas, progress=False), rp_noise_std,
                     "multiplicative" if rp_relative else "additive")
    n_rp = s["roll_plane_n_train"]
    rp_mapping = InverseMapping(rp, InverseMappingConfig(feature="RI", training=training)).fit(
        jax.random.fold_in(k_fit, 1), rp_thetas[:n_rp], rp_x[:n_rp], val=(rp_thetas[n_rp:], rp_x[n_rp:]))
    data = jcalib.synthetic_measurements(k_rp_meas, rp, jnp.asarray(P_REF), NOISE_RELATIVE)
    measured = np.asarray(data.values)
    rp_fn = rp_mapping.inference_fn()
    rp_device = jax.device_put(jnp.asarray(measured))
    jax.block_until_ready(rp_fn(rp_device))
    rp_latency = latency(lambda: jax.block_until_ready(rp_fn(rp_device)), n_calls)
    rp_infer = latency(lambda: jax.block_until_ready(rp_mapping.infer(measured).theta), n_calls)
    noise = RelativeMeasurementNoise(relative=NOISE_RELATIVE, floor=NOISE_FLOOR)
    ekf_first = run_ekf(rp, data, rp.parameters.nominal, R=noise)
    ekf_times = [run_ekf(rp, data, rp.parameters.nominal, R=noise).wall_time_s for _ in range(s["ekf_repeats"])]
    ekf_median = float(np.median(ekf_times))
    print(f"roll_plane: inference_fn median {rp_latency['median_us']:.1f} µs, infer {rp_infer['median_us']:.1f} µs; "
          f"one EKF run (10 updates) {1e3 * ekf_median:.2f} ms warm -> ratio "
          f"{1e6 * ekf_median / rp_latency['median_us']:.0f}x", flush=True)

    median_us = single["inference_fn_device_array"]["median_us"]
    report = {
        "benchmark": "impu", "quick": args.quick, "seed": args.seed,
        "target": f"median latency of one jitted inference <= {TARGET_MEDIAN_US:g} µs (paper: 3 ms)",
        "paper": PAPER,
        "rigid_double_beam": {
            "feature": "RI-FBoI", "n_features": mapping.n_features, "hidden": list(mapping.config.hidden),
            "n_times": int(beam.experiment.n_times), "n_outputs": beam.n_outputs,
            "offline": {
                "n_train": s["n_train"], "n_val": s["n_val"],
                "data_generation_s_first_call_with_compile": data_first_s,
                "data_generation_s_warm": data_warm_s,
                "validation_simulation_s": val_s,
                "fit_s": fit_s, "training_s": tr.wall_time_s,
                "features_and_scaling_s": mapping.timings.get("features_s"),
                "epochs": tr.n_epochs, "best_epoch": tr.best_epoch, "stopped_early": tr.stopped_early,
                "training": training.to_dict(),
            },
            "online": beam_online,
            "accuracy_mare_percent": dict(zip(mapping.names, 100 * np.asarray(accuracy.mare))),
        },
        "roll_plane": {
            "feature": "RI", "n_train": n_rp,
            "inference_fn_device_array": rp_latency, "infer": rp_infer,
            "ekf_run_s_first_call_with_compile": ekf_first.wall_time_s,
            "ekf_run_s_warm_median": ekf_median, "ekf_n_updates": int(measured.shape[0]),
            "ekf_estimate": dict(zip(rp.parameters.names, ekf_first.theta)),
            "impu_estimate": dict(zip(rp.parameters.names, np.asarray(rp_mapping.infer(measured).theta))),
        },
        "ratios": {
            "paper_inference_s_over_ours_rigid_double_beam": PAPER["inference_ms_rigid_double_beam"] * 1e3 / median_us,
            "paper_inference_s_over_ours_roll_plane": PAPER["inference_ms_roll_plane"] * 1e3 / rp_latency["median_us"],
            "paper_data_generation_s_over_ours_warm": PAPER["data_generation_s"] / data_warm_s,
            "paper_data_generation_s_over_ours_with_compile": PAPER["data_generation_s"] / data_first_s,
            "paper_training_s_over_ours": PAPER["training_s"] / tr.wall_time_s,
            "ekf_run_over_impu_inference_roll_plane": 1e6 * ekf_median / rp_latency["median_us"],
            "target_met": bool(median_us <= TARGET_MEDIAN_US),
        },
        "machine": common.machine_info(
            load_at_start, processor=platform.processor(),
            cpus_available=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None),
        "wall_time_s": time.perf_counter() - start,
        "notes": "Latencies are wall-clock per call after 20 warm-up calls, each call blocked on its result "
                 "(block_until_ready); dispatch_floor_trivial_jit is jit(x + 1) on the same input, the cost of "
                 "any jitted call here. inference_fn is InverseMapping.inference_fn(): FFT features, min-max "
                 "scaling, the MLP and the outside-range flags in one jitted XLA call; infer adds input checks, "
                 "the NumPy-to-device transfer and an IMPUEstimate. data_generation_s_warm re-simulates the "
                 "same 1,000 samples with the compiled solver (compile time = first call - warm). The machine is "
                 "shared with other jobs: see the load averages.",
    }
    print(f"target {TARGET_MEDIAN_US:g} µs median: {'met' if report['ratios']['target_met'] else 'missed'} "
          f"({median_us:.1f} µs)", flush=True)
    return common.write_report(args.out, report)


if __name__ == "__main__":
    main()
