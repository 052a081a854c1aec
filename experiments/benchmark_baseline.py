"""The published baseline of jcalib.benchmark (issue 38 §8): the built-in optimizers on the analytic,
ODE and PEtab-collection problems, the built-in samplers on the posteriors with references.

Optimizers (`OPTIMIZERS`) run on every problem of the ``"analytic"`` and ``"ode"`` suites and on the
collection problems `PETAB` (imported with `experiments.petab_collection`'s solver settings), each
from ``--repeats`` starts (uniform in the internal box, the same per repetition for every method)
within `BUDGET`; samplers (`SAMPLERS`) on `POSTERIORS`, ``--sampler-repeats`` keys each. Every run
is stored in ``--store`` as it finishes (a rerun skips what is stored); the report (tables,
figures) goes to ``--out`` with the commit and the command on its first lines.

    python -m experiments.benchmark_baseline --out docs/benchmark --engine local
"""

from __future__ import annotations

import datetime
import pathlib
import subprocess
import sys

from experiments import common
from experiments.petab_collection import collection_root, load_options

OPTIMIZERS = ("lm", "trf", "fides", "gauss-newton", "lbfgs", "adam", "de")
SAMPLERS = ("mala:n_steps=1000", "hmc:n_steps=500", "nuts:n_steps=500")
PETAB = ("Boehm_JProteomeRes2014", "Bertozzi_PNAS2020", "Fiedler_BMCSystBiol2016", "Rahman_MBS2016",
         "Armistead_CellDeathDis2024", "Raia_CancerResearch2011")
POSTERIORS = ("gaussian-2", "gaussian-8", "banana-2", "linear-gaussian-ode")
BUDGET = {"gradients": 2000.0, "evaluations": 20000.0}
"""Per optimizer run: 2,000 gradient equivalents (a forward-mode Jacobian counts 1) or 20,000
model evaluations, whichever comes first (differential evolution uses no gradients)."""
QUICK = {"optimizers": ("lm", "gauss-newton"), "samplers": ("mala:n_steps=200,warmup=100",), "petab": (),
         "repeats": 2, "sampler_repeats": 1, "posteriors": ("gaussian-2",)}


def main(argv: list[str] | None = None) -> dict:
    parser = common.parser(__doc__, "benchmark_baseline", seed=False,
                           quick_help="the analytic and ODE suites, two optimizers, one short sampler run")
    parser.add_argument("--repeats", type=int, default=50, help="starts per problem and optimizer")
    parser.add_argument("--sampler-repeats", type=int, default=5, help="runs (keys) per posterior and sampler")
    parser.add_argument("--petab", nargs="*", default=None, help=f"collection problems (default: {' '.join(PETAB)})")
    parser.add_argument("--store", type=pathlib.Path, default=None, help="the record store (default: --out/store)")
    parser.add_argument("--engine", default="inline", help="inline | local (a Dask cluster of --workers processes)")
    parser.add_argument("--workers", type=int, default=None)
    args = parser.parse_args(argv)
    from jcalib import benchmark

    out = common.prepare_out(args.out)
    store = args.store or out / "store"
    quick = QUICK if args.quick else {"optimizers": OPTIMIZERS, "samplers": SAMPLERS, "repeats": args.repeats,
                                      "petab": PETAB if args.petab is None else tuple(args.petab),
                                      "sampler_repeats": args.sampler_repeats, "posteriors": POSTERIORS}
    problems = benchmark.suite("analytic") + benchmark.suite("ode")
    if quick["petab"]:
        problems += benchmark.register_petab_collection(
            collection_root(), quick["petab"], options={n: load_options(n, "auto") for n in quick["petab"]})
    run = {"store": store, "engine": args.engine, "n_workers": args.workers}
    optimizers = benchmark.run_grid(problems, quick["optimizers"], quick["repeats"], BUDGET, **run)
    samplers = benchmark.run_grid(list(quick["posteriors"]), quick["samplers"], quick["sampler_repeats"], **run)
    path = benchmark.report(store, out, notes=[_provenance(argv)])
    return {"report": str(path), "n_optimizer_runs": len(optimizers), "n_sampler_runs": len(samplers),
            "statuses": {**optimizers["status"].value_counts().to_dict()}}


def _provenance(argv: list[str] | None) -> str:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    command = " ".join(["python -m experiments.benchmark_baseline", *(sys.argv[1:] if argv is None else argv)])
    return f"Made by `{command}` at commit {commit or 'unknown'} on {datetime.date.today().isoformat()}."


if __name__ == "__main__":
    main()
