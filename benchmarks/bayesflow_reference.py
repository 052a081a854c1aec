"""The reference side of benchmarks/bayesflow.py: the `bayesflow` library (2.x, Keras 3 on JAX).

Run by benchmarks/bayesflow.py with the python of its own virtual environment (bayesflow and
keras are not dependencies of jcalib); it does not import jcalib. It reads the simulations the
parent wrote (``--data``, an .npz with ``theta_train`` (n_train, n_params), ``x_train``
(n_train, n_times, n_outputs), ``x_obs`` (n_obs, n_times, n_outputs)) and the settings
(``--settings``, JSON), then

1. builds a `bayesflow.approximators.ContinuousApproximator` with a
   `bayesflow.networks.CouplingFlow` (``depth`` dual coupling layers of affine couplings,
   each coupling's subnet an MLP of ``widths``) and the summary network of jcalib's of the same
   name (``summary`` in the settings), layer for layer, each a `bayesflow.networks.SummaryNetwork`:
   ``"lstm"`` (`LSTMSummary`): one LSTM layer of ``summary_hidden`` units whose final state goes
   through a dense layer to ``summary_size`` summary statistics; ``"conv"`` (`ConvSummary`): two
   Conv1D layers of ``summary_hidden`` channels (kernel 5 then 3, stride 2, "same" padding, ReLU),
   the mean over time and a dense layer to ``summary_size`` (bayesflow's own TimeSeriesNetwork
   adds a convolutional stem and a bidirectional skip-GRU, so it would not be the same size).
   Both the parameters and the series are standardized by bayesflow
   (``standardize=("inference_variables", "summary_variables")``);
2. trains it with Adam (``learning_rate``, constant) for ``epochs`` epochs of minibatches of
   ``batch_size`` (`bayesflow.datasets.OfflineDataset`, shuffled; ``n_train`` is a multiple of
   the batch size so no epoch ends with a partial batch), timing every epoch with a Keras callback
   (``on_epoch_begin`` to ``on_epoch_end``, after which Keras has fetched the epoch's losses);
   the throughput is ``n_train * (epochs - 1) / (seconds of epochs 2..epochs)``: the first epoch
   (tracing and compilation of the train step) is excluded, as jcalib's
   `TrainingResult.samples_per_second` excludes its first epoch. The process CPU time of every
   epoch is recorded too (`time.process_time`, all threads), a measure of the work done that
   depends less on other processes sharing the machine;
3. draws ``n_samples`` posterior samples for each of the ``n_obs`` observations with
   ``approximator.sample(num_samples=..., conditions={"x": x_obs})``, timing the first call
   and ``repeats`` further calls (median);
4. writes the timings to ``--out`` (JSON) and the posterior draws of the last call to
   ``--samples-out`` (.npz, ``samples`` (n_obs, n_samples, n_params)) for the parent's SBC.

Usage (normally through ``python -m benchmarks.bayesflow``):
    KERAS_BACKEND=jax python benchmarks/bayesflow_reference.py --data D.npz --settings S.json \
        --out R.json --samples-out P.npz
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "jax")
# this script's folder holds benchmarks/bayesflow.py, which would shadow the bayesflow library
_HERE = pathlib.Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if pathlib.Path(p or ".").resolve() != _HERE]

import numpy as np  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=pathlib.Path, required=True)
    parser.add_argument("--settings", type=pathlib.Path, required=True)
    parser.add_argument("--out", type=pathlib.Path, required=True)
    parser.add_argument("--samples-out", type=pathlib.Path, required=True)
    args = parser.parse_args(argv)
    s = json.loads(args.settings.read_text())
    load_at_start = list(os.getloadavg())
    t_import = time.perf_counter()
    import bayesflow as bf
    import jax
    import keras
    import_s = time.perf_counter() - t_import
    if keras.backend.backend() != "jax":
        raise SystemExit(f"bayesflow_reference: Keras runs on {keras.backend.backend()!r}, not 'jax'; "
                         "set KERAS_BACKEND=jax")
    keras.utils.set_random_seed(int(s["seed"]))

    data = np.load(args.data)
    theta_train = data["theta_train"].astype(np.float32)
    x_train = data["x_train"].astype(np.float32)
    x_obs = data["x_obs"].astype(np.float32)
    n_train, batch_size = theta_train.shape[0], int(s["batch_size"])

    class LSTMSummary(bf.networks.SummaryNetwork):
        """One LSTM layer over time, its final hidden state projected to the summary."""

        def __init__(self, hidden: int, summary_dim: int, **kwargs):
            super().__init__(**kwargs)
            self.lstm = keras.layers.LSTM(hidden)
            self.projector = keras.layers.Dense(summary_dim)

        def call(self, x, training: bool = False, **kwargs):
            return self.projector(self.lstm(x, training=training))

    class ConvSummary(bf.networks.SummaryNetwork):
        """jcalib's "conv" summary: two strided 1-D convolutions with ReLU, mean over time, a dense map."""

        def __init__(self, hidden: int, summary_dim: int, **kwargs):
            super().__init__(**kwargs)
            self.conv1 = keras.layers.Conv1D(hidden, 5, strides=2, padding="same", activation="relu")
            self.conv2 = keras.layers.Conv1D(hidden, 3, strides=2, padding="same", activation="relu")
            self.pool = keras.layers.GlobalAveragePooling1D()
            self.projector = keras.layers.Dense(summary_dim)

        def call(self, x, training: bool = False, **kwargs):
            return self.projector(self.pool(self.conv2(self.conv1(x))))

    summaries = {"lstm": (LSTMSummary, f"LSTM({s['summary_hidden']}) -> Dense({s['summary_size']})"),
                 "conv": (ConvSummary, f"Conv1D({s['summary_hidden']}, kernel 5, stride 2, same, ReLU) -> Conv1D("
                                       f"{s['summary_hidden']}, kernel 3, stride 2, same, ReLU) -> mean over time -> "
                                       f"Dense({s['summary_size']})")}
    kind = s.get("summary", "lstm")
    if kind not in summaries:
        raise SystemExit(f"bayesflow_reference: unknown summary network {kind!r}; known: {', '.join(summaries)}")
    summary_type, summary_text = summaries[kind]

    flow = bf.networks.CouplingFlow(
        depth=int(s["depth"]), transform="affine", permutation=s["permutation"], use_actnorm=bool(s["actnorm"]),
        subnet_kwargs={"widths": tuple(s["coupling_hidden"]), "dropout": s["dropout"]})
    summary = summary_type(int(s["summary_hidden"]), int(s["summary_size"]))
    adapter = (bf.Adapter()
               .convert_dtype("float64", "float32")
               .rename("theta", "inference_variables")
               .rename("x", "summary_variables"))
    approximator = bf.approximators.ContinuousApproximator(
        inference_network=flow, summary_network=summary, adapter=adapter,
        standardize=("inference_variables", "summary_variables"))
    approximator.compile(optimizer=keras.optimizers.Adam(learning_rate=float(s["learning_rate"])))
    dataset = bf.datasets.OfflineDataset(data={"theta": theta_train, "x": x_train}, batch_size=batch_size,
                                         adapter=adapter, shuffle=True)

    class EpochTimer(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.times, self.cpu_times, self.losses = [], [], []

        def on_epoch_begin(self, epoch, logs=None):
            self.start, self.cpu_start = time.perf_counter(), time.process_time()

        def on_epoch_end(self, epoch, logs=None):
            self.times.append(time.perf_counter() - self.start)
            self.cpu_times.append(time.process_time() - self.cpu_start)
            self.losses.append(float((logs or {}).get("loss", np.nan)))

    timer = EpochTimer()
    t = time.perf_counter()
    approximator.fit(dataset=dataset, epochs=int(s["epochs"]), verbose=0, callbacks=[timer])
    train_wall_s = time.perf_counter() - t
    n_weights = int(sum(np.prod(w.shape) for w in approximator.trainable_weights))
    n_summary_weights = int(sum(np.prod(w.shape) for w in summary.trainable_weights))
    timed = timer.times[1:]
    samples_per_second = n_train * len(timed) / sum(timed) if timed else float("nan")
    timed_cpu = timer.cpu_times[1:]

    def draw():
        return approximator.sample(num_samples=int(s["n_samples"]), conditions={"x": x_obs})["theta"]

    t = time.perf_counter()
    samples = np.asarray(draw())
    first_s = time.perf_counter() - t
    times = []
    for _ in range(int(s["repeats"])):
        t = time.perf_counter()
        samples = np.asarray(draw())
        times.append(time.perf_counter() - t)
    if samples.shape != (x_obs.shape[0], int(s["n_samples"]), theta_train.shape[1]):
        raise SystemExit(f"bayesflow_reference: unexpected sample shape {samples.shape}")
    np.savez(args.samples_out, samples=samples.astype(np.float32))

    warm = float(np.median(times)) if times else first_s
    report = {
        "library": "bayesflow",
        "configuration": {"summary": kind, "batch_size": batch_size, "n_train": n_train},
        "versions": {"bayesflow": bf.__version__, "keras": keras.__version__, "jax": jax.__version__,
                     "numpy": np.__version__, "python": platform.python_version()},
        "keras_backend": keras.backend.backend(),
        "devices": [str(d) for d in jax.devices()],
        "import_s": import_s,
        "network": {"inference": "CouplingFlow", "depth_dual_couplings": int(s["depth"]),
                    "n_coupling_subnets": 2 * int(s["depth"]), "coupling_hidden": list(s["coupling_hidden"]),
                    "transform": "affine", "permutation": s["permutation"], "actnorm": bool(s["actnorm"]),
                    "dropout": s["dropout"], "summary_network": kind, "summary": summary_text,
                    "n_weights": n_weights, "n_summary_weights": n_summary_weights},
        "training": {"n_train": n_train, "epochs": len(timer.times), "batch_size": batch_size,
                     "learning_rate": float(s["learning_rate"]), "wall_s": train_wall_s,
                     "epoch_time_s": timer.times, "loss": timer.losses,
                     "samples_per_second": samples_per_second,
                     "samples_per_second_median_epoch": n_train / float(np.median(timed)) if timed else float("nan"),
                     "samples_per_second_best_epoch": n_train / min(timed) if timed else float("nan"),
                     "epoch_cpu_s": timer.cpu_times,
                     "samples_per_cpu_second": n_train * len(timed_cpu) / sum(timed_cpu) if timed else float("nan"),
                     "median_epoch_s": float(np.median(timed)) if timed else float("nan"),
                     "first_epoch_s": timer.times[0]},
        "sampling": {"n_obs": int(x_obs.shape[0]), "n_samples": int(s["n_samples"]), "first_call_s": first_s,
                     "median_s": warm, "times_s": times, "compile_s_estimate": max(first_s - warm, 0.0),
                     "all_finite": bool(np.all(np.isfinite(samples)))},
        "load_average_at_start": load_at_start,
        "load_average_at_end": list(os.getloadavg()),
    }
    args.out.write_text(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
