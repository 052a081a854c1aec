"""`jcalib` command line: list models, show parameter tables, simulate and plot, analyse
sensitivity and identifiability, calibrate, sample posteriors.

A user mistake (bad option value, unknown parameter, out-of-bounds --set/--start,
unusable --out/--csv/--plot path, bad --data file, failed simulation, an estimator without a
finite answer) ends in one line ``error: ...`` on stderr that names the problem and the fix,
with exit code 2 and no traceback (``JCALIB_DEBUG=1`` shows it). A --fix value outside the
parameter's bounds is allowed (a `CalibrationProblem` admits fixed values outside the bounds
on purpose, e.g. a rate fixed to 0) and gets a one-line ``note: ...`` on stderr. Output
folders and files are checked and created before any computation, and every result file is
written atomically."""

from jcalib.cli.app import app, main

__all__ = ["app", "main"]
