"""Benchmarking calibration methods on standard problems: the problems and suites
(`jcalib.benchmark.problems`), the methods (`jcalib.benchmark.methods`), what a run costs
(`jcalib.benchmark.cost`), running and storing the grid (`jcalib.benchmark.runner`,
`jcalib.benchmark.store`), the metrics (`jcalib.benchmark.metrics`) and the report
(`jcalib.benchmark.reporting`)."""

from jcalib.benchmark.cost import BUDGET_UNITS, BudgetExhausted, CostCounter, CountedProblem, CountedSimulator
from jcalib.benchmark.methods import BenchmarkMethod, method_config, method_names, register_method
from jcalib.benchmark.metrics import (
    average_runtime,
    c2st,
    c2st_marginals,
    coco_targets,
    data_profile,
    fraction_within,
    performance_profile,
    runtime_ecdf,
    runtimes_to_targets,
    sampler_metrics,
)
from jcalib.benchmark.problems import BenchmarkProblem, get_problem, register_petab_collection, register_problem, suite
from jcalib.benchmark.reporting import optimizer_table, report, sampler_table
from jcalib.benchmark.runner import run_grid, run_one, start_point
from jcalib.benchmark.store import RunId, Store, run_id

__all__ = ["BUDGET_UNITS", "BenchmarkMethod", "BenchmarkProblem", "BudgetExhausted", "CostCounter", "CountedProblem",
           "CountedSimulator", "RunId", "Store", "average_runtime", "c2st", "c2st_marginals", "coco_targets",
           "data_profile", "fraction_within", "get_problem", "method_config", "method_names", "optimizer_table",
           "performance_profile", "register_method", "register_petab_collection", "register_problem", "report",
           "run_grid", "run_id", "run_one", "runtime_ecdf", "runtimes_to_targets", "sampler_metrics", "sampler_table",
           "start_point", "suite"]
