"""Digital-twin updating with an inverse mapping model (IMPU, Kessels et al. 2023, Sec. 2.2.3).

The online phase of the paper as a loop. A digital twin is the model with its current
parameters θ_twin (at first the reference model's p_c, the centre of the box). Each time the
physical system repeats the updating experiment (same initial condition and excitation as
the simulated training experiments; the paper's Remark 4), the new measurement y_i goes
through the trained `jcalib.nn.impu.InverseMapping` (milliseconds, no simulation) and gives
the estimate p̂_i. Then:

1. **Before/after errors.** The twin's prediction error against y_i is its RMSE per output,
   ``sqrt(mean_t (y_sim(θ) − y_i)²)``, with the parameters before the update (θ_twin: what
   the twin predicted for this experiment, the out-of-sample error of the previous update)
   and after it. The RMSE of the estimate itself and of the never-updated reference twin
   (θ_initial; the paper's Fig. 13 compares with it) are kept as well. These simulations are
   bookkeeping for the user; the update itself needs none. Each distinct parameter vector
   is simulated once (the experiment is the same every time), so a step costs one
   simulation, two when an estimate is clipped.
2. **Outside the training range.** The mapping flags an estimate whose normalised features
   or parameters leave the training range (`IMPUEstimate.outside_training_range`: the
   network extrapolates there; the paper, Sec. 4.3.2: "it is advised to treat parameter
   estimates outside the training space with caution", while the flag itself tells that the
   system may have left the expected parameter space, e.g. damage). What the twin does with a
   flagged estimate is the ``policy``:

   - ``"keep"`` (default): the twin keeps its previous parameters and the step is reported
     (flagged, not accepted). A twin is used for decisions; an extrapolated estimate that
     is wrong makes it inaccurate, while keeping the last trusted values only delays an
     update until the operator retrains the mapping on a wider box.
   - ``"accept"``: the estimate is taken anyway (still flagged in the history).
   - ``"clip"``: the estimate is projected onto the mapping's parameter box (the nearest
     trusted value in each coordinate; flagged, accepted).

   Estimates inside the range are always taken. An estimate whose simulation fails (e.g. a
   negative stiffness under ``"accept"``) is never taken (``accepted`` False,
   ``simulation_failed`` True).
3. **History.** Every step's parameters (before, estimate, after), flags, RMSEs, inference
   time and, for synthetic studies, the true parameters, stacked in a frozen
   `TwinUpdatingResult` (``to_dict``, JSON ``save``/``load``, `jcalib.plotting.plot_impu_updating`).

Two entry points: `DigitalTwin` (online: ``twin.update(measured)`` per experiment, one step at a
time) and `impu_updating` (offline replay of a sequence: one batched inference, one batched
simulation). Both give the same history for the same measurements.

Example:
    >>> import jax, jcalib                                                      # doctest: +SKIP
    >>> from jcalib.nn import InverseMapping, paper_noise, simulate_training_set  # doctest: +SKIP
    >>> jax.config.update("jax_enable_x64", True)                                # doctest: +SKIP
    >>> beam = jcalib.models.get("rigid_double_beam")                            # doctest: +SKIP
    >>> noise = paper_noise(beam)[0]           # additive on rigid_double_beam   # doctest: +SKIP
    >>> train = simulate_training_set(jax.random.key(0), beam, 1000, sampler="lhs", noise=noise)  # doctest: +SKIP
    >>> val = simulate_training_set(jax.random.key(1), beam, 1000, noise=noise)  # doctest: +SKIP
    >>> impu = InverseMapping(beam).fit(jax.random.key(2), *train, val=val)      # doctest: +SKIP
    >>> twin = DigitalTwin(impu)               # starts at the centre p_c        # doctest: +SKIP
    >>> step = twin.update(measured)           # measured: (256, 2)              # doctest: +SKIP
    >>> step.rmse_before, step.rmse_after, step.outside_training_range         # doctest: +SKIP
    >>> twin.result().save("twin_history.json")                                  # doctest: +SKIP
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence

import equinox as eqx
import numpy as np
from jaxtyping import ArrayLike, Float

from jcalib import fileio
from jcalib.bayes.recovery import relative_errors
from jcalib.data import Measurements
from jcalib.jsonable import to_jsonable
from jcalib.model import SolveStatus, simulate_batch

__all__ = ["POLICIES", "TWIN_CHUNK", "DigitalTwin", "TwinUpdate", "TwinUpdatingResult", "impu_updating",
           "rmse_per_output"]

POLICIES = ("keep", "accept", "clip")
"""What the twin does with an estimate flagged outside the training range (module docstring)."""

_FORMAT = "jcalib-twin-updating-1"
TWIN_CHUNK = 16
"""Default `simulate_batch` chunk of the twin's simulations: an online step simulates one or two
new parameter vectors, a replay all of them; padding every call to 16 rows compiles the solve
once (a new batch size would compile again, seconds) at the cost of a few idle rows."""


def rmse_per_output(simulated: Float[ArrayLike, "*batch n_times n_outputs"],
                    measured: Float[ArrayLike, "*batch n_times n_outputs"]) -> np.ndarray:
    """Root-mean-square error over time per output, ``sqrt(mean_t (sim − meas)²)``,
    shape ``(*batch, n_outputs)`` (NaN where the simulation failed)."""
    diff = np.asarray(simulated, np.float64) - np.asarray(measured, np.float64)
    return np.sqrt(np.mean(diff**2, axis=-2))


class TwinUpdate(eqx.Module):
    """One update of a `DigitalTwin` (one measured experiment).

    Attributes:
        index: position in the sequence (0-based).
        theta_before: the twin's parameters before the update ``(n_params,)``.
        theta_inferred: the IMPU estimate p̂ from this measurement.
        theta_after: the twin's parameters after the update (p̂, p̂ clipped, or unchanged).
        outside_training_range, features_outside, theta_outside: the mapping's flags.
        accepted: the twin took an estimate (p̂, or p̂ clipped under ``"clip"``).
        simulation_failed: the estimate's simulation failed (then never accepted).
        rmse_before: the twin's RMSE per output against this measurement before the update.
        rmse_after: ... after the update.
        rmse_inferred: ... of the estimate p̂ itself (equals ``rmse_after`` when accepted
            unclipped).
        rmse_reference: ... of the never-updated twin (the initial parameters).
        inference_time_s: wall time of the mapping's inference for this step.
        theta_true: the true parameters when known (synthetic studies), else None.
    """

    index: int
    theta_before: np.ndarray
    theta_inferred: np.ndarray
    theta_after: np.ndarray
    outside_training_range: bool
    features_outside: bool
    theta_outside: bool
    accepted: bool
    simulation_failed: bool
    rmse_before: np.ndarray
    rmse_after: np.ndarray
    rmse_inferred: np.ndarray
    rmse_reference: np.ndarray
    inference_time_s: float
    theta_true: np.ndarray | None = None

    def to_dict(self, names: Sequence[str] | None = None, output_names: Sequence[str] | None = None) -> dict:
        """JSON-able record; with ``names``/``output_names`` the vectors become ``{name: value}``."""
        def vec(v, labels):
            if v is None:
                return None
            v = np.asarray(v, np.float64)
            return dict(zip(labels, v.tolist())) if labels is not None else v
        d = {"index": self.index, "outside_training_range": self.outside_training_range,
             "features_outside": self.features_outside, "theta_outside": self.theta_outside,
             "accepted": self.accepted, "simulation_failed": self.simulation_failed,
             "inference_time_s": self.inference_time_s}
        for k in ("theta_before", "theta_inferred", "theta_after", "theta_true"):
            d[k] = vec(getattr(self, k), names)
        for k in ("rmse_before", "rmse_after", "rmse_inferred", "rmse_reference"):
            d[k] = vec(getattr(self, k), output_names)
        return to_jsonable(d)


class TwinUpdatingResult(eqx.Module):
    """The history of a digital twin's IMPU updates (`DigitalTwin.result`, `impu_updating`).

    Arrays are stacked over the ``n_steps`` measured experiments, in order.

    Attributes:
        names: parameter names; output_names: output names.
        policy: what was done with flagged estimates (`POLICIES`).
        feature: the mapping's feature type (e.g. ``"RI-FBoI"``).
        theta_initial: the twin's parameters before the first update ``(n_params,)``.
        theta_before, theta_inferred, theta_after: ``(n_steps, n_params)``, see `TwinUpdate`.
        outside_training_range, features_outside, theta_outside, accepted,
            simulation_failed: ``(n_steps,)`` booleans.
        rmse_before, rmse_after, rmse_inferred, rmse_reference: ``(n_steps, n_outputs)``.
        inference_time_s: ``(n_steps,)``.
        theta_true: ``(n_steps, n_params)`` or None.
        durations: seconds: ``inference_s`` and ``simulation_s`` in total.
    """

    names: tuple[str, ...] = eqx.field(static=True)
    output_names: tuple[str, ...] = eqx.field(static=True)
    policy: str = eqx.field(static=True)
    feature: str = eqx.field(static=True)
    theta_initial: np.ndarray
    theta_before: np.ndarray
    theta_inferred: np.ndarray
    theta_after: np.ndarray
    outside_training_range: np.ndarray
    features_outside: np.ndarray
    theta_outside: np.ndarray
    accepted: np.ndarray
    simulation_failed: np.ndarray
    rmse_before: np.ndarray
    rmse_after: np.ndarray
    rmse_inferred: np.ndarray
    rmse_reference: np.ndarray
    inference_time_s: np.ndarray
    theta_true: np.ndarray | None
    durations: dict

    @property
    def n_steps(self) -> int:
        return int(self.theta_after.shape[0])

    @property
    def n_flagged(self) -> int:
        return int(np.sum(self.outside_training_range))

    @property
    def n_accepted(self) -> int:
        return int(np.sum(self.accepted))

    @property
    def theta(self) -> np.ndarray:
        """The twin's parameters after the last update (the initial ones when there was none)."""
        return np.asarray(self.theta_after[-1] if self.n_steps else self.theta_initial)

    def step(self, i: int) -> TwinUpdate:
        """The ``i``-th update as a `TwinUpdate`."""
        if not -self.n_steps <= i < self.n_steps:
            raise IndexError(f"TwinUpdatingResult.step: index {i} out of range for {self.n_steps} steps")
        return TwinUpdate(
            index=i % self.n_steps, **{k: np.asarray(getattr(self, k)[i]) for k in (
                "theta_before", "theta_inferred", "theta_after", "rmse_before", "rmse_after", "rmse_inferred",
                "rmse_reference")},
            **{k: bool(getattr(self, k)[i]) for k in (
                "outside_training_range", "features_outside", "theta_outside", "accepted", "simulation_failed")},
            inference_time_s=float(self.inference_time_s[i]),
            theta_true=None if self.theta_true is None else np.asarray(self.theta_true[i]))

    def parameter_errors(self, which: str = "after") -> np.ndarray:
        """Relative errors ``(θ − θ_true) / θ_true`` (the paper's eq. 18) of the twin's
        parameters after each update (``"after"``), of the estimates (``"inferred"``), of the
        twin before each update (``"before"``) or of the initial twin (``"initial"``),
        ``(n_steps, n_params)``.

        Raises:
            ValueError: no true parameters; an unknown ``which``.
        """
        if self.theta_true is None:
            raise ValueError("TwinUpdatingResult.parameter_errors: the true parameters are unknown; pass theta_true "
                             "to impu_updating or DigitalTwin.update")
        choices = {"after": self.theta_after, "inferred": self.theta_inferred, "before": self.theta_before,
                   "initial": np.broadcast_to(self.theta_initial, np.shape(self.theta_true))}
        if which not in choices:
            raise ValueError(f"TwinUpdatingResult.parameter_errors: which must be one of {tuple(choices)}; got "
                             f"{which!r}")
        return relative_errors(self.theta_true, choices[which])

    def summary(self) -> dict:
        """Means over the steps: RMSE per output before/after the updates, of the reference
        twin, their ratio; counts; mean absolute relative parameter errors when the truth is
        known."""
        def by_output(v):
            return dict(zip(self.output_names, np.nanmean(np.asarray(v, np.float64), axis=0).tolist())) \
                if self.n_steps else {}
        d = {"n_steps": self.n_steps, "n_flagged": self.n_flagged, "n_accepted": self.n_accepted,
             "n_simulation_failed": int(np.sum(self.simulation_failed)), "policy": self.policy,
             "mean_rmse_before": by_output(self.rmse_before), "mean_rmse_after": by_output(self.rmse_after),
             "mean_rmse_reference": by_output(self.rmse_reference)}
        if self.n_steps:
            before = np.nanmean(self.rmse_before, axis=0)
            after = np.nanmean(self.rmse_after, axis=0)
            d["rmse_ratio_after_over_before"] = dict(zip(self.output_names, (after / before).tolist()))
            d["mean_inference_time_s"] = float(np.mean(self.inference_time_s))
        if self.theta_true is not None and self.n_steps:
            for which in ("initial", "before", "inferred", "after"):
                d[f"mare_{which}"] = dict(zip(self.names, np.mean(np.abs(self.parameter_errors(which)), 0).tolist()))
        return to_jsonable(d)

    def to_dict(self) -> dict:
        """Everything for JSON: names, policy, the stacked history and the `summary`."""
        d = {"format": _FORMAT, "names": list(self.names), "output_names": list(self.output_names),
             "policy": self.policy, "feature": self.feature, "durations": self.durations,
             "summary": self.summary()}
        for k in _ARRAY_FIELDS:
            d[k] = getattr(self, k)
        d["theta_true"] = self.theta_true
        return to_jsonable(d)

    def save(self, path: str | os.PathLike) -> None:
        """Write `to_dict` as JSON (NaN and inf become null) with a ``"sha256"`` checksum,
        atomically (`jcalib.fileio.write_checked_json`)."""
        fileio.write_checked_json(path, self.to_dict())

    @classmethod
    def load(cls, path: str | os.PathLike) -> TwinUpdatingResult:
        """Read a history written by `save` (null becomes NaN), its checksum verified.

        Raises:
            FileNotFoundError: no such file.
            ValueError: not a twin-updating file (another file, not JSON, no checksum), or a
                damaged one ("checksum mismatch").
        """
        d = fileio.read_checked_json(path, "twin-updating history", expected_format=_FORMAT)
        n_params, n_out = len(d["names"]), len(d["output_names"])
        arrays = {}
        for k in _ARRAY_FIELDS:
            kind = bool if k in _BOOL_FIELDS else np.float64
            a = np.asarray([np.nan if v is None else v for v in np.ravel(np.asarray(d[k], dtype=object))], dtype=kind)
            if k == "theta_initial":
                shape = (n_params,)
            elif k in ("theta_before", "theta_inferred", "theta_after"):
                shape = (-1, n_params)
            elif k.startswith("rmse"):
                shape = (-1, n_out)
            else:
                shape = (-1,)
            arrays[k] = a.reshape(shape)
        true = None if d["theta_true"] is None else np.asarray(
            [[np.nan if v is None else v for v in row] for row in d["theta_true"]], np.float64).reshape(-1, n_params)
        return cls(names=tuple(d["names"]), output_names=tuple(d["output_names"]), policy=d["policy"],
                   feature=d["feature"], theta_true=true, durations=dict(d["durations"]), **arrays)


_BOOL_FIELDS = ("outside_training_range", "features_outside", "theta_outside", "accepted", "simulation_failed")
_ARRAY_FIELDS = ("theta_initial", "theta_before", "theta_inferred", "theta_after", *_BOOL_FIELDS, "rmse_before",
                 "rmse_after", "rmse_inferred", "rmse_reference", "inference_time_s")


class DigitalTwin:
    """A digital twin updated online by an inverse mapping model, one experiment at a time.

    Args:
        mapping: a trained `jcalib.nn.impu.InverseMapping` (or an object with ``infer``,
            ``names``, ``space``, ``ts`` and ``model``).
        theta: the twin's initial parameters ``(n_params,)`` in physical units (default: the
            nominal values, the reference model's p_c).
        model: the model the twin simulates for the prediction errors (default: the
            mapping's simulator; a loaded mapping has none).
        policy: what to do with estimates flagged outside the training range: ``"keep"``,
            ``"accept"`` or ``"clip"`` (module docstring).
        chunk_size: `simulate_batch` chunk size (default `TWIN_CHUNK`): batches are padded
            to it, so every step reuses one compiled solve.

    Raises:
        ValueError: an unknown policy; an untrained mapping; no model; a model whose
            parameters, outputs or times differ from the mapping's; a bad ``theta``.
    """

    def __init__(self, mapping, theta: Float[ArrayLike, " n_params"] | None = None, *, model=None,
                 policy: str = "keep", chunk_size: int | None = TWIN_CHUNK) -> None:
        self.mapping = mapping
        self.model = _check_setup(mapping, model, policy, "DigitalTwin")
        self.policy = policy
        self.chunk_size = chunk_size
        self.theta_initial = _check_theta(mapping, theta, "DigitalTwin")
        self._theta = self.theta_initial.copy()
        self._cache: dict[bytes, np.ndarray] = {}
        self._history: list[TwinUpdate] = []
        self._durations = {"inference_s": 0.0, "simulation_s": 0.0}

    @property
    def theta(self) -> np.ndarray:
        """The twin's current parameters."""
        return self._theta.copy()

    @property
    def history(self) -> tuple[TwinUpdate, ...]:
        return tuple(self._history)

    def simulate(self, theta: Float[ArrayLike, " n_params"] | None = None) -> np.ndarray:
        """The twin's prediction of the updating experiment, ``(n_times, n_outputs)``, with
        ``theta`` (default: the current parameters); NaN if the solve fails."""
        theta = self._theta if theta is None else np.asarray(theta, np.float64)
        return self._simulate([theta])[0]

    def update(self, measured: Float[ArrayLike, "n_times n_outputs"], *,
               theta_true: Float[ArrayLike, " n_params"] | None = None) -> TwinUpdate:
        """Infer parameters from one new measurement and update the twin (the policy decides).

        Args:
            measured: the measured experiment on the model's observation times,
                ``(n_times, n_outputs)`` (an array or a `jcalib.data.Measurements` without
                missing entries).
            theta_true: the true parameters, when known (synthetic studies), for the history.

        Returns:
            The `TwinUpdate` (also appended to `history`).

        Raises:
            ValueError: a measurement of another shape, with NaN, or with missing entries; a
                ``theta_true`` of another shape.
        """
        x = _measurements(self.mapping, [measured], "DigitalTwin.update")[0]
        true = None if theta_true is None else _check_theta(self.mapping, theta_true, "DigitalTwin.update",
                                                           "theta_true")
        start = time.perf_counter()
        estimate = self.mapping.infer(x)
        theta_hat = np.asarray(estimate.theta, np.float64)
        inference_s = time.perf_counter() - start
        flags = tuple(bool(np.asarray(getattr(estimate, k))) for k in _FLAGS)
        step = _step(len(self._history), self.policy, self.mapping.space, self.theta_initial, self._theta,
                     theta_hat, flags, x, self._simulate, inference_s, true)
        self._history.append(step)
        self._theta = np.asarray(step.theta_after, np.float64).copy()
        self._durations["inference_s"] += inference_s
        return step

    def result(self) -> TwinUpdatingResult:
        """The history so far as a `TwinUpdatingResult`."""
        return _stack(self._history, self.mapping, self.model, self.policy, self.theta_initial, self._durations)

    # --- helpers ------------------------------------------------------------------------------------
    def _simulate(self, thetas: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Simulations of the parameter vectors, each distinct one solved once (cached)."""
        keys = [np.ascontiguousarray(t, np.float64).tobytes() for t in thetas]
        todo = {k: t for k, t in zip(keys, thetas) if k not in self._cache}
        if todo:
            start = time.perf_counter()
            batch = np.stack([np.asarray(t, np.float64) for t in todo.values()])
            n = batch.shape[0]
            if self.chunk_size:  # pad to whole chunks (simulate_batch shrinks a chunk to a smaller batch)
                batch = np.concatenate([batch, np.repeat(batch[-1:], -n % self.chunk_size, axis=0)])
            values, status = simulate_batch(self.model, batch, self.chunk_size, throw=False, return_status=True,
                                            check_bounds=False, progress=False)
            values, status = values[:n], status[:n]
            for k, v, s in zip(todo, values, status):
                self._cache[k] = v if s == SolveStatus.SUCCESS else np.full_like(v, np.nan)
            self._durations["simulation_s"] += time.perf_counter() - start
        return [self._cache[k] for k in keys]


_FLAGS = ("outside_training_range", "features_outside", "theta_outside")


def impu_updating(
    mapping,
    measurements,
    *,
    theta: Float[ArrayLike, " n_params"] | None = None,
    model=None,
    policy: str = "keep",
    theta_true: Float[ArrayLike, "n_steps n_params"] | None = None,
    chunk_size: int | None = None,
) -> TwinUpdatingResult:
    """Replay a sequence of measured experiments through a digital twin (offline).

    The same history as feeding the measurements one by one to `DigitalTwin.update`, with one
    batched inference and one batched simulation of all distinct parameter vectors.

    Args:
        mapping: a trained `jcalib.nn.impu.InverseMapping`.
        measurements: ``(n_steps, n_times, n_outputs)`` array, or a sequence of
            ``(n_times, n_outputs)`` arrays or `jcalib.data.Measurements` without missing
            entries, in time order.
        theta: the twin's initial parameters (default: nominal, p_c).
        model: the model the twin simulates (default: the mapping's simulator).
        policy: ``"keep"``, ``"accept"`` or ``"clip"`` for flagged estimates (module docstring).
        theta_true: the true parameters per experiment ``(n_steps, n_params)``, when known.
        chunk_size: `simulate_batch` chunk size (default `TWIN_CHUNK`).

    Returns:
        `TwinUpdatingResult`.

    Raises:
        ValueError: as `DigitalTwin` and `DigitalTwin.update`; no measurements;
            ``theta_true`` of another shape.
    """
    twin = DigitalTwin(mapping, theta, model=model, policy=policy,
                       chunk_size=TWIN_CHUNK if chunk_size is None else chunk_size)
    xs = _measurements(mapping, measurements, "impu_updating")
    n = xs.shape[0]
    trues = None
    if theta_true is not None:
        trues = np.asarray(theta_true, np.float64)
        if trues.shape != (n, len(mapping.names)):
            raise ValueError(f"impu_updating: theta_true must have shape (n_steps={n}, n_params={len(mapping.names)}); "
                             f"got {trues.shape}")
    start = time.perf_counter()
    estimate = mapping.infer(xs)
    thetas = np.asarray(estimate.theta, np.float64).reshape(n, -1)
    flags = np.stack([np.asarray(getattr(estimate, k), bool).reshape(n) for k in _FLAGS], axis=1)
    inference_each = (time.perf_counter() - start) / n
    twin._durations["inference_s"] += inference_each * n
    # every parameter vector the twin can take: the initial, the estimates, their clipped versions
    box = (np.asarray(mapping.space.lower, np.float64), np.asarray(mapping.space.upper, np.float64))
    candidates = [twin.theta_initial, *thetas]
    if policy == "clip":
        candidates += [np.clip(t, *box) for t in thetas]
    twin._simulate(candidates)
    for i in range(n):
        step = _step(i, policy, mapping.space, twin.theta_initial, twin._theta, thetas[i], tuple(flags[i]), xs[i],
                     twin._simulate, inference_each, None if trues is None else trues[i])
        twin._history.append(step)
        twin._theta = np.asarray(step.theta_after, np.float64).copy()
    return twin.result()


# --- helpers -----------------------------------------------------------------------------------------
def _step(index, policy, space, theta_initial, theta_before, theta_hat, flags, measured, simulate, inference_s,
          theta_true) -> TwinUpdate:
    """One update: the policy's decision and the four RMSEs."""
    flagged = bool(flags[0])
    candidate = theta_hat
    if flagged and policy == "clip":
        candidate = np.clip(theta_hat, np.asarray(space.lower, np.float64), np.asarray(space.upper, np.float64))
    take = not flagged or policy in ("accept", "clip")
    sim_before, sim_hat, sim_candidate, sim_reference = simulate([theta_before, theta_hat, candidate, theta_initial])
    failed = bool(take and not np.all(np.isfinite(sim_candidate)))
    accepted = take and not failed
    theta_after = candidate if accepted else theta_before
    sim_after = sim_candidate if accepted else sim_before
    return TwinUpdate(
        index=int(index), theta_before=np.asarray(theta_before, np.float64).copy(),
        theta_inferred=np.asarray(theta_hat, np.float64).copy(), theta_after=np.asarray(theta_after, np.float64).copy(),
        outside_training_range=flagged, features_outside=bool(flags[1]), theta_outside=bool(flags[2]),
        accepted=bool(accepted), simulation_failed=bool(not np.all(np.isfinite(sim_hat)) or failed),
        rmse_before=rmse_per_output(sim_before, measured), rmse_after=rmse_per_output(sim_after, measured),
        rmse_inferred=rmse_per_output(sim_hat, measured), rmse_reference=rmse_per_output(sim_reference, measured),
        inference_time_s=float(inference_s), theta_true=None if theta_true is None else np.asarray(theta_true).copy())


def _stack(history, mapping, model, policy, theta_initial, durations) -> TwinUpdatingResult:
    n_params, n_out = len(mapping.names), len(model.output_names)

    def stack(k, width, dtype=np.float64):
        if not history:
            return np.zeros((0, width) if width else (0,), dtype)
        return np.stack([np.asarray(getattr(s, k), dtype) for s in history])
    truths = [s.theta_true for s in history]
    true = np.stack(truths) if history and all(t is not None for t in truths) else None
    return TwinUpdatingResult(
        names=tuple(mapping.names), output_names=tuple(model.output_names), policy=policy,
        feature=str(getattr(mapping, "feature", "")), theta_initial=np.asarray(theta_initial, np.float64).copy(),
        **{k: stack(k, n_params) for k in ("theta_before", "theta_inferred", "theta_after")},
        **{k: stack(k, None, bool) for k in _BOOL_FIELDS},
        **{k: stack(k, n_out) for k in ("rmse_before", "rmse_after", "rmse_inferred", "rmse_reference")},
        inference_time_s=stack("inference_time_s", None), theta_true=true, durations=dict(durations))


def _check_setup(mapping, model, policy: str, where: str):
    if policy not in POLICIES:
        raise ValueError(f"{where}: unknown policy {policy!r}; use one of {POLICIES} (what to do with an estimate "
                         "flagged outside the training range)")
    if not getattr(mapping, "is_trained", True) or not hasattr(mapping, "infer"):
        raise ValueError(f"{where}: mapping must be a trained InverseMapping; call InverseMapping(simulator, "
                         "config).fit(key, thetas, trajectories) or InverseMapping.load(path) first")
    model = getattr(mapping, "simulator", None) if model is None else model
    if model is None:
        raise ValueError(f"{where}: the twin needs a model to simulate; pass model=... (a loaded mapping keeps no "
                         "simulator)")
    names = tuple(mapping.names)
    if tuple(model.parameters.names) != names:
        raise ValueError(f"{where}: the model's parameters {tuple(model.parameters.names)} are not the mapping's "
                         f"{names}; use the model the mapping was trained for")
    ts, mts = np.asarray(mapping.ts, np.float64), np.asarray(model.ts, np.float64)
    if ts.shape != mts.shape or not np.allclose(ts, mts, rtol=1e-12, atol=0.0):
        raise ValueError(f"{where}: the model is observed at {mts.size} times but the mapping was trained on "
                         f"{ts.size}; use the same experiment (observation times) for both")
    return model


def _check_theta(mapping, theta, where: str, what: str = "theta") -> np.ndarray:
    space = mapping.space
    if theta is None:
        return np.asarray(space.nominal, np.float64).copy()
    theta = np.asarray(theta, np.float64)
    if theta.shape != (space.n_params,) or not np.all(np.isfinite(theta)):
        raise ValueError(f"{where}: {what} must be {space.n_params} finite values ({', '.join(space.names)}); got "
                         f"shape {theta.shape}{'' if theta.shape != (space.n_params,) else ' with NaN or inf'}")
    return theta.copy()


def _measurements(mapping, measurements, where: str) -> np.ndarray:
    """``(n, n_times, n_outputs)`` float64 from an array or a sequence of arrays/Measurements."""
    if not isinstance(measurements, Measurements) and (
            isinstance(measurements, np.ndarray) or hasattr(measurements, "__array__")):
        xs = np.asarray(measurements, np.float64)
    else:
        rows = []
        for i, m in enumerate(measurements):
            if isinstance(m, Measurements):
                if not np.all(np.asarray(m.mask)):
                    raise ValueError(f"{where}: measurement {i} has missing entries; IMPU features need every output "
                                     "at every time (impute them first)")
                m = m.values
            rows.append(np.asarray(m, np.float64))
        xs = np.stack(rows) if rows else np.zeros((0, np.asarray(mapping.ts).size, 0))
    n_times = np.asarray(mapping.ts).size
    if xs.ndim == 2:
        xs = xs[None]
    if xs.ndim != 3 or xs.shape[1] != n_times or (xs.shape[0] and xs.shape[2] != _n_outputs(mapping)):
        raise ValueError(f"{where}: measurements must have shape (n_times={n_times}, n_outputs={_n_outputs(mapping)}) "
                         f"each; got {xs.shape}")
    if xs.shape[0] == 0:
        raise ValueError(f"{where}: measurements is empty; pass (n_steps, n_times, n_outputs)")
    bad = np.flatnonzero(~np.all(np.isfinite(xs.reshape(xs.shape[0], -1)), axis=1))
    if bad.size:
        raise ValueError(f"{where}: measurements {bad[:10].tolist()} contain NaN or inf")
    return xs


def _n_outputs(mapping) -> int:
    names = getattr(mapping, "output_names", None) or getattr(getattr(mapping, "simulator", None), "output_names", None)
    return len(names) if names is not None else int(mapping.extractor.n_outputs)
