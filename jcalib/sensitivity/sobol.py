"""Variance-based (Sobol') global sensitivity indices and Algorithm 1 of Zhang & Mikelsons (2023).

`sobol_indices` draws a Saltelli design (`saltelli_design`), evaluates a jcalib simulator (a
model, a surrogate, or a JAX function wrapped as `jcalib.model.FunctionSimulator`; one
`simulate_batch` call) on every sample and estimates, for every output element at once,

- first-order indices, Saltelli et al. (2010): ``S_i = mean(f_B (f_ABi - f_A)) / V``,
- total-order indices, Jansen (1999): ``ST_i = 0.5 mean((f_A - f_ABi)^2) / V``,
- optionally second-order indices, Saltelli (2002):
  ``S_ij = mean(f_BAi f_ABj - f_A f_B) / V - S_i - S_j``,

with ``V = var([f_A; f_B])`` (``ddof=0``), exactly as ``SALib.analyze.sobol.analyze`` does
(including its centring and scaling of the outputs by their mean and standard deviation over
all samples, which the first- and second-order estimators are not invariant to). Indices
over time (Aka et al. 2023, app. B) are the per-element indices; eq. (12) of Zhang &
Mikelsons (2023) averages the first-order indices over all time steps and outputs
(`SobolResult.averaged_first_order`), and `select_identifiable` is their Algorithm 1 /
eq. (13).

Example:
    >>> import jax, jax.numpy as jnp
    >>> from jcalib.model import FunctionSimulator
    >>> space = ParameterSpace([Parameter("x1", 0.0, -1.0, 1.0), Parameter("x2", 0.0, -1.0, 1.0)])
    >>> simulator = FunctionSimulator(lambda th: th[0] + 2.0 * th[1], space)  # outputs (1, 1)
    >>> result = sobol_indices(jax.random.key(0), simulator, None, 1024)
    >>> [round(float(s), 2) for s in result.first_order.ravel()]
    [0.2, 0.8]
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, PRNGKeyArray
from scipy.stats import norm, qmc

from jcalib.jsonable import to_jsonable
from jcalib.model import (
    AbstractSimulator,
    FunctionSimulator,
    SimulationError,
    SolveStatus,
    check_simulator,
    simulate_batch,
)
from jcalib.parameters import Parameter, ParameterSpace  # noqa: F401  (Parameter: doctest)

__all__ = [
    "Selection",
    "SobolResult",
    "saltelli_design",
    "select_identifiable",
    "sobol_indices",
]

SAMPLERS = ("salib", "scipy")

CONSTANT_RTOL = 1e-10
"""An output element is *constant* when its range over all samples is at most
``CONSTANT_RTOL * max |value|``: no parameter moves it beyond round-off (an adaptive solver
changes its step sequence with theta, so an untouched output still jitters at ~1e-16
relative). Its indices are set to 0 and it is left out of the averages (eq. 12)."""

DEFAULT_CHUNK = 16384
"""Samples per jitted, vmapped call of a `FunctionSimulator` (other simulators use
`simulate_batch`'s own default)."""

_BLOCK_ELEMENTS = 2**24
"""Largest ``n_base * n_params * block`` temporary of the estimators (128 MiB of float64);
more output elements are processed in column blocks of one compiled shape."""


# --- design -------------------------------------------------------------------------------
def _check_n(n, what="n") -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 2:
        raise ValueError(f"{what} must be an integer >= 2 (the number of base samples); got {n!r}")
    n = int(n)
    if n & (n - 1):
        # SALib (through scipy's Sobol sampler) warns rather than refuses: the estimates stay
        # consistent, only the Sobol sequence's balance properties are lost.
        warnings.warn(
            f"{what}={n} is not a power of 2: the Sobol' sequence loses its balance properties "
            f"(use {2 ** math.ceil(math.log2(n))} or {2 ** math.floor(math.log2(n))})",
            UserWarning, stacklevel=3,
        )
    return n


def _seed(key: PRNGKeyArray) -> int:
    """An integer seed for NumPy/scipy samplers from a jax key (as `ParameterSpace.sample`)."""
    return int(jax.random.randint(key, (), 0, np.iinfo(np.int32).max))


def _unit_design(n_params: int, n: int, key: PRNGKeyArray, second_order: bool,
                 sampler: str) -> np.ndarray:
    seed = _seed(key)
    with warnings.catch_warnings():  # our own power-of-2 warning replaces scipy's
        warnings.filterwarnings("ignore", message=".*balance properties of Sobol.*")
        if sampler == "salib":
            from SALib.sample import sobol as salib_sobol

            problem = {"num_vars": n_params, "names": [f"x{i}" for i in range(n_params)],
                       "bounds": [[0.0, 1.0]] * n_params}
            return salib_sobol.sample(problem, n, calc_second_order=second_order,
                                      scramble=True, seed=seed)
        base = qmc.Sobol(2 * n_params, scramble=True, rng=np.random.default_rng(seed)).random(n)
    a, b = base[:, :n_params], base[:, n_params:]
    diag = np.arange(n_params)
    ab = np.repeat(a[:, None, :], n_params, axis=1)  # AB_i: A with column i from B
    ab[:, diag, diag] = b
    blocks = [a[:, None, :], ab]
    if second_order:
        ba = np.repeat(b[:, None, :], n_params, axis=1)  # BA_i: B with column i from A
        ba[:, diag, diag] = a
        blocks.append(ba)
    blocks.append(b[:, None, :])
    return np.concatenate(blocks, axis=1).reshape(-1, n_params)


def saltelli_design(
    key: PRNGKeyArray,
    space: ParameterSpace,
    n: int,
    *,
    second_order: bool = False,
    sampler: str = "salib",
) -> Float[Array, "n_samples n_params"]:
    """Saltelli's cross-sampled Sobol' design in physical units, in SALib's row layout.

    Per base row: ``A, AB_1 .. AB_D, [BA_1 .. BA_D,] B`` where ``A`` and ``B`` are the two
    halves of a scrambled ``2D``-dimensional Sobol' point and ``AB_i`` is ``A`` with column
    ``i`` taken from ``B`` (``BA_i`` the reverse). Points are drawn in the unit cube and
    mapped with ``space.from_unit`` (uniform in internal coordinates, i.e. log-uniform for
    log-scale parameters).

    Args:
        key: the design's randomness (the scramble seed is drawn from it).
        space: the parameters; each needs finite bounds (`ParameterSpace.check_box`).
        n: base samples ``N``; a power of 2 (a ``UserWarning`` otherwise, as SALib/scipy).
        second_order: include the ``BA_i`` blocks (needed for second-order indices).
        sampler: ``"salib"`` (``SALib.sample.sobol.sample``) or ``"scipy"`` (the same design
            built from ``scipy.stats.qmc.Sobol``); both are scrambled Sobol' designs, but
            seeded differently, so they give different (equally valid) points.

    Returns:
        ``(n (D + 2), D)`` samples, or ``(n (2D + 2), D)`` with ``second_order``.

    Raises:
        ValueError: ``n`` is not an integer >= 2, an unknown sampler, ``space`` is not a
            `ParameterSpace` or has a parameter without finite bounds.
    """
    _check_space(space, "saltelli_design")
    n = _check_n(n)
    if sampler not in SAMPLERS:
        raise ValueError(f"saltelli_design: unknown sampler {sampler!r}; use one of {SAMPLERS}")
    unit = _unit_design(space.n_params, n, key, second_order, sampler)
    return space.from_unit(jnp.asarray(unit, dtype=jnp.float64))


# --- results ------------------------------------------------------------------------------
class Selection(eqx.Module):
    """Algorithm 1 of Zhang & Mikelsons (2023): possibly identifiable parameters.

    Attributes:
        selected: the kept parameters, in descending order of their averaged index.
        sorted_names: all parameters, sorted by descending averaged index.
        sorted_indices: their averaged first-order indices (eq. 12), same order.
        ratios: drop ratios (eq. 13) at every position: ``ratios[0] = r(0,1) = log10(1 / S[0])``
            and ``ratios[i] = r(i-1,i) = log10(S[i-1] / S[i])``; ``inf`` where ``S[i] <= 0``
            (``nan`` where ``S[i-1]`` is also <= 0).
        K: the largest tolerated drop, ``max(r(0,1), r(1,2))``.
        delta: the smallest index kept.
        stop_index: position in ``sorted_names`` where the walk stopped (``len`` if never).
        stop_reason: ``"below_delta"`` (``S[i] < delta``; non-positive estimates count as
            below), ``"drop_above_K"`` (``r(i-1,i) > K``) or ``"all_selected"``.
    """

    selected: tuple[str, ...] = eqx.field(static=True)
    sorted_names: tuple[str, ...] = eqx.field(static=True)
    sorted_indices: Float[Array, " n_params"]
    ratios: Float[Array, " n_params"]
    K: float
    delta: float
    stop_index: int = eqx.field(static=True)
    stop_reason: str = eqx.field(static=True)

    def to_dict(self) -> dict:
        """JSON-able dict (non-finite ratios become None)."""
        return {
            "selected": list(self.selected),
            "sorted_names": list(self.sorted_names),
            "sorted_indices": to_jsonable(self.sorted_indices),
            "ratios": to_jsonable(self.ratios),
            "K": float(self.K) if math.isfinite(self.K) else None,
            "delta": float(self.delta),
            "stop_index": self.stop_index,
            "stop_reason": self.stop_reason,
        }


def select_identifiable(
    averaged_indices: Float[np.ndarray, " n_params"],
    names: Sequence[str],
    delta: float = 1e-3,
) -> Selection:
    """Algorithm 1 of Zhang & Mikelsons (2023): walk the sorted averaged indices.

    The averaged first-order indices (eq. 12) are sorted in descending order ``S[0] >= S[1]
    >= ...``; the drop ratios are ``r(0,1) = log10(1/S[0])`` and ``r(i-1,i) =
    log10(S[i-1]/S[i])`` (eq. 13), and ``K = max(r(0,1), r(1,2))``. Walking down the list,
    a parameter is kept while ``S[i] >= delta`` and ``r(i-1,i) <= K``; the walk stops at the
    first failure (so at least the first two are kept when both reach ``delta``).

    Args:
        averaged_indices: one averaged first-order index per parameter (estimator noise can
            make them slightly negative; non-positive values count as below ``delta``).
        names: the parameter names, same order.
        delta: the smallest index kept (the paper's ``delta = 0.001``).

    Returns:
        A `Selection`.

    Raises:
        ValueError: fewer than 2 parameters, mismatched lengths, non-finite indices,
            duplicate names or ``delta <= 0``.

    Example:
        >>> sel = select_identifiable([0.3, 0.2, 0.01, 0.005], ["a", "b", "c", "d"])
        >>> sel.selected, sel.stop_reason
        (('a', 'b'), 'drop_above_K')
    """
    s = np.asarray(averaged_indices, dtype=np.float64)
    names = tuple(names)
    if s.ndim != 1:
        raise ValueError(f"select_identifiable: averaged_indices must be 1-D; got shape {s.shape}")
    if s.size != len(names):
        raise ValueError(f"select_identifiable: {s.size} averaged_indices but {len(names)} names; "
                         "pass one name per index")
    if s.size < 2:
        raise ValueError(f"select_identifiable: Algorithm 1 needs at least 2 parameters (K uses "
                         f"the two largest indices); got {s.size}")
    if len(set(names)) != len(names):
        raise ValueError(f"select_identifiable: duplicate names in {names}")
    if not np.all(np.isfinite(s)):
        raise ValueError(f"select_identifiable: averaged_indices must be finite; got {s.tolist()}")
    if not (isinstance(delta, (int, float)) and delta > 0):
        raise ValueError(f"select_identifiable: delta must be a positive number; got {delta!r}")

    order = np.argsort(-s, kind="stable")
    s_sorted = s[order]
    previous = np.concatenate([[1.0], s_sorted[:-1]])  # r(0,1) compares with 1, the maximum
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = np.where(s_sorted > 0,
                          np.log10(np.where(previous > 0, previous, np.nan)
                                   / np.where(s_sorted > 0, s_sorted, 1.0)),
                          np.where(previous > 0, np.inf, np.nan))
    k = float(max(ratios[0], ratios[1])) if np.all(np.isfinite(ratios[:2])) else math.inf
    stop, reason = s.size, "all_selected"
    for i in range(s.size):
        if not s_sorted[i] >= delta:
            stop, reason = i, "below_delta"
            break
        if ratios[i] > k:
            stop, reason = i, "drop_above_K"
            break
    sorted_names = tuple(names[i] for i in order)
    return Selection(selected=sorted_names[:stop], sorted_names=sorted_names,
                     sorted_indices=jnp.asarray(s_sorted), ratios=jnp.asarray(ratios), K=k,
                     delta=float(delta), stop_index=stop, stop_reason=reason)


class SobolResult(eqx.Module):
    """Sobol' indices of every output element, their bootstrap intervals and averages.

    Attributes:
        names: the parameter names (first axis of the indices).
        output_shape: shape of one evaluation (``(n_times, n_outputs)`` for a model).
        first_order, total_order: ``(D, *output_shape)``; 0 on constant elements.
        first_order_conf, total_order_conf: bootstrap half-widths, same shapes:
            ``z_{(1+confidence)/2}`` times the standard deviation (``ddof=1``) of the
            bootstrap estimates (SALib's convention: a normal-approximation interval).
        second_order, second_order_conf: ``(D, D, *output_shape)`` with ``S_ij`` for
            ``i < j`` and NaN elsewhere (SALib's layout), or None.
        averaged_first_order, averaged_total_order: ``(D,)`` averages over all non-constant
            output elements (eq. 12 of Zhang & Mikelsons 2023).
        constant_mask: ``output_shape`` booleans, True where no sample moved the output
            (`CONSTANT_RTOL`).
        n_constant: number of constant elements (excluded from the averages).
        n_base: base samples ``N``; n_simulations: evaluations ``N (D + 2)`` or ``N (2D + 2)``.
        n_bootstrap, confidence, sampler: the settings used.
        wall_time_s, simulation_time_s, analysis_time_s: durations (the first call includes
            compilation).
    """

    names: tuple[str, ...] = eqx.field(static=True)
    output_shape: tuple[int, ...] = eqx.field(static=True)
    first_order: Float[Array, "n_params ..."]
    total_order: Float[Array, "n_params ..."]
    first_order_conf: Float[Array, "n_params ..."]
    total_order_conf: Float[Array, "n_params ..."]
    second_order: Float[Array, "n_params n_params ..."] | None
    second_order_conf: Float[Array, "n_params n_params ..."] | None
    averaged_first_order: Float[Array, " n_params"]
    averaged_total_order: Float[Array, " n_params"]
    constant_mask: Bool[Array, "..."]
    n_constant: int = eqx.field(static=True)
    n_base: int = eqx.field(static=True)
    n_simulations: int = eqx.field(static=True)
    n_bootstrap: int = eqx.field(static=True)
    confidence: float = eqx.field(static=True)
    sampler: str = eqx.field(static=True)
    wall_time_s: float
    simulation_time_s: float
    analysis_time_s: float

    def select(self, delta: float = 1e-3) -> Selection:
        """Algorithm 1 on `averaged_first_order` (see `select_identifiable`)."""
        return select_identifiable(self.averaged_first_order, self.names, delta)

    def to_dict(self) -> dict:
        """JSON-able dict (nested lists; NaN entries of the second-order arrays become None)."""
        out = {
            "names": list(self.names),
            "output_shape": list(self.output_shape),
            "first_order": to_jsonable(self.first_order),
            "total_order": to_jsonable(self.total_order),
            "first_order_conf": to_jsonable(self.first_order_conf),
            "total_order_conf": to_jsonable(self.total_order_conf),
            "second_order": None if self.second_order is None else to_jsonable(self.second_order),
            "second_order_conf": (None if self.second_order_conf is None
                                  else to_jsonable(self.second_order_conf)),
            "averaged_first_order": to_jsonable(self.averaged_first_order),
            "averaged_total_order": to_jsonable(self.averaged_total_order),
            "constant_mask": np.asarray(self.constant_mask).tolist(),
        }
        for field in ("n_constant", "n_base", "n_simulations", "n_bootstrap", "confidence",
                      "sampler"):
            out[field] = getattr(self, field)
        for field in ("wall_time_s", "simulation_time_s", "analysis_time_s"):
            out[field] = float(getattr(self, field))
        return out


# --- evaluation ---------------------------------------------------------------------------
def _check_space(space, where):
    if not isinstance(space, ParameterSpace):
        raise ValueError(f"{where}: space must be a jcalib ParameterSpace; got {type(space).__name__}")
    space.check_box(where)


def _evaluate(simulator, space, thetas, chunk_size, progress):
    full_space = simulator.parameters
    columns = [full_space.index(name) for name in space.names]
    full = np.tile(full_space.nominal, (thetas.shape[0], 1))
    full[:, columns] = thetas
    if chunk_size is None and isinstance(simulator, FunctionSimulator):
        chunk_size = DEFAULT_CHUNK
    values, status = simulate_batch(simulator, full, chunk_size, throw=False, return_status=True,
                                    progress=progress)
    failed = np.flatnonzero(status != SolveStatus.SUCCESS)
    if failed.size:
        kinds = {SolveStatus.describe(c): int(np.sum(status == c)) for c in np.unique(status[failed])}
        i = failed[0]
        raise SimulationError(
            f"sobol_indices: {failed.size} of {status.size} simulations failed ({kinds}); first: "
            f"sample {i}, theta = {space.to_dict(thetas[i])}. Sobol' indices need every sample: "
            "narrow the parameter bounds, relax the solver settings (e.g. "
            "model.with_solver(max_steps=...)) or fix the function; the error's .values and .status "
            "hold all results",
            values, status,
        )
    return values


# --- estimators ---------------------------------------------------------------------------
@jax.jit
def _first_total(weights, a, ab, b):
    """First/total-order estimates for each row of ``weights`` (R, N) (resampling counts / N).

    ``a``, ``b``: (N, M); ``ab``: (N, D, M), outputs already centred and scaled. Returns
    ``(s1, st, var, ok)`` with shapes (R, D, M), (R, D, M), (R, M), (R, M); ``ok`` marks a
    variance above machine epsilon (SALib sets the indices to 0 elsewhere)."""
    hi = jax.lax.Precision.HIGHEST
    mean = 0.5 * (jnp.matmul(weights, a, precision=hi) + jnp.matmul(weights, b, precision=hi))
    mean_sq = 0.5 * (jnp.matmul(weights, a * a, precision=hi)
                     + jnp.matmul(weights, b * b, precision=hi))
    var = mean_sq - mean * mean  # var([A; B]) of the resample, ddof 0 (np.var)
    num_first = jnp.einsum("rn,ndm->rdm", weights, b[:, None, :] * (ab - a[:, None, :]),
                           precision=hi)
    num_total = 0.5 * jnp.einsum("rn,ndm->rdm", weights, (a[:, None, :] - ab) ** 2, precision=hi)
    ok = var > np.finfo(np.float64).eps  # SALib: 0 where the variance vanishes
    safe = jnp.where(ok, var, 1.0)[:, None, :]
    s1 = jnp.where(ok[:, None, :], num_first / safe, 0.0)
    st = jnp.where(ok[:, None, :], num_total / safe, 0.0)
    return s1, st, var, ok


@jax.jit
def _second(weights, a, ab, ba, b, s1, var, ok):
    """Second-order estimates (R, D, D, M), upper triangle meaningful (Saltelli 2002)."""
    hi = jax.lax.Precision.HIGHEST
    base = jnp.matmul(weights, a * b, precision=hi)  # (R, M)

    def row(j):  # mean(BA_j AB_k) for all k
        ba_j = jax.lax.dynamic_index_in_dim(ba, j, axis=1, keepdims=False)  # (N, M)
        return jnp.einsum("rn,nkm->rkm", weights, ba_j[:, None, :] * ab, precision=hi)

    cross = jax.lax.map(row, jnp.arange(ab.shape[1]))  # (D, R, D, M)
    cross = jnp.moveaxis(cross, 0, 1)  # (R, D, D, M)
    safe = jnp.where(ok, var, 1.0)[:, None, None, :]
    v = jnp.where(ok[:, None, None, :], (cross - base[:, None, None, :]) / safe, 0.0)
    return v - s1[:, :, None, :] - s1[:, None, :, :]


def _analyze(values: np.ndarray, n_params: int, second_order: bool, resamples: np.ndarray,
             z: float) -> dict[str, np.ndarray]:
    """Indices and half-widths of flattened outputs ``values`` (n_samples, M).

    ``resamples`` (n_bootstrap, N) holds the base rows of each bootstrap draw (with
    replacement); every draw becomes a row of counts / N, and the point estimate is the
    draw that takes every row once, so one weighted estimator serves both (identical to
    indexing ``A[r]``, ``AB[r]``, ``B[r]`` as SALib does, without copying the rows).
    """
    n_samples, n_out = values.shape
    step = 2 * n_params + 2 if second_order else n_params + 2
    n_base = n_samples // step
    # SALib centres and scales by the mean and std over all samples (eq. estimators are not
    # shift invariant); constant elements are flagged and left at 0.
    mean = values.mean(axis=0)
    std = values.std(axis=0)
    ptp = np.ptp(values, axis=0)
    constant = ptp <= CONSTANT_RTOL * np.max(np.abs(values), axis=0)
    y = np.where(constant, 0.0, (values - mean) / np.where(constant, 1.0, std))
    y = y.reshape(n_base, step, n_out)

    n_boot = resamples.shape[0]
    counts = np.zeros((n_boot, n_base))
    np.add.at(counts, (np.arange(n_boot)[:, None], resamples), 1.0)
    weights = jnp.asarray(np.concatenate([np.ones((1, n_base)), counts]) / n_base)

    block = max(1, min(n_out, _BLOCK_ELEMENTS // (n_base * n_params * (n_params if second_order
                                                                        else 1))))
    n_pad = -(-n_out // block) * block
    if n_pad > n_out:  # pad with zero columns so every block has one compiled shape
        y = np.concatenate([y, np.zeros((n_base, step, n_pad - n_out))], axis=2)
    parts = {"s1": [], "st": [], "s2": []}
    for start in range(0, n_pad, block):
        cols = jnp.asarray(y[:, :, start:start + block])
        a, b = cols[:, 0], cols[:, -1]
        ab = cols[:, 1:n_params + 1]
        s1, st, var, ok = _first_total(weights, a, ab, b)
        parts["s1"].append(np.asarray(s1))
        parts["st"].append(np.asarray(st))
        if second_order:
            ba = cols[:, n_params + 1:2 * n_params + 1]
            parts["s2"].append(np.asarray(_second(weights, a, ab, ba, b, s1, var, ok)))
    out = {}
    for name, arrays in parts.items():
        if not arrays:
            continue
        est = np.concatenate(arrays, axis=-1)[..., :n_out]
        est = np.where(constant, 0.0, est)
        out[name] = est[0]
        out[name + "_conf"] = np.where(constant, 0.0, z * est[1:].std(axis=0, ddof=1))
    if second_order:
        upper = np.triu(np.ones((n_params, n_params), bool), k=1)[:, :, None]
        out["s2"] = np.where(upper, out["s2"], np.nan)
        out["s2_conf"] = np.where(upper, out["s2_conf"], np.nan)
    out["constant"] = constant
    return out


def sobol_indices(
    key: PRNGKeyArray,
    simulator: AbstractSimulator,
    space: ParameterSpace | None,
    n: int,
    *,
    second_order: bool = False,
    n_bootstrap: int = 100,
    confidence: float = 0.95,
    sampler: str = "salib",
    chunk_size: int | None = None,
    progress: bool | None = None,
) -> SobolResult:
    """Sobol' indices of every output element of a simulator, with bootstrap intervals.

    Args:
        key: randomness of the design and of the bootstrap; same key, same result.
        simulator: a `jcalib.model.AbstractSimulator`: a model, a PELS-VAE surrogate, or a
            JAX function wrapped as ``FunctionSimulator(fn, space)``. All samples go through
            one `simulate_batch` call.
        space: the parameters to vary. None means ``simulator.parameters``; a space of a
            subset of the simulator's parameters varies those (with its own bounds) and keeps
            the others at their nominal values. Every varied parameter needs finite bounds
            (the design is uniform on their box; `ParameterSpace.check_box`).
        n: base samples ``N`` (a power of 2; a ``UserWarning`` otherwise, as in SALib);
            ``N (D + 2)`` evaluations, ``N (2D + 2)`` with ``second_order``.
        second_order: also estimate ``S_ij`` (Saltelli 2002).
        n_bootstrap: bootstrap draws of the ``N`` base rows (with replacement) for the
            intervals; at least 2.
        confidence: level of the intervals, in (0, 1).
        sampler: ``"salib"`` or ``"scipy"`` (see `saltelli_design`).
        chunk_size: samples per compiled call (see `simulate_batch`; default `DEFAULT_CHUNK`
            for a `FunctionSimulator`).
        progress: progress bar over chunks (default: when there are several).

    Returns:
        A `SobolResult`; indices have shape ``(D, n_times, n_outputs)``.

    Raises:
        ValueError: ``simulator`` is not an `AbstractSimulator`; bad
            ``n``/``n_bootstrap``/``confidence``/``sampler``, a mismatched ``space``, a
            varied parameter without finite bounds, or outputs that no parameter moves at all.
        SimulationError: simulations failed or gave NaN/inf (the message says how many).

    Long for its documented options; the body is 71 lines.
    """
    t_start = time.perf_counter()
    if not jax.config.jax_enable_x64:
        raise ValueError("sobol_indices needs float64: call jax.config.update('jax_enable_x64', "
                         "True) before creating arrays")
    check_simulator(simulator, "sobol_indices")
    if space is None:
        space = simulator.parameters
    _check_space(space, "sobol_indices")
    known = simulator.parameters.names
    unknown = [name for name in space.names if name not in known]
    if unknown:
        raise ValueError(f"sobol_indices: space has parameters {unknown} that the simulator does "
                         f"not know; its parameters: {', '.join(known)}")
    if space.n_params < 2:
        raise ValueError(f"sobol_indices: needs at least 2 parameters to vary; got {space.names}")
    if isinstance(n_bootstrap, bool) or not isinstance(n_bootstrap, (int, np.integer)) or n_bootstrap < 2:
        raise ValueError(f"sobol_indices: n_bootstrap must be an integer >= 2; got {n_bootstrap!r}")
    if not 0 < confidence < 1:
        raise ValueError(f"sobol_indices: confidence must lie in (0, 1); got {confidence!r}")
    if sampler not in SAMPLERS:
        raise ValueError(f"sobol_indices: unknown sampler {sampler!r}; use one of {SAMPLERS}")
    n = _check_n(n)

    design_key, boot_key = jax.random.split(key)
    thetas = np.asarray(saltelli_design(design_key, space, n, second_order=second_order,
                                        sampler=sampler))
    t_sim = time.perf_counter()
    values = _evaluate(simulator, space, thetas, chunk_size, progress)
    simulation_s = time.perf_counter() - t_sim
    output_shape = tuple(values.shape[1:])
    flat = values.reshape(values.shape[0], -1)

    t_an = time.perf_counter()
    resamples = np.asarray(jax.random.randint(boot_key, (int(n_bootstrap), n), 0, n))
    z = float(norm.ppf(0.5 + confidence / 2))
    est = _analyze(flat, space.n_params, second_order, resamples, z)
    constant = est["constant"]
    if constant.all():
        raise ValueError(
            f"sobol_indices: all {constant.size} output elements are constant over the "
            f"{flat.shape[0]} samples: no parameter in ({', '.join(space.names)}) moves the outputs"
        )
    averaged_first = est["s1"][:, ~constant].mean(axis=1)
    averaged_total = est["st"][:, ~constant].mean(axis=1)
    analysis_s = time.perf_counter() - t_an

    def shaped(x, lead=1):
        return jnp.asarray(x.reshape(x.shape[:lead] + output_shape))

    return SobolResult(
        names=space.names,
        output_shape=output_shape,
        first_order=shaped(est["s1"]),
        total_order=shaped(est["st"]),
        first_order_conf=shaped(est["s1_conf"]),
        total_order_conf=shaped(est["st_conf"]),
        second_order=shaped(est["s2"], 2) if second_order else None,
        second_order_conf=shaped(est["s2_conf"], 2) if second_order else None,
        averaged_first_order=jnp.asarray(averaged_first),
        averaged_total_order=jnp.asarray(averaged_total),
        constant_mask=jnp.asarray(constant.reshape(output_shape)),
        n_constant=int(constant.sum()),
        n_base=n,
        n_simulations=int(flat.shape[0]),
        n_bootstrap=int(n_bootstrap),
        confidence=float(confidence),
        sampler=sampler,
        wall_time_s=time.perf_counter() - t_start,
        simulation_time_s=simulation_s,
        analysis_time_s=analysis_s,
    )
