"""`PosteriorResult`: posterior samples by chain with the numbers a Bayesian paper reports.

Saved as one ``.npz`` file: the arrays, plus a ``metadata`` entry holding JSON (names,
units, settings, ``extra``) and a SHA-256 checksum verified on loading
(`jcalib.fileio.write_checked_npz`); written atomically, loading never unpickles. For ArviZ
users, ``result.to_inference_data().to_netcdf(path)`` writes netCDF (h5netcdf backend).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

import equinox as eqx
import numpy as np

from jcalib import fileio
from jcalib._warnings import warn_user
from jcalib.bayes import diagnostics
from jcalib.jsonable import to_jsonable

__all__ = ["COORDINATES", "QUANTILE_LEVELS", "PosteriorResult", "is_internal"]

COORDINATES = ("physical", "internal")


def is_internal(coordinates: str, where: str) -> bool:
    """Whether ``coordinates`` is ``"internal"`` (``"physical"``: False).

    Raises:
        ValueError: anything else, naming ``where``.
    """
    if coordinates not in COORDINATES:
        raise ValueError(f"{where}: coordinates must be 'physical' or 'internal'; got {coordinates!r}")
    return coordinates == "internal"

QUANTILE_LEVELS = (0.05, 0.5, 0.95)  # the 90 % central interval and the median
_ARRAYS = ("samples", "samples_internal", "logdensity", "acceptance_rate", "step_sizes", "mean", "sd",
           "quantiles", "ess_bulk", "ess_tail", "rhat", "mcse_mean", "mcse_sd", "best", "best_internal")
_FORMAT = "jcalib.PosteriorResult/1"


class PosteriorResult(eqx.Module):
    """Posterior draws of one sampling run, in internal and physical units, by name.

    Statistics (``mean``, ``sd``, ``quantiles``, ``mcse_*``) are of the physical values
    over all chains; ESS and R-hat (rank-based, so the same for internal values) come from
    ArviZ (`jcalib.bayes.diagnostics`).

    Attributes:
        names: parameter names, ``(n_params,)``.
        samples: physical values, ``(n_chains, n_draws, n_params)``.
        samples_internal: the same in internal coordinates (what the sampler moved in).
        logdensity: log density of each draw, ``(n_chains, n_draws)``.
        acceptance_rate: accepted fraction of the sampling steps per chain, ``(n_chains,)``.
        step_sizes: the diagonal of P used for sampling, ``(n_params,)``.
        mean, sd: posterior mean and standard deviation, ``(n_params,)``.
        quantiles: at `QUANTILE_LEVELS` (5, 50, 95 %), ``(3, n_params)``.
        ess_bulk, ess_tail, rhat, mcse_mean, mcse_sd: diagnostics, ``(n_params,)``.
        best, best_internal: the draw with the largest log density.
        best_logdensity: its log density.
        units: physical units ("" if unknown).
        log_scale: whether each parameter's internal coordinate is its log.
        method: sampler name.
        n_steps, burn_in, thin, warmup: the run's settings (steps per chain).
        n_logdensity_evaluations: log density + gradient evaluations (all chains, warm-up,
            burn-in and prescaling draws included).
        wall_time_s: wall-clock seconds including compilation.
        extra: method-specific numbers (JSON-able), e.g. the prescaling's τ; ``extra["warnings"]``
            holds the run's `warnings`.
    """

    names: tuple[str, ...]
    samples: np.ndarray
    samples_internal: np.ndarray
    logdensity: np.ndarray
    acceptance_rate: np.ndarray
    step_sizes: np.ndarray
    mean: np.ndarray
    sd: np.ndarray
    quantiles: np.ndarray
    ess_bulk: np.ndarray
    ess_tail: np.ndarray
    rhat: np.ndarray
    mcse_mean: np.ndarray
    mcse_sd: np.ndarray
    best: np.ndarray
    best_internal: np.ndarray
    best_logdensity: float
    units: tuple[str, ...]
    log_scale: tuple[bool, ...]
    method: str = "prescaled-mala"
    n_steps: int = 0
    burn_in: int = 0
    thin: int = 1
    warmup: int = 0
    n_logdensity_evaluations: int = 0
    wall_time_s: float = float("nan")
    extra: dict = eqx.field(default_factory=dict)

    @classmethod
    def from_chains(
        cls,
        samples_internal,
        logdensity,
        acceptance_rate,
        *,
        samples=None,
        names: Sequence[str] | None = None,
        units: Sequence[str] | None = None,
        log_scale: Sequence[bool] | None = None,
        step_sizes=None,
        warn: bool = True,
        **settings,
    ) -> PosteriorResult:
        """Build a result from chains and compute its statistics and diagnostics.

        Args:
            samples_internal: ``(n_chains, n_draws, n_params)``.
            logdensity: ``(n_chains, n_draws)``.
            acceptance_rate: ``(n_chains,)``.
            samples: physical values of the same shape (default: ``samples_internal``).
            names, units, log_scale: per parameter (defaults ``x0, ...``, "", False).
            step_sizes: ``(n_params,)`` (default NaN).
            warn: emit the run's `warnings` (stalled chains, R-hat, ESS) as
                `jcalib.bayes.diagnostics.SamplingWarning`; they are recorded in
                ``extra["warnings"]`` either way.
            **settings: the remaining fields (``method``, ``n_steps``, ``extra``, ...).

        Raises:
            ValueError: inconsistent shapes or names.
        """
        z = np.asarray(samples_internal, dtype=np.float64)
        if z.ndim != 3 or z.shape[1] < 1:
            raise ValueError(
                f"PosteriorResult: samples_internal must have shape (n_chains, n_draws, n_params); got {z.shape}")
        n_chains, _, n = z.shape
        theta = z if samples is None else np.asarray(samples, dtype=np.float64)
        lp = np.asarray(logdensity, dtype=np.float64)
        acc = np.asarray(acceptance_rate, dtype=np.float64)
        for label, arr, shape in (("samples", theta, z.shape), ("logdensity", lp, z.shape[:2]),
                                  ("acceptance_rate", acc, (n_chains,))):
            if arr.shape != shape:
                raise ValueError(f"PosteriorResult: {label} must have shape {shape}; got {arr.shape}")
        names = tuple(f"x{i}" for i in range(n)) if names is None else tuple(names)
        if len(names) != n:
            raise ValueError(f"PosteriorResult: {len(names)} names for {n} parameters")
        flat = theta.reshape(-1, n)
        diag = diagnostics.chain_diagnostics(theta)
        best_index = np.unravel_index(int(np.argmax(lp)), lp.shape)
        advice = diagnostics.sampling_advice(settings.get("warmup"), (settings.get("extra") or {}).get("metric"))
        messages = diagnostics.sampling_warnings(names, acc, diag.rhat, diag.ess_bulk, advice)
        settings["extra"] = {**(settings.get("extra") or {}), "warnings": list(messages)}
        if warn:
            for message in messages:
                warn_user(message, diagnostics.SamplingWarning)
        return cls(
            names=names, samples=theta, samples_internal=z, logdensity=lp, acceptance_rate=acc,
            step_sizes=np.full(n, np.nan) if step_sizes is None else np.asarray(step_sizes, dtype=np.float64),
            mean=flat.mean(axis=0), sd=flat.std(axis=0, ddof=1) if flat.shape[0] > 1 else np.full(n, np.nan),
            quantiles=np.quantile(flat, QUANTILE_LEVELS, axis=0),
            ess_bulk=diag.ess_bulk, ess_tail=diag.ess_tail, rhat=diag.rhat, mcse_mean=diag.mcse_mean,
            mcse_sd=diag.mcse_sd, best=theta[best_index], best_internal=z[best_index],
            best_logdensity=float(lp[best_index]),
            units=("",) * n if units is None else tuple(units),
            log_scale=(False,) * n if log_scale is None else tuple(bool(b) for b in log_scale),
            **settings,
        )

    # --- views -------------------------------------------------------------------------------
    @property
    def n_chains(self) -> int:
        return int(self.samples.shape[0])

    @property
    def n_draws(self) -> int:
        """Kept draws per chain."""
        return int(self.samples.shape[1])

    @property
    def n_params(self) -> int:
        return int(self.samples.shape[2])

    def flat_samples(self, coordinates: str = "physical") -> np.ndarray:
        """All chains pooled, ``(n_chains n_draws, n_params)``, in ``coordinates``
        (``"physical"`` or ``"internal"``).

        Raises:
            ValueError: unknown ``coordinates``.
        """
        arr = self.samples_internal if is_internal(coordinates, "flat_samples") else self.samples
        return arr.reshape(-1, self.n_params)

    @property
    def acceptance(self) -> float:
        """Mean acceptance rate over chains."""
        return float(np.mean(self.acceptance_rate))

    @property
    def warnings(self) -> tuple[str, ...]:
        """One-line diagnostics warnings of the run (``extra["warnings"]``): acceptance below
        5 % in a chain, R-hat above 1.05 (two or more chains) or bulk ESS below 100 for a
        parameter (`jcalib.bayes.diagnostics.sampling_warnings`); empty for a healthy run."""
        return tuple(str(m) for m in (self.extra.get("warnings") or ()))

    @property
    def ess_per_second(self) -> np.ndarray:
        """Bulk ESS per wall-clock second (compilation included), ``(n_params,)``."""
        return self.ess_bulk / self.wall_time_s

    def interval(self, prob: float = 0.9, coordinates: str = "physical") -> np.ndarray:
        """Central ``prob`` credible interval per parameter, ``(2, n_params)``, in
        ``coordinates`` (``"physical"`` or ``"internal"``).

        Raises:
            ValueError: ``prob`` not in (0, 1); unknown ``coordinates``.
        """
        if not 0.0 < prob < 1.0:
            raise ValueError(f"interval: prob must lie in (0, 1); got {prob!r}")
        is_internal(coordinates, "interval")
        return np.quantile(self.flat_samples(coordinates), [(1 - prob) / 2, (1 + prob) / 2], axis=0)

    def summary(self) -> dict[str, dict[str, float]]:
        """``{name: {mean, sd, q5, q50, q95, mcse_mean, ess_bulk, ess_tail, rhat}}``."""
        out = {}
        for i, n in enumerate(self.names):
            out[n] = {"mean": float(self.mean[i]), "sd": float(self.sd[i]), "q5": float(self.quantiles[0, i]),
                      "q50": float(self.quantiles[1, i]), "q95": float(self.quantiles[2, i]),
                      "mcse_mean": float(self.mcse_mean[i]), "mcse_sd": float(self.mcse_sd[i]),
                      "ess_bulk": float(self.ess_bulk[i]), "ess_tail": float(self.ess_tail[i]),
                      "rhat": float(self.rhat[i]), "unit": self.units[i]}
        return out

    def to_dict(self) -> dict:
        """JSON-able summary (no draws; non-finite numbers become None)."""
        return to_jsonable({
            "method": self.method, "names": list(self.names), "summary": self.summary(),
            "acceptance_rate": self.acceptance_rate, "acceptance": self.acceptance,
            "step_sizes": self.step_sizes, "best": dict(zip(self.names, self.best.tolist())),
            "best_internal": self.best_internal, "best_logdensity": self.best_logdensity,
            "n_chains": self.n_chains, "n_draws": self.n_draws, "n_steps": self.n_steps, "burn_in": self.burn_in,
            "thin": self.thin, "warmup": self.warmup, "n_logdensity_evaluations": self.n_logdensity_evaluations,
            "wall_time_s": self.wall_time_s, "ess_per_second": self.ess_per_second,
            "log_scale": list(self.log_scale), "warnings": list(self.warnings), "extra": self.extra,
        })

    def to_inference_data(self, coordinates: str = "physical"):
        """The draws in ``coordinates`` (``"physical"`` or ``"internal"``) as an
        ``arviz.InferenceData`` (posterior by name, ``sample_stats.lp``).

        Raises:
            ValueError: unknown ``coordinates``.
        """
        internal = is_internal(coordinates, "to_inference_data")
        return diagnostics.to_inference_data(self.samples_internal if internal else self.samples, self.names,
                                             logdensity=self.logdensity,
                                             attrs={"method": self.method, "coordinates": coordinates})

    # --- files -------------------------------------------------------------------------------
    def save(self, path: str | os.PathLike) -> None:
        """Write an ``.npz`` file (the name as given): the arrays, a JSON ``metadata`` entry and
        a SHA-256 checksum, atomically (a temporary file, then a rename; no pickle)."""
        metadata = {"format": _FORMAT, "names": list(self.names), "units": list(self.units),
                    "log_scale": list(self.log_scale), "best_logdensity": self.best_logdensity,
                    "method": self.method, "n_steps": self.n_steps, "burn_in": self.burn_in, "thin": self.thin,
                    "warmup": self.warmup, "n_logdensity_evaluations": self.n_logdensity_evaluations,
                    "wall_time_s": self.wall_time_s, "extra": self.extra}
        arrays = {name: np.asarray(getattr(self, name)) for name in _ARRAYS}
        fileio.write_checked_npz(path, {"metadata": np.array(json.dumps(to_jsonable(metadata))), **arrays})

    @classmethod
    def load(cls, path: str | os.PathLike) -> PosteriorResult:
        """Read a file written by `save` (its checksum verified).

        Raises:
            FileNotFoundError: there is no such file.
            ValueError: the file is not a saved `PosteriorResult` (another file, empty,
                truncated, written by a jcalib without checksums), or it is damaged
                ("checksum mismatch").
        """
        data = fileio.read_checked_npz(path, "PosteriorResult file", required=("metadata",))
        try:
            meta = json.loads(str(data["metadata"]))
        except json.JSONDecodeError:
            meta = None
        if not isinstance(meta, dict) or meta.get("format") != _FORMAT:
            found = meta.get("format") if isinstance(meta, dict) else None
            raise ValueError(f"PosteriorResult.load: {os.fspath(path)!r} has format {found!r}; expected {_FORMAT!r}")
        missing = [name for name in _ARRAYS if name not in data]
        if missing:
            raise ValueError(f"PosteriorResult.load: {os.fspath(path)!r} lacks the arrays {missing}; not written by "
                             "PosteriorResult.save")
        arrays = {name: data[name] for name in _ARRAYS}
        nan = float("nan")
        return cls(
            names=tuple(meta["names"]), units=tuple(meta["units"]), log_scale=tuple(meta["log_scale"]),
            best_logdensity=nan if meta["best_logdensity"] is None else float(meta["best_logdensity"]),
            method=meta["method"], n_steps=int(meta["n_steps"]), burn_in=int(meta["burn_in"]),
            thin=int(meta["thin"]), warmup=int(meta["warmup"]),
            n_logdensity_evaluations=int(meta["n_logdensity_evaluations"]),
            wall_time_s=nan if meta["wall_time_s"] is None else float(meta["wall_time_s"]),
            extra=meta["extra"], **arrays,
        )
