"""scipy baseline of ``radical_polymerization_real`` (the full 11-state stiff model, scheme 51):
the NumPy right-hand side a user would write for ``solve_ivp`` (LSODA) on the model's scaled
states, with the sampling of the benchmark cases. Both cases (the full jcalib model and its
quasi-steady-state variant) are compared with this full-model baseline."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import jcalib

from .case import ScipyCase


def _build(theta, model):
    """Full 11-state real model (scheme 51) on the model's scaled states, NumPy RHS."""
    ktc, ktd, kcage, kprim = theta
    kd, kp, a_t = float(model.kd), float(model.kp), float(model.termination_factor)
    m_mono = float(model.monomer_molar_mass)
    full = jcalib.models.get("radical_polymerization_real")  # the scipy baseline is always
    scales = np.asarray(full.full_state_scales())           # the full (non-QSS) model
    cond = model.experiment.conditions

    def rhs(t, y):
        i, r, m, _, _, m0, m1, m2, l0, l1, l2 = y * scales
        kt = ktc + ktd
        rd, ri, rc, rp = kd * i, kp * r * m, kcage * r * r, kprim * r * m0
        d = np.array([
            -rd, 2 * rd - 2 * rc - ri - rp, -kp * m * (r + m0), rc, ri + rp,
            ri - a_t * kt * m0 * m0 - rp,
            ri + kp * m * m0 - a_t * kt * m0 * m1 - kprim * r * m1,
            ri + kp * m * (2 * m1 + m0) - a_t * kt * m0 * m2 - kprim * r * m2,
            a_t * (ktc / 2 + ktd) * m0 * m0 + rp,
            a_t * kt * m0 * m1 + kprim * r * m1,
            a_t * (ktc * (m0 * m2 + m1 * m1) + ktd * m0 * m2) + kprim * r * m2,
        ])
        return d / scales

    y0 = np.zeros(11)
    y0[0], y0[2] = float(cond["I0"]) / scales[0], float(cond["M0"]) / scales[2]

    def observe(ys):
        x = ys * scales
        return np.stack([x[:, 2], m_mono * x[:, 10] / x[:, 9], 1000 * x[:, 4]], axis=1)

    return rhs, y0, observe


def _sample(model, key, n):
    """ktc, kcage, kprim within +-30 % of Table 1; ktd (nominal 0) uniform in [0, 2e6]."""
    nominal = model.parameters.nominal
    u = np.asarray(jax.random.uniform(key, (n, 4), dtype=jnp.float64))
    thetas = nominal * (0.7 + 0.6 * u)
    thetas[:, 1] = 2e6 * u[:, 1]
    return thetas


CASES = {
    "radical_polymerization_real": ScipyCase(
        model=lambda: jcalib.models.get("radical_polymerization_real"),
        build=_build,
        sample=_sample,
        rtol=1e-8, atol=1e-10, n_full=1_000, n_quick=16,
        notes="full stiff model: Kvaerno5 (chord tol 1e-5/1e-7, PI control) vmapped vs "
              "LSODA loop, both on scaled states; differences on measured entries",
    ),
    "radical_polymerization_real_qss": ScipyCase(
        model=lambda: jcalib.models.get("radical_polymerization_real", qss=True),
        build=_build,
        sample=_sample,
        rtol=1e-8, atol=1e-10, n_full=1_000, n_quick=16,
        notes="quasi-steady-state radicals + Tsit5 vmapped vs LSODA loop of the FULL model: "
              "max_rel_difference is the QSS model error against the full model",
    ),
}
