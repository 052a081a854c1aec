"""Measurements: data on a time grid with missing entries and noise levels; synthetic data; I/O.

A `Measurements` holds ``values[i, j]``, the measurement of output ``j`` at time
``ts[i]``, with a boolean ``mask`` (True = measured) for ragged data and an optional
noise level ``sigma``. Missing (masked-out) entries are stored as `MISSING_FILL` (1.0),
never NaN, so relative residuals ``(X - F) / X`` never divide by NaN or zero there;
methods only ever read the measured entries.

Example:
    >>> import jax
    >>> jax.config.update("jax_enable_x64", True)
    >>> import numpy as np
    >>> m = Measurements([0.0, 1.0], np.array([[1.0, np.nan], [0.5, 2.0]]),
    ...                  mask=np.array([[True, False], [True, True]]), sigma=0.05,
    ...                  output_names=("A", "B"))
    >>> m.n_times, m.n_outputs, m.n_observed
    (2, 2, 3)
    >>> float(m.values[0, 1])  # the missing entry holds the fill value
    1.0
"""

from __future__ import annotations

import csv
import io
import math
import os
from collections.abc import Mapping

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float, PRNGKeyArray

from jcalib import fileio
from jcalib.model import AbstractModel, SimulationError, SolveStatus
from jcalib.probability.likelihoods import add_noise

__all__ = ["MISSING_FILL", "Measurements", "synthetic_measurements"]

MISSING_FILL = 1.0
"""Value stored in masked-out entries: finite and non-zero, so relative residuals stay finite."""

_NOISE_MODELS = ("multiplicative", "additive")


class Measurements(eqx.Module):
    """Measured outputs on a time grid (an immutable pytree, usable as a field of a module).

    Args:
        ts: measurement times, ``(n_times,)``, finite and non-decreasing.
        values: measurements, ``(n_times, n_outputs)``; entries with ``mask=False`` may hold
            anything (NaN included) and are replaced by `MISSING_FILL`.
        mask: booleans ``(n_times, n_outputs)``, True where measured; None: all measured.
        sigma: noise level: None, a scalar, one per output ``(n_outputs,)`` or one per entry
            ``(n_times, n_outputs)``; positive and finite (per-entry values of masked-out
            entries are ignored and stored as `MISSING_FILL`). Its meaning depends on the
            weighting of the `CalibrationProblem`: the relative noise level for
            multiplicative noise, the standard deviation for additive noise.
        output_names: names of the outputs (the model's ``output_names``), or None.

    Attributes:
        ts, values, mask: float64 / bool JAX arrays as described above (``mask`` always full).
        sigma: float64 array of the shape it was given in, or None.
        output_names: tuple of names, or None.

    Raises:
        ValueError: float64 not enabled; wrong shapes (the message names the argument and
            gives the expected and received shapes); non-finite or decreasing ``ts``;
            NaN or inf in a measured entry (the message names the time and output);
            non-positive or non-finite ``sigma``; no measured entry at all.
    """

    ts: Float[Array, " n_times"]
    values: Float[Array, "n_times n_outputs"]
    mask: Bool[Array, "n_times n_outputs"]
    sigma: Float[Array, "..."] | None
    output_names: tuple[str, ...] | None = eqx.field(static=True)

    def __init__(self, ts: ArrayLike, values: ArrayLike, mask: ArrayLike | None = None,
                 sigma: ArrayLike | None = None, output_names=None) -> None:
        if not _x64_enabled():
            raise ValueError(
                "Measurements need float64: call jax.config.update('jax_enable_x64', True) "
                "before creating them"
            )
        ts_np = np.asarray(ts, dtype=np.float64)
        if ts_np.ndim != 1 or ts_np.size == 0:
            raise ValueError(
                f"Measurements: ts must be a non-empty 1-D array (n_times,); got shape {ts_np.shape}"
            )
        if not np.all(np.isfinite(ts_np)):
            raise ValueError("Measurements: ts contains NaN or inf")
        if np.any(np.diff(ts_np) < 0):
            i = int(np.flatnonzero(np.diff(ts_np) < 0)[0])
            raise ValueError(
                f"Measurements: ts must be non-decreasing; got ts[{i}]={ts_np[i]} > "
                f"ts[{i + 1}]={ts_np[i + 1]}"
            )
        n_times = ts_np.size
        values_np = np.array(values, dtype=np.float64)
        if values_np.ndim != 2 or values_np.shape[0] != n_times or values_np.shape[1] == 0:
            hint = " (use values[:, None] for a single output)" if values_np.ndim == 1 else ""
            raise ValueError(
                f"Measurements: values must have shape (n_times, n_outputs) with n_times={n_times}"
                f"; got shape {values_np.shape}{hint}"
            )
        shape = values_np.shape
        n_outputs = shape[1]

        if output_names is not None:
            if isinstance(output_names, str):
                output_names = (output_names,)
            output_names = tuple(output_names)
            if not all(isinstance(n, str) and n for n in output_names):
                raise ValueError(
                    f"Measurements: output_names must be non-empty strings; got {output_names!r}"
                )
            if len(output_names) != n_outputs:
                raise ValueError(
                    f"Measurements: output_names has {len(output_names)} names {output_names} but "
                    f"values has {n_outputs} columns (shape {shape})"
                )
            duplicates = sorted({n for n in output_names if output_names.count(n) > 1})
            if duplicates:
                raise ValueError(f"Measurements: duplicate output_names {duplicates}")

        if mask is None:
            mask_np = np.ones(shape, dtype=bool)
        else:
            mask_np = np.asarray(mask)
            if mask_np.shape != shape:
                raise ValueError(
                    f"Measurements: mask must have the shape of values {shape}; got shape "
                    f"{mask_np.shape}"
                )
            if mask_np.dtype != bool:
                if not np.all((mask_np == 0) | (mask_np == 1)):
                    raise ValueError("Measurements: mask must be boolean (True = measured)")
                mask_np = mask_np.astype(bool)
        if not mask_np.any():
            raise ValueError("Measurements: no measured entries (mask is all False)")

        bad = mask_np & ~np.isfinite(values_np)
        if bad.any():
            i, j = (int(k) for k in np.argwhere(bad)[0])
            kind = "NaN" if np.isnan(values_np[i, j]) else "inf"
            more = f" (and {int(bad.sum()) - 1} more)" if bad.sum() > 1 else ""
            raise ValueError(
                f"Measurements: {kind} in measured entry (t={ts_np[i]}, "
                f"{_output_label(output_names, j)}){more}; mark missing entries with mask=False"
            )
        values_np = np.where(mask_np, values_np, MISSING_FILL)

        self.ts = jnp.asarray(ts_np)
        self.values = jnp.asarray(values_np)
        self.mask = jnp.asarray(mask_np)
        self.sigma = None if sigma is None else jnp.asarray(_check_sigma(sigma, mask_np, output_names))
        self.output_names = output_names

    # --- shape information -----------------------------------------------------------------
    @property
    def n_times(self) -> int:
        return int(self.values.shape[0])

    @property
    def n_outputs(self) -> int:
        return int(self.values.shape[1])

    @property
    def n_observed(self) -> int:
        """Number of measured entries (``mask.sum()``)."""
        return int(np.asarray(self.mask).sum())

    def sigma_full(self) -> Float[Array, "n_times n_outputs"] | None:
        """``sigma`` broadcast to ``(n_times, n_outputs)``, or None when not given."""
        if self.sigma is None:
            return None
        shape = (self.n_times, self.n_outputs)
        sigma = self.sigma[None, :] if self.sigma.ndim == 1 else self.sigma
        return jnp.broadcast_to(sigma, shape)

    # --- I/O ------------------------------------------------------------------------------
    def to_csv(self, path: str | os.PathLike) -> None:
        """Write a CSV file: header ``t,<name1>,<name2>,...``, one row per time.

        Missing entries are empty cells. When ``sigma`` is given, columns
        ``sigma_<name>`` follow with the per-entry noise level (`sigma_full`). Without
        ``output_names`` the columns are named ``y0, y1, ...``. Floats are written with
        ``repr`` precision, so `from_csv` gives back exactly the same numbers.
        """
        names = self.output_names or tuple(f"y{j}" for j in range(self.n_outputs))
        ts, values, mask = np.asarray(self.ts), np.asarray(self.values), np.asarray(self.mask)
        sigma = self.sigma_full()
        header = ["t", *names]
        if sigma is not None:
            sigma = np.asarray(sigma)
            header += [f"sigma_{n}" for n in names]
        buffer = io.StringIO(newline="")
        writer = csv.writer(buffer)
        writer.writerow(header)
        for i in range(self.n_times):
            row = [_fmt(ts[i])]
            row += [_fmt(values[i, j]) if mask[i, j] else "" for j in range(self.n_outputs)]
            if sigma is not None:
                row += [_fmt(s) for s in sigma[i]]
            writer.writerow(row)
        fileio.atomic_write_text(path, buffer.getvalue())  # never a half-written file

    @classmethod
    def from_csv(cls, path: str | os.PathLike) -> Measurements:
        """Read a file written by `to_csv` (or by hand, or by a spreadsheet program, in the
        same layout).

        The file is UTF-8 text, with or without a byte-order mark. Empty cells are missing
        entries (``mask=False``); blank lines are skipped. Sigma columns come back in the
        most compact form that reproduces them: a scalar if all are equal, one value per
        output if every column is constant, per entry otherwise (`sigma_full` is
        always exactly the one written). A sigma cell may be empty where its value is.

        Raises:
            FileNotFoundError: ``path`` does not exist.
            ValueError: the file is not UTF-8 CSV text, is empty, or its header is not
                ``t,<outputs>[,sigma_<outputs>]``; a row has the wrong number of cells; a
                cell is not a finite number (or a sigma not positive); the times decrease.
                Every message about a cell names its line, its column (number and name)
                and the offending text.
        """
        where = os.fspath(path)
        rows = _csv_rows(path)
        header, names, has_sigma = _csv_header(rows, where)
        if len(rows) == 1:
            raise ValueError(f"from_csv: {where!r} has a header but no rows")
        n_out = len(names)

        def number(line: int, j: int, text: str, what: str = "a finite number") -> float:
            try:
                value = float(text)
            except ValueError:
                value = math.nan
            if not math.isfinite(value) or (what != "a finite number" and value <= 0):
                hint = "; leave the cell empty for a missing entry" if 1 <= j <= n_out else ""
                raise ValueError(
                    f"from_csv: line {line}, column {j + 1} ({header[j]!r}) of {where!r}: {text!r} is not "
                    f"{what}{hint}"
                ) from None
            return value

        ts, values, mask, sigma = [], [], [], []
        for line, row in rows[1:]:
            if len(row) != len(header):
                raise ValueError(
                    f"from_csv: line {line} of {where!r} has {len(row)} cells; expected "
                    f"{len(header)} ({', '.join(header)})"
                )
            cells = [c.strip() for c in row]
            t = number(line, 0, cells[0])
            if ts and t < ts[-1][1]:
                raise ValueError(
                    f"from_csv: line {line}, column 1 ('t') of {where!r}: time {cells[0]!r} is before "
                    f"{ts[-1][1]!r} on line {ts[-1][0]}; sort the rows by time"
                )
            ts.append((line, t))
            values.append([number(line, j, c) if c else np.nan for j, c in enumerate(cells[1 : 1 + n_out], 1)])
            mask.append([bool(c) for c in cells[1 : 1 + n_out]])
            if has_sigma:
                sigma.append([np.nan if not c and not cells[j - n_out] else
                              number(line, j, c, "a positive finite number")
                              for j, c in enumerate(cells[1 + n_out :], 1 + n_out)])
        sigma_arr = _compact_sigma(np.array(sigma, dtype=np.float64)) if has_sigma else None
        return cls(np.array([t for _, t in ts]), np.array(values), np.array(mask, dtype=bool), sigma_arr,
                   tuple(names))

    def to_npz(self, path: str | os.PathLike) -> None:
        """Write every field (ts, values, mask, sigma, output_names) to an ``.npz`` file,
        atomically and with a SHA-256 checksum (`jcalib.fileio.write_checked_npz`).

        ``.npz`` is appended to ``path`` when it has no such suffix (as NumPy does). No
        pickles are used.
        """
        arrays = {"ts": np.asarray(self.ts), "values": np.asarray(self.values),
                  "mask": np.asarray(self.mask)}
        if self.sigma is not None:
            arrays["sigma"] = np.asarray(self.sigma)
        if self.output_names is not None:
            arrays["output_names"] = np.array(self.output_names, dtype=np.str_)
        path = os.fspath(path)
        fileio.write_checked_npz(path if path.endswith(".npz") else path + ".npz", arrays)

    @classmethod
    def from_npz(cls, path: str | os.PathLike) -> Measurements:
        """Read a file written by `to_npz` (its checksum verified); the result equals the
        saved measurements.

        Raises:
            FileNotFoundError: there is no such file.
            ValueError: not a `to_npz` file (another file, empty, truncated, written by a
                jcalib without checksums), or a damaged one ("checksum mismatch").
        """
        data = fileio.read_checked_npz(path, "Measurements file", required=("ts", "values", "mask"))
        sigma = data["sigma"] if "sigma" in data else None
        names = tuple(str(n) for n in data["output_names"]) if "output_names" in data else None
        return cls(data["ts"], data["values"], data["mask"], sigma, names)


def synthetic_measurements(
    key: PRNGKeyArray,
    model: AbstractModel,
    theta: Float[ArrayLike, " n_params"] | Mapping[str, float],
    sigma: ArrayLike,
    noise: str = "multiplicative",
    mask: ArrayLike | None = None,
) -> Measurements:
    """Simulate ``model`` at ``theta`` and add Gaussian noise: synthetic data with known truth.

    Noise models, with ε ~ N(0, 1) i.i.d. per entry:

    - ``"multiplicative"``: X = F (1 + σ ε), the relative error model of the papers
      (Wulkow 2021, eq. 6 weights residuals by 1/X);
    - ``"additive"``: X = F + σ ε.

    Args:
        key: a ``jax.random`` key; the same key gives the same data.
        model: the model to simulate (times, outputs and default mask come from it).
        theta: physical parameter vector, ``(n_params,)``, float64, or ``{name: value}``
            (parameters not named at their nominal values).
        sigma: noise level: scalar, per output ``(n_outputs,)`` or per entry
            ``(n_times, n_outputs)``; stored in the result.
        noise: ``"multiplicative"`` or ``"additive"``.
        mask: measured entries, ``(n_times, n_outputs)``; defaults to
            ``model.experiment.mask`` (None: all measured).

    Returns:
        `Measurements` at ``model.ts`` with the model's output names.

    Raises:
        ValueError: unknown ``noise``, invalid ``sigma`` / ``mask``, ``theta`` of the wrong
            shape or naming an unknown parameter.
        SimulationError: the simulation at ``theta`` failed (NaN output).
    """
    if noise not in _NOISE_MODELS:
        raise ValueError(
            f"synthetic_measurements: noise must be 'multiplicative' or 'additive'; got {noise!r}"
        )
    if isinstance(theta, Mapping):  # {name: value}: the others at their nominal values, as the estimators take
        try:
            theta = model.parameters.to_vector(theta)
        except ValueError as err:
            raise ValueError(f"synthetic_measurements: theta: {err}") from None
    theta = jnp.asarray(model.parameters.check_shape(theta, "synthetic_measurements: theta"))
    f, status = _simulate_with_status(model, theta)
    f, status = np.asarray(f), int(status)
    if status != SolveStatus.SUCCESS or not np.all(np.isfinite(f)):
        reason = SolveStatus.describe(status) if status != SolveStatus.SUCCESS else "NaN output"
        raise SimulationError(
            f"synthetic_measurements: the simulation failed ({reason}) at theta = "
            f"{model.parameters.to_dict(np.asarray(theta))}; no data generated",
            f[None], np.array([status]),
        )
    if mask is None:
        mask = model.experiment.mask
    mask_np = np.ones(f.shape, dtype=bool) if mask is None else np.asarray(mask)
    if mask_np.shape != f.shape:
        raise ValueError(
            f"synthetic_measurements: mask must have shape (n_times, n_outputs) = {f.shape}; got "
            f"shape {mask_np.shape}"
        )
    sigma_np = _check_sigma(sigma, mask_np.astype(bool), model.output_names)
    sigma_full = np.broadcast_to(sigma_np[None, :] if sigma_np.ndim == 1 else sigma_np, f.shape)
    values = np.asarray(add_noise(key, f, sigma_full, noise), np.float64)
    return Measurements(np.asarray(model.ts), values, mask_np, sigma_np, model.output_names)


# --- helpers --------------------------------------------------------------------------------
def _x64_enabled() -> bool:
    return bool(jax.config.jax_enable_x64)


@eqx.filter_jit
def _simulate_with_status(model, theta):
    return model.simulate_with_status(theta)


def _check_sigma(sigma, mask: np.ndarray, output_names) -> np.ndarray:
    """Validated float64 sigma in the shape given: (), (n_outputs,) or (n_times, n_outputs)."""
    n_times, n_outputs = mask.shape
    sigma = np.array(sigma, dtype=np.float64)
    if sigma.ndim == 0 or sigma.shape in ((n_outputs,), (n_times, n_outputs)):
        pass
    else:
        raise ValueError(
            f"Measurements: sigma must be a scalar, shape (n_outputs,) = ({n_outputs},) or "
            f"(n_times, n_outputs) = ({n_times}, {n_outputs}); got shape {sigma.shape}"
        )
    if sigma.ndim == 2:
        sigma = np.where(mask, sigma, MISSING_FILL)
    bad = ~(np.isfinite(sigma) & (sigma > 0))
    if bad.any():
        where = ""
        if sigma.ndim >= 1:
            idx = np.argwhere(bad)[0]
            j = int(idx[-1])
            where = f" at {_output_label(output_names, j)}"
            if sigma.ndim == 2:
                where += f", time index {int(idx[0])}"
        raise ValueError(
            f"Measurements: sigma must be positive and finite; got {sigma[tuple(np.argwhere(bad)[0])]}"
            f"{where}"
        )
    return sigma


def _csv_rows(path) -> list[tuple[int, list[str]]]:
    """The non-blank rows of a UTF-8 CSV file with their line numbers."""
    where = os.fspath(path)
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            reader = csv.reader(f)
            rows = [(reader.line_num, row) for row in reader if any(c.strip() for c in row)]
    except UnicodeDecodeError as err:
        raise ValueError(
            f"from_csv: {where!r} is not UTF-8 text (byte {err.object[err.start:err.start + 1]!r} at "
            f"offset {err.start}); save the file as UTF-8 CSV"
        ) from None
    except csv.Error as err:
        raise ValueError(f"from_csv: line {reader.line_num} of {where!r} is not valid CSV ({err})") from None
    if not rows:
        raise ValueError(f"from_csv: {where!r} is empty; expected a header t,<outputs> and one row per time")
    return rows


def _csv_header(rows, where: str) -> tuple[list[str], list[str], bool]:
    """(header cells, output names, whether sigma columns follow), checked."""
    header_line, header = rows[0][0], [h.strip() for h in rows[0][1]]
    if header[0] != "t":
        raise ValueError(
            f"from_csv: the first column must be 't'; got header {header} (line {header_line} of {where!r})"
        )
    for j, h in enumerate(header):
        if not h:
            raise ValueError(
                f"from_csv: column {j + 1} of the header (line {header_line} of {where!r}) has no name; "
                f"got header {header}"
            )
    columns = header[1:]
    half = len(columns) // 2
    has_sigma = (len(columns) % 2 == 0 and half > 0
                 and columns[half:] == [f"sigma_{n}" for n in columns[:half]])
    names = columns[:half] if has_sigma else columns
    if not names:
        raise ValueError(f"from_csv: no output columns in {where!r}; expected a header t,<outputs>")
    if not has_sigma and any(n.startswith("sigma_") for n in names):
        expected = ",".join(["t", *(n for n in names if not n.startswith("sigma_")),
                             *(n for n in names if n.startswith("sigma_"))])
        raise ValueError(
            f"from_csv: the header of {where!r} has sigma columns but not one per output after all "
            f"outputs in the same order; got {','.join(header)}, expected e.g. {expected} with "
            "sigma_<name> for every output <name>"
        )
    return header, names, has_sigma


def _compact_sigma(sigma: np.ndarray) -> np.ndarray:
    """Per-entry sigma -> per output -> scalar, whenever that loses nothing."""
    if np.all(sigma == sigma[:1]):
        sigma = sigma[0]
        if np.all(sigma == sigma[0]):
            sigma = sigma[0]
    return np.asarray(sigma)


def _output_label(output_names, j: int) -> str:
    return f"output {output_names[j]!r}" if output_names else f"output {j}"


def _fmt(x) -> str:
    """Shortest repr that round-trips a float64 exactly."""
    x = float(x)
    return repr(x) if math.isfinite(x) else str(x)
