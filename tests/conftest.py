"""Test-wide JAX settings: float64, strict promotion, persistent compilation cache."""

import os
import pathlib

import jax

# Simulations, sensitivities and estimators are float64 by contract (DESIGN.md).
jax.config.update("jax_enable_x64", True)
# Catch silent float32/float64 mixing and accidental broadcasting in jcalib code.
jax.config.update("jax_numpy_dtype_promotion", "strict")
jax.config.update("jax_numpy_rank_promotion", "raise")
# Compile once per machine: reruns and subprocess tests reuse compiled solvers.
_CACHE = os.environ.get("JCALIB_JAX_CACHE",
                        str(pathlib.Path(__file__).resolve().parent.parent / ".jax_cache"))
jax.config.update("jax_compilation_cache_dir", _CACHE)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
