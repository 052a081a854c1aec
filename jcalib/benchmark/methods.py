"""The methods a benchmark compares, by name, each with its options as a configuration string.

A configuration is ``name`` or ``name:option=value,option=value`` (``"lm"``,
``"trf:stop=fides"``, ``"nuts:n_steps=500,preconditioner=laplace"``); values read as JSON
where they parse (``200``, ``1e-6``, ``true``, ``null``), else as strings. `register_method`
adds a user's method in one call; `method_config` parses a configuration and checks its
options against the method's signature.

Three kinds:

- ``"optimizer"``: ``fn(key, problem, start, **options)``, ``start`` the internal coordinates
  ``(n_free,)`` of the run's start (the same for every method in a repetition). What it
  returns is not used: the benchmark's `jcalib.benchmark.cost.CostCounter` sees every
  evaluation the method makes through ``problem``, and the best value it saw is the run's.
- ``"sampler"``: ``fn(key, problem, **options) -> draws``, physical values
  ``(n_chains, n_draws, n_free)``.
- ``"amortized"``: ``fn(key, simulator, noise, **options) -> posterior``: trains on simulations
  of ``simulator`` (a `jcalib.benchmark.cost.CountedSimulator` of the problem's model, every
  simulation counted) with additive Gaussian noise of standard deviation ``noise`` (one per
  output), its parameters drawn from the problem's prior; ``posterior.sample(key, x, n)``
  draws ``(n, n_params)`` physical values for one data set ``x`` ``(n_times, n_outputs)`` and
  ``(n_obs, n, n_params)`` for a batch (as `jcalib.nn.bayesflow.AmortizedPosterior`).

Built in: optimizers ``"lm"``, ``"trf"``, ``"fides"`` (`jcalib.estimation.multistart` from the
one start), ``"gauss-newton"`` (essential directions), ``"lbfgs"`` and ``"adam"`` (optax, on
the negative log-likelihood in internal coordinates, kept in the box by projection) and
``"de"`` (differential evolution, a global baseline that draws its own population, simulated 32
members at a time); samplers ``"mala"``, ``"hmc"``, ``"nuts"`` (`jcalib.bayes`, chains started
uniformly in the internal box);
amortized ``"bayesflow"`` (`jcalib.nn.bayesflow.AmortizedPosterior` trained online).

Example:
    >>> method, options = method_config("trf:stop=fides,max_steps=50")
    >>> method.kind, options
    ('optimizer', {'stop': 'fides', 'max_steps': 50})
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jaxtyping import Array, Float

from jcalib.bayes import hmc, mala, nuts
from jcalib.estimation.gauss_newton import gauss_newton
from jcalib.estimation.global_search import differential_evolution
from jcalib.estimation.multistart import multistart, sample_starts
from jcalib.problems import AbstractProblem

__all__ = ["KINDS", "BenchmarkMethod", "canonical_config", "method_config", "method_names", "register_method"]

KINDS = ("optimizer", "sampler", "amortized")


@dataclasses.dataclass(frozen=True)
class BenchmarkMethod:
    """A method under a name (module docstring for ``fn``'s signature per ``kind``); ``check``
    refuses bad option values (``check(options)`` raises ValueError) before any run."""

    name: str
    fn: Callable
    kind: str = "optimizer"
    description: str = ""
    check: Callable[[dict], None] | None = None


_METHODS: dict[str, BenchmarkMethod] = {}


def register_method(name: str, fn: Callable, kind: str = "optimizer", description: str = "",
                    check: Callable[[dict], None] | None = None) -> BenchmarkMethod:
    """Add a method under ``name`` (letters, digits, ``-`` and ``_``) and return it; ``check``
    (optional) raises ValueError for option values the method cannot take.

    Raises:
        ValueError: a name that is taken or not of those characters, ``fn`` not callable, an
            unknown ``kind``.
    """
    if not isinstance(name, str) or not name or not all(c.isalnum() or c in "-_" for c in name):
        raise ValueError(f"register_method: a name is letters, digits, '-' and '_'; got {name!r}")
    if name in _METHODS:
        raise ValueError(f"register_method: a method {name!r} is registered already")
    if not callable(fn) or kind not in KINDS:
        raise ValueError(f"register_method: fn must be callable and kind one of {KINDS}; got {fn!r}, {kind!r}")
    _METHODS[name] = BenchmarkMethod(name, fn, kind, description, check)
    return _METHODS[name]


def method_names(kind: str | None = None) -> list[str]:
    """The registered methods' names (of one ``kind``, or all), sorted."""
    return sorted(n for n, m in _METHODS.items() if kind is None or m.kind == kind)


def method_config(config: str) -> tuple[BenchmarkMethod, dict[str, object]]:
    """The method and options of a configuration string (module docstring).

    Raises:
        ValueError: an unknown method, an option written without ``=``, an option the method's
            function does not take, or one given twice.
    """
    name, _, rest = str(config).partition(":")
    if name not in _METHODS:
        raise ValueError(f"unknown method {name!r} in {config!r}; known: {method_names()}")
    method = _METHODS[name]
    options: dict[str, object] = {}
    for item in filter(None, rest.split(",")):
        key, sep, text = item.partition("=")
        if not sep or not key.strip() or key.strip() in options:
            raise ValueError(f"method configuration {config!r}: write options as name:option=value,option=value "
                             f"(each once); got {item!r}")
        options[key.strip()] = _value(text.strip())
    accepted = _keyword_options(method)
    unknown = sorted(set(options) - accepted) if accepted is not None else []
    if unknown:
        raise ValueError(f"method {name!r} takes no option {unknown}; its options: {sorted(accepted)}")
    if method.check is not None:
        try:
            method.check(options)
        except ValueError as err:
            raise ValueError(f"method {name!r}: {err}") from None
    return method, options


def canonical_config(config: str) -> str:
    """``config`` with its options sorted by name (``"trf:stop=fides,max_steps=50"`` ->
    ``"trf:max_steps=50,stop=fides"``): one run id and one report row per configuration.

    Raises:
        ValueError: as `method_config`.
    """
    method, options = method_config(config)
    text = ",".join(f"{k}={v if isinstance(v, str) else json.dumps(v)}" for k, v in sorted(options.items()))
    return f"{method.name}:{text}" if text else method.name


def _value(text: str) -> object:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _keyword_options(method: BenchmarkMethod) -> set[str] | None:
    """The keyword options ``method.fn`` takes after its fixed arguments (None: any, ``**kwargs``)."""
    parameters = list(inspect.signature(method.fn).parameters.values())
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return None
    fixed = 2 if method.kind == "sampler" else 3
    return {p.name for p in parameters[fixed:]}


_RULES = {
    "count": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1, "an integer >= 1"),
    "count0": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0, "an integer >= 0"),
    "positive": (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < float("inf"),
                 "a number > 0"),
    "nonnegative": (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < float("inf"),
                    "a number >= 0"),
    "count2": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 2, "an integer >= 2"),
    "stop": (lambda v: v in ("fides", "scipy"), "fides or scipy"),
    "summary": (lambda v: v in ("lstm", "gru", "conv", "mlp"), "lstm, gru, conv or mlp"),
    "name": (lambda v: v is None or isinstance(v, str), "a name or null"),
}


def _checker(**rules: str) -> Callable[[dict], None]:
    """A ``check`` of option values by rule name (`_RULES`), for the built-in methods."""
    def check(options: dict) -> None:
        for option, value in options.items():
            test, wanted = _RULES[rules[option]]
            if not test(value):
                raise ValueError(f"option {option}={value!r}: must be {wanted}")
    return check


# --- built-in optimizers -----------------------------------------------------------------
def _local(method: str):
    """`multistart`'s ``method`` from the one start (``"trf"``, ``"fides"``: with their ``stop`` option)."""
    def fn(key, problem, start, stop=None, max_steps=None):
        options = {} if max_steps is None else {"max_steps": max_steps}
        return multistart(None, problem, 1, method, starts=problem.to_physical(start)[None], stop=stop, **options)
    return fn


def _lm(key, problem, start, max_steps=None):
    options = {} if max_steps is None else {"max_steps": max_steps}
    return multistart(None, problem, 1, "lm", starts=problem.to_physical(start)[None], **options)


def _gauss_newton(key, problem, start, max_steps=100):
    return gauss_newton(problem, start, coordinates="internal", max_steps=max_steps)


def _de(key, problem, start, max_steps=1000, population_size=None, batch_size=32):
    """DE simulating ``batch_size`` members at a time, so a budget stops it within a generation."""
    return differential_evolution(key, problem, max_steps=max_steps, population_size=population_size,
                                  batch_size=batch_size)


@eqx.filter_jit
def _first_order(optimizer: optax.GradientTransformationExtraArgs, problem: AbstractProblem,
                 start: Float[Array, " n_free"], max_steps: int, xtol: float) -> Float[Array, " n_free"]:
    """``optimizer`` on the negative log-likelihood from ``start``, each iterate projected onto
    the internal box, until ``max_steps`` or a step of at most ``xtol`` in every coordinate (the
    value and gradient its line search found are reused where it keeps them, as L-BFGS does)."""
    lower, upper = (jnp.asarray(b) for b in (problem.space.lower_internal, problem.space.upper_internal))

    def objective(z):
        return -problem.log_likelihood(z)

    reuse = optax.tree_utils.tree_get(optimizer.init(jnp.asarray(start)), "value") is not None
    value_and_grad = optax.value_and_grad_from_state(objective) if reuse else \
        (lambda z, state: jax.value_and_grad(objective)(z))

    def body(carry):
        z, state, _, step = carry
        value, grad = value_and_grad(z, state=state)
        updates, state = optimizer.update(grad, state, z, value=value, grad=grad, value_fn=objective)
        z_new = jnp.clip(optax.apply_updates(z, updates), lower, upper)
        return z_new, state, jnp.max(jnp.abs(z_new - z)), step + 1

    def go_on(carry):
        return (carry[3] < max_steps) & (carry[2] > xtol)

    z0 = jnp.asarray(start)
    carry = jax.lax.while_loop(go_on, body, (z0, optimizer.init(z0), jnp.inf, 0))
    return carry[0]


_LBFGS = optax.lbfgs()


def _lbfgs(key, problem, start, max_steps=500, xtol=1e-10):
    return _first_order(_LBFGS, problem, jnp.asarray(start), max_steps, xtol)


@functools.cache
def _adam_optimizer(learning_rate: float) -> optax.GradientTransformation:
    return optax.adam(learning_rate)


def _adam(key, problem, start, max_steps=2000, learning_rate=0.05, xtol=1e-10):
    return _first_order(_adam_optimizer(float(learning_rate)), problem, jnp.asarray(start), max_steps, xtol)


# --- built-in samplers -------------------------------------------------------------------
def _sampler(module):
    """``module.sample`` with its chains started at points drawn uniformly in the internal box
    (from the run's key), not at the nominal values (on an analytic problem, its posterior mean)."""
    def fn(key, problem, n_steps=1000, n_chains=4, warmup=200, preconditioner=None):
        key_starts, key_chains = jax.random.split(key)
        starts = sample_starts(key_starts, problem, n_chains, "uniform")
        result = module.sample(key_chains, problem, starts, n_steps, n_chains=n_chains, warmup=warmup,
                               preconditioner=preconditioner)
        return np.asarray(result.samples)
    return fn


# --- built-in amortized methods ----------------------------------------------------------
def _bayesflow(key, simulator, noise, n_simulations=2000, epochs=50, n_val=500, summary="mlp", n_blocks=4,
               hidden=64):
    """An `AmortizedPosterior` trained online: ``epochs`` x ``n_simulations`` fresh simulations
    (and ``n_val`` for validation), each drawn from the prior (uniform in internal coordinates)."""
    from jcalib.nn.bayesflow import AmortizedPosterior, BayesFlowConfig
    from jcalib.nn.training import TrainingConfig

    config = BayesFlowConfig(summary=summary, summary_size=max(4, 2 * simulator.parameters.n_params),
                             summary_hidden=hidden, n_blocks=n_blocks, coupling_hidden=(hidden, hidden),
                             training=TrainingConfig(epochs=epochs, batch_size=64, learning_rate=1e-3,
                                                     schedule="exponential", decay=0.97, progress=False))
    return AmortizedPosterior(simulator, config).fit_online(key, n_per_epoch=n_simulations, n_val=n_val,
                                                            noise=np.asarray(noise))


def _register_built_ins() -> None:
    local = _checker(stop="stop", max_steps="count")
    first_order = _checker(max_steps="count", xtol="nonnegative", learning_rate="positive")
    for name, fn, text, check in (
        ("lm", _lm, "Levenberg-Marquardt (jcalib.estimation.levenberg_marquardt_batch)", local),
        ("trf", _local("trf"), "scipy's trust-region reflective with the autodiff Jacobian", local),
        ("fides", _local("fides"), "Fides's trust-region reflective method (jcalib.estimation.trust_region)", local),
        ("gauss-newton", _gauss_newton, "damped Gauss-Newton with essential directions (Wulkow 2021)", local),
        ("lbfgs", _lbfgs, "optax's L-BFGS with zoom line search, projected onto the box", first_order),
        ("adam", _adam, "optax's Adam, projected onto the box", first_order),
        ("de", _de, "differential evolution (global; draws its own population)",
         _checker(max_steps="count", population_size="count", batch_size="count")),
    ):
        register_method(name, fn, "optimizer", text, check)
    check = _checker(n_steps="count", n_chains="count", warmup="count0", preconditioner="name")
    for module, text in ((mala, "prescaled MALA"), (hmc, "HMC"), (nuts, "NUTS")):
        register_method(module.__name__.rsplit(".", 1)[1], _sampler(module), "sampler", f"{text} (jcalib.bayes)", check)
    register_method("bayesflow", _bayesflow, "amortized", "BayesFlow: summary network + coupling flow, trained online",
                    _checker(n_simulations="count2", epochs="count", n_val="count0", summary="summary",
                             n_blocks="count", hidden="count"))


_register_built_ins()
