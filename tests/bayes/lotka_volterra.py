"""A user-defined model that is not built in: Lotka-Volterra predator-prey fitted to a short
table of counts (Hudson's Bay Company hare and lynx pelts, 1900-1920, thousands), with
unknown initial populations and unknown noise levels per output.

Everything between the ``# --- setup`` markers is what a user writes (the test
``test_lotka_volterra_setup_is_short`` counts it: under 30 lines of code); sampling is then
``jcalib.bayes.mala`` on ``problem.log_posterior``.
"""

import numpy as np

YEARS = np.arange(1900.0, 1921.0)
COUNTS = np.array([  # hare, lynx
    [30.0, 4.0], [47.2, 6.1], [70.2, 9.8], [77.4, 35.2], [36.3, 59.4], [20.6, 41.7],
    [18.1, 19.0], [21.4, 13.0], [22.0, 8.3], [25.4, 9.1], [27.1, 7.4], [40.3, 8.0],
    [57.0, 12.3], [76.6, 19.5], [52.3, 45.7], [19.5, 51.1], [11.2, 29.7], [7.6, 15.8],
    [14.6, 9.7], [16.2, 10.1], [24.7, 8.6]])

# --- setup (user code starts) ---
import diffrax as dfx  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import jcalib  # noqa: E402
from jcalib.probability.priors import HalfNormal, LogNormal, Normal  # noqa: E402
from jcalib.problems import initial_state_from_parameters  # noqa: E402


class LotkaVolterra(jcalib.AbstractModel):
    def vector_field(self, t, y, theta):
        alpha, beta, gamma, delta = theta[:4]
        return jnp.stack([(alpha - beta * y[1]) * y[0], (delta * y[0] - gamma) * y[1]])

    def initial_state(self, theta):  # parameters prey0, predator0 (convention "<state>0")
        return initial_state_from_parameters(self, theta, jnp.ones(2))

    def observe(self, t, y, theta):
        return y


def lotka_volterra_problem(ts, counts):
    P = jcalib.Parameter
    space = jcalib.ParameterSpace([
        P("alpha", 0.5, 0.05, 3.0), P("beta", 0.03, 0.002, 0.2), P("gamma", 0.8, 0.05, 3.0),
        P("delta", 0.03, 0.002, 0.2), P("prey0", 30.0, 1.0, 200.0, log_scale=True),
        P("predator0", 5.0, 0.5, 100.0, log_scale=True)])
    model = LotkaVolterra(
        parameters=space, output_names=("prey", "predator"), state_names=("prey", "predator"),
        experiment=jcalib.Experiment(ts), solver=dfx.Tsit5(), dt0=None, max_steps=4096,
        controller=dfx.PIDController(rtol=1e-8, atol=1e-8), adjoint=dfx.RecursiveCheckpointAdjoint())
    data = jcalib.Measurements(ts, counts, output_names=("prey", "predator"))
    prior = {"alpha": Normal(1.0, 0.5), "gamma": Normal(1.0, 0.5), "beta": Normal(0.05, 0.05),
             "delta": Normal(0.05, 0.05), "prey0": LogNormal(np.log(10.0), 1.0),
             "predator0": LogNormal(np.log(10), 1.0), "sigma_prey": HalfNormal(1.0), "sigma_predator": HalfNormal(1.0)}
    return jcalib.CalibrationProblem(model, data, weighting="absolute", prior=prior,
                                     likelihood="lognormal", noise_parameters=True)
# --- setup (user code ends) ---
