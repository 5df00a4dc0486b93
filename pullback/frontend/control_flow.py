"""Python's ``if``, ``while``, ``for i in range(n)`` and ``a if c else b`` in converted code
(``convert``): Python's own where the condition is a value known when tracing, pullback's
``cond``, ``while_loop`` and ``fori_loop`` where it is traced, so the printed program shows the
user's ``if`` and ``while`` again.

The converter turns a statement into functions of the enclosing function's variables (its blocks
run as nested functions that assign those variables with ``nonlocal``) and passes them here with a
getter and a setter of the variables the statement assigns. Where the condition is traced, each
block is traced as a function of those variables' values before the statement, and the
statement's results are set back. A variable one branch defines and the other does not cannot
be a traced branch's result: that is an error naming the variable, as AutoGraph does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from pullback.errors import ConcretizationError, TracingError
from pullback.ir.tracer import Tracer, located


class _Undefined:
    """The value of a variable not yet assigned (a getter's answer, a setter's cue to unbind it)."""

    def __repr__(self) -> str:
        return "<undefined>"


UNDEFINED = _Undefined()


def refuse(test, construct: str):
    """The test of an ``if`` or ``while`` the converter left as written (``construct`` says why): a
    traced one is refused, naming it."""
    if _traced(test):
        raise ConcretizationError(located(
            f"bool() of a traced value {test.ssa.type} in {construct}: Python control flow on a traced value is "
            f"converted to pb.cond and pb.while_loop, but not there; put the break or return at the end of "
            f"every branch, use np.where for elementwise choices, or pb.while_loop with a flag in its carry"))
    return test


def until_break(broken, test: Callable):
    """A loop's test once a ``break`` is a flag (``convert``): ``not broken and test()``, traced or not."""
    if not _traced(broken):
        return False if broken else test()
    return np.logical_and(np.logical_not(broken), test())  # a tracer's: NumPy's ufuncs reach pullback


def neither(broken, continued):
    """``not broken and not continued``: whether the rest of a loop's step runs (``convert``)."""
    if not _traced(broken) and not _traced(continued):
        return not broken and not continued
    return np.logical_not(np.logical_or(broken, continued))


def load(read: Callable):
    """``read()``, a variable's value, or ``UNDEFINED`` where it has none yet."""
    try:
        return read()
    except NameError:
        return UNDEFINED


def _traced(value) -> bool:
    return isinstance(value, Tracer)


def _defined(names: Sequence[str], values: tuple, what: str) -> None:
    missing = [n for n, v in zip(names, values) if v is UNDEFINED]
    if missing:
        raise TracingError(located(
            f"{what} on a traced condition: {', '.join(missing)} must be defined before it, or in every branch "
            f"(the program computes each variable on every path)"))


def _kept(names: Sequence[str], carried: list[int], before: tuple, after: tuple, what: str) -> tuple:
    """The carried variables after a step, which must keep their shapes and dtypes."""
    for k in carried:
        b, a = before[k], after[k]
        if a is UNDEFINED:
            raise TracingError(located(f"{what} on a traced condition: the body deletes {names[k]}"))
        if np.shape(a) != np.shape(b) or np.result_type(a) != np.result_type(b):
            raise TracingError(located(
                f"{what} on a traced condition: {names[k]} changes from {np.result_type(b)}{list(np.shape(b))} to "
                f"{np.result_type(a)}{list(np.shape(a))} in the loop; give it its final shape and dtype before the "
                f"loop (np.zeros_like(...))"))
    return tuple(after[k] for k in carried)


def if_stmt(test, then: Callable, orelse: Callable, get: Callable, put: Callable, names: Sequence[str]) -> None:
    """``if test: then() else: orelse()``, the blocks assigning the variables ``names``."""
    if not _traced(test):
        (then if test else orelse)()
        return
    from pullback.frontend import loops

    before = get()

    def branch(block: Callable) -> Callable:
        def run():
            put(before)
            block()
            after = get()
            _defined(names, after, "an if statement")
            return after

        return run

    put(loops.cond(test, branch(then), branch(orelse)))


def if_return(test, then: Callable, orelse: Callable, get: Callable, put: Callable, names: Sequence[str]):
    """``return then() if test else orelse()``: an ``if`` whose every path returns, its blocks assigning
    the variables ``names`` on the way."""
    if not _traced(test):
        return then() if test else orelse()
    from pullback.frontend import loops

    before = get()

    def branch(block: Callable) -> Callable:
        def run():
            put(before)
            return block()

        return run

    return loops.cond(test, branch(then), branch(orelse))


def ifexp(test, then: Callable, orelse: Callable):
    """``then() if test else orelse()``."""
    if not _traced(test):
        return then() if test else orelse()
    from pullback.frontend import loops

    return loops.cond(test, then, orelse)


def while_stmt(test: Callable, body: Callable, get: Callable, put: Callable, names: Sequence[str]) -> None:
    """``while test(): body()``, the body assigning the variables ``names``. The loop's carry is those
    defined before it, by name (the printed loop's variables are the user's); the others are the
    body's own temporaries."""
    condition = test()
    while not _traced(condition):  # Python's loop, for as long as the condition is known
        if not condition:
            return
        body()
        condition = test()
    from pullback.frontend import loops

    init = get()
    carried = [i for i, v in enumerate(init) if v is not UNDEFINED]

    def state(values: dict) -> tuple:
        full = [UNDEFINED] * len(init)
        for i in carried:
            full[i] = values[names[i]]
        return tuple(full)

    def cond_fun(values):
        put(state(values))
        return test()

    def body_fun(values):
        put(state(values))
        body()
        kept = _kept(names, carried, state(values), get(), "a while loop")
        return {names[i]: v for i, v in zip(carried, kept)}

    out = loops.traced_while(cond_fun, body_fun, {names[i]: init[i] for i in carried}, names=[""])
    put(state(out))


def for_range(bounds: tuple, body: Callable, get: Callable, put: Callable, names: Sequence[str]) -> None:
    """``for i in range(*bounds): body(i)``; a traced bound makes it a ``while_loop`` over ``i``."""
    if not any(map(_traced, bounds)):
        for i in range(*bounds):
            body(i)
        return
    if len(bounds) == 3:
        raise TracingError(located("for ... in range(start, stop, step) with a traced bound: use a step of 1"))
    from pullback.frontend import loops
    from pullback.frontend import numpy as api

    lower, upper = (0, bounds[0]) if len(bounds) == 1 else bounds
    init = get()
    carried = [i for i, v in enumerate(init) if v is not UNDEFINED]

    def state(values) -> tuple:
        full = [UNDEFINED] * len(init)
        for k, v in zip(carried, values):
            full[k] = v
        return tuple(full)

    def step(carry):
        i, values = carry
        put(state(values))
        body(i)
        return api.add(i, 1), _kept(names, carried, state(values), get(), "a for loop")

    start = api.astype(api._lift(lower), np.int64) if _traced(lower) else np.int64(lower)
    _, out = loops.while_loop(lambda carry: api.less(carry[0], upper), step, (start, tuple(init[k] for k in carried)))
    put(state(out))
