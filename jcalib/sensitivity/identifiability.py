"""Local identifiability from one sensitivity matrix: rank, null parameters, rankings, flat
directions.

Two papers, one matrix S (rows: measured (time, output) entries; columns: parameters):

- Bastogne et al. 2007 (§3.1-3.3): the *practical identifiability degree* is the numerical
  rank of the output-sensitivity matrix; parameters whose sensitivity column is null are
  not identifiable; parameters are ranked by their J-sensitivity |dJ/dθ_i| (eq. 12) and by
  a *correlation classification*: starting from the most influential column, add at each
  step the column that maximises the smallest singular value σ_min of the selected columns
  (eq. 13-15); the σ_min spectrum over j = 1..μ shows where the next parameter becomes weak
  or nearly collinear with those already selected (`correlation_ranking`; unit-norm
  columns measure collinearity alone). Bastogne's columns are the sensitivity functions
  of the running cost S_J(t, θ_i) ∈ R^N (``correlation_columns="j_sensitivity"``); the
  default ranks the scaled output-sensitivity matrix instead. The rank depends on its
  tolerance: `rank_tolerance` guards against rounding, `noise_rank_rtol` against noise.
- Wulkow et al. 2021 (§2.2.1): the singular values s_1 >= ... >= s_d of the Jacobian, its
  condition number κ = s_1/s_d (eq. 21), and the *essential directions*: singular directions
  with s_1/s_k <= 100 are essential, the others flat, "if there is no other clear gap
  between the singular values" (see `n_essential_directions` for the gap rule used here).
  Each flat direction is a combination of parameters (a right singular vector) that the
  data barely constrain.

`identifiability` computes all of it from a single forward-mode Jacobian of a
`CalibrationProblem` (a model without data: `CalibrationProblem.from_simulation`). The
results depend on the scaling of the columns and on the problem's weighting: Wulkow et al.
note that "even a slight change of the scaling or a different weighting can alter these
structures". Use scale-free columns (relative or log-parameter sensitivities) unless the
units are commensurable.

Example:
    >>> import jax
    >>> jax.config.update("jax_enable_x64", True)
    >>> import jcalib
    >>> model = jcalib.models.get("four_substance_reactions", observe="A")
    >>> report = identifiability(jcalib.CalibrationProblem.from_simulation(model))
    >>> report.rank, report.jacobian.n_essential  # kac, kad enter A only through their sum
    (2, 2)
    >>> [name for name, _ in report.jacobian.flat_directions[0]["components"][:2]]
    ['kac', 'kad']
"""

from __future__ import annotations

import equinox as eqx
import numpy as np
from jaxtyping import ArrayLike, Float

from jcalib.jsonable import to_jsonable
from jcalib.problems import AbstractProblem, JointProblem
from jcalib.sensitivity.local import (
    J_SCALINGS,
    _check_choice,
    _scale_problem_jacobian,
    loss_gradient,
    problem_point,
    residual_jacobian,
    running_loss_gradient,
)

__all__ = [
    "CORRELATION_COLUMNS",
    "FLAT_RATIO",
    "GAP_RATIO",
    "SIGMA_MIN_THRESHOLD",
    "CorrelationRanking",
    "IdentifiabilityReport",
    "JacobianAnalysis",
    "correlation_ranking",
    "identifiability",
    "jacobian_analysis",
    "n_essential_directions",
    "noise_rank_rtol",
    "null_parameters",
    "numerical_rank",
    "rank_tolerance",
]

CORRELATION_COLUMNS = ("outputs", "j_sensitivity")
"""Columns of the correlation ranking in `identifiability`: the scaled output (residual)
sensitivities, or the sensitivity functions of the running cost S_J(t, θ_i) of Bastogne et
al. 2007 §3.3.2 (`jcalib.sensitivity.local.j_sensitivity_functions`)."""

FLAT_RATIO = 100.0
"""s_1/s_k above this marks a flat direction (Wulkow et al. 2021, §2.2.1: "a condition
number of about 100 or larger")."""

GAP_RATIO = 10.0
"""A drop s_k/s_{k+1} of at least an order of magnitude between neighbouring singular values
counts as a "clear gap" (see `n_essential_directions`)."""

SIGMA_MIN_THRESHOLD = 1.0 / FLAT_RATIO
"""Default threshold on the relative σ_min spectrum, σ_min(j)/σ_min(1) (σ_min(1) is the norm
of the first, most sensitive column): a subset stops being well determined once its least
determined combination is 100 times weaker than the leading parameter, the same factor as
Wulkow's flat-direction rule. For unit-norm columns (``normalize=True``) 1/σ_min is the
collinearity index of Brun et al. (2001, Water Res. 35), critical at 10-15; use 0.1 there."""


# --- rank and null columns -------------------------------------------------------------------
def rank_tolerance(matrix: Float[ArrayLike, "m n"], *, rtol: float | None = None) -> float:
    """Absolute singular-value threshold of `numerical_rank`: ``rtol * s_1``.

    Args:
        matrix: any 2-D matrix.
        rtol: relative tolerance; None means NumPy's default ``max(m, n) * eps`` (the
            ``matrix_rank`` rule: singular values below it are indistinguishable from the
            rounding of the SVD itself). Sensitivities from an ODE solver are only accurate
            to about the solver's relative tolerance, so a *practical* rank may call for a
            larger ``rtol`` (e.g. 1e-6 for a solver at rtol 1e-8).
    """
    m = _as_matrix(matrix, "rank_tolerance")
    rtol = _rtol(rtol, m.shape, "rank_tolerance")
    s = np.linalg.svd(m, compute_uv=False)
    return float(rtol * (s[0] if s.size else 0.0))


def noise_rank_rtol(matrix: Float[ArrayLike, "m n"], sigma: float, *, delta: float = 1.0) -> float:
    """Noise-aware relative rank tolerance: ``sigma / (delta * s_1)`` for `numerical_rank`.

    With i.i.d. Gaussian noise of standard deviation ``sigma`` on every row of a sensitivity
    matrix S (rows in the units of the measurements, columns per unit of the analysed
    parameter coordinates), the Fisher information is SᵀS/σ², so the Cramér-Rao lower bound
    on the standard deviation of the parameter combination along the k-th right singular
    vector is σ/s_k (Walter & Pronzato 1997, "Identification of parametric models from
    experimental data", the Fisher information and its eigen-decomposition). A direction
    counts as practically identifiable when that bound is below ``delta``:

        s_k > σ / δ    ⇔    s_k / s_1 > rtol = σ / (δ s_1).

    ``delta`` is the largest standard deviation still worth calling "determined", in the
    columns' coordinates: for log-parameter columns (dy/d ln θ) ``delta = 1`` means an
    uncertainty of a factor e, the order of a vaguely known parameter's prior range; 0.1
    asks for about 10 %. Unlike a solver-accuracy tolerance, this one depends on the data's
    noise and on what precision is asked for, so report it with both.

    Args:
        matrix: the (unweighted) sensitivity matrix, rows in the units of ``sigma``.
        sigma: noise standard deviation of every row (> 0).
        delta: acceptable standard deviation of an identifiable combination (> 0).

    Returns:
        The relative tolerance. A value >= 1 means that no direction is determined to
        ``delta`` (rank 0); `numerical_rank` and `identifiability` accept only values below 1.

    Raises:
        ValueError: a bad matrix, a non-positive ``sigma`` or ``delta``, or an all-zero matrix.
    """
    m = _as_matrix(matrix, "noise_rank_rtol")
    if not (np.isfinite(sigma) and sigma > 0):
        raise ValueError(f"noise_rank_rtol: sigma must be a positive noise level; got {sigma!r}")
    if not (np.isfinite(delta) and delta > 0):
        raise ValueError(f"noise_rank_rtol: delta must be a positive standard deviation; got {delta!r}")
    s1 = float(np.linalg.svd(m, compute_uv=False)[0])
    if s1 == 0:
        raise ValueError("noise_rank_rtol: the matrix is all zero; no direction is identifiable")
    return float(sigma / (delta * s1))


def numerical_rank(matrix: Float[ArrayLike, "m n"], *, rtol: float | None = None) -> int:
    """Number of singular values above ``rank_tolerance(matrix, rtol=rtol)``.

    With the default ``rtol`` this equals ``numpy.linalg.matrix_rank(matrix)``. For a
    sensitivity matrix it is the practical identifiability degree of Bastogne et al. 2007
    (§3.1): how many parameter combinations the experiment distinguishes locally.

    Raises:
        ValueError: ``matrix`` is not 2-D or finite, or ``rtol`` is negative.
    """
    m = _as_matrix(matrix, "numerical_rank")
    rtol = _rtol(rtol, m.shape, "numerical_rank")
    s = np.linalg.svd(m, compute_uv=False)
    return int(np.sum(s > rtol * s[0])) if s.size and s[0] > 0 else 0


def null_parameters(
    matrix: Float[ArrayLike, "m n_params"], names, *, atol: float = 0.0
) -> tuple[str, ...]:
    """Names of the parameters whose sensitivity column has Euclidean norm <= ``atol``.

    ``atol = 0`` (default) finds exactly zero columns (structural non-identifiability, such
    as the dynamometer gains of the winding process, Bastogne et al. 2007 §4.4); pass the
    rank tolerance to also catch columns too small to raise the rank.
    """
    m = _as_matrix(matrix, "null_parameters")
    names = _names(names, m.shape[1], "null_parameters")
    if not atol >= 0:
        raise ValueError(f"null_parameters: atol must be >= 0; got {atol}")
    norms = np.linalg.norm(m, axis=0)
    return tuple(n for n, v in zip(names, norms) if v <= atol)


# --- correlation classification (Bastogne et al. 2007, §3.3.2) -------------------------------
class CorrelationRanking(eqx.Module):
    """Greedy σ_min ordering of sensitivity columns (Bastogne et al. 2007, eq. 13-15).

    Attributes:
        order: parameter names in the order selected.
        indices: their column indices in the analysed matrix.
        sigma_min: σ_min of the first j selected columns, j = 1..len(order); never
            increases with j (adding a column cannot raise the smallest singular value).
        normalized: whether columns were scaled to unit norm first (then σ_min is in
            [0, 1] and 1/σ_min is the collinearity index); otherwise σ_min(1) is the norm
            of the first column.
        excluded: parameters left out (zero columns, which cannot be normalised).
    """

    order: tuple[str, ...] = eqx.field(static=True)
    indices: np.ndarray
    sigma_min: np.ndarray
    normalized: bool = eqx.field(static=True)
    excluded: tuple[str, ...] = eqx.field(static=True)

    @property
    def relative_sigma_min(self) -> np.ndarray:
        """σ_min(j) / σ_min(1): the spectrum relative to the first column's norm."""
        s = np.asarray(self.sigma_min)
        return s / s[0]

    def subset(self, threshold: float = SIGMA_MIN_THRESHOLD) -> tuple[str, ...]:
        """The leading parameters selected before the *relative* σ_min first drops below
        ``threshold``."""
        below = np.flatnonzero(self.relative_sigma_min < threshold)
        n = int(below[0]) if below.size else len(self.order)
        return self.order[:n]

    def to_dict(self) -> dict:
        return {"order": list(self.order), "indices": np.asarray(self.indices).tolist(),
                "sigma_min": np.asarray(self.sigma_min).tolist(),
                "relative_sigma_min": self.relative_sigma_min.tolist(),
                "normalized": self.normalized, "excluded": list(self.excluded)}


def correlation_ranking(
    matrix: Float[ArrayLike, "m n_params"],
    names=None,
    *,
    start: str | int | None = None,
    normalize: bool = False,
    n_select: int | None = None,
) -> CorrelationRanking:
    """Rank parameters by increasing collinearity of their sensitivity columns.

    Σ starts with the column of ``start`` (Bastogne: the most J-sensitive parameter,
    eq. 13); step j adds the remaining column that maximises σ_min of the selected ones
    (eq. 14-15). Ties go to the lower column index.

    Args:
        matrix: sensitivity matrix, one column per parameter.
        names: parameter names (default ``"p0", "p1", ...``).
        start: first parameter (name or index); None takes the column of largest norm of
            ``matrix`` as given (before normalisation).
        normalize: scale every column to unit Euclidean norm first, so that σ_min measures
            collinearity only, not magnitude. The default (False) takes the columns as
            given, so σ_min weighs both: a parameter enters early when its influence is
            large *and* not explained by those already selected (as in Bastogne's Figure
            8, where the first four agree with the J-sensitivity ranking). Scale the
            columns first (relative or log sensitivities), or the units decide.
        n_select: how many parameters to rank (default: all non-zero columns).

    Returns:
        A `CorrelationRanking`.

    Raises:
        ValueError: bad shapes or names, an unknown or zero ``start`` column, a bad
            ``n_select``, or no non-zero column.
    """
    m = _as_matrix(matrix, "correlation_ranking")
    n_params = m.shape[1]
    names = _names(names, n_params, "correlation_ranking")
    norms = np.linalg.norm(m, axis=0)
    candidates = [j for j in range(n_params) if norms[j] > 0]
    excluded = tuple(names[j] for j in range(n_params) if norms[j] == 0)
    if not candidates:
        raise ValueError("correlation_ranking: every column of the matrix is zero")
    if start is None:
        first = int(np.argmax(norms))
    else:
        first = names.index(start) if isinstance(start, str) and start in names else start
        if not isinstance(first, (int, np.integer)) or not 0 <= first < n_params:
            raise ValueError(
                f"correlation_ranking: start must be a parameter name or column index; got "
                f"{start!r}; known: {', '.join(names)}"
            )
        first = int(first)
        if norms[first] == 0:
            raise ValueError(
                f"correlation_ranking: start {names[first]!r} has a zero sensitivity column; "
                "start with a parameter the outputs depend on"
            )
    if n_select is None:
        n_select = len(candidates)
    if not isinstance(n_select, (int, np.integer)) or not 1 <= n_select <= len(candidates):
        raise ValueError(
            f"correlation_ranking: n_select must be an integer in [1, {len(candidates)}] (the "
            f"non-zero columns); got {n_select!r}"
        )
    cols = m / norms[None, :] if normalize else m
    cols = np.where(norms[None, :] > 0, cols, 0.0)
    if cols.shape[0] > n_params:  # same singular values of column subsets, smaller matrix
        cols = np.linalg.qr(cols, mode="r")
    selected = [first]
    spectrum = [_sigma_min(cols[:, selected])]
    remaining = [j for j in candidates if j != first]
    while len(selected) < n_select:
        scores = [_sigma_min(cols[:, selected + [j]]) for j in remaining]
        best = int(np.argmax(scores))
        selected.append(remaining.pop(best))
        spectrum.append(scores[best])
    return CorrelationRanking(order=tuple(names[j] for j in selected),
                              indices=np.array(selected), sigma_min=np.array(spectrum),
                              normalized=bool(normalize), excluded=excluded)


def _sigma_min(columns):
    if columns.shape[0] < columns.shape[1]:
        return 0.0  # more columns than rows: rank deficient
    return float(np.linalg.svd(columns, compute_uv=False)[-1])


# --- essential directions (Wulkow et al. 2021, §2.2.1) ---------------------------------------
def n_essential_directions(
    singular_values: Float[ArrayLike, " d"],
    *,
    flat_ratio: float = FLAT_RATIO,
    gap_ratio: float | None = GAP_RATIO,
) -> tuple[int, str]:
    """Number of essential directions from singular values (any order), and the rule used.

    Rule: direction k is essential when s_1/s_k <= ``flat_ratio`` (Wulkow et al. 2021:
    "flat directions are usually identified by being assigned to singular values that lead
    to a condition number of about 100 or larger (if there is no other clear gap between the
    singular values)"). The gap clause, made precise: only when the ratio rule finds flat
    directions (κ > ``flat_ratio``) are the neighbour gaps g_k = s_k/s_{k+1} examined, for the
    k with s_1/s_k <= ``flat_ratio``² (k_ratio: the ratio rule's count; g at k_ratio is its
    own cut). If the largest of them is at some k != k_ratio, is at least ``gap_ratio`` and is
    strictly larger than the gap at the ratio rule's cut, the cut moves to that clearer gap:
    k essential directions. A clear gap can so drop directions the ratio rule keeps
    (s = (1, 0.5, 0.02, 0.005) has 2) or keep, up to a condition of ``flat_ratio``², ones it
    drops: s = (1, 4e-3, 1e-16) has 2, its only clear gap being where an exact degeneracy
    starts (issue 39 §3). A well-conditioned spectrum (κ <= ``flat_ratio``) keeps all
    directions whatever its gaps.

    Args:
        singular_values: non-negative, at least one positive.
        flat_ratio: the s_1/s_k threshold (> 1).
        gap_ratio: minimum neighbour ratio of a clear gap (> 1); None disables the gap rule.

    Returns:
        ``(n_essential, rule)`` with ``rule`` ``"ratio"`` or ``"gap"``.

    Raises:
        ValueError: empty, negative, non-finite or all-zero singular values, or thresholds
            not above 1.
    """
    s = np.sort(np.asarray(singular_values, dtype=np.float64).reshape(-1))[::-1]
    if s.size == 0 or not np.all(np.isfinite(s)) or np.any(s < 0) or s[0] == 0:
        raise ValueError(
            "n_essential_directions: singular_values must be finite, non-negative and not "
            f"all zero; got {np.asarray(singular_values)!r}"
        )
    if not flat_ratio > 1:
        raise ValueError(f"n_essential_directions: flat_ratio must be > 1; got {flat_ratio}")
    if gap_ratio is not None and not gap_ratio > 1:
        raise ValueError(
            f"n_essential_directions: gap_ratio must be > 1 or None (no gap rule); got {gap_ratio}"
        )
    k_ratio = int(np.sum(s * flat_ratio >= s[0]))
    if gap_ratio is None or k_ratio == s.size:
        return k_ratio, "ratio"
    # g_1 .. g_{d-1}: inf where s_k > 0 = s_{k+1}, no gap (1) between two zeros
    gaps = np.divide(s[:-1], s[1:], out=np.where(s[:-1] > 0, np.inf, 1.0), where=s[1:] > 0)
    gaps = gaps[: int(np.sum(s * flat_ratio**2 >= s[0]))]  # the cuts a gap may make
    k_gap = int(np.argmax(gaps)) + 1
    if k_gap != k_ratio and gaps[k_gap - 1] >= gap_ratio and gaps[k_gap - 1] > gaps[k_ratio - 1]:
        return k_gap, "gap"
    return k_ratio, "ratio"


class JacobianAnalysis(eqx.Module):
    """Singular-value analysis of a (scaled) Jacobian (Wulkow et al. 2021, §2.2.1).

    Attributes:
        parameter_names: column names.
        singular_values: s_1 >= ... >= s_d, length ``n_params`` (zeros appended when the
            matrix has fewer rows than columns).
        right_singular_vectors: ``(n_params, n_params)``, column k is the parameter
            direction of s_k; signs are fixed so that its largest component is positive.
        condition_number: κ = s_1/s_d (inf when s_d = 0).
        n_essential: number of essential directions (`n_essential_directions`).
        n_essential_ratio_rule: the count of the s_1/s_k <= flat_ratio rule alone.
        rule: ``"ratio"`` or ``"gap"``, which rule set ``n_essential``.
        flat_ratio, gap_ratio: the thresholds used.
    """

    parameter_names: tuple[str, ...] = eqx.field(static=True)
    singular_values: np.ndarray
    right_singular_vectors: np.ndarray
    condition_number: float
    n_essential: int = eqx.field(static=True)
    n_essential_ratio_rule: int = eqx.field(static=True)
    rule: str = eqx.field(static=True)
    flat_ratio: float = eqx.field(static=True)
    gap_ratio: float | None = eqx.field(static=True)

    @property
    def flat_directions(self) -> list[dict]:
        """One entry per flat direction k > n_essential: its index k (1-based), s_k,
        s_1/s_k and the parameter combination it mixes, ``[(name, component), ...]``
        sorted by decreasing magnitude (a unit vector in the analysed coordinates)."""
        s = np.asarray(self.singular_values)
        v = np.asarray(self.right_singular_vectors)
        out = []
        for k in range(self.n_essential, s.size):
            order = np.argsort(-np.abs(v[:, k]), kind="stable")
            out.append({
                "index": k + 1,
                "singular_value": float(s[k]),
                "ratio_to_largest": float(s[0] / s[k]) if s[k] > 0 else float("inf"),
                "components": [(self.parameter_names[i], float(v[i, k])) for i in order],
            })
        return out

    def to_dict(self) -> dict:
        return {
            "parameter_names": list(self.parameter_names),
            "singular_values": np.asarray(self.singular_values).tolist(),
            "relative_singular_values": (np.asarray(self.singular_values)
                                         / float(self.singular_values[0])).tolist(),
            "condition_number": to_jsonable(self.condition_number),
            "n_essential": self.n_essential,
            "n_essential_ratio_rule": self.n_essential_ratio_rule,
            "rule": self.rule,
            "flat_ratio": self.flat_ratio,
            "gap_ratio": self.gap_ratio,
            "flat_directions": [
                {**d, "ratio_to_largest": to_jsonable(d["ratio_to_largest"]),
                 "components": [[n, c] for n, c in d["components"]]}
                for d in self.flat_directions
            ],
        }


def jacobian_analysis(
    matrix: Float[ArrayLike, "m n_params"],
    names=None,
    *,
    flat_ratio: float = FLAT_RATIO,
    gap_ratio: float | None = GAP_RATIO,
) -> JacobianAnalysis:
    """Singular values, condition number, essential and flat directions of ``matrix``.

    Args:
        matrix: the Jacobian (rows: residuals or outputs, columns: parameters), scaled as
            the analysis should see it (Wulkow et al.: relative residuals, log parameters).
        names: parameter names (default ``"p0", "p1", ...``).
        flat_ratio, gap_ratio: see `n_essential_directions`.

    Raises:
        ValueError: a matrix that is not 2-D, not finite or all zero; bad names or thresholds.
    """
    m = _as_matrix(matrix, "jacobian_analysis")
    n_params = m.shape[1]
    names = _names(names, n_params, "jacobian_analysis")
    _, s, vt = np.linalg.svd(m, full_matrices=True)
    s = np.concatenate([s, np.zeros(n_params - s.size)])
    n_ess, rule = n_essential_directions(s, flat_ratio=flat_ratio, gap_ratio=gap_ratio)
    n_ratio, _ = n_essential_directions(s, flat_ratio=flat_ratio, gap_ratio=None)
    v = vt.T
    biggest = v[np.argmax(np.abs(v), axis=0), np.arange(n_params)]
    v = v * np.where(biggest < 0, -1.0, 1.0)[None, :]
    return JacobianAnalysis(
        parameter_names=names, singular_values=s, right_singular_vectors=v,
        condition_number=float(s[0] / s[-1]) if s[-1] > 0 else float("inf"),
        n_essential=n_ess, n_essential_ratio_rule=n_ratio, rule=rule,
        flat_ratio=float(flat_ratio), gap_ratio=None if gap_ratio is None else float(gap_ratio),
    )


# --- everything from one Jacobian -------------------------------------------------------------
class IdentifiabilityReport(eqx.Module):
    """Local identifiability of a problem at one point (see the module docstring).

    Attributes:
        parameter_names: the analysed parameters (the problem's free ones).
        theta: their physical values at the analysed point.
        scaling: column scaling of the analysed matrix (`J_SCALINGS`).
        matrix: the analysed matrix ``(n_rows, n_params)`` (not in `to_dict`): the scaled
            residual Jacobian (d r = -d y for absolute weighting).
        matrix_shape: ``(n_rows, n_params)`` of the analysed matrix.
        rank: numerical rank (practical identifiability degree, Bastogne §3.1).
        rank_rtol, rank_tolerance: the relative tolerance and the absolute singular-value
            threshold used (`rank_tolerance`).
        column_norms: Euclidean norm of each column.
        null_parameters: parameters whose column norm is <= ``rank_tolerance`` (in
            particular exactly zero columns): not identifiable.
        jacobian: the `JacobianAnalysis` (singular values, κ, essential/flat directions).
        correlation: the `CorrelationRanking` of the non-null parameters.
        correlation_columns: what the correlation ranking ranks (`CORRELATION_COLUMNS`):
            the analysed matrix's columns (``"outputs"``) or the running-cost sensitivity
            functions S_J(t, θ_i) in ``j_sensitivity_scaling`` coordinates (``"j_sensitivity"``).
        sigma_min_threshold: threshold of ``proposed_subset`` on the relative σ_min.
        proposed_subset: the correlation ranking's parameters before σ_min drops below
            the threshold: a well-conditioned starting subset (Bastogne §3.4).
        j_sensitivity: |dJ/dθ| per parameter, in the coordinates of
            ``j_sensitivity_scaling`` (Bastogne eq. 12: ``"absolute"``); 0 for a problem
            `~jcalib.problems.CalibrationProblem.from_simulation` at its own ``theta``.
        j_sensitivity_order: parameter names by decreasing J-sensitivity.
    """

    parameter_names: tuple[str, ...] = eqx.field(static=True)
    theta: np.ndarray
    scaling: str = eqx.field(static=True)
    matrix: np.ndarray
    matrix_shape: tuple[int, int] = eqx.field(static=True)
    rank: int = eqx.field(static=True)
    rank_rtol: float = eqx.field(static=True)
    rank_tolerance: float = eqx.field(static=True)
    column_norms: np.ndarray
    null_parameters: tuple[str, ...] = eqx.field(static=True)
    jacobian: JacobianAnalysis
    correlation: CorrelationRanking
    correlation_columns: str = eqx.field(static=True)
    sigma_min_threshold: float = eqx.field(static=True)
    proposed_subset: tuple[str, ...] = eqx.field(static=True)
    j_sensitivity: np.ndarray
    j_sensitivity_scaling: str = eqx.field(static=True)
    j_sensitivity_order: tuple[str, ...] = eqx.field(static=True)

    @property
    def identifiable_parameters(self) -> tuple[str, ...]:
        """Parameters with a non-null sensitivity column."""
        return tuple(n for n in self.parameter_names if n not in self.null_parameters)

    def to_dict(self) -> dict:
        return {
            "parameter_names": list(self.parameter_names),
            "theta": dict(zip(self.parameter_names, np.asarray(self.theta).tolist())),
            "scaling": self.scaling,
            "matrix_shape": list(self.matrix_shape),
            "rank": self.rank,
            "rank_rtol": self.rank_rtol,
            "rank_tolerance": self.rank_tolerance,
            "column_norms": dict(zip(self.parameter_names,
                                     np.asarray(self.column_norms).tolist())),
            "null_parameters": list(self.null_parameters),
            "identifiable_parameters": list(self.identifiable_parameters),
            "jacobian": self.jacobian.to_dict(),
            "correlation": self.correlation.to_dict(),
            "correlation_columns": self.correlation_columns,
            "sigma_min_threshold": self.sigma_min_threshold,
            "proposed_subset": list(self.proposed_subset),
            "j_sensitivity": dict(zip(self.parameter_names, np.asarray(self.j_sensitivity).tolist())),
            "j_sensitivity_scaling": self.j_sensitivity_scaling,
            "j_sensitivity_order": list(self.j_sensitivity_order),
        }


def identifiability(
    problem: AbstractProblem,
    theta: Float[ArrayLike, " n_free"] | None = None,
    *,
    coordinates: str = "physical",
    scaling: str = "internal",
    rank_rtol: float | None = None,
    flat_ratio: float = FLAT_RATIO,
    gap_ratio: float | None = GAP_RATIO,
    start: str | None = None,
    normalize_columns: bool = False,
    sigma_min_threshold: float = SIGMA_MIN_THRESHOLD,
    j_sensitivity_scaling: str = "absolute",
    correlation_columns: str = "outputs",
) -> IdentifiabilityReport:
    """Rank, null parameters, rankings and essential directions from one Jacobian.

    The matrix is the problem's residual Jacobian d r / d θ_internal (one forward-mode
    Jacobian; the problem's weighting scales the rows: ``"relative"`` weighting gives
    Wulkow's J), with columns rescaled per ``scaling`` in `J_SCALINGS` (default
    ``"internal"``: as the problem's methods see it). The same Jacobian and the residuals
    give the J-sensitivity (2/n) Jᵀr.

    A model without data is analysed through ``CalibrationProblem.from_simulation(model,
    theta)`` (its own outputs as data, relative weighting): with ``scaling="log"`` the
    matrix holds the relative sensitivities d ln y / d ln θ of Bastogne et al.

    Args:
        problem: a `CalibrationProblem`.
        theta: the point, the free parameters in ``coordinates``; None: the nominal values.
        coordinates: ``"physical"`` (default) or ``"internal"``, the coordinates of ``theta``.
        scaling: column scaling, one of `J_SCALINGS`.
        rank_rtol: relative rank tolerance (`rank_tolerance`; None: NumPy's default).
        flat_ratio, gap_ratio: essential-direction rule (`n_essential_directions`).
        start: first parameter of the correlation ranking: a name, None (the largest
            column of the analysed matrix) or ``"j_sensitivity"`` (the most J-sensitive
            parameter, Bastogne eq. 13).
        normalize_columns: rank unit-norm columns (pure collinearity) instead of the
            scaled ones (`correlation_ranking`'s ``normalize``).
        sigma_min_threshold: relative σ_min, σ_min(j)/σ_min(1), below which the proposed
            subset stops (`SIGMA_MIN_THRESHOLD`).
        j_sensitivity_scaling: coordinates of the J-sensitivity (`j_sensitivity`).
        correlation_columns: ``"outputs"`` (default: the analysed matrix's columns) or
            ``"j_sensitivity"``: the sensitivity functions of the running cost, S_J(t, θ_i)
            ∈ R^N in ``j_sensitivity_scaling`` coordinates, as Bastogne et al. define the
            correlation classification (§3.3.2, `j_sensitivity_functions`); they need
            data that the model does not fit exactly (at a zero residual they vanish).

    Returns:
        An `IdentifiabilityReport`.

    Raises:
        ValueError: ``problem`` is not a `CalibrationProblem`; bad arguments (named in the
            message) or non-finite sensitivities (a failed solve).
    """
    if not isinstance(problem, AbstractProblem):
        raise ValueError(
            f"identifiability: problem must be a CalibrationProblem; got {type(problem).__name__}; for a "
            "model without data pass CalibrationProblem.from_simulation(model, theta)"
        )
    _check_choice(scaling, J_SCALINGS, "identifiability", "scaling")
    _check_choice(j_sensitivity_scaling, J_SCALINGS, "identifiability", "j_sensitivity_scaling")
    _check_choice(correlation_columns, CORRELATION_COLUMNS, "identifiability", "correlation_columns")
    z = problem_point(problem, theta, coordinates, "identifiability")
    jac, residuals = residual_jacobian(problem, z)
    matrix = _scale_problem_jacobian(problem, z, jac, scaling, "identifiability")
    j_sens = np.abs(loss_gradient(problem, z, jac, residuals, j_sensitivity_scaling, "identifiability"))
    columns = None
    if correlation_columns == "j_sensitivity":
        columns = running_loss_gradient(problem, z, jac, residuals, j_sensitivity_scaling, "identifiability")
    return _report(matrix, problem.free_names, np.asarray(problem.to_physical(z)), scaling, rank_rtol,
                   flat_ratio, gap_ratio, start, normalize_columns, sigma_min_threshold, j_sens,
                   j_sensitivity_scaling, columns)


class ExperimentContributions(eqx.Module):
    """Which experiment of a `jcalib.problems.JointProblem` adds which essential direction.

    Attributes:
        experiment_names: the experiments, in the order they are added.
        parameter_names: the joint problem's free parameters (the analysed columns).
        alone: one `JacobianAnalysis` per experiment, of its rows alone (columns of other
            experiments' parameters are zero there, so they count as flat).
        cumulative: one `JacobianAnalysis` per experiment, of the rows of experiments 1..k.
        rank_alone, rank_cumulative: numerical ranks of the same matrices.
        added: essential directions that experiment k adds, ``cumulative[k].n_essential``
            minus that of experiments 1..k-1 (the first experiment: its own count).
    """

    experiment_names: tuple[str, ...] = eqx.field(static=True)
    parameter_names: tuple[str, ...] = eqx.field(static=True)
    alone: tuple[JacobianAnalysis, ...]
    cumulative: tuple[JacobianAnalysis, ...]
    rank_alone: tuple[int, ...] = eqx.field(static=True)
    rank_cumulative: tuple[int, ...] = eqx.field(static=True)
    added: tuple[int, ...] = eqx.field(static=True)

    def to_dict(self) -> dict:
        return {"experiment_names": list(self.experiment_names), "parameter_names": list(self.parameter_names),
                "rank_alone": list(self.rank_alone), "rank_cumulative": list(self.rank_cumulative),
                "essential_alone": [a.n_essential for a in self.alone],
                "essential_cumulative": [c.n_essential for c in self.cumulative], "added": list(self.added),
                "alone": [a.to_dict() for a in self.alone], "cumulative": [c.to_dict() for c in self.cumulative]}


def experiment_contributions(
    problem: JointProblem,
    theta: Float[ArrayLike, " n_free"] | None = None,
    *,
    coordinates: str = "physical",
    scaling: str = "internal",
    rank_rtol: float | None = None,
    flat_ratio: float = FLAT_RATIO,
    gap_ratio: float | None = GAP_RATIO,
) -> ExperimentContributions:
    """Rank and essential directions of a joint problem's Jacobian, experiment by experiment.

    One forward-mode Jacobian of all experiments (rows stacked in experiment order); its
    rows of experiment k alone, and of experiments 1..k together, are analysed as in
    `identifiability` (same ``scaling``, ``rank_rtol``, ``flat_ratio``, ``gap_ratio``), so
    the result says what each further experiment adds (e.g. a second initial concentration
    that makes a flat direction essential).

    Args:
        problem: a `jcalib.problems.JointProblem`.
        theta, coordinates, scaling, rank_rtol, flat_ratio, gap_ratio: as in `identifiability`.

    Returns:
        An `ExperimentContributions`.

    Raises:
        ValueError: ``problem`` is not a JointProblem; bad arguments; non-finite sensitivities.
    """
    if not isinstance(problem, JointProblem):
        raise ValueError(f"experiment_contributions: problem must be a JointProblem; got {type(problem).__name__}")
    _check_choice(scaling, J_SCALINGS, "experiment_contributions", "scaling")
    z = problem_point(problem, theta, coordinates, "experiment_contributions")
    jac, _ = residual_jacobian(problem, z)
    matrix = _scale_problem_jacobian(problem, z, jac, scaling, "experiment_contributions")
    rtol = _rtol(rank_rtol, matrix.shape, "experiment_contributions", "rank_rtol")
    alone, cumulative, rank_alone, rank_cumulative, added = [], [], [], [], []
    for rows in problem.experiment_rows:
        own, upto = matrix[rows], matrix[: rows.stop]
        alone.append(jacobian_analysis(own, problem.free_names, flat_ratio=flat_ratio, gap_ratio=gap_ratio))
        cumulative.append(jacobian_analysis(upto, problem.free_names, flat_ratio=flat_ratio, gap_ratio=gap_ratio))
        rank_alone.append(numerical_rank(own, rtol=rtol))
        rank_cumulative.append(numerical_rank(upto, rtol=rtol))
        added.append(cumulative[-1].n_essential - (cumulative[-2].n_essential if len(cumulative) > 1 else 0))
    return ExperimentContributions(problem.experiment_names, problem.free_names, tuple(alone), tuple(cumulative),
                                   tuple(rank_alone), tuple(rank_cumulative), tuple(added))


def _report(matrix, names, theta, scaling, rank_rtol, flat_ratio, gap_ratio, start,
            normalize, sigma_min_threshold, j_sens, j_scaling, correlation_matrix=None):
    if not sigma_min_threshold >= 0:
        raise ValueError(
            f"identifiability: sigma_min_threshold must be >= 0; got {sigma_min_threshold}"
        )
    rtol = _rtol(rank_rtol, matrix.shape, "identifiability", "rank_rtol")
    tolerance = rank_tolerance(matrix, rtol=rtol)
    rank = numerical_rank(matrix, rtol=rtol)
    norms = np.linalg.norm(matrix, axis=0)
    null = tuple(n for n, v in zip(names, norms) if v <= tolerance)
    analysis = jacobian_analysis(matrix, names, flat_ratio=flat_ratio, gap_ratio=gap_ratio)
    keep = [j for j, n in enumerate(names) if n not in null]
    if start == "j_sensitivity":
        start = names[max(keep, key=lambda j: j_sens[j])]
    if start is not None and start not in names:
        raise ValueError(
            f"identifiability: unknown start parameter {start!r}; known: {', '.join(names)}"
        )
    if start is not None and start in null:
        raise ValueError(
            f"identifiability: start parameter {start!r} has a null sensitivity; choose one of "
            f"{', '.join(names[j] for j in keep)}"
        )
    kind = "outputs" if correlation_matrix is None else "j_sensitivity"
    columns = matrix if correlation_matrix is None else correlation_matrix
    zero = [names[j] for j in keep if not np.any(columns[:, j])]
    if kind == "j_sensitivity" and zero:
        raise ValueError(
            f"identifiability: correlation_columns='j_sensitivity' needs non-zero cost sensitivity "
            f"functions, but those of {', '.join(zero)} are zero (a problem whose data the model fits "
            "exactly, e.g. from_simulation at its own theta?); use data with a residual or "
            "correlation_columns='outputs'"
        )
    ranking = correlation_ranking(columns[:, keep], [names[j] for j in keep], start=start,
                                  normalize=normalize)
    ranking = CorrelationRanking(order=ranking.order, indices=np.array(keep)[ranking.indices],
                                 sigma_min=ranking.sigma_min, normalized=ranking.normalized,
                                 excluded=ranking.excluded + null)
    j_order = tuple(names[i] for i in np.argsort(-j_sens, kind="stable"))
    return IdentifiabilityReport(
        parameter_names=tuple(names), theta=np.asarray(theta), scaling=scaling,
        matrix=matrix, matrix_shape=tuple(int(d) for d in matrix.shape), rank=rank, rank_rtol=float(rtol),
        rank_tolerance=tolerance, column_norms=norms, null_parameters=null, jacobian=analysis,
        correlation=ranking, correlation_columns=kind, sigma_min_threshold=float(sigma_min_threshold),
        proposed_subset=ranking.subset(sigma_min_threshold), j_sensitivity=j_sens,
        j_sensitivity_scaling=j_scaling, j_sensitivity_order=j_order,
    )


# --- input checks -----------------------------------------------------------------------------
def _as_matrix(matrix, where):
    m = np.asarray(matrix, dtype=np.float64)
    if m.ndim != 2 or 0 in m.shape:
        raise ValueError(
            f"{where}: matrix must be a non-empty 2-D array (rows: outputs/residuals, columns: "
            f"parameters); got shape {m.shape}"
        )
    if not np.all(np.isfinite(m)):
        raise ValueError(f"{where}: matrix has NaN or inf entries (a failed solve?)")
    return m


def _names(names, n_params, where):
    if names is None:
        return tuple(f"p{j}" for j in range(n_params))
    names = tuple(names)
    if len(names) != n_params or not all(isinstance(n, str) for n in names):
        raise ValueError(
            f"{where}: names must be {n_params} strings, one per column; got {names!r}"
        )
    if len(set(names)) != len(names):
        raise ValueError(f"{where}: names must be unique; got {names!r}")
    return names


def _rtol(rtol, shape, where, what="rtol"):
    if rtol is None:
        return max(shape) * float(np.finfo(np.float64).eps)
    if not (isinstance(rtol, (int, float, np.floating)) and 0 <= rtol < 1):
        raise ValueError(f"{where}: {what} must be in [0, 1) or None; got {rtol!r}")
    return float(rtol)
