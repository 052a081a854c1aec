"""notebooks/07_petab_problem.ipynb runs top to bottom (one file per notebook: the xdist workers share them out)."""

import pytest

from tests.helpers import execute_notebook, shared_petab

pytestmark = pytest.mark.slow  # make test-all (notebooks run in the second tier)


def test_notebook_executes(tmp_path):
    if not (shared_petab("benchmark_models") / "Boehm_JProteomeRes2014").exists():
        pytest.skip("the PEtab benchmark collection is not beside the checkout")
    execute_notebook("07_petab_problem.ipynb", tmp_path)
