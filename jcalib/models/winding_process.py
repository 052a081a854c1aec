"""Three-reel web winder with DC drives and local PI loops (Bastogne et al. 2007).

An unwinding reel (1), a pacer roll (2) and a rewinding reel (3), each driven by a DC motor
through a gear, move a plastic web through two spans (``shared/models/winding_process.md``;
physics of Koc et al. 2002). Derived quantities:

    ES = E width thickness                   web stiffness [N]
    J1,3 = eta^2 Js + (pi rho width / 2)(r1,3^4 - rs^4),   J2 = Jp + eta^2 Js   [kg m^2]
    Omega1,3 = H1,3 / J1,3,   V1 = r1 Omega1,  V2 = rp Omega2,  V3 = r3 Omega3
    k_eta = eta Kphi,   k_m = 100 RS / V_fs  (current measurement [%/A])

Current loops (i = 1, 3; PI in parallel form, armature inductance neglected, so the
currents are algebraic) and the pacer's speed loop:

    e_i = kW_i S_i - k_m I_i,   U_i = G_i ((100/BP_i) e_i + eps_i/Ti_i)
    I1 = (G1 (100/BP1) kW1 S1 + G1 eps1/Ti1 + k_eta Omega1) / (R + G1 (100/BP1) k_m)  (brake)
    I3 = (G3 (100/BP3) kW3 S3 + G3 eps3/Ti3 - k_eta Omega3) / (R + G3 (100/BP3) k_m)  (motor)
    e2 = k_s (S2 - beta2 Omega2),   I2 = (G2 ((100/BP2) e2 + eps2/Ti2) - k_eta Omega2) / R

State equations (12 states):

    d eps_i/dt = e_i  (i = 1, 2, 3)                                   [% s]
    dr1/dt = -thickness Omega1 / (2 pi),   dr3/dt = thickness Omega3 / (2 pi)      [m]
    l dT1/dt = ES (V2 - V1) + T0 V1 - T1 V2,   l dT3/dt = ES (V3 - V2) + T1 V2 - T3 V3 [N]
    tau_f dOmega1f/dt = Omega1 - Omega1f,   tau_f dOmega3f/dt = Omega3 - Omega3f   [rad/s]
    J2 dOmega2/dt = rp (T3 - T1) + k_eta I2                                        [rad/s]
    dH1/dt = r1 T1 - k_eta I1 - cv1 Omega1 - Tfs1 tanh(Omega1/omega_eps)    [kg m^2/s]
    dH3/dt = k_eta I3 - r3 T3 - cv3 Omega3 - Tfs3 tanh(Omega3/omega_eps)

State order: eps1, eps2, eps3, r1, r3, T1, T3, Omega1f, Omega3f, Omega2, H1, H3.

Inputs (volts): S = setpoints (1 + sum_k a_k sin(2 pi f_k t)), the spec's multisine around
S(0) = (2.05, 0.5714, 5.51) V; smooth, so the controller needs no ``jump_ts``.
``excitation=False`` holds the setpoints constant.

Outputs: ``y1 = gamma1 T1``, ``y2 = gamma3 T3`` [V] (tension meters, the calibration data)
at t = 0.1 k s, k = 1..600; optionally the tachometer signals ``y3 = beta1 Omega1f``,
``y4 = beta3 Omega3f`` [V], the only place where beta1, beta3 act (so their sensitivities
on y1, y2 are exactly zero).

Initial state: the closed-form steady operating point of the current theta for constant
setpoints S(0) and r1(0) = 0.10 m, r3(0) = 0.05 m (spec): only dr1/dt, dr3/dt are nonzero
there. T3 is the root of ``(ES - T3)(r3 T3 - b3) + c3 = 0`` closest to b3/r3 (the small one),
computed as ``2 (ES b3 - c3) / (B + sqrt((ES r3 - b3)^2 + 4 r3 c3))``, ``B = ES r3 + b3``,
which is free of cancellation and differentiable. tanh(Omega/omega_eps) = 1 there (the reel
speeds are ~2-6 rad/s, omega_eps = 0.05 rad/s).

Calibrated parameters (spec table order, the paper's vaguely known class): gamma1, gamma3,
Jp, Js, kW1, kW3, G1, G3, Tfs1, Tfs3, cv1, cv3, BP1, BP3, [BP2 with ``calibrate_bp2=True``],
beta1, beta3. All other physical values are fixed constants (fields, see `constants`).

Choices made here (beyond the spec's own "chosen" values): T0 enters the steady state in its
general form ``V1 = V2 (ES - T1)/(ES - T0)`` (the spec's closed form is its T0 = 0 case); the
steady state uses the constant setpoints ``setpoints`` (= S(t0) for the default t0 = 0); the
output names ``y1..y4``; the fixed constants can be overridden by name through the factory.

Solver (chosen here): Tsit5 with a PI step-size controller (rtol = atol = 1e-8) and a step
cap ``dtmax`` = 0.0110 s. The linearisation has eigenvalues down to -124 1/s (the pacer speed
loop, up to -252 1/s in the box) and lightly damped 0.2-0.4 Hz modes (stiffness ratio ~600),
so an explicit solver is stability-limited, not accuracy-limited. Without a cap, Tsit5 sits at
the edge of its stability region (2256 steps at nominal, error 1.2e-8 of max|y| on 32 box
samples against rtol 1e-12): the primal solution stays accurate because the controller damps
the stiff mode's error, but the forward-mode tangents, which follow the same steps without
error control, are amplified there -- ``jacobian`` was off by factors up to 1e110 at the
lower bounds of Jp, Js (and wrong at nominal too). The cap keeps every step inside the
stability interval ``[-3.507, 0]`` of Tsit5 for the fastest pacer mode in the box (80 %
safety, `stable_dtmax`): 5467 steps per solve, error 3e-11, Jacobians right to 1e-6. Steps and
largest relative error of one solve at nominal (timings: CHANGELOG 0.1.0):

    solver                    steps  max rel. error
    Tsit5, dtmax auto          5467  3e-11
    Tsit5, no dtmax            2256  1e-8 (Jacobians wrong)
    Kvaerno5, rtol 1e-7         352  8e-6 (too coarse)
    Kvaerno5, rtol 1e-8         571  9e-7

Kvaerno5 (A-stable, so Jacobians are right without a cap) misses the spec's 1e-6 accuracy
at rtol 1e-7 and is slower than capped Tsit5 at rtol 1e-8, so Tsit5 with the cap is the
default; the rtol hardly matters for it (the cap, not the error, sets the steps).
``dtmax="auto"`` is ``None`` for implicit solvers.
"""

from __future__ import annotations

from collections.abc import Mapping

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from jcalib.model import AbstractModel, Experiment
from jcalib.models.registry import register
from jcalib.parameters import Parameter, ParameterSpace

__all__ = [
    "CONSTANTS",
    "OBSERVATION_TIMES",
    "OUTPUT_NAMES",
    "STATE_NAMES",
    "WindingProcess",
    "pacer_eigenvalue",
    "parameter_space",
    "stable_dtmax",
    "winding_process",
]

OBSERVATION_TIMES = tuple(k / 10 for k in range(1, 601))  # s, t_k = 0.1 k (spec)
STATE_NAMES = ("eps1", "eps2", "eps3", "r1", "r3", "T1", "T3", "Omega1f", "Omega3f",
               "Omega2", "H1", "H3")
OUTPUT_NAMES = ("y1", "y2", "y3", "y4")  # gamma1 T1, gamma3 T3, beta1 Omega1f, beta3 Omega3f
_OUTPUT_SETS = {"tensions": ("y1", "y2"), "tensions+speeds": OUTPUT_NAMES}

# Fixed constants {name: (value, unit)}: the paper's class 1 (accurately known) and the
# spec's values chosen there (V_fs ... T0), plus the initial radii.
CONSTANTS: dict[str, tuple[float, str]] = {
    "E": (3e7, "N/m^2"),  # Young's modulus of the web (the paper's 3e7, see the spec)
    "thickness": (2e-4, "m"),  # web thickness eps_w
    "width": (5e-2, "m"),  # web width lambda
    "rho": (1350.0, "kg/m^3"),  # web density
    "span_length": (0.65, "m"),  # l, span length between reel axes
    "rp": (3.5e-2, "m"),  # pacer roll radius
    "rs": (1.5e-2, "m"),  # driving-shaft/core radius
    "R": (5.0, "Ohm"),  # armature resistance
    "Kphi": (0.75, "V*s"),  # motor constant
    "Ti1": (40e-3, "s"),  # current PI integral time, unwinder
    "Ti2": (0.2, "s"),  # speed PI integral time, pacer
    "Ti3": (40e-3, "s"),  # current PI integral time, rewinder
    "eta": (10.4, "-"),  # gear ratio, motor/reel speed
    "RS": (0.1, "Ohm"),  # shunt resistance
    "BP2": (100.0, "%"),  # proportional band of the pacer's speed PI (fixed by default)
    "V_fs": (3.0, "V"),  # shunt full-scale voltage (chosen in the spec)
    "k_s": (50.0, "%/V"),  # speed-error scaling of the pacer controller (chosen)
    "beta2": (0.1, "V*s/rad"),  # pacer tachometer gain (chosen)
    "G2": (2.0, "V/%"),  # pacer power-stage gain (chosen)
    "tau_f": (0.05, "s"),  # tachometer filter time constant (chosen)
    "omega_eps": (0.05, "rad/s"),  # dry-friction sign smoothing, tanh(Omega/omega_eps)
    "T0": (0.0, "N"),  # tension of the web entering span 1 (chosen)
    "r1_0": (0.10, "m"),  # initial unwinder roll radius
    "r3_0": (0.05, "m"),  # initial rewinder roll radius
}

# Input S_i(t) = setpoint_i (1 + sum_k a_ik sin(2 pi f_ik t)); two sines per input, the
# pacer's second amplitude is zero (spec).
SETPOINTS = (2.05, 0.5714, 5.51)  # V: unwinder current, pacer speed, rewinder current
EXCITATION_AMPLITUDES = ((0.10, 0.05), (0.05, 0.0), (0.08, 0.05))  # relative
EXCITATION_FREQUENCIES = ((0.05, 0.31), (0.02, 0.0), (0.07, 0.43))  # Hz

_BP2 = Parameter("BP2", 100.0, 25.0, 400.0, "%", log_scale=True)


def parameter_space(calibrate_bp2: bool = False) -> ParameterSpace:
    """The calibrated parameters in the spec table's order (BP2 after BP3 if calibrated)."""
    params = [
        Parameter("gamma1", 0.1, 0.02, 0.5, "V/N", log_scale=True),
        Parameter("gamma3", 0.1, 0.02, 0.5, "V/N", log_scale=True),
        Parameter("Jp", 2e-3, 5e-4, 8e-3, "kg*m^2", log_scale=True),
        Parameter("Js", 2e-3, 1e-3, 4e-3, "kg*m^2", log_scale=True),
        Parameter("kW1", 0.1, 0.08, 0.15, "%/V"),
        Parameter("kW3", 0.1, 0.08, 0.15, "%/V"),
        Parameter("G1", 2.0, 0.5, 8.0, "V/%", log_scale=True),
        Parameter("G3", 2.0, 0.5, 8.0, "V/%", log_scale=True),
        Parameter("Tfs1", 0.5, 0.3, 0.7, "N*m"),
        Parameter("Tfs3", 0.5, 0.3, 0.7, "N*m"),
        Parameter("cv1", 1e-2, 2.5e-3, 4e-2, "N*m*s", log_scale=True),
        Parameter("cv3", 1e-2, 2.5e-3, 4e-2, "N*m*s", log_scale=True),
        Parameter("BP1", 100.0, 25.0, 400.0, "%", log_scale=True),
        Parameter("BP3", 100.0, 25.0, 400.0, "%", log_scale=True),
        *([_BP2] if calibrate_bp2 else []),
        Parameter("beta1", 0.1, 0.02, 0.5, "V*s/rad", log_scale=True),
        Parameter("beta3", 0.1, 0.02, 0.5, "V*s/rad", log_scale=True),
    ]
    return ParameterSpace(params)


class WindingProcess(AbstractModel):
    """Unwinder-pacer-rewinder web winder; 12 states, tensions (and speeds) observed.

    Every fixed constant of `CONSTANTS` is a float64 scalar field of the same name (replace
    one with ``eqx.tree_at``, or pass ``constants={...}`` to the factory).

    Attributes:
        outputs: indices of the observed outputs into `OUTPUT_NAMES`.
        setpoints: constant part of the inputs (S1, S2, S3) [V], shape ``(3,)``; the
            initial steady state is computed for these constant setpoints.
        excitation_amplitudes: relative sine amplitudes, shape ``(3, 2)`` (zeros: constant
            setpoints).
        excitation_frequencies: sine frequencies [Hz], shape ``(3, 2)``.
    """

    outputs: tuple[int, ...] = eqx.field(static=True)
    setpoints: Float[Array, "3"]
    excitation_amplitudes: Float[Array, "3 2"]
    excitation_frequencies: Float[Array, "3 2"]
    E: Float[Array, ""]
    thickness: Float[Array, ""]
    width: Float[Array, ""]
    rho: Float[Array, ""]
    span_length: Float[Array, ""]
    rp: Float[Array, ""]
    rs: Float[Array, ""]
    R: Float[Array, ""]
    Kphi: Float[Array, ""]
    Ti1: Float[Array, ""]
    Ti2: Float[Array, ""]
    Ti3: Float[Array, ""]
    eta: Float[Array, ""]
    RS: Float[Array, ""]
    BP2: Float[Array, ""]
    V_fs: Float[Array, ""]
    k_s: Float[Array, ""]
    beta2: Float[Array, ""]
    G2: Float[Array, ""]
    tau_f: Float[Array, ""]
    omega_eps: Float[Array, ""]
    T0: Float[Array, ""]
    r1_0: Float[Array, ""]
    r3_0: Float[Array, ""]

    # --- parameters and derived quantities ------------------------------------------------
    def named(self, theta: Float[Array, " n_params"]) -> dict[str, Float[Array, ""]]:
        """``{name: value}`` of the calibrated parameters, plus BP2 (a constant unless it is
        calibrated)."""
        values = {name: theta[i] for i, name in enumerate(self.parameters.names)}
        values.setdefault("BP2", self.BP2)
        return values

    def web_stiffness(self) -> Float[Array, ""]:
        """ES = E width thickness [N]."""
        return self.E * self.width * self.thickness

    def reel_inertia(self, r: Float[Array, ""], js: Float[Array, ""]) -> Float[Array, ""]:
        """J(r) = eta^2 Js + (pi rho width / 2)(r^4 - rs^4) [kg m^2] of a reel of radius r."""
        return self.eta**2 * js + 0.5 * jnp.pi * self.rho * self.width * (r**4 - self.rs**4)

    def current_measurement_gain(self) -> Float[Array, ""]:
        """k_m = 100 RS / V_fs [%/A]."""
        return 100.0 * self.RS / self.V_fs

    # --- AbstractModel ---------------------------------------------------------------------
    def inputs(self, t: Float[Array, ""]) -> Float[Array, "3"]:
        """Setpoints (S1, S2, S3) [V] at time t [s]."""
        phase = (2.0 * jnp.pi) * self.excitation_frequencies * t
        return self.setpoints * (1.0 + jnp.sum(self.excitation_amplitudes * jnp.sin(phase),
                                               axis=1))

    def vector_field(self, t, y, theta):
        p = self.named(theta)
        eps1, eps2, eps3, r1, r3, t1, t3, w1f, w3f, w2, h1, h3 = (y[i] for i in range(12))
        s1, s2, s3 = (v for v in self.inputs(t))
        es, k_eta, k_m = self.web_stiffness(), self.eta * self.Kphi, self.current_measurement_gain()
        w1 = h1 / self.reel_inertia(r1, p["Js"])
        w3 = h3 / self.reel_inertia(r3, p["Js"])
        v1, v2, v3 = r1 * w1, self.rp * w2, r3 * w3
        # current loops: proportional gain (100/BP) in %/%, currents solved algebraically
        kp1, kp3 = 100.0 / p["BP1"], 100.0 / p["BP3"]
        i1 = ((p["G1"] * kp1 * p["kW1"] * s1 + p["G1"] * eps1 / self.Ti1 + k_eta * w1)
              / (self.R + p["G1"] * kp1 * k_m))
        i3 = ((p["G3"] * kp3 * p["kW3"] * s3 + p["G3"] * eps3 / self.Ti3 - k_eta * w3)
              / (self.R + p["G3"] * kp3 * k_m))
        e1 = p["kW1"] * s1 - k_m * i1
        e3 = p["kW3"] * s3 - k_m * i3
        # pacer speed loop
        e2 = self.k_s * (s2 - self.beta2 * w2)
        u2 = self.G2 * ((100.0 / p["BP2"]) * e2 + eps2 / self.Ti2)
        i2 = (u2 - k_eta * w2) / self.R
        j2 = p["Jp"] + self.eta**2 * p["Js"]
        return jnp.stack([
            e1,
            e2,
            e3,
            -self.thickness * w1 / (2.0 * jnp.pi),
            self.thickness * w3 / (2.0 * jnp.pi),
            (es * (v2 - v1) + self.T0 * v1 - t1 * v2) / self.span_length,
            (es * (v3 - v2) + t1 * v2 - t3 * v3) / self.span_length,
            (w1 - w1f) / self.tau_f,
            (w3 - w3f) / self.tau_f,
            (self.rp * (t3 - t1) + k_eta * i2) / j2,
            r1 * t1 - k_eta * i1 - p["cv1"] * w1 - p["Tfs1"] * jnp.tanh(w1 / self.omega_eps),
            k_eta * i3 - r3 * t3 - p["cv3"] * w3 - p["Tfs3"] * jnp.tanh(w3 / self.omega_eps),
        ])

    def initial_state(self, theta):
        """Closed-form steady state for constant setpoints (see the module docstring)."""
        p = self.named(theta)
        s1, s2, s3 = (v for v in self.setpoints)
        es, k_eta, k_m = self.web_stiffness(), self.eta * self.Kphi, self.current_measurement_gain()
        r1, r3, t0 = self.r1_0, self.r3_0, self.T0
        i1 = p["kW1"] * s1 / k_m
        i3 = p["kW3"] * s3 / k_m
        w2 = s2 / self.beta2
        v2 = self.rp * w2
        # span 1: V1 = V2 (ES - T1)/(ES - T0); torque balance of the unwinder
        q1 = p["cv1"] * v2 / ((es - t0) * r1)
        t1 = (k_eta * i1 + p["Tfs1"] + q1 * es) / (r1 + q1)
        w1 = v2 * (es - t1) / ((es - t0) * r1)
        # span 2 and rewinder torque balance: (ES - T3)(r3 T3 - b3) + c3 = 0, small root
        b3 = k_eta * i3 - p["Tfs3"]
        c3 = p["cv3"] * v2 * (es - t1) / r3
        big_b = es * r3 + b3
        t3 = 2.0 * (es * b3 - c3) / (big_b + jnp.sqrt((es * r3 - b3) ** 2 + 4.0 * r3 * c3))
        w3 = v2 * (es - t1) / ((es - t3) * r3)
        u1 = self.R * i1 - k_eta * w1
        u3 = self.R * i3 + k_eta * w3
        i2 = -self.rp * (t3 - t1) / k_eta
        u2 = self.R * i2 + k_eta * w2
        return jnp.stack([
            self.Ti1 * u1 / p["G1"],
            self.Ti2 * u2 / self.G2,
            self.Ti3 * u3 / p["G3"],
            r1,
            r3,
            t1,
            t3,
            w1,
            w3,
            w2,
            self.reel_inertia(r1, p["Js"]) * w1,
            self.reel_inertia(r3, p["Js"]) * w3,
        ])

    def observe(self, t, y, theta):
        p = self.named(theta)
        values = (p["gamma1"] * y[5], p["gamma3"] * y[6], p["beta1"] * y[7], p["beta3"] * y[8])
        return jnp.stack([values[i] for i in self.outputs])

    def constants(self) -> dict[str, tuple[float, str]]:
        """The fixed constants' current values and units (BP2 only while it is fixed)."""
        return {name: (float(getattr(self, name)), unit) for name, (_, unit) in CONSTANTS.items()
                if not (name == "BP2" and "BP2" in self.parameters.names)}

    # --- helpers ---------------------------------------------------------------------------
    def reel_speeds(self, ys: Float[Array, "n_times 12"],
                    theta: Float[Array, " n_params"]) -> Float[Array, "n_times 2"]:
        """True reel speeds (Omega1, Omega3) [rad/s] from states ``ys`` (e.g. ``solve().ys``)."""
        js = self.named(jnp.asarray(theta))["Js"]
        inertia = jax.vmap(lambda r: self.reel_inertia(r, js))
        return jnp.stack([ys[:, 10] / inertia(ys[:, 3]), ys[:, 11] / inertia(ys[:, 4])], axis=1)


TSIT5_STABILITY_INTERVAL = 3.507  # |R(z)| <= 1 of Tsit5 on the real axis for -3.507 <= z <= 0
STABILITY_SAFETY = 0.8  # fraction of the stability interval used by dtmax="auto"


def pacer_eigenvalue(values: Mapping[str, float]) -> float:
    """The pacer speed loop's diagonal Jacobian entry [1/s], d(dOmega2/dt)/dOmega2 =
    -k_eta (G2 (100/BP2) k_s beta2 + k_eta) / (R J2), J2 = Jp + eta^2 Js: the stiffest mode
    (eigenvalue -124 1/s at nominal, entry -127 1/s).

    Args:
        values: constants and the parameters Jp, Js, BP2 by name.
    """
    k_eta = values["eta"] * values["Kphi"]
    j2 = values["Jp"] + values["eta"] ** 2 * values["Js"]
    loop = values["G2"] * (100.0 / values["BP2"]) * values["k_s"] * values["beta2"]
    return -k_eta * (loop + k_eta) / (values["R"] * j2)


def stable_dtmax(constants: Mapping[str, float], space: ParameterSpace) -> float:
    """Largest step [s] that keeps Tsit5 stable on the pacer mode everywhere in the box.

    ``STABILITY_SAFETY * TSIT5_STABILITY_INTERVAL / |pacer_eigenvalue|`` at the lower bounds
    of Jp, Js (and BP2 when calibrated), where the mode is fastest: 0.0110 s for the spec's
    box (eigenvalue bound -256 1/s; the largest |eigenvalue| of 4000 random box samples is
    252 1/s), 0.0041 s when BP2 >= 25 % is calibrated.
    """
    values = dict(constants)
    for name in ("Jp", "Js", "BP2"):
        if name in space.names:
            values[name] = space[name].lower
    return STABILITY_SAFETY * TSIT5_STABILITY_INTERVAL / abs(pacer_eigenvalue(values))


@register("winding_process")
def winding_process(
    outputs="tensions", calibrate_bp2: bool = False, excitation: bool = True,
    constants: Mapping[str, float] | None = None, rtol: float = 1e-8, atol: float = 1e-8,
    dtmax: float | str | None = "auto", solver: dfx.AbstractSolver | None = None,
    max_steps: int = 32_768,
) -> WindingProcess:
    """Web winder (unwinder, pacer, rewinder; DC drives, PI loops), Bastogne 2007; 16 params.

    Args:
        outputs: ``"tensions"`` (y1 = gamma1 T1, y2 = gamma3 T3 [V], the calibration data),
            ``"tensions+speeds"`` (adds y3 = beta1 Omega1f, y4 = beta3 Omega3f [V]) or a
            non-empty tuple of names from ``("y1", "y2", "y3", "y4")``.
        calibrate_bp2: make BP2 (pacer proportional band [%], nominal 100, bounds [25, 400],
            log) a 17th calibrated parameter, placed after BP3.
        excitation: apply the spec's multisine on the setpoints (False: constant setpoints
            S(0), so the model stays at its steady state up to the slow radius drift).
        constants: overrides of fixed constants by name (see `CONSTANTS`), e.g.
            ``{"T0": 1.0}``.
        rtol, atol: tolerances of the PID step-size controller.
        dtmax: largest step [s]. ``"auto"``: `stable_dtmax` of the parameter box, which
            keeps Tsit5 inside its stability region so that forward-mode Jacobians are
            right (0.0110 s by default, 0.0041 s with ``calibrate_bp2``; None for implicit
            solvers); a float; or None (no limit: batches are ~1.3x faster, but forward-mode
            Jacobians are wrong, see the module docstring).
        solver: diffrax solver (default Tsit5; for explicit solvers ``dtmax="auto"`` assumes
            the stability interval of Tsit5).
        max_steps: solver step budget.

    Long for its documented options; the body is 54 lines.
    """
    if isinstance(outputs, str):
        if outputs not in _OUTPUT_SETS:
            raise ValueError(f"winding_process: outputs must be one of {sorted(_OUTPUT_SETS)} "
                             f"or a tuple of names from {OUTPUT_NAMES}; got {outputs!r}")
        outputs = _OUTPUT_SETS[outputs]
    outputs = tuple(outputs)
    if not outputs or any(o not in OUTPUT_NAMES for o in outputs):
        raise ValueError(f"winding_process: outputs must be a non-empty tuple of names from "
                         f"{OUTPUT_NAMES}; got {outputs!r}")
    overrides = dict(constants or {})
    unknown = sorted(set(overrides) - set(CONSTANTS))
    if unknown:
        raise ValueError(f"winding_process: unknown constants {unknown}; known: "
                         f"{', '.join(CONSTANTS)}")
    if calibrate_bp2 and "BP2" in overrides:
        raise ValueError("winding_process: BP2 is calibrated (calibrate_bp2=True); it cannot "
                         "also be overridden as a constant")
    values = {name: float(overrides.get(name, value)) for name, (value, _) in CONSTANTS.items()}
    bad = [name for name, v in values.items() if not np.isfinite(v)]
    if bad:
        raise ValueError(f"winding_process: constants must be finite; got {bad}")
    space = parameter_space(calibrate_bp2)
    solver = dfx.Tsit5() if solver is None else solver
    if isinstance(dtmax, str):
        if dtmax != "auto":
            raise ValueError(f"winding_process: dtmax must be 'auto', a positive float or None; "
                             f"got {dtmax!r}")
        implicit = isinstance(solver, dfx.AbstractImplicitSolver)
        dtmax = None if implicit else stable_dtmax(values, space)
    elif dtmax is not None and not (np.isfinite(dtmax) and dtmax > 0):
        raise ValueError(f"winding_process: dtmax must be 'auto', a positive float or None; "
                         f"got {dtmax!r}")
    amplitudes = np.asarray(EXCITATION_AMPLITUDES) * (1.0 if excitation else 0.0)
    f64 = jnp.float64
    return WindingProcess(
        parameters=space,
        output_names=outputs,
        state_names=STATE_NAMES,
        experiment=Experiment(OBSERVATION_TIMES, t0=0.0, t1=60.0,
                              name="multisine" if excitation else "constant setpoints"),
        solver=solver,
        # PI coefficients (Soederlind/Hairer): on this stability-limited problem they cut the
        # steps by ~16 % against diffrax's pure I control (2255 instead of 2678 at nominal)
        controller=dfx.PIDController(rtol=rtol, atol=atol, pcoeff=0.3, icoeff=0.4,
                                     dtmax=None if dtmax is None else float(dtmax)),
        adjoint=dfx.RecursiveCheckpointAdjoint(),
        dt0=None,
        max_steps=max_steps,
        outputs=tuple(OUTPUT_NAMES.index(o) for o in outputs),
        setpoints=jnp.asarray(SETPOINTS, dtype=f64),
        excitation_amplitudes=jnp.asarray(amplitudes, dtype=f64),
        excitation_frequencies=jnp.asarray(EXCITATION_FREQUENCIES, dtype=f64),
        **{name: jnp.asarray(v, dtype=f64) for name, v in values.items()},
    )
