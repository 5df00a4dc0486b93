"""ODE solves on traced values: ``solve_ivp`` (RK45, DOP853, RK23) and ``odeint``, with SciPy's
signatures, written in pullback's own loops so that they trace and differentiate.

The steps are SciPy's (``scipy/integrate/_ivp/rk.py``): the same Butcher tableaus (read from SciPy's
solver classes), the same RMS error norm, step-size control (``SAFETY``, ``MIN_FACTOR``,
``MAX_FACTOR``) and initial step, and the same dense-output polynomials evaluated at ``t_eval``, so
the values agree with SciPy's to rounding, not merely to the tolerance. One ``pb.scan`` runs over the
output times; for each, a ``pb.while_loop`` makes step attempts (SciPy's step and its retries, one
attempt per iteration) until the step that reaches the time, whose interpolant gives the output.
A last ``while_loop`` goes on to ``t_span[1]``, as SciPy does, for ``nfev`` and ``status`` alone
(dropped from the program when they are not read).

Derivatives. By default they are those of the computation (discretise, then differentiate): reverse
mode goes back through the loops (``while_loop`` records each attempt's residuals), with the step
sizes the controller chose held fixed (``stop_gradient`` on the controller, as its choices only move
the result by about the tolerance, and its ``min``/``max`` and rejections are not differentiable).
Times still move: the first step starts at ``t_span[0]``, the last one ends at ``t_span[1]``, and
each output is the interpolant at its ``t_eval``. ``adjoint=True`` (pullback's keyword) instead
solves the adjoint ODE backwards in time between the output times (Chen et al. 2018, appendix C;
``jax.experimental.ode.odeint``), through ``pb.custom_vjp``: memory does not grow with the steps,
at the cost of a backward solve (whose ``y`` is integrated again, backwards, from each output).

>>> import scipy.integrate
>>> def height(v0):  # a ball thrown up at v0, with drag: where it is at t = 1
...     fall = lambda t, y: np.array([y[1], -9.81 - 0.1 * y[1] * np.abs(y[1])])
...     return scipy.integrate.solve_ivp(fall, (0.0, 1.0), np.array([0.0, v0]), t_eval=[1.0], rtol=1e-9,
...                                      atol=1e-9).y[0, 0]
>>> round(float(height(10.0)), 6), round(float(pb.grad(height)(10.0)), 6)
(3.314727, 0.603604)
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import scipy.integrate
from scipy.optimize import OptimizeResult

from pullback import tree
from pullback.errors import TracingError
from pullback.frontend.custom import custom_vjp, stop_gradient
from pullback.frontend.loops import cond, scan, while_loop
from pullback.ir.tracer import Tracer, call_user, current_builder, located, tracing

__all__ = ["OdeResult", "odeint", "solve_ivp"]

# scipy/integrate/_ivp/rk.py: the step grows or shrinks by SAFETY * err ** (-1 / (q + 1)), within these
SAFETY = 0.9
MIN_FACTOR = 0.2
MAX_FACTOR = 10.0
EPS = np.finfo(float).eps
_EXPLICIT = ("RK45", "DOP853", "RK23")
_MESSAGE = ("status 0: the solver reached the end of the integration interval; status -1: a step fell below "
            "the spacing of floating-point numbers near t (the outputs past it are nan); the status is "
            "computed when the program runs")


@dataclass(frozen=True)
class Method:
    """An explicit Runge-Kutta pair as SciPy defines it (its solver class's attributes)."""

    name: str
    C: np.ndarray
    A: np.ndarray
    B: np.ndarray
    E: np.ndarray | None  # RK45, RK23: the error estimate K.T @ E h
    P: np.ndarray | None  # RK45, RK23: the dense output, h K.T @ P @ [x, x^2, ...]
    order: int
    error_order: int
    n_stages: int

    @property
    def dop853(self) -> bool:
        return self.E is None


def tableau(name: Any) -> Method:
    """The tableau of SciPy's solver ``name`` (RK45, DOP853 or RK23); the implicit ones are refused."""
    if isinstance(name, type):
        name = name.__name__
    if name in ("Radau", "BDF", "LSODA"):
        raise NotImplementedError(located(
            f"solve_ivp: method={name!r} is implicit (or switches to an implicit method), which pullback does "
            f"not trace; use method='RK45', 'DOP853' or 'RK23' (explicit: a stiff problem takes many small "
            f"steps)"))
    if name not in _EXPLICIT:
        raise ValueError(located(f"solve_ivp: `method` must be one of {list(_EXPLICIT)} in pullback, got {name!r}"))
    cls = getattr(scipy.integrate, name)
    dop = name == "DOP853"
    return Method(name, np.asarray(cls.C, float), np.asarray(cls.A, float), np.asarray(cls.B, float),
                  None if dop else np.asarray(cls.E, float), None if dop else np.asarray(cls.P, float),
                  cls.order, cls.error_estimator_order, cls.n_stages)


class OdeResult(OptimizeResult):
    """``solve_ivp``'s result, with SciPy's fields: ``t`` (``t_eval``), ``y`` (shape ``(n, len(t_eval))``),
    ``nfev``, ``njev`` and ``nlu`` (0: explicit methods), ``status`` (0, or -1 where a step became too
    small), ``success`` (``status >= 0``), ``message``, and ``sol``, ``t_events``, ``y_events`` (None).
    On traced values ``status``, ``success`` and ``nfev`` are traced too, and ``message`` describes both
    statuses, as which one occurs is known only when the program runs. A traced function may return it
    (a pytree: its arrays are outputs, and the message is SciPy's for the status the program reached)."""


_DATA = ("t", "y", "nfev", "njev", "nlu", "status", "success")


def _message(status) -> str:
    if isinstance(status, Tracer):
        return _MESSAGE
    return ("The solver successfully reached the end of the integration interval." if status == 0 else
            "Required step size is less than spacing between numbers.")


def _result(**fields) -> OdeResult:
    return OdeResult(**fields, sol=None, t_events=None, y_events=None, message=_message(fields["status"]))


tree.register_pytree_node(OdeResult, lambda r: ([r[k] for k in _DATA], None),
                          lambda _, children: _result(**dict(zip(_DATA, children))))


# --- the steps ----------------------------------------------------------------------------------


class State(NamedTuple):
    """The solver between attempts: the current point, the step to try, and the last accepted step
    (``t_old``, ``y_old`` and its stages ``K``: what the interpolant needs)."""

    t: Any
    y: Any
    f: Any
    h_abs: Any
    rejected: Any  # the previous attempt was rejected: this one retries the same step
    failed: Any
    nfev: Any
    accepted: Any  # steps accepted so far
    t_old: Any
    y_old: Any
    K: Any  # (n_stages + 1, n): the stages of the last accepted step, f at its end last
    F: Any  # DOP853: the interpolant's coefficients (7, n) of the step ``F_at``; else unused (0-d)
    F_at: Any


def _min_step(t, direction):
    """SciPy's smallest step, ``10 |nextafter(t, direction * inf) - t|``: ``t`` moved by 0.6 ``eps |t|``
    (between 0.6 and 1.2 spacings of the floating-point numbers there) rounds to its neighbour."""
    return 10 * np.fmax(np.abs((t + _toward(direction, 0.6 * EPS * np.abs(t))) - t), 5e-324)


def _rms(x):
    return np.sqrt(np.sum(x * x) / x.size)


def _initial_step(rhs, t0, y0, t_bound, max_step, f0, direction, order: int, rtol, atol):
    """SciPy's ``select_initial_step`` (Hairer, Norsett and Wanner, II.4), with its derivative stopped: the
    step is the controller's choice."""
    interval = np.abs(t_bound - t0)
    scale = atol + np.abs(y0) * rtol
    d0, d1 = _rms(y0 / scale), _rms(f0 / scale)
    small = (d0 < 1e-5) | (d1 < 1e-5)
    h0 = np.where(small, 1e-6, 0.01 * d0 / np.where(small, 1.0, d1))
    h0 = np.fmin(h0, interval)
    h0_safe = np.where(h0 > 0, h0, 1.0)
    f1 = rhs(t0 + h0 * direction, y0 + h0 * direction * f0)
    d2 = _rms((f1 - f0) / scale) / h0_safe
    flat = (d1 <= 1e-15) & (d2 <= 1e-15)
    h1 = np.where(flat, np.fmax(1e-6, h0 * 1e-3), (0.01 / np.where(flat, 1.0, np.fmax(d1, d2))) ** (1 / (order + 1)))
    h = np.fmin(np.fmin(100 * h0, h1), np.fmin(interval, max_step))
    return stop_gradient(np.where(interval == 0, 0.0, h))


def _rk_step(rhs, m: Method, t, y, f, h):
    """SciPy's ``rk_step``: the stages ``K`` (f at the new point last), the new point and its f."""
    K = [f]
    for s in range(1, m.n_stages):
        K.append(rhs(t + m.C[s] * h, y + _combination(m.A[s, :s], K) * h))
    y_new = y + h * _combination(m.B, K)
    f_new = rhs(t + h, y_new)
    return np.stack(K + [f_new]), y_new, f_new


def _combination(coefficients: np.ndarray, K: list):
    """``sum_j c_j K_j`` over the nonzero coefficients, each a literal of the program: no stack of the
    stages is made (and copied again) for each stage, which costs a state of many components."""
    terms = [float(c) * k for c, k in zip(coefficients, K) if c != 0]
    total = terms[0]
    for term in terms[1:]:
        total = total + term
    return total


def _named(a, name: str):
    """A tableau's array (or the output times), named after its origin where the program reads it
    (``RK45_E``, ``t_eval``, not ``c``); a traced value, or an array the program makes itself
    (``np.linspace(0, 1, 3)``), is left as it is."""
    if tracing() and type(a) is np.ndarray:
        builder = current_builder()
        made = builder.made.get(id(a))
        if made is None or made[0]() is not a:
            builder.const_names.setdefault(id(a), name)
    return a


def _error_norm(m: Method, K, h, scale):
    if not m.dop853:
        return _rms((_named(m.E, f"{m.name}_E") @ K) * h / scale)
    err5 = (_named(scipy.integrate.DOP853.E5, "DOP853_E5") @ K) / scale
    err3 = (_named(scipy.integrate.DOP853.E3, "DOP853_E3") @ K) / scale
    e5, e3 = np.sum(err5 * err5), np.sum(err3 * err3)
    denom = e5 + 0.01 * e3
    zero = denom == 0
    return np.where(zero, 0.0, np.abs(h) * e5 / np.sqrt(np.where(zero, 1.0, denom) * scale.size))


def _toward(direction, x):
    """``direction * x``, without the product where the direction is known to be forwards or backwards."""
    if isinstance(direction, float):
        return x if direction > 0 else -x
    return direction * x


def _attempt(rhs, m: Method, s: State, t_bound, direction, rtol, atol, max_step) -> State:
    """One iteration of SciPy's ``_step_impl``: a step of ``h_abs`` (clipped to ``[min_step, max_step]``
    when it is a new step, not a retry, and to the end of the interval), accepted or retried smaller.
    Only the next step size has its derivative stopped: the tangents of the error estimate reach
    nothing else, and are dropped from the derivative programs."""
    min_step = _min_step(s.t, direction)
    clipped = np.where(s.h_abs < min_step, min_step, s.h_abs)
    if max_step != np.inf:
        clipped = np.where(s.h_abs > max_step, max_step, clipped)
    h_abs = np.where(s.rejected, s.h_abs, clipped)
    too_small = h_abs < min_step
    t_new = s.t + _toward(direction, h_abs)
    t_new = np.where(_toward(direction, t_new - t_bound) > 0, t_bound, t_new)
    h = t_new - s.t
    K, y_new, f_new = _rk_step(rhs, m, s.t, s.y, s.f, h)

    scale = atol + np.maximum(np.abs(s.y), np.abs(y_new)) * rtol
    err = _error_norm(m, K, h, scale)
    accept = ~too_small & (err < 1)
    exponent = -1 / (m.error_order + 1)
    power = SAFETY * np.where(err == 0, 1.0, err) ** exponent  # nan (a step that overflowed) shrinks by 5
    grow = np.where(err == 0, MAX_FACTOR, np.fmin(MAX_FACTOR, power))
    grow = np.where(s.rejected, np.fmin(1.0, grow), grow)
    h_next = stop_gradient(np.where(too_small, h_abs, np.abs(h) * np.where(accept, grow, np.fmax(MIN_FACTOR, power))))

    def pick(new, old):
        return np.where(accept, new, old)

    return State(t=pick(t_new, s.t), y=pick(y_new, s.y), f=pick(f_new, s.f), h_abs=h_next,
                 rejected=~accept & ~too_small, failed=too_small, nfev=s.nfev + np.where(too_small, 0, m.n_stages),
                 accepted=s.accepted + np.where(accept, 1, 0), t_old=pick(s.t, s.t_old), y_old=pick(s.y, s.y_old),
                 K=pick(K, s.K), F=s.F, F_at=s.F_at)


def _dop853_coefficients(rhs, s: State):
    """DOP853's interpolant over the last step: three more stages, then SciPy's ``F`` (7, n)."""
    h = s.t - s.t_old
    K = s.K
    for i, (a, c) in enumerate(zip(scipy.integrate.DOP853.A_EXTRA, scipy.integrate.DOP853.C_EXTRA)):
        dy = (_named(a[:K.shape[0]], f"DOP853_A_EXTRA_{i}") @ K) * h
        K = np.concatenate([K, rhs(s.t_old + c * h, s.y_old + dy)[None]])
    f_old = K[0]
    delta_y = s.y - s.y_old
    rest = h * (_named(scipy.integrate.DOP853.D, "DOP853_D") @ K)
    return np.concatenate([np.stack([delta_y, h * f_old - delta_y, 2 * delta_y - h * (s.f + f_old)]), rest])


def _interpolate(m: Method, s: State, te):
    """The last step's dense output at ``te`` (SciPy's ``RkDenseOutput``/``Dop853DenseOutput``); the
    current point where no step was taken (``t_span`` of length 0)."""
    h = s.t - s.t_old
    x = (te - s.t_old) / np.where(h == 0, 1.0, h)
    if m.dop853:
        y, k = 0.0, s.F.shape[0]
        for i in range(k):  # Horner's scheme in x and 1 - x, from the last coefficient
            y = (y + s.F[k - 1 - i]) * (x if i % 2 == 0 else 1 - x)
        y = y + s.y_old
    else:
        Q = s.K.T @ _named(m.P, f"{m.name}_P")
        p = [x]
        for _ in range(m.P.shape[1] - 1):
            p.append(p[-1] * x)
        y = h * (Q @ np.stack(p)) + s.y_old
    return np.where(s.accepted == 0, s.y, y)


def integrate(rhs: Callable, t0, t_bound, y0, t_eval, m: Method, rtol, atol, max_step=np.inf, first_step=None):
    """The solution at each ``t_eval`` (shape ``(len(t_eval), n)``), ``nfev`` and ``status`` of SciPy's
    ``solve_ivp(rhs, (t0, t_bound), y0, method=m, t_eval=t_eval)``, ``rhs(t, y)`` returning an array
    shaped like ``y``."""
    concrete = not isinstance(t0, Tracer) and not isinstance(t_bound, Tracer)
    if concrete:
        direction = float(np.sign(t_bound - t0)) if t_bound != t0 else 1.0
    else:
        direction = stop_gradient(np.where(t_bound == t0, 1.0, np.sign(t_bound - t0)))
    f0 = rhs(t0, y0)
    n = y0.shape[0]
    if first_step is None:
        h_abs = _initial_step(rhs, t0, y0, t_bound, max_step, f0, direction, m.error_order, rtol, atol)
        nfev = np.where(t_bound == t0, 1, 2)  # SciPy evaluates f once more, but for an interval of length 0
    else:
        h_abs, nfev = np.float64(first_step), 1
    t0 = t0 if isinstance(t0, Tracer) else np.float64(t0)
    zeros = np.zeros((m.n_stages + 1, n))
    F = np.zeros((scipy.integrate.DOP853.D.shape[0] + 3, n)) if m.dop853 else np.float64(0.0)
    state = State(t=t0, y=y0, f=f0, h_abs=h_abs if isinstance(h_abs, Tracer) else np.float64(h_abs),
                  rejected=np.bool_(False), failed=np.bool_(False),
                  nfev=nfev if isinstance(nfev, Tracer) else np.asarray(nfev, np.int64), accepted=np.int64(0),
                  t_old=t0, y_old=y0, K=zeros, F=F, F_at=np.int64(0))

    def attempt(s):
        return _attempt(rhs, m, s, t_bound, direction, rtol, atol, max_step)

    def output(s, te):
        # step until the step that reaches te (the first step in any case, as SciPy interpolates in it at t0)
        def more(s):
            return ~s.failed & (s.t != t_bound) & ((_toward(direction, s.t - te) < 0) | (s.accepted == 0))

        s = while_loop(more, attempt, s)
        if m.dop853:  # the interpolant of a step is made once, for its first output (3 evaluations)
            def fresh(s):
                return s._replace(F=_dop853_coefficients(rhs, s), F_at=s.accepted, nfev=s.nfev + 3)

            s = cond((s.F_at != s.accepted) & (s.accepted > 0), fresh, lambda s: s, s)
        y = _interpolate(m, s, te)
        unreached = s.failed & (_toward(direction, s.t - te) < 0)  # a step became too small before te
        return s, np.where(unreached, np.nan, y)

    state, ys = scan(output, state, _named(t_eval, "t_eval"))
    state = while_loop(lambda s: ~s.failed & (s.t != t_bound), attempt, state)  # on to t_span[1], as SciPy
    return ys, state.nfev, np.where(state.failed, -1, 0)


# --- the adjoint method ------------------------------------------------------------------------


def _closure_converted(rhs: Callable, n: int) -> tuple[Callable, list]:
    """``rhs(t, y)`` as ``rhs_c(t, y, caps)`` and the traced values it reads from enclosing traces (``args``,
    closures), which ``custom_vjp`` needs as arguments (JAX's ``closure_convert``)."""
    from pullback.ir.tracer import inline, trace_closed

    program, captures, _ = trace_closed(lambda t, y: rhs(t, y), [np.float64(0.0), np.zeros(n)], name="fun")

    def rhs_c(t, y, caps):
        return inline(program, [*caps, t, y])[0]

    return rhs_c, list(captures)


def _adjoint_solve(rhs: Callable, t0, t_bound, y0, t_eval, m: Method, rtol, atol, max_step, first_step):
    """``integrate``'s outputs, with reverse mode by the adjoint ODE: ``custom_vjp`` over the solve."""
    n = y0.shape[0]
    rhs_c, caps = _closure_converted(rhs, n)
    diff = [i for i, c in enumerate(caps) if np.dtype(c.dtype).kind == "f"]

    def forward(y0, t0, t_bound, t_eval, caps):
        ys, nfev, status = integrate(lambda t, y: rhs_c(t, y, caps), t0, t_bound, y0, t_eval, m, rtol, atol,
                                     max_step, first_step)
        return ys, np.stack([nfev, status]).astype(np.float64)  # counts as floats: no cotangent is read

    solve = custom_vjp(forward)

    def fwd(y0, t0, t_bound, t_eval, caps):
        ys, counts = forward(y0, t0, t_bound, t_eval, caps)
        return (ys, counts), (ys, y0, t0, t_eval, caps)

    def bwd(res, cts):
        ys, y0, t0, t_eval, caps = res
        g = cts[0]
        sizes = [int(np.prod(caps[i].shape)) for i in diff]
        p = sum(sizes)

        def f(t, y):
            return rhs_c(t, y, caps)

        def aug(t, z):
            """The state, its adjoint a and the parameters' cotangent, backwards in time: dy/dt = f,
            da/dt = -a df/dy, d theta_bar/dt = -a df/dtheta."""
            def at(y, *theta):
                c = list(caps)
                for i, v in zip(diff, theta):
                    c[i] = v
                return rhs_c(t, y, c)

            from pullback.api.transforms import vjp

            fy, vjp_fn = vjp(at, z[:n], *(caps[i] for i in diff))
            bars = vjp_fn(-z[n:2 * n])  # linear in a: the minus signs on the way in, once
            bars = bars if isinstance(bars, tuple) else (bars,)
            return np.concatenate([fy, bars[0], *(np.ravel(b).astype(np.float64) for b in bars[1:])])

        atol_aug = atol if np.ndim(atol) == 0 else np.concatenate([atol, atol, np.full(p, np.min(atol))])

        def interval(carry, x):
            a, theta = carry
            te, t_prev, y, g_k = x
            a = a + g_k
            te_bar = np.sum(g_k * f(te, y))  # moving an output time moves its output along f
            z0 = np.concatenate([y, a, theta])
            zs, _, _ = integrate(aug, te, t_prev, z0, t_prev[None], m, rtol, atol_aug, max_step, None)
            return (zs[0, n:2 * n], zs[0, 2 * n:]), te_bar

        starts = np.concatenate([t0[None], t_eval[:-1]])
        (a, theta), te_bar = scan(interval, (np.zeros(n), np.zeros(p)), (t_eval, starts, ys, g), reverse=True)
        t0_bar = -np.sum(a * f(t0, y0))  # the trajectory starts later: every output moves back along it
        caps_bar: list = [None] * len(caps)
        offset = 0
        for i, size in zip(diff, sizes):
            caps_bar[i] = np.reshape(theta[offset:offset + size], caps[i].shape).astype(caps[i].dtype)
            offset += size
        return a, t0_bar, None, te_bar, tuple(np.zeros(np.shape(c)) if b is None else b
                                               for c, b in zip(caps, caps_bar))

    solve.defvjp(fwd, bwd)
    ys, counts = solve(y0, t0, t_bound, t_eval, tuple(caps))
    return ys, counts[0].astype(np.int64), counts[1].astype(np.int64)


# --- SciPy's functions ------------------------------------------------------------------------


def _f64(x):
    """A time as a float64 value: a tracer cast, anything else a NumPy float64."""
    if isinstance(x, Tracer):
        if np.dtype(x.dtype).kind == "c":
            raise TracingError(located("solve_ivp: times must be real"))
        return x.astype(np.float64) if x.dtype != np.float64 else x
    return np.float64(x)


def _state_array(x, what: str):
    from pullback.frontend.construct import array

    x = array(x) if isinstance(x, list | tuple) else x if isinstance(x, Tracer) else np.asarray(x)
    if np.dtype(x.dtype).kind == "c":
        raise TracingError(located(f"{what}: complex states are not supported by pullback; integrate the real and "
                                   "imaginary parts as one real state of twice the size"))
    return x.astype(np.float64) if x.dtype != np.float64 else x


def _rhs(fun: Callable, args: tuple, y_shape: tuple, what: str) -> Callable:
    """``fun`` called with ``args``, its result made an array of ``y``'s shape and dtype (SciPy's wrapper
    converts it with ``np.asarray(..., dtype)``; a scalar fills every component, as SciPy's stages do)."""
    def rhs(t, y):
        out = _state_array(call_user(fun, t, y, *args), what)
        if out.shape != y_shape:
            if out.shape not in ((), (1,)):
                raise ValueError(located(f"{what}: the right-hand side returned shape {tuple(out.shape)}, but the "
                                         f"state has shape {y_shape}"))
            out = np.broadcast_to(out, y_shape)
        return out

    return rhs


def _tolerances(rtol, atol, n: int):
    """SciPy's ``validate_tol``: ``rtol`` raised to ``100 eps`` with a warning, ``atol`` a scalar or (n,)."""
    if np.any(np.asarray(rtol) < 100 * EPS):
        warnings.warn(f"At least one element of `rtol` is too small. Setting `rtol = np.maximum(rtol, {100 * EPS})`.",
                      stacklevel=4)
        rtol = np.maximum(rtol, 100 * EPS)
    atol = np.asarray(atol, float)
    if atol.ndim > 0 and atol.shape != (n,):
        raise ValueError(located("`atol` has wrong shape."))
    if np.any(atol < 0):
        raise ValueError(located("`atol` must be positive."))
    return np.float64(rtol) if np.ndim(rtol) == 0 else np.asarray(rtol, float), atol[()] if atol.ndim == 0 else atol


def _check_t_eval(t_eval, t0, t_bound, strict: bool, what: str) -> None:
    """SciPy's checks of the output times, where they are known when tracing."""
    if any(isinstance(v, Tracer) for v in (t_eval, t0, t_bound)):
        return
    if np.any(t_eval < min(t0, t_bound)) or np.any(t_eval > max(t0, t_bound)):
        raise ValueError(located(f"{what}: values in `t_eval` are not within `t_span`."))
    d = np.diff(t_eval)
    if strict and (t_bound > t0 and np.any(d <= 0) or t_bound < t0 and np.any(d >= 0)) or \
            not strict and (t_bound > t0 and np.any(d < 0) or t_bound < t0 and np.any(d > 0)):
        raise ValueError(located(f"{what}: values in `t_eval` are not properly sorted."))


def _solve(fun, args, t0, t_bound, y0, t_eval, m: Method, rtol, atol, max_step, first_step, adjoint: bool,
           what: str):
    if np.ndim(y0) != 1:
        raise ValueError(located(f"{what}: `y0` must be 1-dimensional."))
    if np.ndim(t_eval) != 1:
        raise ValueError(located(f"{what}: `t_eval` must be 1-dimensional."))
    n = y0.shape[0]
    rtol, atol = _tolerances(rtol, atol, n)
    max_step = np.inf if max_step is None else float(max_step)
    if max_step <= 0:
        raise ValueError(located("`max_step` must be positive."))
    if first_step is not None:
        first_step = float(first_step)
        if first_step <= 0:
            raise ValueError(located("`first_step` must be positive."))
        if not isinstance(t0, Tracer) and not isinstance(t_bound, Tracer) and first_step > abs(t_bound - t0):
            raise ValueError(located("`first_step` exceeds bounds."))
    rhs = _rhs(fun, args, tuple(y0.shape), what)
    if adjoint and tracing():
        return _adjoint_solve(rhs, t0, t_bound, y0, t_eval, m, rtol, atol, max_step, first_step)
    return integrate(rhs, t0, t_bound, y0, t_eval, m, rtol, atol, max_step, first_step)


def solve_ivp(fun: Callable, t_span: Sequence, y0: Any, method: str = "RK45", t_eval: Any = None,
              dense_output: bool = False, events: Any = None, vectorized: bool = False, args: tuple | None = None,
              *, adjoint: bool = False, **options) -> OdeResult:
    """SciPy's ``solve_ivp`` for the explicit methods ``RK45``, ``DOP853`` and ``RK23``, tracing and
    differentiable in ``y0``, in the values ``fun`` reads (``args`` and closures) and in the times
    (``t_span``, ``t_eval``). ``t_eval`` is required (a program returns arrays of fixed shapes); the
    values are SciPy's, steps and interpolation included. Options: ``rtol``, ``atol``, ``max_step``,
    ``first_step``. ``adjoint=True`` (pullback's) takes reverse-mode derivatives by the adjoint ODE,
    solved backwards, instead of through the loop: memory independent of the number of steps.

    >>> def decay(t, y, k):
    ...     return -k * y
    >>> def final(k):
    ...     sol = pb.integrate.solve_ivp(decay, (0.0, 1.0), [1.0], t_eval=[1.0], args=(k,), rtol=1e-10, atol=1e-12)
    ...     return sol.y[0, -1]
    >>> round(float(final(2.0)), 8), round(float(pb.grad(final)(2.0)), 8)  # exp(-k), -exp(-k)
    (0.13533528, -0.13533528)
    """
    what = "solve_ivp"
    if dense_output:
        raise NotImplementedError(located(
            f"{what}: dense_output=True is not supported by pullback (the interpolants of a run are not one traced "
            "value); give the times you need as t_eval"))
    if events is not None:
        raise NotImplementedError(located(
            f"{what}: events are not supported by pullback (how many occur depends on the values); find the time "
            "with a root finder on the solution at t_eval, or make it an output time"))
    m = method if isinstance(method, Method) else tableau(method)
    if t_eval is None:
        raise TracingError(located(
            f"{what}: pullback needs t_eval, the times at which to return the solution (SciPy returns every step "
            "it took, whose number depends on the values): pass t_eval=[t_span[1]] for the end point, or "
            "np.linspace(*t_span, num)"))
    if args is not None:
        try:
            args = tuple(args)
        except TypeError:
            raise TypeError("Supplied 'args' cannot be unpacked. Please supply `args` as a tuple "
                            f"(e.g. `args=({args},)`)") from None
    else:
        args = ()
    known = {"rtol", "atol", "max_step", "first_step"}
    extra = sorted(set(options) - known)
    if extra:
        warnings.warn("The following arguments have no effect for a chosen solver: "
                      + ", ".join(f"`{x}`" for x in extra) + ".", stacklevel=2)
    t0, t_bound = (_f64(t) for t in t_span)
    y0 = _state_array(y0, what)
    t_eval = _times(t_eval, what)
    _check_t_eval(t_eval, t0, t_bound, True, what)
    ys, nfev, status = _solve(fun, args, t0, t_bound, y0, t_eval, m, options.get("rtol", 1e-3),
                              options.get("atol", 1e-6), options.get("max_step", np.inf), options.get("first_step"),
                              adjoint, what)
    return _result(t=t_eval, y=ys.T, nfev=nfev, njev=0, nlu=0, status=status, success=status >= 0)


def _traced(x) -> bool:
    return isinstance(x, Tracer) or isinstance(x, list | tuple) and any(map(_traced, x))


def _times(t, what: str):
    """Output times as a float64 array, traced where any of them is."""
    if isinstance(t, Tracer):
        return _f64(t)
    return _state_array(t, what) if isinstance(t, list | tuple) and _traced(t) else np.asarray(t, float)


def odeint(func: Callable, y0: Any, t: Any, args: tuple = (), Dfun: Callable | None = None, col_deriv: int = 0,
           full_output: int = 0, ml: int | None = None, mu: int | None = None, rtol: float | None = None,
           atol: float | None = None, tcrit: Any = None, h0: float = 0.0, hmax: float = 0.0, hmin: float = 0.0,
           ixpr: int = 0, mxstep: int = 0, mxhnil: int = 0, mxordn: int = 12, mxords: int = 5, printmessg: int = 0,
           tfirst: bool = False, *, method: str = "RK45", adjoint: bool = False):
    """SciPy's ``odeint`` (``func(y, t, *args)``, or ``func(t, y, *args)`` with ``tfirst``), returning the
    solution at each of ``t`` (shape ``(len(t), n)``; ``t[0]`` is the initial time), with SciPy's default
    tolerances (1.49012e-8). SciPy's ``odeint`` is LSODA, which switches to an implicit method on stiff
    problems; pullback's steps with Dormand-Prince (``method='RK45'``, as ``jax.experimental.ode.odeint``
    does), so values agree with SciPy's to the tolerance, not to rounding. LSODA's own options (``Dfun``,
    ``ml``, ``mu``, ``hmin``, ``mxstep``, ...) are accepted and have no effect; ``h0`` and ``hmax`` are the first
    and the largest step. ``adjoint=True``: reverse mode by the adjoint ODE, as ``jax.experimental.ode``.

    >>> def decay(y, t, k):
    ...     return -k * y
    >>> pb.integrate.odeint(decay, [1.0], [0.0, 1.0], args=(2.0,))[:, 0].round(7).tolist()  # exp(-2)
    [1.0, 0.1353353]
    """
    what = "odeint"
    if full_output:
        raise NotImplementedError(located(
            f"{what}: full_output=True (LSODA's diagnostics) is not available from pullback's odeint, which steps "
            "with Dormand-Prince; call solve_ivp and read .nfev and .status"))
    m = method if isinstance(method, Method) else tableau(method)
    y0 = _state_array(y0, what)
    y0 = y0.reshape(1) if y0.ndim == 0 else y0
    t = _times(t, what)
    if np.ndim(t) != 1 or t.shape[0] == 0:
        raise ValueError(located(f"{what}: t must be a 1-d sequence of times, the first the initial time"))
    t0, t_bound = t[0], t[-1]
    _check_t_eval(t, t0, t_bound, False, what)

    def fun(time, y, *a):
        return call_user(func, time, y, *a) if tfirst else call_user(func, y, time, *a)

    rtol = 1.49012e-8 if rtol is None else rtol
    atol = 1.49012e-8 if atol is None else atol
    ys, _, _ = _solve(fun, tuple(args), t0, t_bound, y0, t, m, rtol, atol, hmax or np.inf, h0 or None, adjoint,
                      what)
    return ys
