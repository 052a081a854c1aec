"""jcalib's benchmarks against the tools a user would otherwise write or install (scipy,
SALib, blackjax, bayesflow). Run them from the repository root as modules, e.g.
``python -m benchmarks.simulate_batch --quick``; shared helpers are in `benchmarks.common`,
the scipy baselines of the built-in models in `benchmarks.scipy_reference`."""
