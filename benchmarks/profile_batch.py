"""Where a vmapped batch solve spends its time: the cost per lane and step of its pieces.

For each ``--cases`` entry of `benchmarks.scipy_reference.SCIPY_CASES` (the models of
`benchmarks.simulate_batch`), on one chunk of ``--chunk`` parameter sets:

- the whole solve (``jax.jit(jax.vmap(model.solve))``, best of 5 warm calls), its steps per
  set (mean and max: vmapped lanes step in lockstep until the slowest is done) and the time
  per lane and step (whole time / chunk / max steps);
- one solver step alone (``solver.step`` from ``solver.init``, vmapped over the same states),
  so ``1 - step x max steps / whole`` is the loop, step-size controller and saving;
- inside a step: one vector field and its forward-mode Jacobian per lane and, for the
  Rosenbrock solver (`jcalib.rosenbrock.Rodas5P`), the LU factorisation and the inverse of
  the step matrix (``jax.scipy.linalg.lu_factor`` and ``lu_solve`` against the identity).

Usage: ``python -m benchmarks.profile_batch [--cases a,b] [--chunk 512] [--quick]``; writes
``results/benchmarks/profile_batch.json``. Timings are best-of-N on a warm cache; the shares
say what limits a batch, the absolute numbers depend on the machine (recorded in the JSON).
"""

from __future__ import annotations

import time

import diffrax as dfx
import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np

import jcalib  # noqa: F401  (sets the thread and error-mode defaults before any solve)
from benchmarks import common
from benchmarks.scipy_reference import SCIPY_CASES
from jcalib.rosenbrock import _GAMMA, Rodas5P

jax.config.update("jax_enable_x64", True)

DEFAULT_CASES = ("radical_polymerization_real", "cabin_thermal")


def best_seconds(fn, *args, repeats: int = 5) -> float:
    """The fastest of ``repeats`` warm calls of ``fn(*args)`` (after one untimed call)."""
    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t)
    return min(times)


def profile_case(name: str, chunk: int, seed: int, repeats: int) -> dict:
    """The per-lane-step costs of one case (microseconds) and their shares of a lane-step."""
    case = SCIPY_CASES[name]
    model = case.model()
    thetas = jnp.asarray(case.sample(model, jax.random.key(seed), chunk))
    solve = jax.jit(jax.vmap(model.solve))
    sol = solve(thetas)
    steps = np.asarray(sol.stats["num_steps"])
    rejected = np.asarray(sol.stats["num_rejected_steps"])
    whole_s = best_seconds(solve, thetas, repeats=repeats)
    lane_step_us = whole_s / chunk / steps.max() * 1e6

    # states and times inside the run: the middle saved time of every lane
    mid = model.experiment.ts.shape[0] // 2
    ys, t = sol.ys[:, mid], jnp.full((chunk,), float(model.experiment.ts[mid]))
    dt = float(model.experiment.t1 - model.experiment.t0) / float(steps.mean())
    term = dfx.ODETerm(model.vector_field)
    solver = model.solver

    def one_step(t, y, theta):
        state = solver.init(term, t, t + dt, y, theta)
        return solver.step(term, t, t + dt, y, theta, state, False)[:2]

    many = 50 * repeats
    step_us = best_seconds(jax.jit(jax.vmap(one_step)), t, ys, thetas, repeats=many) / chunk * 1e6
    field_us = best_seconds(jax.jit(jax.vmap(model.vector_field)), t, ys, thetas, repeats=many) / chunk * 1e6
    jacobian = jax.vmap(jax.jacfwd(model.vector_field, argnums=1))
    jac_us = best_seconds(jax.jit(jacobian), t, ys, thetas, repeats=many) / chunk * 1e6
    row = {
        "case": name, "solver": type(solver).__name__, "n_states": int(ys.shape[-1]), "chunk": chunk,
        "n_saved_times": int(model.experiment.ts.shape[0]),
        "steps_mean": float(steps.mean()), "steps_max": int(steps.max()), "rejected_mean": float(rejected.mean()),
        "lockstep_factor": float(steps.max() / steps.mean()),
        "whole_solve_s": whole_s, "sets_per_s": chunk / whole_s, "lane_step_us": lane_step_us,
        "step_us": step_us, "vector_field_us": field_us, "jacobian_us": jac_us,
        "share_step": step_us / lane_step_us, "share_loop_controller_saving": 1 - step_us / lane_step_us,
        "share_vector_field": field_us / lane_step_us,
    }
    if isinstance(solver, Rodas5P):
        n = ys.shape[-1]
        jac = jacobian(t, ys, thetas)
        matrix = jnp.eye(n)[None] / (dt * _GAMMA) - jac  # the step matrix I / (h gamma) - J
        lu_us = best_seconds(jax.jit(jax.vmap(jsl.lu_factor)), matrix, repeats=many) / chunk * 1e6
        inverse = jax.jit(jax.vmap(lambda a: jsl.lu_solve(jsl.lu_factor(a), jnp.eye(n, dtype=a.dtype))))
        lu_inverse_us = best_seconds(inverse, matrix, repeats=many) / chunk * 1e6
        row |= {"lu_factor_us": lu_us, "lu_and_inverse_us": lu_inverse_us,
                "share_lu_and_inverse": lu_inverse_us / lane_step_us,
                "share_vector_fields_per_step": 8 * field_us / lane_step_us,  # Rodas5P: 8 stages
                "share_jacobian": jac_us / lane_step_us}
    else:
        row["share_vector_fields_per_step"] = 6 * field_us / lane_step_us  # Tsit5: 7 stages, first as last
    print(f"{name} ({row['solver']}, {row['n_states']} states, chunk {chunk}): {row['sets_per_s']:.0f} sets/s, "
          f"{lane_step_us:.2f} us per lane-step (steps mean {row['steps_mean']:.0f}, max {row['steps_max']}); "
          f"a step alone {step_us:.2f} us ({row['share_step']:.0%}), vector field {field_us:.3f} us, "
          f"Jacobian {jac_us:.3f} us" + (f", LU {row['lu_factor_us']:.2f} us + inverse "
                                          f"{row['lu_and_inverse_us'] - row['lu_factor_us']:.2f} us "
                                          f"({row['share_lu_and_inverse']:.0%})" if "lu_factor_us" in row else ""),
          flush=True)
    return row


def main(argv=None):
    parser = common.parser(__doc__, "profile_batch", quick_help="a chunk of 16 sets, fewer repeats")
    parser.add_argument("--cases", default=",".join(DEFAULT_CASES))
    parser.add_argument("--chunk", type=int, default=512, help="parameter sets in the vmapped solve")
    args = common.parse_args(parser, argv)
    if args.chunk < 1:
        parser.error("--chunk must be positive")
    names = args.cases.split(",")
    unknown = [n for n in names if n not in SCIPY_CASES]
    if unknown:
        parser.error(f"unknown cases {unknown}; known: {', '.join(SCIPY_CASES)}")
    load_at_start = common.load_average()
    chunk, repeats = (16, 2) if args.quick else (args.chunk, 5)
    rows = [profile_case(name, chunk, args.seed, repeats) for name in names]
    return common.write_report(args.out, {"benchmark": "profile_batch", "quick": args.quick,
                                          "machine": common.machine_info(load_at_start), "results": rows})


if __name__ == "__main__":
    main()
