"""Multi-experiment problems: cost and compile time of a JointProblem with 1, 10 and 100 experiments.

Case: four_substance_reactions, K experiments with different initial concentrations A0
(5 ... 15) and ragged time grids (10, 15 or 20 observation times, cycling), synthetic data
with 1 % multiplicative noise, absolute residuals; shared kab, kac and one kad per experiment (2 + K free
parameters). For every K the benchmark times, in the same run:

- building the `JointProblem` (Python, once);
- the first call of ``residuals`` and of ``jacobian`` (compilation included) and the median
  of warm calls: the joint problem simulates all K experiments in one vmapped solve, so its
  compile time should not grow with K;
- the alternative a user without joint problems writes: a Python loop over K
  single-experiment `CalibrationProblem` objects (one per experiment, each with its own kad),
  whose residuals and Jacobians are concatenated; their experiments are left unnamed, so the
  loop compiles once per distinct time-grid length (3), not once per experiment (an
  experiment's name is a static field), and runs K solves one after another.

Writes JSON (default results/benchmarks/joint_problem.json): per K the times above and the
ratios loop / joint (warm) and the compile time relative to K = 1.

Usage:
    python -m benchmarks.joint_problem [--quick] [--sizes 1 10 100] [--repeats 5] [--seed 0] [--out PATH]
"""

from __future__ import annotations

import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import jcalib  # noqa: E402
from benchmarks import common  # noqa: E402
from jcalib.model import Experiment  # noqa: E402
from jcalib.problems import CalibrationProblem, JointProblem  # noqa: E402

GRID_LENGTHS = (10, 15, 20)


def experiments(key, n: int):
    """``n`` (model, measurements) pairs with A0 in [5, 15] and ragged grids."""
    base = jcalib.models.get("four_substance_reactions")
    t_first, t_last = float(base.ts[1]), float(base.ts[-1])
    pairs = []
    for k, subkey in enumerate(jax.random.split(key, n)):
        ts = np.linspace(t_first, t_last, GRID_LENGTHS[k % len(GRID_LENGTHS)])
        a0 = 5.0 + 10.0 * k / max(n - 1, 1)
        model = base.with_experiment(Experiment(ts, t0=0.0, conditions={"A0": a0}, name=f"A0={a0:.3g} #{k}"))
        pairs.append((model, jcalib.synthetic_measurements(subkey, model, model.parameters.nominal, sigma=0.01)))
    return pairs


def _unnamed(experiment: Experiment) -> Experiment:
    return Experiment(np.asarray(experiment.ts), t0=float(experiment.t0), t1=float(experiment.t1),
                      conditions={k: float(v) for k, v in experiment.conditions.items()})


def _ready(x):
    return jax.block_until_ready(x)


def measure(pairs, repeats: int) -> dict:
    t = time.perf_counter()
    joint = JointProblem(pairs, free=["kab", "kac"], per_experiment=["kad"], weighting="absolute")
    build_s = time.perf_counter() - t
    z = joint.initial_internal() + 0.05
    res_first, res_times, r = common.time_repeated(lambda: _ready(joint.residuals(z)), repeats)
    jac_first, jac_times, jac = common.time_repeated(lambda: _ready(joint.jacobian(z)), repeats)

    singles = [CalibrationProblem(m.with_experiment(_unnamed(m.experiment)), d, free=["kab", "kac", "kad"],
                                  weighting="absolute") for m, d in pairs]
    z_exp = [jnp.asarray(np.asarray(zk)) for zk in joint.experiment_internal(z)]

    def loop_residuals():
        return np.concatenate([np.asarray(p.residuals(zk)) for p, zk in zip(singles, z_exp)])

    def loop_jacobian():
        return [np.asarray(p.jacobian(zk)) for p, zk in zip(singles, z_exp)]

    loop_res_first, loop_res_times, r_loop = common.time_repeated(loop_residuals, repeats)
    loop_jac_first, loop_jac_times, _ = common.time_repeated(loop_jacobian, repeats)
    res_warm, jac_warm = float(np.median(res_times)), float(np.median(jac_times))
    loop_res_warm, loop_jac_warm = float(np.median(loop_res_times)), float(np.median(loop_jac_times))
    return {
        "n_experiments": len(pairs), "n_free": joint.n_free, "n_observed": joint.n_observed,
        "groups": len(joint.group_members), "build_s": build_s,
        "joint": {"residuals_first_s": res_first, "residuals_warm_s": res_warm,
                  "jacobian_first_s": jac_first, "jacobian_warm_s": jac_warm},
        "loop": {"residuals_first_s": loop_res_first, "residuals_warm_s": loop_res_warm,
                 "jacobian_first_s": loop_jac_first, "jacobian_warm_s": loop_jac_warm},
        "speedup_residuals_warm": loop_res_warm / res_warm,
        "speedup_jacobian_warm": loop_jac_warm / jac_warm,
        "max_abs_difference_residuals": float(np.max(np.abs(np.asarray(r) - r_loop))),
        "jacobian_shape": list(np.shape(jac)),
    }


def main(argv=None):
    parser = common.parser(__doc__, "joint_problem", quick_help="K = 1 and 3, 2 repeats")
    parser.add_argument("--sizes", type=int, nargs="+", default=None, help="numbers of experiments (default 1 10 100)")
    parser.add_argument("--repeats", type=int, default=5)
    args = common.parse_args(parser, argv)
    sizes = args.sizes or ([1, 3] if args.quick else [1, 10, 100])
    repeats = 2 if args.quick else args.repeats
    load = common.load_average()
    rows = []
    for n in sizes:
        row = measure(experiments(jax.random.key(args.seed), n), repeats)
        rows.append(row)
        j, loop = row["joint"], row["loop"]
        print(f"K={n:4d}: joint residuals {j['residuals_first_s']:.2f} s first / {1e3 * j['residuals_warm_s']:.2f} ms "
              f"warm, jacobian {j['jacobian_first_s']:.2f} s / {1e3 * j['jacobian_warm_s']:.2f} ms; loop residuals "
              f"{loop['residuals_first_s']:.2f} s / {1e3 * loop['residuals_warm_s']:.2f} ms, jacobian "
              f"{loop['jacobian_first_s']:.2f} s / {1e3 * loop['jacobian_warm_s']:.2f} ms")
    first = rows[0]["joint"]
    for row in rows:
        row["compile_growth_residuals"] = row["joint"]["residuals_first_s"] / first["residuals_first_s"]
        row["compile_growth_jacobian"] = row["joint"]["jacobian_first_s"] / first["jacobian_first_s"]
    common.write_report(args.out, {"benchmark": "joint_problem", "quick": args.quick, "repeats": repeats,
                                   "rows": rows, "machine": common.machine_info(load)})
    return rows


if __name__ == "__main__":
    main()
