"""notebooks/00_quickstart.ipynb runs top to bottom (one file per notebook: the xdist workers share them out)."""

import pytest

from tests.helpers import execute_notebook

# make test-all, with the other notebooks: make test ran it as its notebook smoke check (31 s of
# a suite at its 10-minute limit, 2026-12-02); every call it makes has its unit tests in make test
pytestmark = pytest.mark.slow


def test_notebook_executes(tmp_path):
    execute_notebook("00_quickstart.ipynb", tmp_path)
