"""scipy baseline of ``radical_polymerization_simple`` with quasi-steady radicals (``qss=True``):
the NumPy right-hand side a user would write for ``solve_ivp``, used by the finite-difference
MALA loop of ``benchmarks.mala`` (not a `SCIPY_CASES` entry: no batch benchmark runs it)."""

from __future__ import annotations

import math

import numpy as np

__all__ = ["build"]


def build(theta, model):
    """Simple model (scheme 50) with quasi-steady radicals on the model's 7 scaled states
    (I, M, T, EG, lam0, lam1, lam2), NumPy RHS: ``(rhs(t, y), y0, observe(ys) -> ([M], Mw))``, the
    `ScipyCase.build` signature."""
    f, ktc, ktd = (float(v) for v in theta)
    kd, kp, a_t = float(model.kd), float(model.kp), float(model.termination_factor)
    m_mono = float(model.monomer_molar_mass)
    scales = np.asarray(model.state_scales())
    kt = ktc + ktd
    cond = model.experiment.conditions

    def rhs(t, y):
        i, m, _, _, _, _, _ = y * scales
        r = 2 * f * kd * i / (kp * m)  # dR/dt = 0
        mu0 = math.sqrt(kp * m * r / (a_t * kt))  # dmu0/dt = 0
        loss = a_t * kt * mu0
        mu1 = kp * m * (r + mu0) / loss
        mu2 = (kp * m * r + kp * m * (2 * mu1 + mu0)) / loss
        return np.array([
            -kd * i, -kp * m * (r + mu0), 0.0, kp * r * m,
            a_t * (ktc / 2 + ktd) * mu0 * mu0, a_t * kt * mu0 * mu1,
            a_t * (ktc * (mu0 * mu2 + mu1 * mu1) + ktd * mu0 * mu2),
        ]) / scales

    y0 = np.zeros(7)
    y0[0], y0[1] = float(cond["I0"]) / scales[0], float(cond["M0"]) / scales[1]

    def observe(ys):
        x = ys * scales
        with np.errstate(divide="ignore", invalid="ignore"):
            mw = np.where(x[:, 5] > 0, m_mono * x[:, 6] / x[:, 5], np.nan)
        return np.stack([x[:, 1], mw], axis=1)

    return rhs, y0, observe
