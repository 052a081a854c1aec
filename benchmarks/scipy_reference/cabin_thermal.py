"""NumPy/scipy baseline of ``cabin_thermal`` (what a user would write for ``solve_ivp``).

The right-hand side is written from the spec (``shared/models/cabin_thermal.md``) with
NumPy fancy indexing; the three phases are integrated piecewise (0-1800, 1800-3600,
3600-5400 s), restarting the solver at each switch, with the model's tolerances (rtol =
atol = 1e-6). RK45 is the method: the problem is only mildly stiff, and on 16 uniform samples
(one noisy run on a shared 2-core machine) RK45 took 143 ms per run with a max error of
1.7e-4 K against DOP853 at 1e-11, LSODA 152 ms (1.0e-4 K), DOP853 202 ms (1.3e-2 K), BDF
204 ms (2.9e-4 K) and Radau 266 ms (1.9e-5 K).
"""

from __future__ import annotations

import dataclasses

import numpy as np
from scipy.integrate import solve_ivp

import jcalib
from jcalib.models import cabin_thermal as ct

from .case import ScipyCase

# zones FLT, FLB, FRT, FRB, RLT, RLB, RRT, RRB; masses FL, FR, RL, RR
_FRONT = np.array([1, 1, 1, 1, 0, 0, 0, 0], bool)
_LEFT = np.array([1, 1, 0, 0, 1, 1, 0, 0], bool)
_TOP = np.array([1, 0, 1, 0, 1, 0, 1, 0], bool)
# exchange pairs (i, j) and their type index (FBT, RBT, TFR, BFR, LR)
_I = np.array([1, 3, 5, 7, 0, 2, 1, 3, 0, 1, 4, 5])
_J = np.array([0, 2, 4, 6, 4, 6, 5, 7, 2, 3, 6, 7])
_TYPE = np.array([0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 4, 4])
_VERTICAL = _TYPE <= 1
_SUPPLY_OUTLET = np.array([0, 1, 0, 1, 2, -1, 2, -1])  # outlet feeding each zone (-1: none)


def _constants(model) -> dict:
    """The model's fixed constants (`CabinConstants` fields) as NumPy arrays."""
    return {f.name: np.asarray(getattr(model.consts, f.name))
            for f in dataclasses.fields(model.consts)}


def _rhs_factory(theta, c, phase):
    """dy/dt of the 20 states in ``phase`` (0 soak, 1 cool-down, 2 heat-up)."""
    (cf_ai, cf_ae, cf_ins, cf_hc, cf_fbt, cf_rbt, cf_tfr, cf_bfr, cf_lr, a_mass, cf_am, cf_v,
     z_dash, z_foot, z_rear, r_bu, r_fr, cf_cool, cf_heat) = theta
    c_p, t_amb = float(c["c_p"]), float(c["T_amb"])
    if phase == 0:
        flows = np.zeros(3)
    else:
        m_r = float(c["m_nom"] if phase == 1 else c["m_low"])
        cond = c["outlet_shares"] / np.sqrt([z_dash, z_foot, z_rear])
        beta = float(c["beta_fan"])
        flows = m_r * cond * np.sqrt((1 + beta) / (1 + beta * cond.sum() ** 2))
    r_fan = flows.sum() / float(c["m_nom"])
    m_zone = np.where(_SUPPLY_OUTLET >= 0, 0.5 * flows[_SUPPLY_OUTLET], 0.0)
    load = float(c["Q_L0"]) * (cf_heat if phase == 2 else 1.0)
    eps = 1 - np.exp(-float(c["NTU0"]) * cf_cool)

    cf_type = np.array([cf_fbt, cf_rbt, cf_tfr, cf_bfr, cf_lr])
    g_pair = (cf_type * (c["g_nat"] + c["g_fcd"] * r_fan))[_TYPE]
    v = c["volume_fraction"]
    c_air = float(c["f_cap"] * c["rho"] * c["V_cab"]) * c_p * v
    area_h = c["hull_area"]
    g_in = cf_ai * (float(c["alpha_in0"]) + float(c["alpha_in1"]) * m_zone / float(c["m_ref"])) \
        * area_h
    g_out = area_h / (cf_ins * c["hull_insulation"] + 1 / (cf_ae * float(c["alpha_ext0"])))
    c_hull = cf_hc * c["hull_areal_capacity"] * area_h
    area_m = a_mass * c["mass_share"]
    c_mass = float(c["c_m"]) * area_m
    v_m = cf_v * float(c["v_m_ref"]) * r_fan
    g_m = cf_am * (float(c["alpha_m0"]) + float(c["alpha_m1"]) * v_m) * area_m
    w_top, lam, f_dir = float(c["w_top"]), float(c["lambda_L"]), float(c["f_dir"])
    w_fr = np.where(_FRONT, r_fr, 1 - r_fr)
    w_lr = np.where(_LEFT, lam, 1 - lam)
    q_direct = load * f_dir * w_fr * w_lr * np.where(_TOP, 1 - r_bu, r_bu)
    q_mass_load = load * (1 - f_dir) * w_fr[::2] * w_lr[::2]  # masses = zones FLT, FRT, ...
    kappa, q_sun = float(c["kappa_b"]), c["hull_sun"]
    phi, t_evap = float(c["phi_fresh"]), float(c["T_evap"])

    def rhs(t, y):
        t_air, t_hull, t_mass = y[:8], y[8:16], y[16:]
        if phase == 1:
            t_in = phi * t_amb + (1 - phi) * (v @ t_air)
            t_sup = t_in - eps * (t_in - t_evap)
        else:
            t_sup = t_amb
        diff = t_air[_I] - t_air[_J]
        g = np.where(_VERTICAL, g_pair * (1 + kappa * np.logaddexp(0.0, diff)), g_pair)
        flux = g * c_p * diff  # from i to j
        q_air = m_zone * c_p * (t_sup - t_air) + g_in * (t_hull - t_air) + q_direct
        np.subtract.at(q_air, _I, flux)
        np.add.at(q_air, _J, flux)
        q_m = g_m * (t_mass - (w_top * t_air[::2] + (1 - w_top) * t_air[1::2]))
        q_air[::2] += w_top * q_m
        q_air[1::2] += (1 - w_top) * q_m
        d_hull = (g_in * (t_air - t_hull) + g_out * (t_amb - t_hull) + q_sun) / c_hull
        d_mass = (q_mass_load - q_m) / c_mass
        return np.concatenate([q_air / c_air, d_hull, d_mass])

    return rhs


def solve_piecewise(theta, model, case, method=None):
    """Outputs at the model's times by three solve_ivp calls, one per phase; None on failure."""
    theta = np.asarray(theta, dtype=np.float64)
    c = _constants(model)
    ts = np.asarray(model.ts)
    bounds = (0.0, *ct.PHASE_STARTS, float(model.experiment.t1))
    y = np.full(20, float(c["T_amb"]))
    states = np.full((ts.size, 20), np.nan)
    for phase in range(3):
        t0, t1 = bounds[phase], bounds[phase + 1]
        inside = (ts > t0) & (ts <= t1) if phase else (ts <= t1)
        t_eval = ts[inside]
        if phase == 2 or (t_eval.size and t_eval[-1] == t1):
            span_eval = t_eval
        else:
            span_eval = np.append(t_eval, t1)
        sol = solve_ivp(_rhs_factory(theta, c, phase), (t0, t1), y, method=method or case.method,
                        t_eval=span_eval, rtol=case.rtol, atol=case.atol)
        if not sol.success:
            return None
        states[inside] = sol.y.T[: t_eval.size]
        y = sol.y[:, -1]
    return states[:, list(model.observed)]


CASES = {
    "cabin_thermal": ScipyCase(
        model=lambda: jcalib.models.get("cabin_thermal"),
        sample=lambda model, key, n: model.parameters.sample(key, n, "uniform"),
        rtol=1e-6, atol=1e-6, n_full=1_000, n_quick=16,
        method="RK45",
        solve=solve_piecewise,
        notes="Tsit5 + PI controller (jump_ts at the phase switches) vmapped vs RK45 loop "
              "restarted per phase; uniform over the 19-parameter box",
    ),
}
