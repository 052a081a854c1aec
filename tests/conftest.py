"""Test-wide JAX settings (float64, strict promotion, persistent compilation cache) and
the shared four_substance_reactions fixtures."""

import datetime
import os
import pathlib

from platformdirs import user_cache_dir


def _arviz_stamp_for_today() -> None:
    """Write today's date where arviz keeps its once-a-day import warning's stamp. arviz writes
    it on import through one fixed temporary name and a rename, so two test workers importing it
    at once on a new day (every fresh CI machine) race, and the loser's import fails with
    FileNotFoundError. Written first, with a temporary name per process, the stamp is current
    and arviz writes nothing."""
    folder = pathlib.Path(user_cache_dir("arviz", "arviz"))
    folder.mkdir(parents=True, exist_ok=True)
    temporary = folder / f"daily_warning.{os.getpid()}.tmp"
    temporary.write_text(datetime.date.today().isoformat())
    temporary.replace(folder / "daily_warning")


_arviz_stamp_for_today()
# One compilation cache per user, not per clone: a second clone on the same machine starts warm
# (entries are keyed by the program, the jax/jaxlib version and the XLA flags, so clones of other
# commits share it safely). JCALIB_JAX_CACHE=<empty folder> measures a cold run.
_CACHE = pathlib.Path(os.environ.get("JCALIB_JAX_CACHE") or pathlib.Path(
    os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache") / "jcalib" / "jax")
# diffrax solves hold equinox's runtime-error callbacks, and JAX never writes programs with host
# callbacks to its persistent cache; "nan" mode drops the callbacks (a failed check gives NaN, and
# jcalib reports failed solves through SolveStatus anyway), so every compiled solve is cached.
os.environ.setdefault("EQX_ON_ERROR", "nan")
# Every program is cached, however short its compile: the suite compiles ~2,000 programs, most
# under 0.5 s, and recompiling them was half of a warm run (2026-11-29, tests/budget.py).
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
# Subprocesses (notebook kernels, the CLI, the two-process jobs) inherit these variables and
# use JAX's own cache in a folder of their own. JAX's size limit switches on its file lock around
# reads and writes, without which a process can read an entry another is still writing
# (deserialising the partial executable segfaults).
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", str(_CACHE / "subprocesses"))
os.environ.setdefault("JAX_COMPILATION_CACHE_MAX_SIZE", str(8 * 2**30))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from jax._src import lru_cache as _lru_cache  # noqa: E402

# Simulations, sensitivities and estimators are float64 by contract (DESIGN.md).
jax.config.update("jax_enable_x64", True)
# Catch silent float32/float64 mixing and accidental broadcasting in jcalib code.
jax.config.update("jax_numpy_dtype_promotion", "strict")
jax.config.update("jax_numpy_rank_promotion", "raise")
# Compile once per machine: the xdist workers share one folder without JAX's size limit, whose
# eviction pass reads every entry's timestamp on each write (0.29 s per write at 2,100 entries:
# five minutes of a cold run); entries are written whole instead, so no worker reads a partial one.
jax.config.update("jax_compilation_cache_dir", str(_CACHE))
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
jax.config.update("jax_compilation_cache_max_size", -1)


def _put_whole(self, key: str, value: bytes) -> None:
    """jax's LRUCache.put for a cache without size limit, written under a temporary name and
    renamed (JAX writes in place)."""
    path = self.path / f"{key}{_lru_cache._CACHE_SUFFIX}"
    if not path.exists():
        partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
        partial.write_bytes(value)
        os.replace(partial, path)


_lru_cache.LRUCache.put = _put_whole


import jcalib  # noqa: E402  (after the float64 switch)


@pytest.fixture(scope="session")
def model():
    """four_substance_reactions observing A, B, C, D (fast, non-stiff)."""
    return jcalib.models.get("four_substance_reactions")


@pytest.fixture(scope="session")
def theta(model):
    """Its nominal parameters, float64 jax array."""
    return jnp.asarray(model.parameters.nominal)


@pytest.fixture(scope="session")
def clean(model, theta):
    """Noise-free outputs at the nominal parameters, (22, 4)."""
    return np.asarray(model.simulate(theta))


_RSS_LIMIT = 4 * 2**30  # bytes


def _rss() -> int:
    """This process's resident memory in bytes (Linux; 0 where /proc is missing)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


@pytest.fixture(autouse=True, scope="module")
def _free_compiled_programs():
    """Drop JAX's in-memory compiled programs after a test module once this worker holds more
    than 4 GiB: an xdist worker runs hundreds of modules and otherwise keeps every program (6.7 GB
    in one worker was seen). Clearing after every module instead cost a third more time."""
    yield
    if _rss() > _RSS_LIMIT:
        jax.clear_caches()


@pytest.fixture(autouse=True)
def _close_figures():
    """Tests create figures through jcalib.plotting; close them so memory stays flat."""
    yield
    import matplotlib.pyplot as plt

    plt.close("all")



# `make test` and `make test-all` run `pytest -n auto --dist loadfile`: xdist hands out whole
# files, by default (--loadscope-reorder) the files with the most tests first. The notebooks and
# the experiment scripts are one or two tests of a minute or more each, so they came last and one
# worker ran them alone for minutes at the end. Instead: the files below first, longest first,
# then the rest in collection order, so the two workers finish together. The list is a schedule,
# not a selection: a file missing from it still runs, only later. Its first part is the second
# tier's (make test-all; the earlier list's files not in the second part), the second make test's:
# its files of 8 s or more on a fresh clone (`make test-budget`, 2026-12-02; regenerate it when a
# file grows).
LONGEST_FILES_FIRST = (
    "tests/notebooks/test_nb_07_petab_problem.py",
    "tests/notebooks/test_nb_03_classical_and_bayesian.py",
    "tests/test_experiments.py",
    "tests/test_experiments_joint.py",
    "tests/test_experiments_petab.py",
    "tests/cli/test_cli_kernels.py",
    "tests/notebooks/test_nb_04_surrogates.py",
    "tests/robustness/test_samplers.py",
    "tests/nn/test_impu.py",
    "tests/notebooks/test_nb_05_amortized_inference.py",
    "tests/notebooks/test_nb_01_models.py",
    "tests/workflows/test_iterative_identification.py",
    "tests/nn/test_pelsvae.py",
    "tests/notebooks/test_nb_02_sensitivity.py",
    "tests/notebooks/test_nb_06_digital_twin_impu.py",
    "tests/estimation/test_trust_region.py",
    "tests/test_solve.py",
    "tests/problems/test_single.py",
    "tests/notebooks/test_nb_00_quickstart.py",
    "tests/robustness/test_persistence.py",
    "tests/bayes/test_mala.py",
    "tests/test_distributed.py",
    "tests/io/test_petab.py",
    "tests/robustness/test_estimators.py",
    "tests/test_model.py",
    "tests/cli/test_cli.py",
    "tests/robustness/test_solves.py",
    "tests/sensitivity/test_sobol.py",
    "tests/io/test_sbml.py",
    "tests/estimation/test_global_search.py",
    "tests/robustness/test_interrupts.py",
    "tests/models/test_roll_plane.py",
    "tests/nn/test_training.py",
    "tests/test_rosenbrock.py",
    "tests/probability/test_likelihoods.py",
    "tests/models/test_rigid_double_beam.py",
    "tests/estimation/test_uncertainty.py",
    "tests/problems/test_joint.py",
    "tests/robustness/test_petab_input.py",
    "tests/sensitivity/test_identifiability.py",
    "tests/robustness/test_properties.py",
    "tests/robustness/test_amortized.py",
    "tests/robustness/test_cli.py",
    "tests/test_benchmarks_common.py",
    "tests/sensitivity/test_local.py",
    "tests/workflows/test_impu_updating.py",
    "tests/bayes/test_hmc.py",
    "tests/estimation/test_multistart.py",
    "tests/filters/test_ekf.py",
    "tests/estimation/test_gauss_newton.py",
    "tests/robustness/test_cli_runs.py",
    "tests/benchmark/test_problems.py",
    "tests/test_algorithm.py",
    "jcalib/solve.py",
    "tests/probability/test_priors.py",
    "tests/bayes/test_predictive.py",
    "jcalib/nn/layers.py",
    "tests/robustness/test_model_input.py",
)


# Docstring examples that train networks or run a global search: each compiles programs no test
# shares (about 115 of the 180 worker-seconds the examples cost cold), so they run in the second tier.
SLOW_EXAMPLES = frozenset({
    "jcalib/nn/pelsvae.py::jcalib.nn.pelsvae.PELSVAE",
    "jcalib/nn/pelsvae.py::jcalib.nn.pelsvae.PELSVAENetwork",
    "jcalib/nn/bayesflow.py::jcalib.nn.bayesflow",
    "jcalib/nn/bayesflow.py::jcalib.nn.bayesflow.PosteriorNetwork",
    "jcalib/estimation/global_search.py::jcalib.estimation.global_search",
    "jcalib/estimation/global_search.py::jcalib.estimation.global_search.differential_evolution_algorithm",
    "jcalib/estimation/bottom_up.py::jcalib.estimation.bottom_up",
    "jcalib/filters/ekf.py::jcalib.filters.ekf",
    "jcalib/bayes/hmc.py::jcalib.bayes.hmc",
    "jcalib/bayes/nuts.py::jcalib.bayes.nuts",
})


def pytest_configure(config):
    if hasattr(config.option, "loadscopereorder"):  # pytest-xdist is loaded
        config.option.loadscopereorder = False  # keep the order set below


@pytest.hookimpl(tryfirst=True)  # the slow examples' mark must be set before `-m 'not slow'` deselects
def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.nodeid in SLOW_EXAMPLES:
            item.add_marker(pytest.mark.slow)
    if config.getoption("jaxtyping_packages", None):  # jcalib's functions are wrapped (tests/shapecheck.py)
        skip = pytest.mark.skip(reason="needs jcalib's functions unwrapped; run by make test-all")
        for item in items:
            if item.get_closest_marker("unwrapped"):
                item.add_marker(skip)
    rank = {path: i for i, path in enumerate(LONGEST_FILES_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))  # stable: same order within a file
