"""``scipy.integrate.solve_ivp`` and ``odeint`` by their SciPy names in traced code: SciPy's solvers
call ``np.asarray`` on the state, so while a trace runs these names stand for ``pullback.integrate``'s
(``construct.implements_attribute``), with SciPy's signatures. They are taken whenever a trace runs,
not only when an argument is traced: the right-hand side may read traced values through its closure
alone."""

from __future__ import annotations

import scipy.integrate

from pullback.frontend.construct import implements_attribute


@implements_attribute(scipy.integrate, "solve_ivp", "scipy.integrate.solve_ivp")
def solve_ivp(fun, t_span, y0, method="RK45", t_eval=None, dense_output=False, events=None, vectorized=False,
              args=None, **options):
    from pullback.frontend import integrate

    return integrate.solve_ivp(fun, t_span, y0, method, t_eval, dense_output, events, vectorized, args, **options)


@implements_attribute(scipy.integrate, "odeint", "scipy.integrate.odeint")
def odeint(func, y0, t, *rest, **options):
    from pullback.frontend import integrate

    return integrate.odeint(func, y0, t, *rest, **options)


for _impl in (solve_ivp, odeint):
    _impl.takes_tuples = True  # type: ignore[attr-defined]  # ``args`` is a tuple of arguments, not an array
    _impl.whenever_tracing = True  # type: ignore[attr-defined]
