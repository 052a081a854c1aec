"""Where benchmark records live: a folder of Parquet files, one per run (problem, method, repetition, budget).

Each record is written as its run finishes, atomically (a temporary file, then a rename), with
Parquet's page checksums, so an interrupted grid loses only the runs in flight and a rerun skips
what is stored (`Store.has`). `Store.frame` loads every record as one pandas frame; a damaged
file is an error that names it, never a row of wrong numbers.

Why Parquet: columnar, typed (lists of floats for traces), read by pandas, pyarrow, polars and
R alike; one file per record needs no lock between processes writing at once.

Example:
    >>> import tempfile
    >>> store = Store(tempfile.mkdtemp())
    >>> run = run_id("rosenbrock", "fides", 0, {"gradients": 100})
    >>> store.has(run)
    False
    >>> store.append(run, {"final_value": 1e-9, "trace_cost": [1.0, 2.0]})
    >>> store.has(run), store.frame()[["problem", "method", "repeat", "final_value"]].values.tolist()
    (True, [['rosenbrock', 'fides', 0, 1e-09]])
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import pathlib
from collections.abc import Mapping
from typing import NamedTuple

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from jcalib.fileio import atomic_write_bytes

__all__ = ["RunId", "Store", "run_id"]

_KEY_COLUMNS = ("problem", "method", "repeat", "budget", "digest")


class RunId(NamedTuple):
    """What identifies a run: the problem's id, the method's configuration (e.g.
    ``"trf:stop=fides"``), the repetition (its random key is derived from it), the budget (JSON)
    and their hash ``digest``."""

    problem: str
    method: str
    repeat: int
    budget: str
    digest: str


def run_id(problem: str, method: str, repeat: int, budget: Mapping[str, float] | None = None) -> RunId:
    """The `RunId` of a run: its ``digest`` is the first 16 hex digits of the SHA-256 of the
    canonical JSON of the four.

    Example:
        >>> run_id("p", "lm", 1).digest == run_id("p", "lm", 1, {}).digest != run_id("p", "lm", 2).digest
        True
    """
    if not isinstance(repeat, (int, np.integer)) or isinstance(repeat, bool) or repeat < 0:
        raise ValueError(f"run_id: repeat must be an integer >= 0; got {repeat!r}")
    budget = {} if budget is None else budget
    if not isinstance(budget, Mapping) or not all(isinstance(k, str) and isinstance(v, (int, float, np.number))
                                                  and math.isfinite(v) and v >= 0 for k, v in budget.items()):
        raise ValueError(f"run_id: budget must be a {{unit: amount >= 0}} dict of finite numbers; got {budget!r}")
    budget_json = json.dumps({k: float(v) for k, v in budget.items()}, sort_keys=True)  # 1 and 1.0: one run
    repeat = int(repeat)
    text = json.dumps([str(problem), str(method), repeat, budget_json])
    return RunId(str(problem), str(method), repeat, budget_json, hashlib.sha256(text.encode()).hexdigest()[:16])


class Store:
    """A folder of benchmark records (created if missing).

    Args:
        path: the folder.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = pathlib.Path(path)
        if self.path.exists() and not self.path.is_dir():
            raise ValueError(f"Store: {os.fspath(self.path)!r} is a file; give a folder")
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise ValueError(f"Store: cannot create the folder {os.fspath(self.path)!r}: {err.strerror}") from None

    def _file(self, run: RunId) -> pathlib.Path:
        if not isinstance(run, RunId):
            raise ValueError(f"Store: a run is identified by a RunId (`run_id(...)`); got {run!r}")
        return self.path / f"{run.digest}.parquet"

    def has(self, run: RunId) -> bool:
        """Whether ``run`` is stored."""
        return self._file(run).is_file()

    def append(self, run: RunId, record: Mapping[str, object]) -> None:
        """Store ``run``'s ``record`` (scalars, strings, lists of numbers).

        Raises:
            ValueError: the run is stored already; a record field named like an id column
                (``problem``, ``method``, ``repeat``, ``budget``, ``digest``); a value Parquet
                cannot hold.
        """
        if self.has(run):
            raise ValueError(f"Store: the run {run.problem!r} x {run.method!r} x repeat {run.repeat} is stored already "
                             f"({self._file(run).name}); a rerun skips it")
        if not isinstance(record, Mapping) or not all(isinstance(k, str) for k in record):
            raise ValueError(f"Store: a record is a {{field name: value}} dict; got {type(record).__name__}")
        clash = sorted(set(record) & set(_KEY_COLUMNS))
        if clash:
            raise ValueError(f"Store: record fields {clash} are the run id's columns; rename them")
        try:
            table = pa.Table.from_pylist([{**run._asdict(), **record}])
        except (pa.ArrowInvalid, pa.ArrowTypeError) as err:
            raise ValueError(f"Store: the record of {run.problem!r} x {run.method!r} cannot be stored: {err}") from None
        buffer = io.BytesIO()
        pq.write_table(table, buffer, write_page_checksum=True)
        atomic_write_bytes(self._file(run), buffer.getvalue())

    def frame(self) -> pd.DataFrame:
        """Every stored record, one row each (columns missing from a record are NaN/None),
        sorted by problem, method and repetition.

        Raises:
            ValueError: a file that is not a readable Parquet record (damaged or foreign), by name.
        """
        rows = [self._read(f) for f in sorted(self.path.glob("*.parquet"))]
        if not rows:
            return pd.DataFrame(columns=list(_KEY_COLUMNS))
        frame = pd.concat(rows, ignore_index=True)
        return frame.sort_values(["problem", "method", "repeat"], kind="stable", ignore_index=True)

    def _read(self, path: pathlib.Path) -> pd.DataFrame:
        try:
            frame = pq.read_table(path, page_checksum_verification=True).to_pandas()
        except (pa.ArrowException, OSError) as err:
            raise ValueError(f"Store: {os.fspath(path)!r} is not a readable record (damaged, or not written by "
                             f"jcalib.benchmark): {err}; delete it to run that run again") from None
        if not set(_KEY_COLUMNS) <= set(frame.columns) or len(frame) != 1 or frame["digest"][0] != path.stem:
            raise ValueError(f"Store: {os.fspath(path)!r} is not a jcalib.benchmark record (its id columns or "
                             "name do not match); delete it or move it out of the store")
        return frame
