"""notebooks/08_benchmarking.ipynb runs top to bottom (one file per notebook: the xdist workers share them out)."""

import pytest

from tests.helpers import execute_notebook

pytestmark = pytest.mark.slow  # make test-all (notebooks run in the second tier)


def test_notebook_executes(tmp_path):
    execute_notebook("08_benchmarking.ipynb", tmp_path)
