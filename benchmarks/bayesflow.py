"""Amortized posterior: jcalib's coupling flow versus the `bayesflow` library (2.x on JAX).

Target: at least 1.5x the training throughput (samples/s) of the `bayesflow` library with a
coupling flow and a summary network of the same size. A *configuration* is a summary network
(``lstm`` or ``conv``, the same architecture on both sides) and a batch size; one run measures
one or several configurations (``--configs lstm:64,conv:256``), each on both sides, on the same
data. For every configuration the benchmark

1. simulates a damped oscillator in NumPy (`simulate`: 4 parameters drawn uniformly from
   their bounds, 50 times x 2 outputs, Gaussian noise): ``n_train`` training simulations
   and ``n_obs`` = 400 held-out ones (the "observations"), saved to an .npz that both sides
   read, so they train on the same data;
2. **bayesflow** (unless ``--no-reference``): creates, if missing, a virtual environment
   (default results/benchmarks/bayesflow-venv) with ``bayesflow``, ``keras`` and the same
   ``jax`` version as jcalib's (pins in `REFERENCE_REQUIREMENTS`), then runs
   benchmarks/bayesflow_reference.py in it with ``KERAS_BACKEND=jax``: a
   `bayesflow.networks.CouplingFlow` (``n_blocks`` dual couplings = ``2 n_blocks`` affine
   coupling MLPs of ``coupling_hidden``, no dropout, no ActNorm) with the configuration's
   summary network, trained by Adam for the same epochs and batch size on the same data.
   ``lstm``: one LSTM layer of ``summary_hidden`` units, its final state -> dense
   ``summary_size``; ``conv``: Conv1D(``summary_hidden``, kernel 5, stride 2, "same", ReLU) ->
   Conv1D(``summary_hidden``, kernel 3, stride 2, "same", ReLU) -> mean over time -> dense
   ``summary_size`` (jcalib's ``"conv"`` summary network, layer for layer);
3. **jcalib**: `AmortizedPosterior` with the same sizes (``summary="lstm"`` or ``"conv"``,
   ``n_blocks`` coupling blocks of two affine coupling steps each, ``coupling_hidden``), same
   optimizer settings, epochs and batch size;
4. for each side: training throughput in samples/s over the epochs after the first (the first
   epoch traces and compiles the train step on both sides, and is excluded on both; no
   validation set on either side, so an epoch is training only); the time to draw
   ``n_samples`` = 1,000 posterior samples for each of the 400 held-out observations (the
   first call, which compiles, and the median of ``repeats`` further calls; the samples are
   returned as NumPy arrays on both sides); simulation-based calibration (SBC, Talts et al.
   2018) on those same draws: the rank of each true parameter among its 1,000 draws, and a
   chi-square test of the rank histogram per parameter and the 95 % simultaneous ECDF band
   (`jcalib.bayes.sbc.sbc_result`, applied to both sides' draws);
5. ratios: jcalib / bayesflow training throughput (target >= 1.5) and bayesflow / jcalib
   sampling time.

The two sides of a configuration run one after the other, never at the same time, and the
configurations one after another (the reference side first), so both sides of a ratio see about
the same machine load. Writes JSON (default results/benchmarks/bayesflow.json): ``runs`` (per
configuration both sides and the ratios), ``table`` (one row per configuration) and ``best``
(the configuration with the highest training-throughput ratio). ``--quick`` uses a tiny problem
and network (CI smoke run; its numbers say little). The reference side takes a minute or
two more for the first installation (pip reaches PyPI) and about 10 s to import.

Usage:
    python -m benchmarks.bayesflow [--quick] [--no-reference] [--n-train N] [--epochs E]
        [--summary lstm|conv] [--batch-size B] [--configs SUMMARY:B,...] [--repeats R] [--seed S]
        [--venv PATH] [--out PATH]
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

from benchmarks import common  # noqa: E402
from jcalib.bayes.sbc import rank_histogram, sbc_ranks, sbc_result  # noqa: E402
from jcalib.model import FunctionSimulator  # noqa: E402
from jcalib.nn import training as _training_module  # noqa: E402
from jcalib.nn.bayesflow import AmortizedPosterior, BayesFlowConfig  # noqa: E402
from jcalib.nn.training import TrainingConfig  # noqa: E402
from jcalib.parameters import Parameter, ParameterSpace  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
WORKER = ROOT / "benchmarks" / "bayesflow_reference.py"
DEFAULT_VENV = ROOT / "results" / "benchmarks" / "bayesflow-venv"
# versions that install and run together on CPython 3.11 (bayesflow 2.0.12 needs keras >= 3.9);
# jax is pinned to jcalib's own version at run time, so both sides use the same XLA.
REFERENCE_REQUIREMENTS = ("bayesflow==2.0.12", "keras==3.15.1")
TARGET_THROUGHPUT_RATIO = 1.5
SUMMARY_NETWORKS = ("lstm", "conv")  # built layer for layer on both sides (bayesflow_reference.py)
SBC_ALPHA = 0.01  # an SBC check passes with a chi-square p-value above this and the ECDF inside its band

# the damped oscillator: y1 = A e^{-ζωt} cos(ω_d t + φ), y2 = A e^{-ζωt} sin(ω_d t + φ), ω_d = ω sqrt(1 - ζ²)
SPACE = ParameterSpace([
    Parameter("omega", 1.2, 0.5, 2.0, "rad/s"),
    Parameter("zeta", 0.2, 0.05, 0.5),
    Parameter("amplitude", 1.0, 0.5, 2.0),
    Parameter("phase", 0.75, 0.0, 1.5, "rad"),
])
NOISE_SIGMA = 0.1
T_END = 10.0

# full / quick
SETTINGS = {
    "n_train": (10240, 256),  # a multiple of the batch size: no partial batch on either side
    "n_obs": (400, 32),
    "n_samples": (1000, 100),
    "n_times": (50, 20),
    "epochs": (10, 3),
    "batch_size": (64, 64),
    "repeats": (2, 1),
    "summary_hidden": (64, 16),
    "summary_size": (32, 8),
    "n_blocks": (6, 2),
    "coupling_hidden": ((128, 128), (32, 32)),
}
LEARNING_RATE = 1e-3


def simulate(rng: np.random.Generator, thetas: np.ndarray, n_times: int) -> np.ndarray:
    """Noisy damped-oscillator series ``(n, n_times, 2)`` for ``thetas`` ``(n, 4)`` (float64)."""
    t = np.linspace(0.0, T_END, n_times)
    omega, zeta, amplitude, phase = (thetas[:, i:i + 1] for i in range(4))
    envelope = amplitude * np.exp(-zeta * omega * t)
    angle = omega * np.sqrt(1.0 - zeta**2) * t + phase
    clean = np.stack([envelope * np.cos(angle), envelope * np.sin(angle)], axis=-1)
    return clean + NOISE_SIGMA * rng.standard_normal(clean.shape)


def prior_samples(rng: np.random.Generator, n: int) -> np.ndarray:
    return SPACE.lower + (SPACE.upper - SPACE.lower) * rng.uniform(size=(n, SPACE.n_params))


def ensure_reference_venv(venv: pathlib.Path) -> tuple[pathlib.Path, dict]:
    """The venv's python, creating the venv and installing bayesflow when it lacks them.

    Returns the interpreter and what was done (``installed``, the seconds it took, the pins).
    Raises RuntimeError with pip's output when the installation fails.
    """
    python = venv / "bin" / "python"
    requirements = [*REFERENCE_REQUIREMENTS, f"jax[cpu]=={jax.__version__}"]
    check = [str(python), "-c", "import bayesflow, keras, jax; print(bayesflow.__version__, keras.__version__, "
             "jax.__version__)"]
    if python.exists() and subprocess.run(check, capture_output=True, env=_reference_env()).returncode == 0:
        return python, {"installed": False, "requirements": requirements}
    t = time.perf_counter()
    steps = [[sys.executable, "-m", "venv", str(venv)],
             [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *requirements]]
    for cmd in steps:
        print("  $ " + " ".join(cmd), flush=True)
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}):\n{(done.stdout + done.stderr)[-4000:]}")
    done = subprocess.run(check, capture_output=True, text=True, env=_reference_env())
    if done.returncode != 0:
        raise RuntimeError(f"bayesflow does not import after installation:\n{done.stderr[-4000:]}")
    return python, {"installed": True, "install_s": time.perf_counter() - t, "requirements": requirements,
                    "versions": done.stdout.strip()}


def _reference_env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_PYTHON"))}
    env |= {"KERAS_BACKEND": "jax", "TQDM_DISABLE": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}
    return env


def run_reference(python: pathlib.Path, data_path: pathlib.Path, settings: dict, workdir: pathlib.Path):
    """Run the worker in the reference venv; its report and posterior draws."""
    settings_path, out, samples_out = (workdir / "settings.json", workdir / "reference.json",
                                       workdir / "reference_samples.npz")
    settings_path.write_text(json.dumps(settings))
    cmd = [str(python), str(WORKER), "--data", str(data_path), "--settings", str(settings_path), "--out", str(out),
           "--samples-out", str(samples_out)]
    t = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=_reference_env(), cwd=ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"the bayesflow worker failed ({done.returncode}):\n{done.stderr[-4000:]}")
    report = json.loads(out.read_text())
    report["process_wall_s"] = time.perf_counter() - t
    return report, np.load(samples_out)["samples"]


class _EpochCPUClock:
    """Stands in for `jcalib.nn.training`'s progress bar (``TrainingConfig(progress=True)``) to
    record the process CPU time (`time.process_time`, all threads) between its per-epoch
    ``update`` calls: the CPU seconds of every epoch, the counterpart of the Keras callback of
    the reference side. Prints nothing."""

    marks: list = []

    def __init__(self, *args, **kwargs):
        _EpochCPUClock.marks = [time.process_time()]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def update(self, n=1):
        _EpochCPUClock.marks.append(time.process_time())

    def set_postfix(self, *args, **kwargs):
        pass

    @classmethod
    def epoch_cpu_s(cls) -> list[float]:
        return np.diff(cls.marks).tolist()


def fit_with_cpu_clock(posterior, *args):
    """``posterior.fit(*args)`` with `_EpochCPUClock` as the training loop's progress bar."""
    saved = _training_module.tqdm
    _training_module.tqdm = _EpochCPUClock
    try:
        return posterior.fit(*args)
    finally:
        _training_module.tqdm = saved


def sbc_summary(samples: np.ndarray, thetas: np.ndarray) -> dict:
    """SBC of the posterior draws ``(n_obs, n_samples, n_params)`` against the true parameters:
    chi-square p-values of the rank histograms, whether each rank ECDF stays in its 95 %
    simultaneous band, and pass (p > 0.01 and in the band) per parameter."""
    result = sbc_result(jax.random.key(0), sbc_ranks(samples, thetas), samples.shape[1], SPACE.names)
    d = {k: v for k, v in result.to_dict().items() if k != "ranks"}
    passed = result.passed(SBC_ALPHA)
    return d | {"alpha": SBC_ALPHA, "passed": dict(zip(SPACE.names, passed.tolist())),
                "all_passed": bool(np.all(passed)), "ranks_shape": list(result.ranks.shape),
                "rank_histogram": rank_histogram(result.ranks, result.n_draws, result.n_bins)[0].T.tolist()}


def parse_configurations(text: str) -> list[dict]:
    """``"lstm:64,conv:256"`` -> ``[{"summary": "lstm", "batch_size": 64}, ...]``.

    Raises:
        ValueError: an entry that is not ``SUMMARY:BATCH``, an unknown summary network, a batch
            size below 1 or a configuration given twice.
    """
    configurations = []
    for entry in (e.strip() for e in text.split(",")):
        summary, sep, batch = entry.partition(":")
        if not sep or not batch.strip().isdigit():
            raise ValueError(f"bayesflow benchmark: --configs entries are SUMMARY:BATCH_SIZE, e.g. lstm:64; got "
                             f"{entry!r}")
        configurations.append(_configuration(summary.strip(), int(batch)))
    seen = [(c["summary"], c["batch_size"]) for c in configurations]
    if len(set(seen)) != len(seen):
        raise ValueError(f"bayesflow benchmark: --configs lists a configuration twice: {text!r}")
    return configurations


def _configuration(summary: str, batch_size: int) -> dict:
    if summary not in SUMMARY_NETWORKS:
        raise ValueError(f"bayesflow benchmark: unknown summary network {summary!r}; known: "
                         f"{', '.join(SUMMARY_NETWORKS)}")
    if batch_size < 1:
        raise ValueError(f"bayesflow benchmark: the batch size must be at least 1; got {batch_size}")
    return {"summary": summary, "batch_size": int(batch_size)}


def summary_description(summary: str, hidden: int, size: int) -> str:
    """The summary network in words, the same on both sides."""
    if summary == "lstm":
        return f"LSTM({hidden}) -> Dense({size})"
    return (f"Conv1D({hidden}, kernel 5, stride 2, same, ReLU) -> Conv1D({hidden}, kernel 3, stride 2, same, ReLU) "
            f"-> mean over time -> Dense({size})")


def run_jcalib(s: dict, configuration: dict, seed: int, theta_train, x_train, x_obs):
    """Train and sample jcalib's `AmortizedPosterior` for one configuration; its report and draws."""
    batch_size, n_train = configuration["batch_size"], configuration["n_train"]
    config = BayesFlowConfig(
        summary=configuration["summary"], summary_size=s["summary_size"], summary_hidden=s["summary_hidden"],
        n_blocks=s["n_blocks"], coupling_hidden=tuple(s["coupling_hidden"]), actnorm=False,
        training=TrainingConfig(epochs=s["epochs"], batch_size=batch_size, learning_rate=LEARNING_RATE,
                                schedule="constant", progress=True))  # the CPU clock, silent
    # the data come from NumPy: a FunctionSimulator only describes their space and shape
    description = FunctionSimulator(lambda theta: jnp.zeros((s["n_times"], 2)), SPACE, ("x", "v"),
                                    ts=np.linspace(0.0, T_END, s["n_times"]))
    t = time.perf_counter()
    posterior = fit_with_cpu_clock(AmortizedPosterior(description, config), jax.random.key(seed),
                                   theta_train[:n_train], x_train[:n_train])
    train_wall_s = time.perf_counter() - t
    tr = posterior.training
    epoch_times = list(tr.history["epoch_time_s"])
    epoch_cpu = _EpochCPUClock.epoch_cpu_s()
    key = jax.random.key(seed)
    first, times, samples = common.time_repeated(
        lambda: np.asarray(posterior.sample(key, x_obs, s["n_samples"])), s["repeats"])
    warm = float(np.median(times)) if times else first
    ours = {
        "library": "jcalib",
        "configuration": configuration,
        "network": {"summary_network": configuration["summary"],
                    "summary": summary_description(configuration["summary"], s["summary_hidden"], s["summary_size"]),
                    "n_blocks": s["n_blocks"], "n_coupling_subnets": 2 * s["n_blocks"],
                    "coupling_hidden": list(s["coupling_hidden"]), "actnorm": False,
                    "n_weights": _n_weights(posterior),
                    "n_summary_weights": int(sum(np.size(w) for w in jax.tree_util.tree_leaves(
                        nnx.state(posterior.network.summary, nnx.Param))))},
        "training": {"n_train": n_train, "epochs": tr.n_epochs, "batch_size": batch_size,
                     "learning_rate": LEARNING_RATE, "wall_s": train_wall_s, "epoch_time_s": epoch_times,
                     "loss": list(tr.history["train_loss"]), "samples_per_second": tr.samples_per_second,
                     "samples_per_second_median_epoch": n_train / float(np.median(epoch_times[1:])),
                     "samples_per_second_best_epoch": n_train / min(epoch_times[1:]),
                     "epoch_cpu_s": epoch_cpu,
                     "samples_per_cpu_second": n_train * len(epoch_cpu[1:]) / sum(epoch_cpu[1:]),
                     "median_epoch_s": float(np.median(epoch_times[1:])), "first_epoch_s": epoch_times[0]},
        "sampling": {"n_obs": s["n_obs"], "n_samples": s["n_samples"], "first_call_s": first, "median_s": warm,
                     "times_s": times, "compile_s_estimate": max(first - warm, 0.0),
                     "all_finite": bool(np.all(np.isfinite(samples)))},
    }
    return ours, samples


def throughput_ratios(ours: dict, reference: dict) -> dict:
    """jcalib / bayesflow training throughputs and bayesflow / jcalib sampling times."""
    a, b = ours["training"], reference["training"]
    r_train = a["samples_per_second"] / b["samples_per_second"]
    return {"training_throughput_jcalib_over_bayesflow": r_train,
            "training_throughput_median_epoch_jcalib_over_bayesflow":
                a["samples_per_second_median_epoch"] / b["samples_per_second_median_epoch"],
            "training_throughput_best_epoch_jcalib_over_bayesflow":
                a["samples_per_second_best_epoch"] / b["samples_per_second_best_epoch"],
            "training_samples_per_cpu_second_jcalib_over_bayesflow":
                a["samples_per_cpu_second"] / b["samples_per_cpu_second"],
            "sampling_time_bayesflow_over_jcalib": reference["sampling"]["median_s"] / ours["sampling"]["median_s"],
            "sampling_first_call_bayesflow_over_jcalib":
                reference["sampling"]["first_call_s"] / ours["sampling"]["first_call_s"],
            "target_met": bool(r_train >= TARGET_THROUGHPUT_RATIO)}


def main(argv=None):
    parser = common.parser(__doc__, "bayesflow", quick_help="tiny problem and network (CI smoke run)")
    parser.add_argument("--no-reference", action="store_true", help="skip the bayesflow side (no installation)")
    parser.add_argument("--n-train", type=int, default=None, help="training simulations (rounded down to a "
                        "multiple of the batch size)")
    parser.add_argument("--epochs", type=int, default=None)
    parser.add_argument("--summary", default=None, help=f"summary network, one of {', '.join(SUMMARY_NETWORKS)} "
                        "(default lstm), the same on both sides")
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--configs", default=None, help="several configurations SUMMARY:BATCH_SIZE, comma-separated "
                        "(e.g. lstm:64,lstm:256,conv:64,conv:256), measured one after another in one run; replaces "
                        "--summary and --batch-size")
    parser.add_argument("--repeats", type=int, default=None, help="warm timed sampling calls")
    parser.add_argument("--venv", type=pathlib.Path, default=DEFAULT_VENV, help="the bayesflow virtual environment")
    args = common.parse_args(parser, argv)
    s = {k: v[1 if args.quick else 0] for k, v in SETTINGS.items()}
    for name in ("n_train", "epochs", "batch_size", "repeats"):
        if getattr(args, name) is not None:
            s[name] = getattr(args, name)
    if args.configs is not None:
        if args.batch_size is not None or args.summary is not None:
            raise ValueError("bayesflow benchmark: give either --configs or --summary/--batch-size, not both")
        configurations = parse_configurations(args.configs)
    else:
        configurations = [_configuration(args.summary or "lstm", s["batch_size"])]
    del s["batch_size"]  # per configuration
    if s["epochs"] < 2 or s["repeats"] < 0:
        raise ValueError(f"bayesflow benchmark: need --epochs >= 2 (the first epoch compiles and is not timed) "
                         f"and --repeats >= 0; got {s['epochs']}, {s['repeats']}")
    for c in configurations:
        c["n_train"] = (s["n_train"] // c["batch_size"]) * c["batch_size"]
        if c["n_train"] < c["batch_size"]:
            raise ValueError(f"bayesflow benchmark: --n-train must be at least the batch size {c['batch_size']}; "
                             f"got {s['n_train']}")
    load_at_start = common.load_average()

    rng = np.random.default_rng(args.seed)
    theta_train = prior_samples(rng, s["n_train"])
    x_train = simulate(rng, theta_train, s["n_times"])
    theta_obs = prior_samples(rng, s["n_obs"])
    x_obs = simulate(rng, theta_obs, s["n_times"])
    print(f"damped oscillator: {SPACE.n_params} parameters, {s['n_times']} times x 2 outputs; "
          f"{s['n_train']} training and {s['n_obs']} held-out simulations; configurations "
          + ", ".join(f"{c['summary']}:{c['batch_size']}" for c in configurations), flush=True)

    runs, python, install = [], None, None
    with tempfile.TemporaryDirectory(prefix="jcalib-bayesflow-") as tmp:
        tmp = pathlib.Path(tmp)
        for c in configurations:
            label = f"{c['summary']}:{c['batch_size']}"
            reference, reference_samples = None, None
            if not args.no_reference:
                data_path = tmp / "data.npz"
                np.savez(data_path, theta_train=theta_train[:c["n_train"]], x_train=x_train[:c["n_train"]],
                         x_obs=x_obs)
                ref_settings = {"seed": args.seed, "summary": c["summary"], "batch_size": c["batch_size"],
                                "epochs": s["epochs"], "learning_rate": LEARNING_RATE, "depth": s["n_blocks"],
                                "coupling_hidden": list(s["coupling_hidden"]), "dropout": 0.0, "actnorm": False,
                                "permutation": "random", "summary_hidden": s["summary_hidden"],
                                "summary_size": s["summary_size"], "n_samples": s["n_samples"],
                                "repeats": s["repeats"]}
                try:
                    if python is None:
                        python, install = ensure_reference_venv(args.venv)
                        print(f"bayesflow venv {args.venv} ({'installed' if install['installed'] else 'present'})",
                              flush=True)
                    reference, reference_samples = run_reference(python, data_path, ref_settings, tmp)
                    reference["environment"] = install | {"venv": str(args.venv)}
                except RuntimeError as err:
                    reference = {"error": str(err)}
                    print(f"{label}: bayesflow side failed:\n{err}", flush=True)

            ours, samples = run_jcalib(s, c, args.seed, theta_train, x_train, x_obs)
            ours["sbc"] = sbc_summary(samples, theta_obs)
            print(f"{label} jcalib: {ours['training']['samples_per_second']:.0f} samples/s (median epoch "
                  f"{ours['training']['median_epoch_s']:.2f} s); {s['n_samples']} draws x {s['n_obs']} observations "
                  f"in {ours['sampling']['median_s']:.2f} s (first call {ours['sampling']['first_call_s']:.2f} s)",
                  flush=True)
            ratios = {"target_training_throughput_ratio": TARGET_THROUGHPUT_RATIO}
            if reference is not None and "error" not in reference:
                reference["sbc"] = sbc_summary(reference_samples, theta_obs)
                ratios |= throughput_ratios(ours, reference)
                print(f"{label} bayesflow {reference['versions']['bayesflow']} (keras {reference['versions']['keras']}"
                      f", jax {reference['versions']['jax']}): {reference['training']['samples_per_second']:.0f} "
                      f"samples/s; sampling {reference['sampling']['median_s']:.2f} s (first call "
                      f"{reference['sampling']['first_call_s']:.2f} s)", flush=True)
                print(f"{label} ratios: training throughput jcalib/bayesflow "
                      f"{ratios['training_throughput_jcalib_over_bayesflow']:.2f} (target >= "
                      f"{TARGET_THROUGHPUT_RATIO}: {'met' if ratios['target_met'] else 'missed'}); sampling time "
                      f"bayesflow/jcalib {ratios['sampling_time_bayesflow_over_jcalib']:.2f}; per CPU second "
                      f"{ratios['training_samples_per_cpu_second_jcalib_over_bayesflow']:.2f}, best epochs "
                      f"{ratios['training_throughput_best_epoch_jcalib_over_bayesflow']:.2f}", flush=True)
            runs.append({"configuration": c, "jcalib": ours,
                         "bayesflow": reference if reference is not None else {"skipped": "--no-reference"},
                         "ratios": ratios, "load_average_after": common.load_average()})

    table = [_table_row(run) for run in runs]
    measured = [row for row in table if row["ratio"] is not None]
    best = max(measured, key=lambda row: row["ratio"]) if measured else None
    report = {
        "benchmark": "bayesflow",
        "quick": args.quick,
        "target": f"jcalib's training throughput >= {TARGET_THROUGHPUT_RATIO}x the bayesflow library's (2.x, JAX "
                  "backend) with a coupling flow and a summary network of the same size",
        "problem": {"name": "damped oscillator (NumPy)", "parameters": list(SPACE.names),
                    "lower": SPACE.lower, "upper": SPACE.upper, "prior": "uniform on the bounds",
                    "n_params": SPACE.n_params, "n_times": s["n_times"], "n_outputs": 2, "t_end": T_END,
                    "noise_sigma": NOISE_SIGMA, "n_train": s["n_train"], "n_obs": s["n_obs"],
                    "n_samples": s["n_samples"], "seed": args.seed},
        "settings": {**s, "learning_rate": LEARNING_RATE, "optimizer": "Adam, constant learning rate",
                     "validation": None},
        "configurations": configurations,
        "runs": runs,
        "table": table,
        "best": best,
        "target_met": None if best is None else bool(best["ratio"] >= TARGET_THROUGHPUT_RATIO),
        "machine": common.machine_info(load_at_start),
        "notes": "Training throughput counts the samples of epochs 2..E over their wall time (epoch 1 includes "
                 "tracing and compilation on both sides; jcalib: TrainingResult.samples_per_second, bayesflow: "
                 "a Keras callback from on_epoch_begin to on_epoch_end). The reference side runs in its own "
                 "process with the same jax version, before jcalib's side of the same configuration (the two never "
                 "run at the same time). "
                 "On a shared machine the wall-clock throughput depends on the other processes: "
                 "samples_per_second_median_epoch and _best_epoch (n_train over the median / shortest epoch "
                 "after the first) are less sensitive to load spikes, and samples_per_cpu_second (n_train over "
                 "the process CPU seconds of an epoch, all threads) measures the work done per sample. "
                 "bayesflow standardizes parameters and series with its running statistics, jcalib with "
                 "training-set statistics. Both coupling subnets are MLPs without dropout (bayesflow's default "
                 "dropout of 0.05 is turned off to match). The conv summary network is the same layers on both "
                 "sides; jcalib computes its convolutions as patch matmuls (jcalib.nn.layers.patch_conv1d), Keras "
                 "with lax.conv_general_dilated. Sampling times include the summary network on the "
                 "400 observations and the conversion to NumPy. The machine is shared: see the load averages.",
    }
    if best is not None:
        print("configuration   jcalib samples/s   bayesflow samples/s   ratio (per CPU s)", flush=True)
        for row in table:
            print(f"{row['summary']}:{row['batch_size']:<10d} {row['jcalib_samples_per_second']:16.0f} "
                  f"{row['bayesflow_samples_per_second']:21.0f}   {row['ratio']:.2f} "
                  f"({row['ratio_per_cpu_second']:.2f})", flush=True)
        print(f"best: {best['summary']}:{best['batch_size']}, {best['ratio']:.2f}x (target >= "
              f"{TARGET_THROUGHPUT_RATIO}: {'met' if report['target_met'] else 'missed'})", flush=True)
    return common.write_report(args.out, report)


def _table_row(run: dict) -> dict:
    c, r = run["configuration"], run["ratios"]
    ref = run["bayesflow"].get("training", {})
    return {"summary": c["summary"], "batch_size": c["batch_size"],
            "jcalib_samples_per_second": run["jcalib"]["training"]["samples_per_second"],
            "bayesflow_samples_per_second": ref.get("samples_per_second"),
            "ratio": r.get("training_throughput_jcalib_over_bayesflow"),
            "ratio_per_cpu_second": r.get("training_samples_per_cpu_second_jcalib_over_bayesflow"),
            "ratio_best_epoch": r.get("training_throughput_best_epoch_jcalib_over_bayesflow"),
            "sampling_time_bayesflow_over_jcalib": r.get("sampling_time_bayesflow_over_jcalib")}


def _n_weights(posterior) -> int | None:
    d = posterior.to_dict() if hasattr(posterior, "to_dict") else {}
    return d.get("n_weights")


if __name__ == "__main__":
    main()
