"""Benchmarking calibration methods on standard problems (issue 38): the problems and suites
(`jcalib.benchmark.problems`), the metrics (`jcalib.benchmark.metrics`) and the record store
(`jcalib.benchmark.store`) so far."""

from jcalib.benchmark.metrics import (
    average_runtime,
    coco_targets,
    data_profile,
    fraction_within,
    performance_profile,
    runtime_ecdf,
    runtimes_to_targets,
    sampler_metrics,
)
from jcalib.benchmark.problems import BenchmarkProblem, get_problem, register_problem, suite
from jcalib.benchmark.store import RunId, Store, run_id

__all__ = ["BenchmarkProblem", "RunId", "Store", "average_runtime", "coco_targets", "data_profile",
           "fraction_within", "get_problem", "performance_profile", "register_problem", "run_id",
           "runtime_ecdf", "runtimes_to_targets", "sampler_metrics", "suite"]
