"""Benchmarking calibration methods on standard problems (issue 38): the metrics so far
(`jcalib.benchmark.metrics`)."""

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

__all__ = ["average_runtime", "coco_targets", "data_profile", "fraction_within", "performance_profile",
           "runtime_ecdf", "runtimes_to_targets", "sampler_metrics"]
