"""scipy baselines of the built-in models: the NumPy right-hand side a user without jcalib
would write for ``scipy.integrate.solve_ivp``, one module per model, each exporting ``CASES``
(case name -> `ScipyCase`: the jcalib model, how the benchmark samples it and its scipy
solve). `SCIPY_CASES` collects them all, in the order the benchmarks run them by default."""

from .cabin_thermal import CASES as _CABIN_THERMAL
from .case import ScipyCase
from .four_substance_reactions import CASES as _FOUR_SUBSTANCE_REACTIONS
from .radical_polymerization_real import CASES as _RADICAL_POLYMERIZATION_REAL
from .rigid_double_beam import CASES as _RIGID_DOUBLE_BEAM
from .roll_plane import CASES as _ROLL_PLANE
from .thermal_office_r7c4 import CASES as _THERMAL_OFFICE_R7C4
from .winding_process import CASES as _WINDING_PROCESS

__all__ = ["SCIPY_CASES", "ScipyCase"]

SCIPY_CASES: dict[str, ScipyCase] = {
    **_FOUR_SUBSTANCE_REACTIONS, **_RADICAL_POLYMERIZATION_REAL, **_RIGID_DOUBLE_BEAM, **_ROLL_PLANE,
    **_CABIN_THERMAL, **_THERMAL_OFFICE_R7C4, **_WINDING_PROCESS,
}
"""Every scipy baseline by case name."""
