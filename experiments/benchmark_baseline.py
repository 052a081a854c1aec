"""The published baseline of jcalib.benchmark (issue 38 §8): the built-in optimizers on the analytic,
ODE and PEtab-collection problems, the built-in samplers and amortized posterior on the posteriors
with references.

Two parts (``--part``, default both, each its own store and report): ``built-in``, the optimizers
(`OPTIMIZERS`) on every problem of the ``"analytic"`` and ``"ode"`` suites within `BUDGET`, the
samplers (`SAMPLERS`) on `POSTERIORS`, ``--sampler-repeats`` keys each, and the amortized method
(`AMORTIZED`) on them, ``--amortized-repeats`` keys each; ``petab``, the optimizers
on the collection problems `PETAB` (imported with `experiments.petab_collection`'s solver settings)
within `PETAB_BUDGET`. Optimizers start from ``--repeats`` points (uniform in the internal box, the
same per repetition for every method). Every run is stored as it finishes (a rerun skips what is
stored); each part's report (tables, figures) goes to its folder with the commit and the command
on its first lines: ``--out`` for the built-in part, ``--out``/petab for the collection.

    python -m experiments.benchmark_baseline --out docs/benchmark --engine local

It reproduces no paper's claims, so it writes no ``paper_comparison.md``: its record is the
report itself (``docs/benchmark/report.md``, ``docs/benchmark/petab/report.md``), whose first line
names the command and the commit.
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
AMORTIZED = ("bayesflow",)
PETAB = ("Bertozzi_PNAS2020", "Armistead_CellDeathDis2024", "Rahman_MBS2016", "Boehm_JProteomeRes2014",
         "Fiedler_BMCSystBiol2016", "Giordano_Nature2020")
"""Six collection problems of 3-10 states and 8-50 estimated parameters whose gradients take at
most ~20 ms (README's collection table), so 50 starts of seven optimizers fit in hours on 2 cores."""
POSTERIORS = ("gaussian-2", "gaussian-8", "banana-2", "linear-gaussian-ode")
BUDGET = {"gradients": 2000.0, "evaluations": 20000.0}
"""Per optimizer run: 2,000 gradient equivalents (a forward-mode Jacobian counts 1) or 20,000
model evaluations, whichever comes first (differential evolution uses no gradients)."""
PETAB_BUDGET = {"gradients": 500.0, "evaluations": 2500.0, "seconds": 60.0}
"""Per optimizer run on a collection problem (each gradient costs 1-20 ms of ODE sensitivities):
500 gradient equivalents, 2,500 model evaluations or 60 s, whichever comes first: a line search
that tries parameters where the ODE is very stiff can spend minutes per evaluation (one L-BFGS
run on Bertozzi took 475 s without the time limit)."""
PARTS = ("built-in", "petab")
QUICK = {"optimizers": ("lm", "gauss-newton"), "samplers": ("mala:n_steps=200,warmup=100",), "petab": (),
         "repeats": 2, "sampler_repeats": 1, "posteriors": ("gaussian-2",), "amortized": ()}


def main(argv: list[str] | None = None) -> dict:
    parser = common.parser(__doc__, "benchmark_baseline", seed=False,
                           quick_help="the analytic and ODE suites, two optimizers, one short sampler run")
    parser.add_argument("--repeats", type=int, default=50, help="starts per problem and optimizer")
    parser.add_argument("--sampler-repeats", type=int, default=5, help="runs (keys) per posterior and sampler")
    parser.add_argument("--amortized-repeats", type=int, default=2,
                        help="runs (keys) per posterior of the amortized method (each trains a network)")
    parser.add_argument("--petab", nargs="*", default=None, help=f"collection problems (default: {' '.join(PETAB)})")
    parser.add_argument("--part", choices=[*PARTS, "all"], default="all", help="which part to run (module docstring)")
    parser.add_argument("--store", type=pathlib.Path, default=None,
                        help="the record store (default: --out/store); the petab part's is its name + _petab")
    parser.add_argument("--engine", default="inline", help="inline | local (a Dask cluster of --workers processes)")
    parser.add_argument("--workers", type=int, default=None)
    args = parser.parse_args(argv)
    from jcalib import benchmark

    out = common.prepare_out(args.out)
    store = args.store or out / "store"
    quick = QUICK if args.quick else {"optimizers": OPTIMIZERS, "samplers": SAMPLERS, "repeats": args.repeats,
                                      "petab": PETAB if args.petab is None else tuple(args.petab),
                                      "sampler_repeats": args.sampler_repeats, "posteriors": POSTERIORS,
                                      "amortized": AMORTIZED, "amortized_repeats": args.amortized_repeats}
    run = {"engine": args.engine, "n_workers": args.workers}
    out_dict = {}
    if args.part in ("built-in", "all"):
        problems = benchmark.suite("analytic") + benchmark.suite("ode")
        optimizers = benchmark.run_grid(problems, quick["optimizers"], quick["repeats"], BUDGET, store=store, **run)
        samplers = benchmark.run_grid(list(quick["posteriors"]), quick["samplers"], quick["sampler_repeats"],
                                      store=store, **run)
        amortized = benchmark.run_grid(list(quick["posteriors"]), quick["amortized"], quick["amortized_repeats"],
                                       store=store, **run) if quick["amortized"] else ()
        path = benchmark.report(store, out, notes=[_provenance(argv)])
        out_dict |= {"report": str(path), "n_optimizer_runs": len(optimizers), "n_sampler_runs": len(samplers),
                     "n_amortized_runs": len(amortized),
                     "statuses": {**optimizers["status"].value_counts().to_dict()}}
    if args.part in ("petab", "all") and quick["petab"]:
        names, petab_store = quick["petab"], store.with_name(f"{store.name}_petab")
        problems = benchmark.register_petab_collection(
            collection_root(), names, options={n: load_options(n, "auto") for n in names})
        frame = benchmark.run_grid(problems, quick["optimizers"], quick["repeats"], PETAB_BUDGET,
                                   store=petab_store, **run)
        path = benchmark.report(petab_store, out / "petab", notes=[_provenance(argv)])
        out_dict |= {"petab_report": str(path), "n_petab_runs": len(frame),
                     "petab_statuses": {**frame["status"].value_counts().to_dict()}}
    return out_dict


def _provenance(argv: list[str] | None) -> str:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    command = " ".join(["python -m experiments.benchmark_baseline", *(sys.argv[1:] if argv is None else argv)])
    return f"Made by `{command}` at commit {commit or 'unknown'} on {datetime.date.today().isoformat()}."


if __name__ == "__main__":
    main()
