"""Built-in models, registered by name: ``jcalib.models.get(name)``, ``available()``."""

from jcalib.models import cabin_thermal as _cabin_thermal  # noqa: F401
from jcalib.models import four_substance_reactions as _four_substance_reactions  # noqa: F401
from jcalib.models import radical_polymerization as _radical_polymerization  # noqa: F401
from jcalib.models import rigid_double_beam as _rigid_double_beam  # noqa: F401
from jcalib.models import roll_plane as _roll_plane  # noqa: F401
from jcalib.models import thermal_office_r7c4 as _thermal_office_r7c4  # noqa: F401
from jcalib.models import winding_process as _winding_process  # noqa: F401
from jcalib.models.registry import available, describe, get, register

__all__ = ["available", "describe", "get", "register"]
