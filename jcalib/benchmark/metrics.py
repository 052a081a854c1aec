"""What a benchmark of calibration methods reports: runtimes to targets and their profiles.

A run's *runtime* to a target is the cost (objective evaluations, gradients, seconds, ... in one
unit) it had spent when its best value first reached the target; ``inf`` where it never did.
From runtimes:

- `runtimes_to_targets`: a run's runtimes to many targets from its trace of (cost, value).
- `coco_targets`: COCO's targets, the reference value plus ``10^2 ... 10^-8``.
- `average_runtime`: COCO's aRT, all cost spent (successful runs up to the target, the others
  in full) per successful run.
- `runtime_ecdf`: the fraction of (run, target) pairs reached within each budget (COCO's
  empirical cumulative distribution of runtimes).
- `performance_profile` (Dolan & Moré 2002) and `data_profile` (Moré & Wild 2009, cost divided
  by ``n + 1``): per method, the fraction of problems solved within a factor of the best method
  or within a budget.
- `fraction_within`: the systems-biology convention, the fraction of starts whose final value is
  within 0.05, 2 or 5 of the best.
- `sampler_metrics`: a sampler's effective sample size per gradient and per second, R-hat, and
  the errors of its means and standard deviations against a reference posterior's.
- `c2st` and `c2st_marginals`: the classifier two-sample test (Lopez-Paz & Oquab 2017, as
  sbibm uses it against reference posteriors): the cross-validated accuracy of a classifier
  telling draws from reference draws, 0.5 when it cannot, 1 when they do not overlap.

Example:
    >>> runtimes = np.array([[10.0, 20.0], [np.inf, 5.0]])  # 2 problems x 2 methods
    >>> performance_profile(runtimes, [1.0, 2.0]).tolist()
    [[0.5, 0.5], [0.5, 1.0]]

References:
    E. D. Dolan, J. J. Moré, "Benchmarking optimization software with performance profiles",
    Math. Program. 91 (2002) 201-213. J. J. Moré, S. M. Wild, "Benchmarking derivative-free
    optimization algorithms", SIAM J. Optim. 20 (2009) 172-191. N. Hansen et al., "COCO: a
    platform for comparing continuous optimizers in a black-box setting", Optim. Methods Softw.
    36 (2021) 114-144. D. Lopez-Paz, M. Oquab, "Revisiting classifier two-sample tests", ICLR
    2017. J.-M. Lueckmann et al., "Benchmarking simulation-based inference", AISTATS 2021.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import numpy as np
from jaxtyping import ArrayLike, Float, PRNGKeyArray

from jcalib.bayes.diagnostics import ess, rhat

__all__ = ["average_runtime", "c2st", "c2st_marginals", "coco_targets", "data_profile", "fraction_within",
           "performance_profile", "runtime_ecdf", "runtimes_to_targets", "sampler_metrics"]


MIN_C2ST_DRAWS = 20
"""The fewest (effectively) independent draws `c2st_marginals` tests."""


def _costs(values, name: str, ndim: int) -> np.ndarray:
    """``values`` as a float array of ``ndim`` dimensions, costs ``>= 0`` or ``inf``; else a ValueError."""
    a = np.asarray(values, dtype=np.float64)
    if a.ndim != ndim or a.size == 0:
        raise ValueError(f"{name} must be a non-empty {ndim}-D array; got shape {a.shape}")
    if np.any(np.isnan(a)) or np.any(a < 0):
        raise ValueError(f"{name}: costs must be >= 0 or inf (not reached); got {a[np.isnan(a) | (a < 0)][:3]}")
    return a


def _points(values, name: str, least: float) -> np.ndarray:
    """``values`` as a non-empty 1-D float array of finite numbers ``>= least``; else a ValueError."""
    a = np.atleast_1d(np.asarray(values, dtype=np.float64))
    if a.ndim != 1 or a.size == 0 or not np.all(np.isfinite(a)) or np.any(a < least):
        raise ValueError(f"{name} must be finite numbers >= {least:g}, one axis; got {np.asarray(values)!r}")
    return a


def coco_targets(reference: float, exponents: Sequence[float] = tuple(np.linspace(2, -8, 51))
                 ) -> Float[np.ndarray, " n_targets"]:
    """Targets ``reference + 10^e`` for each exponent (COCO's default: 51 from ``10^2`` to
    ``10^-8``, five per decade), easiest first, for a value to be minimised.

    Example:
        >>> coco_targets(1.0, [0, -1]).tolist()
        [2.0, 1.1]
    """
    return float(reference) + 10.0 ** np.asarray(exponents, dtype=np.float64)


def runtimes_to_targets(costs: Float[ArrayLike, " n_steps"], values: Float[ArrayLike, " n_steps"],
                        targets: Float[ArrayLike, " n_targets"]) -> Float[np.ndarray, " n_targets"]:
    """The cost at which a run's best value so far first reached each target (``<=``); ``inf``
    where it never did.

    Args:
        costs: the cumulative cost after each step, non-decreasing.
        values: the value (to be minimised) found at each step; NaN counts as not reached.
        targets: the targets.

    Example:
        >>> runtimes_to_targets([1, 2, 3], [5.0, 3.0, 4.0], [4.0, 3.0, 1.0]).tolist()
        [2.0, 2.0, inf]
    """
    costs = _costs(costs, "runtimes_to_targets: costs", 1)
    values = np.asarray(values, dtype=np.float64)
    if values.shape != costs.shape:
        raise ValueError(f"runtimes_to_targets: one value per cost; got shapes {costs.shape} and {values.shape}")
    if np.any(np.diff(costs) < 0):
        raise ValueError("runtimes_to_targets: costs must be cumulative (non-decreasing)")
    best = np.fmin.accumulate(np.where(np.isnan(values), np.inf, values))
    targets = np.asarray(targets, dtype=np.float64)
    first = np.searchsorted(-best, -targets, side="left")  # -best is non-decreasing
    return np.where(first < best.size, costs[np.minimum(first, best.size - 1)], np.inf)


def average_runtime(runtimes: Float[ArrayLike, " n_runs"], spent: Float[ArrayLike, " n_runs"]) -> float:
    """COCO's average runtime (aRT) to one target: the cost spent by all runs, the successful
    ones up to the target and the others in full (``spent``), divided by the number of
    successful runs; ``inf`` where none succeeded.

    Example:
        >>> average_runtime([10.0, np.inf, 30.0], [50.0, 100.0, 40.0])  # (10 + 100 + 30) / 2
        70.0
    """
    runtimes = _costs(runtimes, "average_runtime: runtimes", 1)
    spent = _costs(spent, "average_runtime: spent", 1)
    if spent.shape != runtimes.shape:
        raise ValueError(f"average_runtime: one spent cost per run; got {spent.shape} for {runtimes.shape}")
    if np.any(np.isfinite(runtimes) & (runtimes > spent)):
        raise ValueError("average_runtime: a run cannot reach a target after more cost than it spent in all")
    success = np.isfinite(runtimes)
    if not success.any():
        return float("inf")
    return float((runtimes[success].sum() + spent[~success].sum()) / success.sum())


def runtime_ecdf(runtimes: Float[ArrayLike, "n_runs n_targets"], budgets: Float[ArrayLike, " n_budgets"]
                 ) -> Float[np.ndarray, " n_budgets"]:
    """The fraction of (run, target) pairs whose runtime is within each budget (COCO's
    empirical cumulative distribution of runtimes; runs of several problems may be stacked).

    Example:
        >>> runtime_ecdf([[1.0, 4.0], [2.0, np.inf]], [1, 2, 10]).tolist()
        [0.25, 0.5, 0.75]
    """
    runtimes = _costs(runtimes, "runtime_ecdf: runtimes", 2)
    budgets = _points(budgets, "runtime_ecdf: budgets", 0.0)
    return (runtimes.reshape(-1)[None, :] <= budgets[:, None]).mean(axis=1)


def performance_profile(runtimes: Float[ArrayLike, "n_problems n_methods"], taus: Float[ArrayLike, " n_taus"]
                        ) -> Float[np.ndarray, "n_taus n_methods"]:
    """Dolan and Moré's performance profile: per method, the fraction of problems on which its
    runtime is within ``tau`` times the best method's on that problem (a problem no method
    solves counts as unsolved for all).

    Args:
        runtimes: cost to solve each problem by each method (``inf``: not solved).
        taus: the performance ratios, ``>= 1``.
    """
    runtimes = _costs(runtimes, "performance_profile: runtimes", 2)
    best = runtimes.min(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratios = np.where(np.isfinite(runtimes), runtimes / best, np.inf)
    ratios = np.where(best == 0, np.where(runtimes == 0, 1.0, np.inf), ratios)  # a free solve: only ties are best
    taus = _points(taus, "performance_profile: taus", 1.0)
    return (ratios[None, :, :] <= taus[:, None, None]).mean(axis=1)


def data_profile(runtimes: Float[ArrayLike, "n_problems n_methods"], n_parameters: Float[ArrayLike, " n_problems"],
                 budgets: Float[ArrayLike, " n_budgets"]) -> Float[np.ndarray, "n_budgets n_methods"]:
    """Moré and Wild's data profile: per method, the fraction of problems solved within each
    budget of ``alpha`` simplex gradients, i.e. with ``runtime / (n_p + 1) <= alpha`` for a
    problem of ``n_p`` parameters (the cost in objective evaluations, or in a unit whose
    ``n + 1`` makes the same sense).

    Example:
        >>> data_profile([[3.0, 9.0], [4.0, np.inf]], [2, 1], [1, 2, 3]).tolist()
        [[0.5, 0.0], [1.0, 0.0], [1.0, 0.5]]
    """
    runtimes = _costs(runtimes, "data_profile: runtimes", 2)
    n = np.asarray(n_parameters, dtype=np.float64)
    if n.shape != (runtimes.shape[0],) or not np.all(n >= 0):
        raise ValueError(f"data_profile: one parameter count >= 0 per problem ({runtimes.shape[0]}); got {n}")
    scaled = runtimes / (n[:, None] + 1.0)
    budgets = _points(budgets, "data_profile: budgets", 0.0)
    return (scaled[None, :, :] <= budgets[:, None, None]).mean(axis=1)


def fraction_within(final_values: Float[ArrayLike, " n_starts"], best: float,
                    tolerances: Sequence[float] = (0.05, 2.0, 5.0)) -> dict[float, float]:
    """The fraction of starts whose final value (to be minimised, e.g. a negative
    log-likelihood) is within each tolerance of ``best``, the convention of the systems-biology
    benchmarks (Fröhlich & Sorger 2022: within 0.05, 2 or 5); NaN counts as not within.

    Example:
        >>> fraction_within([1.0, 1.04, 2.5, np.nan], 1.0)
        {0.05: 0.5, 2.0: 0.75, 5.0: 0.75}
    """
    values = np.asarray(final_values, dtype=np.float64)
    if values.ndim != 1 or values.size == 0:
        raise ValueError(f"fraction_within: final_values must be one value per start; got shape {values.shape}")
    if not np.isfinite(best):
        raise ValueError(f"fraction_within: best must be a finite value; got {best!r}")
    tolerances = _points(tolerances, "fraction_within: tolerances", 0.0)
    within = np.isfinite(values) & (values - best <= tolerances[:, None])
    return {float(t): float(np.mean(w)) for t, w in zip(tolerances, within)}


def sampler_metrics(samples: Float[ArrayLike, "n_chains n_draws n_params"], n_gradients: int, seconds: float,
                    reference_mean: Float[ArrayLike, " n_params"] | None = None,
                    reference_sd: Float[ArrayLike, " n_params"] | None = None) -> dict[str, float]:
    """A sampler's run against its cost and, where known, the reference posterior.

    Returns:
        ``ess_min`` (bulk ESS of the worst parameter, `jcalib.bayes.diagnostics.ess`), ``ess_per_gradient``
        and ``ess_per_second`` (its ratio to ``n_gradients`` log-density gradients and ``seconds``),
        ``rhat_max``; a parameter whose draws are all equal in some chain (a chain that never
        moved) has ESS 0. With the reference, ``mean_error`` and ``sd_error``: the largest
        ``|mean - reference_mean| / reference_sd`` and ``|sd - reference_sd| / reference_sd`` over
        the parameters (the standardised errors of posteriordb and inference-gym), and ``bias2``,
        the mean over parameters of the squared first.
    """
    draws = np.asarray(samples, dtype=np.float64)
    positive = [isinstance(x, (int, float, np.number)) and np.isfinite(x) and x > 0 for x in (n_gradients, seconds)]
    if draws.ndim != 3 or min(draws.shape) < 1 or not all(positive):
        raise ValueError(f"sampler_metrics: samples must be (n_chains, n_draws, n_params) and the costs positive; "
                         f"got shape {draws.shape}, {n_gradients} gradients, {seconds} s")
    stuck = np.any(np.ptp(draws, axis=1) == 0, axis=0)  # a parameter that never moved in some chain
    ess_min = 0.0 if stuck.any() else float(np.min(ess(draws)))
    out = {"ess_min": ess_min, "ess_per_gradient": ess_min / n_gradients, "ess_per_second": ess_min / seconds,
           "rhat_max": float(np.max(rhat(draws)))}
    if (reference_mean is None) != (reference_sd is None):
        raise ValueError("sampler_metrics: give both reference_mean and reference_sd, or neither")
    if reference_mean is None:
        return out
    flat = draws.reshape(-1, draws.shape[-1])
    ref_mean, ref_sd = np.asarray(reference_mean, dtype=np.float64), np.asarray(reference_sd, dtype=np.float64)
    if ref_mean.shape != (flat.shape[1],) or ref_sd.shape != ref_mean.shape or np.any(ref_sd <= 0):
        raise ValueError(f"sampler_metrics: one reference mean and one sd > 0 per parameter ({flat.shape[1]}); got "
                         f"{ref_mean} and {ref_sd}")
    z_mean = (flat.mean(axis=0) - ref_mean) / ref_sd
    return out | {"mean_error": float(np.max(np.abs(z_mean))), "bias2": float(np.mean(z_mean ** 2)),
                  "sd_error": float(np.max(np.abs(flat.std(axis=0, ddof=1) - ref_sd) / ref_sd))}


def c2st(key: PRNGKeyArray | None, sample: Float[ArrayLike, "n d"], reference: Float[ArrayLike, "m d"], *,
         n_folds: int = 5, neighbours: int | None = None) -> float:
    """The classifier two-sample test's accuracy: a k-nearest-neighbour classifier (majority of
    ``neighbours``, default the odd number nearest ``sqrt(n)``) tells ``sample`` from
    ``reference`` under stratified ``n_folds``-fold cross-validation, on equal numbers of each
    (the larger is subsampled; ``key``, None for ``jax.random.key(0)``, draws the subsample and
    the folds) standardised by the reference's means and sds (as sbibm does). 0.5: the
    classifier cannot tell them apart; 1: they do not overlap. For two Gaussians of unit
    variance whose means are ``delta`` apart the best possible accuracy is ``Phi(delta / 2)``.

    The draws should be independent: a test draw whose chain neighbour is in the training folds
    is recognised by that neighbour (`c2st_marginals` thins chains to their effective size).

    Example:
        >>> rng = np.random.default_rng(0)
        >>> round(c2st(None, rng.normal(size=(1000, 2)), rng.normal(size=(1000, 2))), 1)
        0.5
    """
    x, y = (np.asarray(a, dtype=np.float64) for a in (sample, reference))
    if isinstance(n_folds, bool) or not isinstance(n_folds, (int, np.integer)) or n_folds < 2:
        raise ValueError(f"c2st: n_folds must be an integer >= 2; got {n_folds!r}")
    if x.ndim != 2 or y.ndim != 2 or x.shape[1] != y.shape[1] or min(len(x), len(y)) < 2 * n_folds:
        raise ValueError(f"c2st: two samples (n, d) of the same d, each of at least {2 * n_folds} draws; got shapes "
                         f"{x.shape} and {y.shape}")
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
        raise ValueError("c2st: the draws must be finite")
    rng = np.random.default_rng(np.asarray(jax.random.key_data(jax.random.key(0) if key is None else key)).ravel())
    n = min(len(x), len(y))
    x, y = x[rng.permutation(len(x))[:n]], y[rng.permutation(len(y))[:n]]
    scale = np.where(y.std(axis=0) > 0, y.std(axis=0), 1.0)
    data = (np.concatenate([x, y]) - y.mean(axis=0)) / scale
    labels = np.repeat([1, 0], n)
    k = int(2 * (np.sqrt(n) // 2) + 1) if neighbours is None else neighbours
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1 or k % 2 == 0 or k > n:
        raise ValueError(f"c2st: neighbours must be an odd integer between 1 and the draws per sample ({n}); got {k!r}")
    # stratified folds: each holds as many draws of one sample as of the other, so that the training
    # draws are balanced too (an unbalanced training set biases the vote away from the test draws' own)
    folds = [np.concatenate(pair) for pair in zip(np.array_split(rng.permutation(n), n_folds),
                                                  np.array_split(n + rng.permutation(n), n_folds))]
    correct = 0
    for test in folds:
        train = np.setdiff1d(np.arange(2 * n), test)
        distances = ((data[test, None, :] - data[None, train, :]) ** 2).sum(axis=-1)
        nearest = np.argpartition(distances, k - 1, axis=1)[:, :k]
        predicted = labels[train][nearest].mean(axis=1) > 0.5
        correct += int(np.sum(predicted == labels[test]))
    return correct / (2 * n)


def c2st_marginals(key: PRNGKeyArray | None, samples: Float[ArrayLike, "n_chains n_draws n_params"],
                   reference: Float[ArrayLike, "m n_params"], *,
                   max_draws: int = 1000) -> Float[np.ndarray, " n_pairs"]:
    """`c2st` of every 2-D marginal (parameter pairs ``(i, j)``, ``i < j``, in that order; the
    1-D marginal for one parameter) of a sampler's chains against reference draws. The chains
    are thinned to about their effective sample size (the smallest bulk ESS over the parameters,
    at most ``max_draws`` draws in all), so that autocorrelation is not mistaken for a difference;
    NaN where fewer than `MIN_C2ST_DRAWS` independent draws are left (too few to test). With few
    draws the accuracy is noisy, and the largest over many pairs is biased upwards: compare
    methods at similar effective sizes.

    Example:
        >>> rng = np.random.default_rng(1)
        >>> c2st_marginals(None, rng.normal(size=(2, 500, 3)), rng.normal(size=(2000, 3))).shape
        (3,)
    """
    draws = np.asarray(samples, dtype=np.float64)
    reference = np.asarray(reference, dtype=np.float64)
    if draws.ndim != 3 or reference.ndim != 2 or draws.shape[2] != reference.shape[1]:
        raise ValueError(f"c2st_marginals: samples (n_chains, n_draws, n_params) and reference (m, n_params); got "
                         f"shapes {draws.shape} and {reference.shape}")
    n_chains, n_draws, n_params = draws.shape
    ess_min = float(np.min(ess(draws))) if n_draws > 3 else float(n_draws * n_chains)
    if ess_min < MIN_C2ST_DRAWS:
        return np.full(max(1, n_params * (n_params - 1) // 2), np.nan)
    keep = int(np.clip(min(ess_min, max_draws), 2, n_chains * n_draws))
    step = max(1, int(np.ceil(n_chains * n_draws / keep)))
    thinned = draws[:, ::step].reshape(-1, n_params)
    pairs = [(i, j) for i in range(n_params) for j in range(i + 1, n_params)] or [(0,)]
    return np.array([c2st(key, thinned[:, list(p)], reference[:, list(p)]) for p in pairs])
