"""notebooks/05_amortized_inference.ipynb runs top to bottom
(one file per notebook: the xdist workers share them out)."""

from tests.helpers import execute_notebook


def test_notebook_executes(tmp_path):
    execute_notebook("05_amortized_inference.ipynb", tmp_path)
