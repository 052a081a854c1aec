"""Rodas5P: a linearly implicit (Rosenbrock) stiff solver for diffrax.

Rosenbrock methods replace the nonlinear stage equations of an implicit Runge-Kutta method
(Kvaerno5: a Newton or chord iteration per stage, each a ``while`` loop) by linear ones
with the exact Jacobian: per step one Jacobian ``J = df/dy`` (forward-mode autodiff), one
LU factorisation of ``I / (h gamma) - J`` and eight triangular solves. A step has a fixed
cost and cannot fail to converge, which is what a ``vmap`` over a batch needs: a lane never
waits for another lane's stage iterations, and derivatives go through the step as ordinary
linear algebra (forward and reverse mode).

The method is Rodas5P (Steinebach 2023): order 5 with an embedded order-4 solution (error
estimate), stiffly accurate, L-stable, with a dense output of order 4 (three extra vectors
per step) for `diffrax.SaveAt` ``ts`` between steps. Coefficients in the transformed form of
Hairer & Wanner (1996, Sec. IV.7), as published by Steinebach and used by
OrdinaryDiffEq.jl: stage ``i`` solves

    (I / (h gamma) - J) k_i = f(t0 + c_i h, y0 + sum_j a_ij k_j) + sum_j (C_ij / h) k_j + h d_i df/dt,

``y1 = y0 + sum_j a_8j k_j + k_8`` (stages 6-8 are evaluated at ``t0 + h`` on the running
solution) and the error estimate is ``k_8``.

References:
    G. Steinebach, "Construction of Rosenbrock-Wanner method Rodas5P and numerical benchmarks
    within the Julia Differential Equations package", BIT Numerical Mathematics 63 (2023) 27.
    E. Hairer, G. Wanner, "Solving Ordinary Differential Equations II", 2nd ed., Springer 1996.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import diffrax as dfx
import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
from diffrax._term import WrapTerm  # not exported; diffeqsolve wraps every term in it
from jaxtyping import Array, Float

__all__ = ["JacobianTerm", "Rodas5P", "RodasInterpolation", "state_jacobian"]

_GAMMA = 0.21193756319429014
# a[i, j]: stage i (0-based, 0..5) is evaluated at y0 + sum_j a[i, j] k_j (stages 6 and 7 at
# the running solution, see `Rodas5P.step`)
_A = np.array([
    [0.0, 0.0, 0.0, 0.0, 0.0],
    [3.0, 0.0, 0.0, 0.0, 0.0],
    [2.849394379747939, 0.45842242204463923, 0.0, 0.0, 0.0],
    [-6.954028509809101, 2.489845061869568, -10.358996098473584, 0.0, 0.0],
    [2.8029986275628964, 0.5072464736228206, -0.3988312541770524, -0.04721187230404641, 0.0],
    [-7.502846399306121, 2.561846144803919, -11.627539656261098, -0.18268767659942256, 0.030198172008377946],
])
# C[i, j] (j < i): the k_j / h terms on the right-hand side of stage i
_C = np.zeros((8, 7))
_C[1, :1] = [-14.155112264123755]
_C[2, :2] = [-17.97296035885952, -2.859693295451294]
_C[3, :3] = [147.12150275711716, -1.41221402718213, 71.68940251302358]
_C[4, :4] = [165.43517024871676, -0.4592823456491126, 42.90938336958603, -5.961986721573306]
_C[5, :5] = [24.854864614690072, -3.0009227002832186, 47.4931110020768, 5.5814197821558125, -0.6610691825249471]
_C[6, :6] = [30.91273214028599, -3.1208243349937974, 77.79954646070892, 34.28646028294783, -19.097331116725623,
             -28.087943162872662]
_C[7, :7] = [37.80277123390563, -3.2571969029072276, 112.26918849496327, 66.9347231244047, -40.06618937091002,
             -54.66780262877968, -9.48861652309627]
_CT = np.array([0.0, 0.6358126895828704, 0.4095798393397535, 0.9769306725060716, 0.4288403609558664, 1.0, 1.0, 1.0])
_D = np.array([0.21193756319429014, -0.42387512638858027, -0.3384627126235924, 1.8046452872882734,
               2.325825639765069, 0.0, 0.0, 0.0])
# dense output: the three vectors H @ (k_1 .. k_8) of the interpolant (see `RodasInterpolation`)
_H = np.array([
    [25.948786856663858, -2.5579724845846235, 10.433815404888879, -2.3679251022685204, 0.524948541321073,
     1.1241088310450404, 0.4272876194431874, -0.17202221070155493],
    [-9.91568850695171, -0.9689944594115154, 3.0438037242978453, -24.495224566215796, 20.176138334709044,
     15.98066361424651, -6.789040303419874, -6.710236069923372],
    [11.419903575922262, 2.8879645146136994, 72.92137995996029, 80.12511834622643, -52.072871366152654,
     -59.78993625266729, -0.15582684282751913, 4.883087185713722],
])


class JacobianTerm(dfx.ODETerm):
    """A `diffrax.ODETerm` that knows its Jacobian: ``jacobian(t, y, args)`` is ``d vector_field /
    dy``, ``(n_states, n_states)``, e.g. assembled from a model's sparse structure where
    ``jax.jacfwd`` would push ``n_states`` tangents through the vector field. `Rodas5P` and
    `jcalib.steady_state` use it (`state_jacobian`); other solvers see an ordinary ODETerm.

    Example:
        >>> term = JacobianTerm(lambda t, y, k: -k * y, lambda t, y, k: -k * jnp.eye(y.shape[0]))
        >>> state_jacobian(term, 0.0, jnp.ones(2), 3.0).tolist()
        [[-3.0, -0.0], [-0.0, -3.0]]
    """

    jacobian: Callable


def state_jacobian(term: dfx.AbstractTerm, t: Float[Array, ""], y: Float[Array, " n_states"],
                   args) -> Float[Array, "n_states n_states"]:
    """``d term.vf(t, y, args) / dy``: the term's own `JacobianTerm.jacobian` where it has one
    (also inside diffrax's ``WrapTerm``, which diffeqsolve puts around every term), else
    ``jax.jacfwd`` of the vector field."""
    inner, direction = term, 1
    if isinstance(term, WrapTerm):
        inner, direction = term.term, term.direction
    if isinstance(inner, JacobianTerm):
        return jnp.asarray(inner.jacobian(t * direction, y, args), dtype=y.dtype)
    return jax.jacfwd(lambda x: jnp.asarray(term.vf(t, x, args), dtype=y.dtype))(y)


class RodasInterpolation(dfx.AbstractLocalInterpolation):
    """Dense output of a Rodas step: with s = (t - t0) / (t1 - t0),
    ``y(s) = (1 - s) y0 + s (y1 + (1 - s) (h1 + s (h2 + s h3)))`` (Steinebach 2023)."""

    t0: Float[Array, ""]
    t1: Float[Array, ""]
    y0: Float[Array, " n_states"]
    y1: Float[Array, " n_states"]
    h: Float[Array, "3 n_states"]

    def evaluate(self, t0, t1=None, left: bool = True) -> Float[Array, " n_states"]:
        del left
        if t1 is not None:
            return self.evaluate(t1) - self.evaluate(t0)
        span = self.t1 - self.t0
        s = jnp.where(span == 0, 0.0, (t0 - self.t0) / jnp.where(span == 0, 1.0, span))
        return (1 - s) * self.y0 + s * (self.y1 + (1 - s) * (self.h[0] + s * (self.h[1] + s * self.h[2])))


class Rodas5P(dfx.AbstractAdaptiveSolver):
    """Rodas5P, a 5th-order L-stable Rosenbrock method with an embedded 4th-order error
    estimate and 4th-order dense output (module docstring). For ODE terms whose state is one
    1-D array, as every jcalib model has; use it with an adaptive step-size controller
    (``diffrax.PIDController``), like `diffrax.Kvaerno5`.

    The Jacobian is the term's own (`JacobianTerm`), else ``jax.jacfwd`` of the vector field
    (n_states tangents); a step costs one Jacobian, one dense LU factorisation and eight
    vector-field evaluations.

    Example:
        >>> import diffrax as dfx
        >>> term = dfx.ODETerm(lambda t, y, k: -k * y)
        >>> sol = dfx.diffeqsolve(term, Rodas5P(), 0.0, 1.0, None, jnp.ones(1), args=1e3,
        ...                       stepsize_controller=dfx.PIDController(rtol=1e-8, atol=1e-10))
        >>> bool(jnp.abs(sol.ys[-1, 0]) < 1e-10)
        True
    """

    term_structure: ClassVar = dfx.AbstractTerm
    interpolation_cls: ClassVar = RodasInterpolation

    def order(self, terms) -> int:
        del terms
        return 5

    def error_order(self, terms) -> int:
        del terms
        return 5  # the local error of the embedded order-4 solution: O(h^5)

    def init(self, terms, t0, t1, y0, args) -> None:
        del terms, t0, t1, y0, args
        return None

    def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
        """One step from ``t0`` to ``t1``: ``(y1, error estimate, dense info, None, RESULTS)``;
        a non-finite stage gives an infinite error estimate, so the controller rejects the
        step and tries a smaller one (as diffrax does for a failed implicit stage solve)."""
        del solver_state, made_jump
        if not (isinstance(y0, jax.Array) and y0.ndim == 1):
            raise ValueError(f"Rodas5P: the state must be one 1-D array; got {jax.tree_util.tree_structure(y0)} "
                             f"with leaves of shapes {[jnp.shape(x) for x in jax.tree_util.tree_leaves(y0)]}")
        dtype = y0.dtype
        # a step of zero length (a finished lane of a vmapped solve steps on in place) is the
        # identity; it is computed with a short step instead, so that no 1/0 reaches the matrix
        # (its NaN would come back through the discarded lane's zero cotangent in reverse mode)
        moves = t1 != t0
        h = jnp.where(moves, t1 - t0, 1e-8 * jnp.maximum(1.0, jnp.abs(t0)))

        def f(t, y):
            return jnp.asarray(terms.vf(t, y, args), dtype=dtype)

        f0, dfdt = jax.jvp(lambda t: f(t, y0), (t0,), (jnp.ones_like(t0),))
        jac = state_jacobian(terms, t0, y0, args)
        solve = _lu_solver(jnp.eye(y0.shape[0], dtype=dtype) / (h * _GAMMA) - jac)
        ks = []
        y = y0
        for i in range(8):
            if i == 0:
                fi = f0
            else:
                if i <= 5:  # stages 1-5 from y0, stage 5 (c = 1) also starts the running solution
                    y = y0 + sum(_A[i, j] * ks[j] for j in range(i))
                else:  # stages 6 and 7: the running solution plus the last stage
                    y = y + ks[-1]
                fi = f(t0 + _CT[i] * h, y)
            rhs = fi + sum((_C[i, j] / h) * ks[j] for j in range(i)) + (h * _D[i]) * dfdt
            ks.append(solve(rhs))
        y1 = jnp.where(moves, y + ks[-1], y0)
        k = jnp.where(moves, jnp.stack(ks), 0.0)
        finite = jnp.all(jnp.isfinite(y1))
        error = jnp.where(finite, jnp.where(moves, ks[-1], 0.0), jnp.inf)
        dense_info = dict(y0=y0, y1=y1, h=jnp.asarray(_H, dtype=dtype) @ k)
        return y1, error, dense_info, None, dfx.RESULTS.successful

    def func(self, terms, t0, y0, args):
        return terms.vf(t0, y0, args)


SMALL_SYSTEM = 32
"""Up to this many states a step inverts its matrix explicitly (one LU factorisation and one
solve against the identity, then eight matrix-vector products); above, the eight stages are
eight pairs of triangular solves. Per-call overhead dominates small systems (single solves of
Boehm 2014, 8 states, and vmapped batches of the 11-state polymerization model were faster with
the inverse; measurements in the CHANGELOG's 0.1.0 notes); the inverse costs 2 n^3 more flops
per step, which outweighs the calls from a few dozen states on."""


def _lu_solver(matrix: Float[Array, "n n"]):
    """``b -> matrix^-1 b`` from one LU factorisation with partial pivoting (LAPACK), through
    the explicit inverse up to `SMALL_SYSTEM` states, triangular solves above.

    Derivatives do not go through the factorisation: the solve has the custom JVP
    ``d(A^-1 b) = A^-1 (db - dA A^-1 b)``, one more solve per tangent, where differentiating
    LAPACK's LU would need two triangular solves with a matrix right-hand side per tangent
    (and more to compile). The rule is linear in the tangents, so reverse mode transposes it.
    """
    n = matrix.shape[0]
    lu_pivots = jsl.lu_factor(jax.lax.stop_gradient(matrix))
    if n <= SMALL_SYSTEM:
        factors = (jsl.lu_solve(lu_pivots, jnp.eye(n, dtype=matrix.dtype)),)
    else:
        factors = lu_pivots
    return lambda b: _solve(matrix, factors, b)


def _apply_inverse(factors, b):
    if len(factors) == 1:  # the explicit inverse
        return factors[0] @ b
    return jsl.lu_solve(factors, b)


@jax.custom_jvp
def _solve(matrix, factors, b):
    """``matrix^-1 b`` from ``factors`` of ``matrix`` (`_lu_solver`)."""
    return _apply_inverse(factors, b)


@_solve.defjvp
def _solve_jvp(primals, tangents):
    matrix, factors, b = primals
    dmatrix, _, db = tangents
    x = _apply_inverse(factors, b)
    return x, _apply_inverse(factors, db - dmatrix @ x)
