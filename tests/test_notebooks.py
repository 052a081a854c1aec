"""Every notebook has its own test file in tests/notebooks/ (each executes it; one file per
notebook so the xdist workers, which take whole files, share the notebooks out)."""

import pathlib

from tests.helpers import NOTEBOOKS


def test_every_notebook_is_executed_by_a_test():
    tests = pathlib.Path(__file__).resolve().parent / "notebooks"
    missing = [p.name for p in sorted(NOTEBOOKS.glob("*.ipynb")) if not (tests / f"test_nb_{p.stem}.py").exists()]
    assert not missing, f"add tests/notebooks/test_nb_<name>.py for {missing}"
