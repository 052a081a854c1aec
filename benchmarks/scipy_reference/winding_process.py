"""NumPy/scipy baseline of ``winding_process`` (what a user would write for ``solve_ivp``).

The right-hand side and the closed-form steady state are written from the spec
(``shared/models/winding_process.md``) with plain Python floats; the multisine setpoints are
smooth, so one solve over [0, 60] s suffices (no restarts).

Method and tolerances: LSODA at rtol = atol = 1e-9. On 8 uniform box samples (errors as a
fraction of each output's largest |y| against the jcalib model, whose error is ~3e-11; one
noisy run on a shared 2-core machine): LSODA 1e-9 150 ms per run, error 7.5e-8; LSODA 1e-8
157 ms, 3.8e-7 (the jcalib tolerances; LSODA's global error is ~40x its rtol here); RK45 1e-8
407 ms, 3.6e-9; DOP853 1e-8 589 ms, 2.4e-7; BDF 1e-8 463 ms, 9.1e-7; Radau 1e-7 550 ms,
7.1e-8; Radau 1e-8 1010 ms, 7.5e-9. The problem is mildly stiff (eigenvalues down to
-252 1/s, stiffness ratio ~600), so the explicit methods are stability-limited and the
implicit ones pay for finite-difference Jacobians; LSODA switches between the two.
"""

from __future__ import annotations

import math

import numpy as np

import jcalib
from jcalib.models import winding_process as wp

from .case import ScipyCase


def _constants(model):
    return {name: float(getattr(model, name)) for name in wp.CONSTANTS}


def _build(theta, model):
    """(rhs(t, x), x0, observe(xs)) for one parameter vector ``theta`` of ``model``."""
    p = dict(zip(model.parameters.names, (float(v) for v in theta), strict=True))
    c = _constants(model)
    p.setdefault("BP2", c["BP2"])
    es = c["E"] * c["width"] * c["thickness"]
    k_eta, k_m = c["eta"] * c["Kphi"], 100.0 * c["RS"] / c["V_fs"]
    js, rp, big_r, length, tau_f, w_eps = p["Js"], c["rp"], c["R"], c["span_length"], \
        c["tau_f"], c["omega_eps"]
    j_shaft = c["eta"] ** 2 * js
    j_web = 0.5 * math.pi * c["rho"] * c["width"]
    rs4 = c["rs"] ** 4
    j2 = p["Jp"] + j_shaft
    kp1, kp3, kp2 = 100.0 / p["BP1"], 100.0 / p["BP3"], 100.0 / p["BP2"]
    den1, den3 = big_r + p["G1"] * kp1 * k_m, big_r + p["G3"] * kp3 * k_m
    setpoints = [float(v) for v in model.setpoints]
    amplitudes = np.asarray(model.excitation_amplitudes)
    omegas = 2.0 * math.pi * np.asarray(model.excitation_frequencies)
    two_pi = 2.0 * math.pi

    def inputs(t):
        return [s * (1.0 + a[0] * math.sin(w[0] * t) + a[1] * math.sin(w[1] * t))
                for s, a, w in zip(setpoints, amplitudes.tolist(), omegas.tolist(), strict=True)]

    def rhs(t, x):
        eps1, eps2, eps3, r1, r3, t1, t3, w1f, w3f, w2, h1, h3 = x
        s1, s2, s3 = inputs(t)
        w1 = h1 / (j_shaft + j_web * (r1**4 - rs4))
        w3 = h3 / (j_shaft + j_web * (r3**4 - rs4))
        v1, v2, v3 = r1 * w1, rp * w2, r3 * w3
        i1 = (p["G1"] * kp1 * p["kW1"] * s1 + p["G1"] * eps1 / c["Ti1"] + k_eta * w1) / den1
        i3 = (p["G3"] * kp3 * p["kW3"] * s3 + p["G3"] * eps3 / c["Ti3"] - k_eta * w3) / den3
        e2 = c["k_s"] * (s2 - c["beta2"] * w2)
        i2 = (c["G2"] * (kp2 * e2 + eps2 / c["Ti2"]) - k_eta * w2) / big_r
        return [
            p["kW1"] * s1 - k_m * i1,
            e2,
            p["kW3"] * s3 - k_m * i3,
            -c["thickness"] * w1 / two_pi,
            c["thickness"] * w3 / two_pi,
            (es * (v2 - v1) + c["T0"] * v1 - t1 * v2) / length,
            (es * (v3 - v2) + t1 * v2 - t3 * v3) / length,
            (w1 - w1f) / tau_f,
            (w3 - w3f) / tau_f,
            (rp * (t3 - t1) + k_eta * i2) / j2,
            r1 * t1 - k_eta * i1 - p["cv1"] * w1 - p["Tfs1"] * math.tanh(w1 / w_eps),
            k_eta * i3 - r3 * t3 - p["cv3"] * w3 - p["Tfs3"] * math.tanh(w3 / w_eps),
        ]

    # steady state for the constant setpoints (spec "Initial conditions", T0 = 0 form)
    s1, s2, s3 = setpoints
    r1, r3 = c["r1_0"], c["r3_0"]
    i1, i3 = p["kW1"] * s1 / k_m, p["kW3"] * s3 / k_m
    w2 = s2 / c["beta2"]
    v2 = rp * w2
    t1 = (k_eta * i1 + p["Tfs1"] + p["cv1"] * v2 / r1) / (r1 + p["cv1"] * v2 / (es * r1))
    w1 = v2 * (1.0 - t1 / es) / r1
    b3 = k_eta * i3 - p["Tfs3"]
    c3 = p["cv3"] * v2 * (es - t1) / r3
    # (ES - T3)(r3 T3 - b3) + c3 = 0  <=>  r3 T3^2 - (ES r3 + b3) T3 + ES b3 - c3 = 0
    roots = np.roots([r3, -(es * r3 + b3), es * b3 - c3]).real
    t3 = float(roots[np.argmin(np.abs(roots - b3 / r3))])
    w3 = v2 * (es - t1) / ((es - t3) * r3)
    u1, u3 = big_r * i1 - k_eta * w1, big_r * i3 + k_eta * w3
    u2 = big_r * (-rp * (t3 - t1) / k_eta) + k_eta * w2
    x0 = np.array([c["Ti1"] * u1 / p["G1"], c["Ti2"] * u2 / c["G2"], c["Ti3"] * u3 / p["G3"],
                   r1, r3, t1, t3, w1, w3, w2, (j_shaft + j_web * (r1**4 - rs4)) * w1,
                   (j_shaft + j_web * (r3**4 - rs4)) * w3])
    gains = {"y1": (p["gamma1"], 5), "y2": (p["gamma3"], 6), "y3": (p["beta1"], 7),
             "y4": (p["beta3"], 8)}
    columns = [gains[name] for name in model.output_names]

    def observe(xs):
        return np.stack([g * xs[:, i] for g, i in columns], axis=1)

    return rhs, x0, observe


CASES = {
    "winding_process": ScipyCase(
        model=lambda: jcalib.models.get("winding_process"),
        sample=lambda model, key, n: model.parameters.sample(key, n, "uniform"),
        rtol=1e-9,
        atol=1e-9,
        n_full=1000,
        n_quick=16,
        build=_build,
        method="LSODA",
        notes="LSODA at rtol = atol = 1e-9 (smooth inputs, one solve over [0, 60] s)",
    ),
}
