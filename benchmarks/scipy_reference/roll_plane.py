"""NumPy/scipy baseline of the roll_plane model (what a user would write for ``solve_ivp``).

The road input has kinks in u' at the bump edges, so the solve is restarted there
(piecewise integration between the jump times, as the jcalib model's ``jump_ts`` do).

Method and tolerances: LSODA at rtol 3e-8, atol 3e-10, chosen for equal accuracy with the
jcalib model (Tsit5, rtol 1e-7, atol 1e-9). Against DOP853 at rtol 1e-12 on 40 uniform
samples the worst error is 3.9e-7 of each output's largest |y| (jcalib: 3.4e-7); at the
jcalib tolerances LSODA is as fast (~45 solves/s on a loaded 2-core CPU; the loop is
overhead-bound) but 3x less accurate (1.0e-6). DOP853 needs rtol 1e-8 for that accuracy
(~38/s), RK45 is slower still (~11-13/s).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
from scipy.integrate import solve_ivp

import jcalib
from jcalib.models import roll_plane as _roll_plane  # noqa: F401  (registers the model)

from .case import ScipyCase


def _road(model):
    """u(t) -> (u1, u2) [m] for the model's road, as plain Python floats."""
    h1, h2 = (float(v) for v in model.heights)
    t1, t2 = (float(v) for v in model.starts)
    rate = float(model.speed) / float(model.bump_length)  # bump lengths per second

    def bump(t, t0, h):
        s = (t - t0) * rate
        return 0.5 * h * (1.0 - math.cos(2.0 * math.pi * s)) if 0.0 <= s <= 1.0 else 0.0

    if model.road == "bump":
        return lambda t: (bump(t, t1, h1), bump(t, t2, h2))
    if model.road == "step":
        return lambda t: (h1 if t >= t1 else 0.0, h2 if t >= t2 else 0.0)
    return lambda t: (0.0, 0.0)


def _rhs(theta, model):
    kt1, kt2 = (float(v) for v in theta)
    m, inertia, half_l = float(model.mass), float(model.inertia), 0.5 * float(model.track)
    mt1, mt2 = (float(v) for v in model.wheel_masses)
    ks, ks3, cs = float(model.ks), float(model.ks3), float(model.cs)
    road = _road(model)

    def rhs(t, x):
        x1, x2, x3, x4, v1, v2, v3, v4 = x
        u1, u2 = road(t)
        d1, d2 = x1 - x3, x2 - x4
        fs1 = ks * d1 + ks3 * d1**3 + cs * (v1 - v3)
        fs2 = ks * d2 + ks3 * d2**3 + cs * (v2 - v4)
        heave = -(fs1 + fs2) / m
        lever = half_l * half_l * (fs1 - fs2) / inertia  # (l/2) phi''
        return [v1, v2, v3, v4, heave - lever, heave + lever,
                (fs1 - kt1 * (x3 - u1)) / mt1, (fs2 - kt2 * (x4 - u2)) / mt2]

    return rhs


def solve(theta, model, case):
    """Outputs ``(n_times, 4)``, integrating piecewise between the road's jump times."""
    t0, t1 = float(model.experiment.t0), float(model.experiment.t1)
    ts = np.asarray(model.ts)
    jumps = [] if model.road == "none" else np.asarray(model.controller.jump_ts).tolist()
    edges = [t0] + sorted({t for t in jumps if t0 < t < t1}) + [t1]
    rhs = _rhs(theta, model)
    state, rows = np.zeros(8), []
    for a, b in itertools.pairwise(edges):
        observed = ts[((ts > a) | (a == t0)) & (ts <= b)]
        t_eval = observed if observed.size and observed[-1] == b else np.append(observed, b)
        sol = solve_ivp(rhs, (a, b), state, method=case.method, t_eval=t_eval,
                        rtol=case.rtol, atol=case.atol)
        if not sol.success:
            return None
        rows.append(sol.y[:, : observed.size].T)
        state = sol.y[:, -1]  # at b, the start of the next piece
    x = np.concatenate(rows)
    return np.stack([x[:, 0] - x[:, 2], x[:, 1] - x[:, 3], x[:, 4] - x[:, 6],
                     x[:, 5] - x[:, 7]], axis=1)


CASES = {
    "roll_plane": ScipyCase(
        model=lambda: jcalib.models.get("roll_plane"),
        sample=lambda model, key, n: model.parameters.sample(key, n, "uniform"),
        rtol=3e-8, atol=3e-10, n_full=1000, n_quick=16,
        method="LSODA", solve=solve,
        # m or m/s: samples near a zero crossing of the oscillation would otherwise divide
        # the global error (~1e-7 of the amplitude) by ~0; 1e-4 is ~1e-3 of the largest
        # sampled deflections and rates
        diff_floor=1e-4,
        notes="Tsit5 + PID (rtol 1e-7, atol 1e-9, jump_ts at the bump edges) vmapped vs an "
              "LSODA loop (rtol 3e-8, atol 3e-10: equal accuracy) restarted at the bump "
              "edges; uniform in the kt box; relative differences with a 1e-4 floor",
    ),
}
