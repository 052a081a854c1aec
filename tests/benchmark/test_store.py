"""jcalib.benchmark.store: records written one by one, found again, never read back damaged."""

import numpy as np
import pytest

from jcalib.benchmark.store import Store, run_id


def test_records_round_trip_and_a_stored_run_is_not_stored_twice(tmp_path):
    store = Store(tmp_path / "records")
    first, second = run_id("rosenbrock", "fides", 0, {"gradients": 50}), run_id("banana", "nuts", 3)
    store.append(second, {"ess": 812.5, "trace_cost": [1.0, 2.0, 4.0], "reason": "budget"})
    store.append(first, {"final_value": 1e-12, "trace_cost": [3.0], "n_gradients": 50})
    frame = store.frame()
    assert frame["problem"].tolist() == ["banana", "rosenbrock"] and frame["repeat"].tolist() == [3, 0]
    assert frame["trace_cost"].map(list).tolist() == [[1.0, 2.0, 4.0], [3.0]]
    assert frame["budget"].tolist() == ["{}", '{"gradients": 50.0}']
    assert np.isnan(frame["final_value"][0]) and frame["n_gradients"][1] == 50  # fields one record lacks
    assert store.has(first) and not store.has(run_id("rosenbrock", "fides", 1, {"gradients": 50}))
    with pytest.raises(ValueError, match="stored already"):
        store.append(first, {"final_value": 0.0})
    assert Store(tmp_path / "records").frame().equals(frame)  # another process sees the same


def test_an_interrupted_write_leaves_nothing_and_a_damaged_file_is_named(tmp_path):
    store = Store(tmp_path)
    run = run_id("p", "lm", 0)
    store.append(run, {"value": 1.5})
    (tmp_path / f".{run.digest}.parquet.x1.tmp").write_bytes(b"half a file")  # a write killed before its rename
    assert len(store.frame()) == 1
    path = tmp_path / f"{run.digest}.parquet"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])  # truncated
    with pytest.raises(ValueError, match=f"{run.digest}.parquet' is not a readable record"):
        store.frame()
    other = run_id("p", "lm", 1)  # a record renamed to another run's file
    path.write_bytes(data)
    path.rename(tmp_path / f"{other.digest}.parquet")
    with pytest.raises(ValueError, match="id columns or name do not match"):
        store.frame()


def test_bad_ids_and_records_are_refused(tmp_path):
    store = Store(tmp_path)
    with pytest.raises(ValueError, match="repeat must be an integer >= 0"):
        run_id("p", "lm", -1)
    assert run_id("p", "lm", np.int64(2), {"gradients": 10}) == run_id("p", "lm", 2, {"gradients": 10.0})
    for budget in ({"gradients": np.nan}, "gradients", {"gradients": -1}):
        with pytest.raises(ValueError, match="budget must be a"):
            run_id("p", "lm", 0, budget)
    with pytest.raises(ValueError, match="identified by a RunId"):
        store.has(("p", "lm", 0))
    with pytest.raises(ValueError, match="a record is a"):
        store.append(run_id("p", "lm", 0), [("a", 1)])
    with pytest.raises(ValueError, match="run id's columns"):
        store.append(run_id("p", "lm", 0), {"repeat": 1})
    with pytest.raises(ValueError, match="cannot be stored"):
        store.append(run_id("p", "lm", 0), {"value": object()})
    assert store.frame().empty
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="is a file; give a folder"):
        Store(tmp_path / "file")
    with pytest.raises(ValueError, match="cannot create the folder"):
        Store(tmp_path / "file" / "sub")
