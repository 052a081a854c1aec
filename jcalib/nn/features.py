"""Transient-based output features for inverse mapping parameter updating (IMPU).

The feature types of Kessels, Fey & van de Wouw (2023), Sec. 3, extracted per output signal
and concatenated over the outputs (their eq. 6: ``[ψ_1, ψ_2, ...]``). Signals are sampled
outputs ``x`` of shape ``(..., n_times, n_outputs)`` (a model's ``simulate`` output, with any
leading batch axes); every function returns ``(..., n_features)`` and is jittable and batched.

=============  ======================================================================  =========
name           definition                                                              paper
=============  ======================================================================  =========
``TS-dense``   every time sample, ``y[v_TS]`` with ``v_TS`` = all indices              eq. 10
``TS-sparse``  every ``stride``-th sample, ``y[stride-1 :: stride]``                   eq. 10
``TE``         heights and times of the first ``n_TE`` extrema, ``[y[v_TE], t[v_TE]]``  eq. 11
``MP``         magnitude and phase of the FFT in all bins, ``[|Y|, ∠Y]``               eq. 13
``RI``         real and imaginary parts of the FFT in all bins, ``[Re Y, Im Y]``       eq. 14
``MP-FBoI``    ``MP`` restricted to the frequency bins of interest                     eq. 13
``RI-FBoI``    ``RI`` restricted to the frequency bins of interest                     eq. 14
=============  ======================================================================  =========

(the seven types of the paper's Table 5, in its order; the paper writes "TS (dense)", "RI
(FBoI)" and so on.)

Conventions:

- **Time samples.** The measurement at ``t = 0`` is not part of a model's observation times
  (the paper drops it because every experiment starts from the same initial condition), so
  every sample of ``x`` is a candidate. The paper's sparse set has 17 samples per output of
  256 (34 features for two outputs, the size of RI (FBoI)): ``stride = 15``, i.e. indices
  14, 29, ..., 254, equidistant at ``15 Δt``.
- **Time extrema** (eq. 11, eq. 16). Local maxima and minima of each output (interior samples
  with ``y[k-1] < y[k] > y[k+1]``, resp. ``<``, ``>``; flat plateaus of equal samples, which
  noisy measurements do not have, are not detected) whose *prominence* is at least
  ``prominence · (max y − min y)`` (the paper's minimum peak prominence
  ``mpp = 0.15 (max y − min y)``, eq. 16). The prominence is MATLAB's ``findpeaks`` /
  ``scipy.signal.peak_prominences`` one: the height of the peak above the higher of the two
  lowest points between it and the nearest strictly higher sample on either side (or the
  signal's end); for minima, of ``−y``. It is computed for every sample at once with
  ``O(n_times log n_times)`` sparse-table queries, so it jits and vmaps (tests check it against
  ``scipy.signal.find_peaks(prominence=...)``). The first ``n_TE`` qualifying extrema in time
  (maxima and minima together) give ``[heights (n_TE), times (n_TE)]`` per output. **Fewer
  extrema** than ``n_TE``: the missing entries take the *last sample* ``(y[-1], t[-1])``, as
  if the signal had settled there (finite, continuous in the data, and recognisable as a time
  equal to the end of the record); `time_extrema` can also return the count found. The paper
  chooses ``n_TE`` per output no larger than the fewest extrema met in any training signal;
  `FeatureExtractor.create` does exactly that when ``n_extrema`` is not given.
- **FFT features** (eqs. 12-14). ``Y = numpy.fft.rfft(y)`` over the ``n_times`` samples (no
  window, no normalisation; bin ``j`` is the frequency ``j / (n_times Δt)``). The imaginary
  part and the phase are left out at ``f = 0`` and, for even ``n_times``, at the folding
  frequency (bin ``n_times / 2``): they are always zero for real signals (the phase is 0 or
  π by the sign of the mean and would only add a jump). Per output the features are
  ``[Re Y[bins], Im Y[bins without 0 and n/2]]`` (RI) or ``[|Y|[bins], ∠Y[bins without 0 and
  n/2]]`` (MP), ``∠`` in ``(−π, π]``.
- **Frequency bins of interest** (Sec. 3.2): chosen by engineering insight in the paper;
  for the rigid double beam the bins of 0-4 Hz, which contain the damped eigenfrequencies
  over the whole parameter box. With 256 samples over 2 s the bins are 0, 0.5, ..., 4 Hz:
  9 real and 8 imaginary parts (no imaginary part at 0 Hz) = 17 features per output, 34 for
  the two outputs, the paper's count.
  `frequency_bins_of_interest` offers the interval rule and two data-driven rules (largest
  mean training magnitude, or a threshold on it).

Example:
    >>> import numpy as np
    >>> ts = np.arange(1, 257) * 2.0 / 256
    >>> x = np.stack([np.exp(-ts) * np.sin(2 * np.pi * 2 * ts), np.cos(3 * ts)], axis=-1)  # (256, 2)
    >>> bins = frequency_bins_of_interest(ts, f_max=4.0)
    >>> bins.tolist()
    [0, 1, 2, 3, 4, 5, 6, 7, 8]
    >>> fft_real_imaginary(x, bins).shape  # 2 outputs x (9 real + 8 imaginary)
    (34,)
    >>> extractor = FeatureExtractor.create("TE", ts, n_outputs=2, n_extrema=(3, 1))
    >>> extractor(x).shape  # 2 x 3 + 2 x 1 (heights and times)
    (8,)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Int

__all__ = [
    "FEATURE_TYPES",
    "FeatureExtractor",
    "PAPER_PROMINENCE",
    "PAPER_SPARSE_STRIDE",
    "fft_magnitude_phase",
    "fft_real_imaginary",
    "frequency_bins_of_interest",
    "prominences",
    "time_extrema",
    "time_samples",
]

FEATURE_TYPES = ("TS-dense", "TS-sparse", "TE", "MP", "RI", "MP-FBoI", "RI-FBoI")
"""The seven feature types of the paper's Table 5, in its order."""

PAPER_PROMINENCE = 0.15
"""Minimum peak prominence as a fraction of the signal's range, ``mpp = 0.15 (max y − min y)``
(the paper's eq. 16)."""

PAPER_SPARSE_STRIDE = 15
"""Stride of the paper's sparse time samples: 17 of 256 samples per output (34 features for
two outputs, as many as RI (FBoI))."""

_TIME_TOLERANCE = 1e-6
"""Relative spread of the time steps accepted as equidistant (FFT features need a uniform grid;
times computed as ``k · Δt`` in float64 differ by round-off only)."""



# --- time samples ---------------------------------------------------------------------------------
def time_samples(x: Float[ArrayLike, "... n_times n_outputs"], stride: int | Sequence[int] = 1
                 ) -> Float[Array, "... n_features"]:
    """Time-sample features (eq. 10): the selected samples of every output, output by output.

    Args:
        x: sampled outputs ``(..., n_times, n_outputs)``.
        stride: every ``stride``-th sample, ``x[stride - 1 :: stride]`` (1: all samples,
            TS (dense); 15 of 256: the paper's TS (sparse)), or explicit sample indices.

    Returns:
        ``(..., n_outputs · n_selected)``: ``[y_1[v], y_2[v], ...]``.

    Raises:
        ValueError: ``x`` not at least 2-D; a stride below 1 or larger than ``n_times``;
            indices out of range.
    """
    x = _signals(x, "time_samples")
    index = _sample_indices(stride, x.shape[-2], "time_samples")
    return _time_samples(x, tuple(index.tolist()))


@jax.jit(static_argnums=1)
def _time_samples(x, index: tuple[int, ...]):
    return _per_output(x[..., np.asarray(index, np.int64), :])


def _sample_indices(stride, n_times: int, where: str) -> np.ndarray:
    if isinstance(stride, (int, np.integer)) and not isinstance(stride, bool):
        if not 1 <= stride <= n_times:
            raise ValueError(f"{where}: stride must lie in [1, n_times = {n_times}]; got {stride}")
        return np.arange(stride - 1, n_times, stride)
    index = np.asarray(stride)
    if index.ndim != 1 or index.size == 0 or not np.issubdtype(index.dtype, np.integer):
        raise ValueError(f"{where}: stride must be a positive integer or a 1-D sequence of sample indices; "
                         f"got {stride!r}")
    if index.min() < 0 or index.max() >= n_times:
        raise ValueError(f"{where}: sample indices must lie in [0, {n_times - 1}]; got {index.min()}..{index.max()}")
    return index.astype(np.int64)


# --- time extrema ---------------------------------------------------------------------------------
def prominences(y: Float[ArrayLike, "... n_times"]) -> Float[Array, "... n_times"]:
    """Prominence of every sample as if it were a peak (``scipy.signal.peak_prominences``).

    For sample ``k``: the nearest samples strictly higher than ``y[k]`` on the left and on
    the right bound two windows (to the signal's ends where there is none); the prominence is
    ``y[k] − max(min of the left window, min of the right window)``, both windows including
    ``k``. Values at samples that are not local maxima are computed the same way (use them
    only at peaks).

    Jittable and batched in ``O(n_times log n_times)``: a table of the maxima and minima of
    the blocks ``y[i : i + 2^l]``; binary lifting extends each window by the largest blocks
    that hold nothing higher than ``y[k]`` (a `jax.lax.scan` over ``l`` from large to small),
    taking the blocks' minima along.

    Args:
        y: signals with time on the last axis.

    Returns:
        prominences, same shape.
    """
    y = jnp.asarray(y)
    n = y.shape[-1]
    levels = max(1, math.ceil(math.log2(n)))  # jumps add up to 2^levels - 1 >= n - 1 samples
    inf = jnp.asarray(jnp.inf, y.dtype)
    block_max, block_min = [y], [y]  # [l][..., i] = max / min of y[i : i + 2^l] (padded past the end)
    for level in range(1, levels):
        h = 2 ** (level - 1)
        for table, fill, op in ((block_max, -inf, jnp.maximum), (block_min, inf, jnp.minimum)):
            prev = table[-1]
            tail = jnp.broadcast_to(fill, y.shape[:-1] + (min(h, n),))
            table.append(op(prev, jnp.concatenate([prev[..., h:], tail], axis=-1)[..., :n]))
    tables = jnp.stack([jnp.stack(block_max), jnp.stack(block_min)], axis=-1)  # (levels, ..., n, 2)
    steps = 2 ** jnp.arange(levels)
    k = jnp.broadcast_to(jnp.arange(n), y.shape)

    def lookup(table, index):  # (max, min) of the blocks starting at ``index``
        index = jnp.clip(index, 0, n - 1)[..., None]
        found = jnp.take_along_axis(table, jnp.broadcast_to(index, index.shape[:-1] + (2,)), axis=-2)
        return found[..., 0], found[..., 1]

    def lift(carry, level_table):
        left, right, left_min, right_min = carry
        table, step = level_table
        top, low = lookup(table, left - step)  # the block y[left - step : left]
        move = (left - step >= 0) & (top <= y)
        left, left_min = jnp.where(move, left - step, left), jnp.where(move, jnp.minimum(left_min, low), left_min)
        top, low = lookup(table, right + 1)  # the block y[right + 1 : right + 1 + step]
        move = (right + step <= n - 1) & (top <= y)
        right, right_min = jnp.where(move, right + step, right), jnp.where(move, jnp.minimum(right_min, low), right_min)
        return (left, right, left_min, right_min), None

    (_, _, left_min, right_min), _ = jax.lax.scan(lift, (k, k, y, y), (tables, steps), reverse=True)
    return y - jnp.maximum(left_min, right_min)


def _qualified_extrema(y: Float[Array, " n_times"], prominence: Float[Array, " n_times"],
                       prominence_min: Float[Array, " n_times"], fraction: float) -> Array:
    """Booleans: local maxima and minima of ``y`` with prominence >= ``fraction · (max − min)``
    (``prominence`` of ``y`` and ``prominence_min`` of ``−y``)."""
    mpp = fraction * (jnp.max(y) - jnp.min(y))
    mid, left, right = y[1:-1], y[:-2], y[2:]
    false = jnp.zeros((1,), bool)
    is_max = jnp.concatenate([false, (left < mid) & (mid > right), false])
    is_min = jnp.concatenate([false, (left > mid) & (mid < right), false])
    return (is_max & (prominence >= mpp)) | (is_min & (prominence_min >= mpp))


def _extrema_one(y, ts, qualified, n_extrema: int):
    """``(heights, times)`` of the first ``n_extrema`` qualified extrema of one signal."""
    n = y.shape[0]
    order = jnp.sort(jnp.where(qualified, jnp.arange(n), n))[:n_extrema]
    index = jnp.minimum(order, n - 1)  # missing extrema: the last sample (documented padding)
    return y[index], ts[index]


def time_extrema(
    ts: Float[ArrayLike, " n_times"],
    x: Float[ArrayLike, "... n_times n_outputs"],
    n_extrema: int | Sequence[int],
    prominence: float = PAPER_PROMINENCE,
    *,
    return_count: bool = False,
):
    """Time-extrema features (eq. 11): heights and times of the first extrema of every output.

    Args:
        ts: the sample times ``(n_times,)``.
        x: sampled outputs ``(..., n_times, n_outputs)``.
        n_extrema: ``n_TE``, one count for all outputs or one per output.
        prominence: minimum peak prominence as a fraction of each signal's range
            (``max − min``); the paper's 0.15 (eq. 16).
        return_count: also return the number of qualified extrema found per output.

    Returns:
        ``(..., Σ 2 n_TE_i)``: per output ``[heights, times]`` (missing extrema padded with the
        last sample, see the module docstring); with ``return_count`` also the counts
        ``(..., n_outputs)`` (int).

    Raises:
        ValueError: shapes that do not match, ``n_extrema`` below 1 or of the wrong length,
            a prominence outside [0, 1).
    """
    x = _signals(x, "time_extrema")
    ts = _times(ts, x.shape[-2], "time_extrema")
    counts = _extrema_counts(n_extrema, x.shape[-1], "time_extrema")
    if not 0.0 <= float(prominence) < 1.0:
        raise ValueError(f"time_extrema: prominence is a fraction of the signal range in [0, 1); got {prominence!r}")
    return _time_extrema_jit(jnp.asarray(ts, x.dtype), x, counts, float(prominence), return_count)


def _time_extrema(ts, x, counts: tuple[int, ...], prominence: float, return_count: bool):
    batch = x.shape[:-2]
    flat = x.reshape((-1,) + x.shape[-2:])

    def one(signals):  # (n_times, n_outputs)
        both = jnp.concatenate([signals.T, -signals.T])  # maxima of y and of -y, one prominence pass
        prom = prominences(both)
        m = signals.shape[1]
        parts, found = [], []
        for i, n_ext in enumerate(counts):
            qualified = _qualified_extrema(signals[:, i], prom[i], prom[m + i], prominence)
            parts += list(_extrema_one(signals[:, i], ts, qualified, n_ext))
            found.append(jnp.sum(qualified))
        return jnp.concatenate(parts), jnp.stack(found)

    features, found = jax.vmap(one)(flat)
    features = features.reshape(batch + features.shape[-1:])
    found = found.reshape(batch + found.shape[-1:])
    return (features, found) if return_count else features


_time_extrema_jit = jax.jit(_time_extrema, static_argnums=(2, 3, 4))


def _extrema_counts(n_extrema, n_outputs: int, where: str) -> tuple[int, ...]:
    if isinstance(n_extrema, (int, np.integer)) and not isinstance(n_extrema, bool):
        counts = (int(n_extrema),) * n_outputs
    else:
        try:
            counts = tuple(int(n) for n in n_extrema)
        except TypeError:
            raise ValueError(f"{where}: n_extrema must be an integer or one integer per output; "
                             f"got {n_extrema!r}") from None
    if len(counts) != n_outputs or min(counts) < 1:
        raise ValueError(f"{where}: n_extrema must be positive, one for all outputs or one per output "
                         f"(n_outputs = {n_outputs}); got {n_extrema!r}")
    return counts


# --- FFT features ---------------------------------------------------------------------------------
def fft_real_imaginary(x: Float[ArrayLike, "... n_times n_outputs"], bins: Sequence[int] | None = None
                       ) -> Float[Array, "... n_features"]:
    """Real and imaginary parts of ``numpy.fft.rfft`` of every output (eq. 14).

    Args:
        x: sampled outputs ``(..., n_times, n_outputs)``.
        bins: frequency-bin indices (``0 .. n_times // 2``), e.g. from
            `frequency_bins_of_interest`; None: all bins.

    Returns:
        ``(..., n_outputs · (n_bins + n_bins_without_0_and_folding))``: per output
        ``[Re Y[bins], Im Y[bins except 0 and n_times/2]]``.

    Raises:
        ValueError: ``x`` not at least 2-D; bins out of range or repeated.
    """
    x = _signals(x, "fft_real_imaginary")
    real_bins, imag_bins = _split_bins(bins, x.shape[-2], "fft_real_imaginary")
    return _fft_features(x, "RI", tuple(real_bins.tolist()), tuple(imag_bins.tolist()))


def fft_magnitude_phase(x: Float[ArrayLike, "... n_times n_outputs"], bins: Sequence[int] | None = None
                        ) -> Float[Array, "... n_features"]:
    """Magnitude and phase of ``numpy.fft.rfft`` of every output (eq. 13).

    Args:
        x: sampled outputs ``(..., n_times, n_outputs)``.
        bins: frequency-bin indices; None: all bins.

    Returns:
        ``(..., n_outputs · (n_bins + n_bins_without_0_and_folding))``: per output
        ``[|Y|[bins], ∠Y[bins except 0 and n_times/2]]``, phases in ``(−π, π]``.

    Raises:
        ValueError: ``x`` not at least 2-D; bins out of range or repeated.
    """
    x = _signals(x, "fft_magnitude_phase")
    real_bins, imag_bins = _split_bins(bins, x.shape[-2], "fft_magnitude_phase")
    return _fft_features(x, "MP", tuple(real_bins.tolist()), tuple(imag_bins.tolist()))


@jax.jit(static_argnums=(1, 2, 3))
def _fft_features(x, kind: str, real_bins: tuple[int, ...], imag_bins: tuple[int, ...]):
    spectrum = jnp.fft.rfft(x, axis=-2)
    real, imag = np.asarray(real_bins, np.int64), np.asarray(imag_bins, np.int64)
    if kind == "RI":
        parts = [spectrum.real[..., real, :], spectrum.imag[..., imag, :]]
    else:
        parts = [jnp.abs(spectrum[..., real, :]), jnp.angle(spectrum[..., imag, :])]
    return _per_output(jnp.concatenate(parts, axis=-2))


def _split_bins(bins, n_times: int, where: str) -> tuple[np.ndarray, np.ndarray]:
    """(bins for the real part / magnitude, bins for the imaginary part / phase)."""
    n_freq = n_times // 2 + 1
    if bins is None:
        bins = np.arange(n_freq)
    bins = np.asarray(bins)
    if bins.ndim != 1 or bins.size == 0 or not np.issubdtype(bins.dtype, np.integer):
        raise ValueError(f"{where}: bins must be a non-empty 1-D sequence of integer bin indices; got {bins!r}")
    if bins.min() < 0 or bins.max() >= n_freq:
        raise ValueError(f"{where}: bins must lie in [0, n_times // 2 = {n_freq - 1}]; got {bins.min()}..{bins.max()}")
    if np.unique(bins).size != bins.size:
        raise ValueError(f"{where}: bins must not repeat; got {bins.tolist()}")
    zero_imag = {0, n_times // 2} if n_times % 2 == 0 else {0}
    return bins.astype(np.int64), np.array([b for b in bins if b not in zero_imag], dtype=np.int64)


def frequency_bins_of_interest(
    ts: Float[ArrayLike, " n_times"],
    x_training: Float[ArrayLike, "n n_times n_outputs"] | None = None,
    *,
    f_max: float | None = None,
    f_min: float = 0.0,
    n_bins: int | None = None,
    threshold: float | None = None,
    include_dc: bool = True,
) -> Int[np.ndarray, " n_selected"]:
    """Frequency bins of interest (FBoI; the paper's Sec. 3.2), sorted bin indices.

    Exactly one rule:

    - ``f_max`` (with ``f_min``): every bin with ``f_min <= f <= f_max`` (the paper's choice,
      0-4 Hz for the rigid double beam, from the damped eigenfrequencies of the linearised
      system). Needs no data.
    - ``n_bins``: the ``n_bins`` bins with the largest score (below).
    - ``threshold``: every bin whose score is at least ``threshold``.

    The score of bin ``j >= 1`` is, maximised over the outputs, the mean magnitude
    ``mean_s |Y_s,i[j]|`` over the training signals divided by its largest value over the
    bins ``j >= 1`` (each output counts equally whatever its unit). The 0 Hz bin (the signal
    mean, which carries the static information) has no comparable score: it is always
    selected with ``include_dc=True`` (counted in ``n_bins``) and never otherwise.

    Args:
        ts: equidistant sample times ``(n_times,)``.
        x_training: training signals ``(n, n_times, n_outputs)`` (data-driven rules only).
        f_max, f_min: frequency interval in the unit ``1 / unit(ts)`` (Hz for seconds).
        n_bins: number of bins to select.
        threshold: score threshold in (0, 1].
        include_dc: select the 0 Hz bin with the data-driven rules.

    Returns:
        sorted bin indices (NumPy ``int64``), for `fft_real_imaginary` / `fft_magnitude_phase`.

    Raises:
        ValueError: not exactly one rule; times not equidistant; missing or misshaped training
            signals; an empty selection.
    """
    ts = np.asarray(ts, dtype=np.float64)
    rules = {"f_max": f_max, "n_bins": n_bins, "threshold": threshold}
    given = [k for k, v in rules.items() if v is not None]
    if len(given) != 1:
        raise ValueError(f"frequency_bins_of_interest: give exactly one of f_max, n_bins, threshold; got "
                         f"{given or 'none'}")
    freqs = np.fft.rfftfreq(ts.size, _time_step(ts, "frequency_bins_of_interest"))
    if f_max is not None:
        selected = np.flatnonzero((freqs >= f_min - 1e-9 * freqs[1]) & (freqs <= f_max + 1e-9 * freqs[1]))
    else:
        if x_training is None:
            raise ValueError(f"frequency_bins_of_interest: the {given[0]} rule needs x_training "
                             "(n, n_times, n_outputs); or use f_max")
        x = np.asarray(x_training, dtype=np.float64)
        if x.ndim != 3 or x.shape[1] != ts.size:
            raise ValueError(f"frequency_bins_of_interest: x_training must have shape (n, n_times = {ts.size}, "
                             f"n_outputs); got {x.shape}")
        if not np.all(np.isfinite(x)):
            raise ValueError("frequency_bins_of_interest: x_training contains NaN or inf")
        magnitude = np.abs(np.fft.rfft(x, axis=1)).mean(axis=0)  # (n_freq, n_outputs)
        peak = magnitude[1:].max(axis=0)
        score = np.max(magnitude / np.where(peak > 0, peak, 1.0), axis=1)
        score[0] = np.inf if include_dc else -np.inf
        if n_bins is not None:
            if not isinstance(n_bins, (int, np.integer)) or not 1 <= n_bins <= freqs.size - (not include_dc):
                raise ValueError(f"frequency_bins_of_interest: n_bins must lie in [1, {freqs.size}]; got {n_bins!r}")
            selected = np.sort(np.argsort(-score, kind="stable")[:n_bins])
        else:
            if not 0 < threshold <= 1:
                raise ValueError(f"frequency_bins_of_interest: threshold must lie in (0, 1]; got {threshold!r}")
            selected = np.flatnonzero(score >= threshold)
    if selected.size == 0:
        raise ValueError(f"frequency_bins_of_interest: no bin selected (bin width {freqs[1]:.4g}, up to "
                         f"{freqs[-1]:.4g}); widen the rule")
    return selected.astype(np.int64)


# --- the extractor ----------------------------------------------------------------------------------
class FeatureExtractor(eqx.Module):
    """One feature type with its settings fixed: ``extractor(x) -> ψ`` (jitted, batched).

    Build it with `create` (which derives data-dependent settings, such as the FBoI or
    ``n_TE``, from training signals); save it with `to_dict` / `from_dict`.

    Attributes:
        kind: one of `FEATURE_TYPES`.
        ts: sample times ``(n_times,)`` (TE features use them).
        n_outputs: number of outputs of the signals.
        indices: sample indices (TS kinds).
        bins: frequency-bin indices (FFT kinds).
        n_extrema: ``n_TE`` per output (TE).
        prominence: minimum peak prominence fraction (TE).
    """

    kind: str = eqx.field(static=True)
    ts: Float[Array, " n_times"]
    n_outputs: int = eqx.field(static=True)
    indices: tuple[int, ...] = eqx.field(static=True, default=())
    bins: tuple[int, ...] = eqx.field(static=True, default=())
    n_extrema: tuple[int, ...] = eqx.field(static=True, default=())
    prominence: float = eqx.field(static=True, default=PAPER_PROMINENCE)

    @classmethod
    def create(
        cls,
        kind: str,
        ts: Float[ArrayLike, " n_times"],
        *,
        n_outputs: int | None = None,
        training_trajectories: Float[ArrayLike, "n n_times n_outputs"] | None = None,
        stride: int | Sequence[int] | None = None,
        bins: Sequence[int] | None = None,
        f_max: float | None = None,
        f_min: float = 0.0,
        n_bins: int | None = None,
        threshold: float | None = None,
        n_extrema: int | Sequence[int] | None = None,
        prominence: float = PAPER_PROMINENCE,
    ) -> FeatureExtractor:
        """An extractor of ``kind`` for signals sampled at ``ts``.

        Args:
            kind: one of `FEATURE_TYPES`.
            ts: sample times ``(n_times,)``.
            n_outputs: outputs per signal (default: from ``training_trajectories``).
            training_trajectories: ``(n, n_times, n_outputs)``; needed for data-driven settings
                (``n_extrema=None`` for TE; ``n_bins`` / ``threshold`` for the FBoI kinds).
            stride: TS kinds: a stride or explicit sample indices (default 1 for TS-dense,
                ``max(1, n_times // 17)`` for TS-sparse: the paper's 17 samples per output,
                stride 15 for 256 samples).
            bins: FBoI kinds: explicit bin indices; otherwise one of ``f_max`` (with
                ``f_min``), ``n_bins``, ``threshold`` (`frequency_bins_of_interest`). Without
                any of them, ``threshold=0.1`` on the training signals.
            n_extrema: TE: ``n_TE`` for all outputs or per output; None: the fewest qualified
                extrema found per output over ``training_trajectories`` (the paper's rule), at
                least 1.
            prominence: TE: minimum peak prominence fraction (0.15, eq. 16).

        Raises:
            ValueError: unknown kind; settings that do not belong to the kind; missing
                training signals; invalid settings (see the feature functions).

        Long for its documented options; the body is 59 lines.
        """
        if kind not in FEATURE_TYPES:
            raise ValueError(f"FeatureExtractor: unknown feature kind {kind!r}; use one of {FEATURE_TYPES}")
        ts = np.asarray(ts, dtype=np.float64)
        if ts.ndim != 1 or ts.size < 3 or not np.all(np.isfinite(ts)) or np.any(np.diff(ts) <= 0):
            raise ValueError(f"FeatureExtractor: ts must be increasing finite times, at least 3; got shape {ts.shape}")
        x_train = None
        if training_trajectories is not None:
            x_train = np.asarray(training_trajectories, dtype=np.float64)
            if x_train.ndim != 3 or x_train.shape[1] != ts.size or x_train.shape[0] < 1:
                raise ValueError(f"FeatureExtractor: training_trajectories must have shape (n, n_times = {ts.size}, "
                                 f"n_outputs); got {x_train.shape}")
            if not np.all(np.isfinite(x_train)):
                raise ValueError("FeatureExtractor: training_trajectories contain NaN or inf; drop failed simulations")
            if n_outputs is not None and n_outputs != x_train.shape[2]:
                raise ValueError(f"FeatureExtractor: n_outputs = {n_outputs} but training_trajectories have "
                                 f"{x_train.shape[2]} outputs")
            n_outputs = x_train.shape[2]
        if n_outputs is None:
            raise ValueError("FeatureExtractor: pass n_outputs or training_trajectories")
        if not isinstance(n_outputs, (int, np.integer)) or n_outputs < 1:
            raise ValueError(f"FeatureExtractor: n_outputs must be a positive integer; got {n_outputs!r}")
        settings = {"stride": stride, "bins": bins, "f_max": f_max, "n_bins": n_bins, "threshold": threshold,
                    "n_extrema": n_extrema}
        allowed = {"TS": ("stride",), "TE": ("n_extrema",), "FFT": (), "FBoI": ("bins", "f_max", "n_bins", "threshold")}
        family = _family(kind)
        wrong = [k for k, v in settings.items() if v is not None and k not in allowed[family]]
        if wrong:
            raise ValueError(f"FeatureExtractor: settings {wrong} do not apply to {kind!r} features (allowed: "
                             f"{list(allowed[family]) or 'none'})")
        fields = {"kind": kind, "ts": jnp.asarray(ts), "n_outputs": int(n_outputs)}
        if family == "TS":
            if stride is None:
                stride = 1 if kind == "TS-dense" else max(1, ts.size // 17)
            fields["indices"] = tuple(int(i) for i in _sample_indices(stride, ts.size, "FeatureExtractor"))
        elif family == "TE":
            if not 0.0 <= float(prominence) < 1.0:
                raise ValueError(f"FeatureExtractor: prominence is a fraction in [0, 1); got {prominence!r}")
            if n_extrema is None:
                if x_train is None:
                    raise ValueError("FeatureExtractor: TE features need n_extrema or training_trajectories (to take "
                                     "the fewest extrema per output, as in the paper)")
                _, found = _time_extrema_jit(jnp.asarray(ts), jnp.asarray(x_train), (1,) * int(n_outputs),
                                         float(prominence), True)
                n_extrema = tuple(max(1, int(c)) for c in np.asarray(found).min(axis=0))
            fields["n_extrema"] = _extrema_counts(n_extrema, int(n_outputs), "FeatureExtractor")
            fields["prominence"] = float(prominence)
        elif family == "FFT":
            fields["bins"] = tuple(range(ts.size // 2 + 1))
        else:
            if bins is None:
                if f_max is None and n_bins is None and threshold is None:
                    threshold = 0.1
                if f_max is None and x_train is None:
                    raise ValueError(f"FeatureExtractor: {kind} features need bins=, f_max= or training_trajectories "
                                     "(for the n_bins / threshold rules)")
                bins = frequency_bins_of_interest(ts, x_train, f_max=f_max, f_min=f_min, n_bins=n_bins,
                                                  threshold=threshold)
            fields["bins"] = tuple(int(b) for b in _split_bins(bins, ts.size, "FeatureExtractor")[0])
        return cls(**fields)

    # --- extraction -----------------------------------------------------------------------------
    @property
    def n_times(self) -> int:
        return int(self.ts.shape[0])

    @property
    def n_features(self) -> int:
        """Length of the feature vector."""
        family = _family(self.kind)
        if family == "TS":
            return len(self.indices) * self.n_outputs
        if family == "TE":
            return 2 * sum(self.n_extrema)
        real, imag = _split_bins(self.bins, self.n_times, "FeatureExtractor")
        return (real.size + imag.size) * self.n_outputs

    @property
    def frequencies(self) -> np.ndarray:
        """Frequencies of ``bins`` (FFT kinds), in ``1 / unit(ts)``."""
        ts = np.asarray(self.ts)
        return np.fft.rfftfreq(ts.size, _time_step(ts, "FeatureExtractor"))[list(self.bins)]

    def __call__(self, x: Float[ArrayLike, "... n_times n_outputs"]) -> Float[Array, "... n_features"]:
        """Features of ``x`` ``(n_times, n_outputs)`` or ``(..., n_times, n_outputs)`` (jitted).

        Raises:
            ValueError: ``x`` of another number of times or outputs.
        """
        x = jnp.asarray(x)
        self.check_signals(x)
        return _extract_jit(self, x)

    def check_signals(self, x) -> None:
        """``ValueError`` unless ``x`` has shape ``(..., n_times, n_outputs)`` of this extractor."""
        shape = np.shape(x)
        if len(shape) < 2 or shape[-2:] != (self.n_times, self.n_outputs):
            raise ValueError(f"FeatureExtractor({self.kind!r}): signals must have shape (..., n_times = "
                             f"{self.n_times}, n_outputs = {self.n_outputs}); got {shape}")

    def extract(self, x: Float[Array, "... n_times n_outputs"]) -> Float[Array, "... n_features"]:
        """The features without shape checks or jit (for use inside a caller's jitted function)."""
        family = _family(self.kind)
        if family == "TS":
            return _time_samples(x, self.indices)
        if family == "TE":
            return _time_extrema_jit(jnp.asarray(self.ts, x.dtype), x, self.n_extrema, self.prominence, False)
        real, imag = _split_bins(self.bins, self.n_times, "FeatureExtractor")
        return _fft_features(x, self.kind[:2], tuple(real.tolist()), tuple(imag.tolist()))

    def labels(self, output_names: Sequence[str] | None = None) -> list[str]:
        """A name per feature, e.g. ``"Re y1 @ 1.5"`` (frequency) or ``"y2 t_3"`` (TE)."""
        names = list(output_names) if output_names is not None else [f"y{i + 1}" for i in range(self.n_outputs)]
        if len(names) != self.n_outputs:
            raise ValueError(f"FeatureExtractor.labels: {len(names)} output names for {self.n_outputs} outputs")
        family = _family(self.kind)
        out = []
        for i, name in enumerate(names):
            if family == "TS":
                out += [f"{name} @ {float(self.ts[k]):.4g}" for k in self.indices]
            elif family == "TE":
                out += [f"{name} height_{m + 1}" for m in range(self.n_extrema[i])]
                out += [f"{name} time_{m + 1}" for m in range(self.n_extrema[i])]
            else:
                real, imag = _split_bins(self.bins, self.n_times, "labels")
                freqs = np.fft.rfftfreq(self.n_times, _time_step(np.asarray(self.ts), "labels"))
                a, b = ("|Y|", "arg Y") if self.kind.startswith("MP") else ("Re Y", "Im Y")
                out += [f"{a} {name} @ {freqs[j]:.4g}" for j in real] + [f"{b} {name} @ {freqs[j]:.4g}" for j in imag]
        return out

    # --- persistence -----------------------------------------------------------------------------
    def to_dict(self) -> dict:
        """Plain data (lists, numbers, strings) that `from_dict` turns back into this extractor."""
        return {"kind": self.kind, "ts": np.asarray(self.ts, np.float64).tolist(), "n_outputs": self.n_outputs,
                "indices": list(self.indices), "bins": list(self.bins), "n_extrema": list(self.n_extrema),
                "prominence": float(self.prominence)}

    @classmethod
    def from_dict(cls, d: Mapping) -> FeatureExtractor:
        if d.get("kind") not in FEATURE_TYPES:
            raise ValueError(f"FeatureExtractor.from_dict: unknown feature kind {d.get('kind')!r}")
        return cls(kind=str(d["kind"]), ts=jnp.asarray(np.asarray(d["ts"], np.float64)),
                   n_outputs=int(d["n_outputs"]), indices=tuple(int(i) for i in d.get("indices", ())),
                   bins=tuple(int(b) for b in d.get("bins", ())),
                   n_extrema=tuple(int(n) for n in d.get("n_extrema", ())),
                   prominence=float(d.get("prominence", PAPER_PROMINENCE)))


@eqx.filter_jit
def _extract_jit(extractor: FeatureExtractor, x):
    return extractor.extract(x)


# --- helpers -----------------------------------------------------------------------------------------
def _family(kind: str) -> str:
    if kind.startswith("TS"):
        return "TS"
    if kind == "TE":
        return "TE"
    return "FBoI" if kind.endswith("FBoI") else "FFT"


def _per_output(parts: Float[Array, "... n_selected n_outputs"]) -> Float[Array, "... n_features"]:
    """Concatenate the per-output columns (eq. 6): ``[parts[:, 0], parts[:, 1], ...]``."""
    moved = jnp.swapaxes(parts, -1, -2)
    return moved.reshape(moved.shape[:-2] + (moved.shape[-2] * moved.shape[-1],))


def _signals(x, where: str) -> Array:
    x = jnp.asarray(x)
    if x.ndim < 2:
        raise ValueError(f"{where}: x must have shape (..., n_times, n_outputs); got {x.shape}")
    if not jnp.issubdtype(x.dtype, jnp.floating):
        x = x.astype(jnp.float64 if jax.config.jax_enable_x64 else jnp.float32)
    return x


def _times(ts, n_times: int, where: str) -> np.ndarray:
    ts = np.asarray(ts, dtype=np.float64)
    if ts.shape != (n_times,):
        raise ValueError(f"{where}: ts must have shape (n_times,) = ({n_times},); got {ts.shape}")
    return ts


def _time_step(ts: np.ndarray, where: str) -> float:
    steps = np.diff(ts)
    if steps.size == 0 or steps.min() <= 0:
        raise ValueError(f"{where}: ts must be increasing with at least 2 samples")
    dt = float(steps.mean())
    if np.max(np.abs(steps - dt)) > _TIME_TOLERANCE * dt:
        raise ValueError(f"{where}: FFT features need equidistant times; the steps range over "
                         f"[{steps.min():.6g}, {steps.max():.6g}]")
    return dt

