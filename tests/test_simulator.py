"""The simulator protocol (issue 18 §2): one `AbstractSimulator` that models, the PELS-VAE
`Surrogate` and `FunctionSimulator` implement; entry points refuse anything else with a
message; no ``hasattr`` duck typing of simulators is left in jcalib/."""

import ast
import pathlib

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jcalib
from jcalib.model import AbstractModel, AbstractSimulator, FunctionSimulator, SolveStatus, check_simulator
from jcalib.nn.pelsvae import Surrogate
from jcalib.parameters import Parameter, ParameterSpace

SPACE = ParameterSpace([Parameter("a", 1.0, 0.5, 2.0), Parameter("k", 1.0, 0.1, 10.0, log_scale=True)])
TS = np.linspace(0.0, 1.0, 5)
PACKAGE = pathlib.Path(jcalib.__file__).parent


def decay(theta):
    return (theta[0] * jnp.exp(-theta[1] * jnp.asarray(TS)))[:, None]  # (5, 1)


def test_models_and_surrogates_are_simulators():
    assert issubclass(AbstractModel, AbstractSimulator)
    assert issubclass(Surrogate, AbstractSimulator)
    assert issubclass(FunctionSimulator, AbstractSimulator)
    assert jcalib.AbstractSimulator is AbstractSimulator and jcalib.FunctionSimulator is FunctionSimulator
    for name in ("four_substance_reactions", "rigid_double_beam"):
        model = jcalib.models.get(name)
        assert isinstance(model, AbstractSimulator)
        assert model.n_outputs == len(model.output_names) == model.simulate(model.parameters.nominal).shape[1]


def test_the_protocol_is_abstract():
    """Without simulate_with_status (or parameters, output_names, ts) there is no simulator."""

    class NoSimulate(AbstractSimulator):
        parameters: ParameterSpace = eqx.field(static=True)
        output_names: tuple = ("y",)
        ts: jax.Array = None

    class NoTimes(AbstractSimulator):
        parameters: ParameterSpace = eqx.field(static=True)
        output_names: tuple = ("y",)

        def simulate_with_status(self, theta):
            return jnp.zeros((1, 1)), jnp.asarray(0)

    with pytest.raises(TypeError, match="abstract"):
        NoSimulate(SPACE)
    with pytest.raises(TypeError, match="ts"):
        NoTimes(SPACE)


def test_function_simulator_shapes_and_status():
    simulator = FunctionSimulator(decay, SPACE, ts=TS)
    assert simulator.output_names == ("y",) and simulator.n_outputs == 1
    theta = jnp.asarray([1.5, 2.0])
    y, status = simulator.simulate_with_status(theta)
    np.testing.assert_allclose(y[:, 0], 1.5 * np.exp(-2.0 * TS), rtol=1e-15)
    assert int(status) == SolveStatus.SUCCESS
    np.testing.assert_array_equal(simulator.simulate(theta), y)
    # simulate_batch runs it like a model (one vmapped call)
    thetas = np.asarray(SPACE.sample(jax.random.key(0), 6))
    np.testing.assert_allclose(jcalib.simulate_batch(simulator, thetas), np.stack([decay(t) for t in thetas]),
                               rtol=1e-14)
    scalar = FunctionSimulator(lambda th: th[0] * th[1], SPACE)  # one output at one time
    assert scalar.simulate(theta).shape == (1, 1) and scalar.output_names == ("y",)
    vector = FunctionSimulator(lambda th: th, SPACE, output_names=("u", "v"))  # two outputs at one time
    np.testing.assert_array_equal(vector.simulate(theta), theta[None])
    nan = FunctionSimulator(lambda th: jnp.where(th[0] > 1.0, jnp.nan, th), SPACE)
    y, status = nan.simulate_with_status(theta)
    assert int(status) == SolveStatus.NONFINITE and np.all(np.isnan(np.asarray(y)))  # all NaN, like a failed solve


@pytest.mark.parametrize(("args", "kwargs", "match"), [
    ((3.0, SPACE), {}, r"FunctionSimulator: fn must be a callable fn\(theta\) -> array; got float"),
    ((decay, {"a": (0, 1)}), {}, "FunctionSimulator: parameters must be a jcalib ParameterSpace; got dict"),
    ((lambda th: th.reshape(3, 3), SPACE), {},
     r"FunctionSimulator: calling fn on one parameter vector of shape \(2,\) \(a, k\) failed"),
    ((lambda th: (th, th), SPACE), {}, "FunctionSimulator: fn must return one array per theta"),
    ((lambda th: th > 0, SPACE), {}, "FunctionSimulator: fn must return real numbers; got dtype bool"),
    ((lambda th: th[:0], SPACE), {}, r"fn must return a scalar, an \(n_outputs,\) vector .*got shape \(0,\)"),
    ((lambda th: jnp.ones((2, 2, 2)), SPACE), {}, r"got shape \(2, 2, 2\)"),
    ((decay, SPACE), {"output_names": ("y", "z")},
     r"output_names has 2 names but fn returns 1 outputs \(shape \(5, 1\)\)"),
    ((decay, SPACE), {"ts": np.arange(4.0)}, r"ts must have shape \(n_times,\) = \(5,\) .*got shape \(4,\)"),
])
def test_function_simulator_errors(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        FunctionSimulator(*args, **kwargs)


def test_a_function_simulator_is_calibrated_with_its_exact_jacobian():
    """A `CalibrationProblem` over a `FunctionSimulator` (here the extended Rosenbrock function as
    residuals ``data - f``): its Jacobian in forward mode is ``-df/dtheta``, every component
    against the analytic one."""
    from jcalib import CalibrationProblem
    from jcalib.data import Measurements

    space = ParameterSpace([Parameter(f"x{i}", 0.0, -2.0, 2.0) for i in range(3)])
    simulator = FunctionSimulator(lambda x: jnp.concatenate([-10 * (x[1:] - x[:-1] ** 2), x[:-1]]), space)
    data = Measurements(np.asarray(simulator.ts), np.array([[0.0, 0.0, 1.0, 1.0]]), sigma=1.0)
    problem = CalibrationProblem(simulator, data, weighting="absolute")
    x = np.array([0.3, -1.2, 0.7])
    expected = np.array([[-20 * x[0], 10, 0], [0, -20 * x[1], 10], [-1, 0, 0], [0, -1, 0]])
    np.testing.assert_allclose(problem.forward_mode().jacobian(jnp.asarray(x)), expected, rtol=1e-14, atol=1e-14)
    assert eqx.tree_equal(problem.forward_mode(), problem)  # a function has no solver to switch


def test_check_simulator_message():
    simulator = FunctionSimulator(decay, SPACE, ts=TS)
    assert check_simulator(simulator, "here") is simulator
    with pytest.raises(ValueError, match=r"^here: model must be a jcalib simulator \(an AbstractModel, a PELS-VAE "
                                         r"Surrogate or a FunctionSimulator; any subclass of "
                                         r"jcalib.AbstractSimulator\); got ParameterSpace$"):
        check_simulator(SPACE, "here", "model")
    with pytest.raises(ValueError, match=r"got function; wrap a plain function as "
                                         r"jcalib.FunctionSimulator\(fn, space\)"):
        check_simulator(decay, "here")


def test_simulate_batch_refuses_a_non_simulator():
    with pytest.raises(ValueError, match=r"simulate_batch: model must be a jcalib simulator .*got function; wrap"):
        jcalib.simulate_batch(decay, np.ones((2, 2)))


def test_sobol_refuses_a_non_simulator():
    from jcalib.sensitivity.sobol import sobol_indices

    with pytest.raises(ValueError, match=r"sobol_indices: simulator must be a jcalib simulator .*got ParameterSpace"):
        sobol_indices(jax.random.key(0), SPACE, None, 16)


def test_the_networks_refuse_non_simulators():
    from jcalib.nn import PELSVAE, AmortizedPosterior, InverseMapping, simulate_training_set

    for network in (AmortizedPosterior, PELSVAE, InverseMapping):
        with pytest.raises(ValueError, match=rf"{network.__name__}: simulator must be a jcalib simulator .*got "
                                             r"function"):
            network(decay)
    with pytest.raises(ValueError, match=r"simulate_training_set: simulator must be a jcalib simulator .*got function"):
        simulate_training_set(jax.random.key(0), decay, 4)


@pytest.mark.slow
def test_pelsvae_fits_a_function_simulator():
    """A simulator without an experiment: the surrogate keeps its times and output names."""
    from jcalib.nn.pelsvae import PELSVAE, PELSVAEConfig
    from jcalib.nn.training import TrainingConfig

    simulator = FunctionSimulator(decay, SPACE, output_names=("x",), ts=TS)
    thetas = np.asarray(SPACE.sample(jax.random.key(1), 16))
    config = PELSVAEConfig(latent_size=2, hidden_size=4, n_dense_layers=1, n_passes=0,
                           training=TrainingConfig(epochs=1, batch_size=8, progress=False))
    surrogate = PELSVAE(simulator, config).fit(jax.random.key(0), thetas,
                                               jcalib.simulate_batch(simulator, thetas)).surrogate
    assert surrogate.output_names == ("x",)
    np.testing.assert_array_equal(np.asarray(surrogate.ts), TS)
    assert surrogate.simulate(jnp.asarray(thetas[0])).shape == (5, 1)


# --- no duck typing of simulators -------------------------------------------------------------
_PROTOCOL = {"simulate_with_status", "simulate", "parameters"}  # "ts"/"output_names": Measurements have them too


def _duck_typing_calls(tree: ast.AST) -> list[tuple[int, str]]:
    """``hasattr(x, "<simulator attribute>")`` calls, sorted by line; for ``hasattr(x, a) for a in
    ("parameters", ...)`` the names are the string constants of the enclosing statement."""
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "hasattr"
                and len(node.args) == 2):
            continue
        scope = node
        if not isinstance(node.args[1], ast.Constant):  # a variable: look at the whole statement
            while not isinstance(scope, ast.stmt) and scope in parents:
                scope = parents[scope]
        names = {n.value for n in ast.walk(scope) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
        if names & _PROTOCOL:
            found.append((node.lineno, ast.unparse(node)))
    return sorted(found)


def test_the_duck_typing_detector_finds_the_old_checks():
    old = ('missing = [a for a in ("parameters", "ts") if not hasattr(model, a)]\n'
           'ok = hasattr(obj, "simulate_with_status") and hasattr(obj, "parameters")\n'
           'fine = hasattr(config, "to_dict")\n')
    assert [line for line, _ in _duck_typing_calls(ast.parse(old))] == [1, 2, 2]


def test_no_hasattr_duck_typing_of_simulators_in_jcalib():
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for line, call in _duck_typing_calls(ast.parse(path.read_text(), filename=str(path))):
            offenders.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {call}")
    assert not offenders, "use isinstance(x, AbstractSimulator) (jcalib.model.check_simulator):\n" + "\n".join(
        offenders)
