"""Caches that cannot go stale: a compiled program is used again only while its function reads
the very objects it read when it was traced (kept alive by the cache, compared with ``is``);
the function forms' cache is keyed on functions' identities and does not keep them alive."""

import functools
import gc
import os
import weakref

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pullback as pb
from pullback.api import cache
from pullback.api import transforms as api
from tests.sample import full

X = np.array([0.5, -1.0, 2.0])
LAM = 1.0
ARR = np.array([1.0, 2.0, 3.0])


def scaled(x):
    return LAM * np.sum(x ** 2)


def programs(f) -> int:
    """How many programs the function forms hold for ``f``."""
    return len(api.held(f)._stages)


def test_a_global_float_rebound_in_a_loop_is_seen():
    """The issue's loop: the freed float's address is reused by the next one, which an ``id``
    comparison took for the same object (48 of 50 gradients used the first value)."""
    global LAM
    saved, held = LAM, pb.differentiate(scaled)
    try:
        for _ in range(50):
            LAM *= 0.9
            LAM = round(LAM, 8)
            np.testing.assert_allclose(pb.grad(scaled)(X), 2 * LAM * X, rtol=1e-15)
            np.testing.assert_allclose(held.grad(X), 2 * LAM * X, rtol=1e-15)
    finally:
        LAM = saved


def test_a_closure_cell_reset_to_none_and_to_a_new_value_is_seen():
    lam = 1.0

    def f(x):
        return lam * np.sum(x ** 2)

    jitted = pb.jit(f)
    for _ in range(20):
        value = round(lam * 0.9, 8)
        lam = None
        gc.collect()
        lam = value
        np.testing.assert_allclose(pb.grad(f)(X), 2 * lam * X, rtol=1e-15)
        np.testing.assert_allclose(jitted(X), lam * np.sum(X ** 2), rtol=1e-15)


def test_a_held_object_is_not_traced_again_while_nothing_changes():
    jitted = pb.jit(scaled)
    jitted(X)
    runners = dict(jitted._runners)
    for _ in range(3):
        jitted(X)
    assert jitted._runners == runners and len(jitted._stages) == 1


def in_generator(x):
    return sum(LAM * x[i] for i in range(3))


def in_comprehension(x):
    return np.sum(np.stack([LAM * t for t in (x, x)]))


def in_lambda(x):
    return np.sum((lambda t: LAM * t)(x))


@pytest.mark.parametrize("f, n", [(in_generator, 1), (in_comprehension, 2), (in_lambda, 1)])
def test_globals_read_only_in_comprehensions_generators_and_nested_lambdas_are_seen(f, n):
    """Names of the code objects nested in the function's (in ``co_consts``) are checked too."""
    global LAM
    saved = LAM
    try:
        for value in (2.0, 5.0):
            LAM = value
            np.testing.assert_allclose(pb.grad(f)(X), np.full(3, value * n))
    finally:
        LAM = saved


def test_a_partial_is_checked_through_its_function_arguments_and_keywords():
    global LAM

    def f(x, a, scale=1.0):
        return scale * a * LAM * np.sum(x ** 2)

    p = functools.partial(f, a=2.0, scale=3.0)
    held = pb.jit(p)
    np.testing.assert_allclose(pb.grad(p)(X), 12 * LAM * X)
    p.keywords["scale"] = 5.0  # the partial's own dict, changed in place
    np.testing.assert_allclose(pb.grad(p)(X), 20 * LAM * X)
    np.testing.assert_allclose(held(X), 10 * LAM * np.sum(X ** 2))
    saved = LAM
    try:
        LAM = 7.0  # read by the partial's function
        np.testing.assert_allclose(pb.grad(p)(X), 140 * X)
        np.testing.assert_allclose(held(X), 70 * np.sum(X ** 2))
    finally:
        LAM = saved


class Loss:
    def __init__(self, lam):
        self.lam = lam

    def __call__(self, x):
        return self.lam * LAM * np.sum(x ** 2)

    def loss(self, x):
        return self.lam * np.sum(ARR * x ** 2)


def test_a_callable_object_and_a_bound_method_are_checked_through_the_instance():
    global LAM
    obj = Loss(2.0)
    np.testing.assert_allclose(pb.grad(obj)(X), 4 * LAM * X)
    np.testing.assert_allclose(pb.grad(obj.loss)(X), 4 * ARR * X)
    obj.lam = 3.0
    np.testing.assert_allclose(pb.grad(obj)(X), 6 * LAM * X)
    np.testing.assert_allclose(pb.grad(obj.loss)(X), 6 * ARR * X)
    saved = LAM
    try:
        LAM = 0.5  # read by the type's __call__
        np.testing.assert_allclose(pb.grad(obj)(X), 3 * X)
    finally:
        LAM = saved
    for _ in range(3):  # ``obj.loss`` is a new bound method each time: known by its function and instance
        pb.grad(obj.loss)(X)
    assert programs(obj.loss) == 2  # the primal and the gradient, traced once


def test_a_wrapper_is_checked_through_what_it_wraps():
    """``functools.wraps`` sets ``__wrapped__``: the wrapped function's globals are read too."""
    global LAM

    def logged(fn):
        @functools.wraps(fn)
        def wrapper(*args):
            return fn(*args)
        return wrapper

    f = logged(scaled)
    saved = LAM
    try:
        for value in (2.0, 3.0):
            LAM = value
            np.testing.assert_allclose(pb.grad(f)(X), 2 * value * X)
    finally:
        LAM = saved


def test_defaults_and_keyword_defaults_are_checked():
    def f(x, a=2.0, *, b=3.0):
        return a * b * np.sum(x ** 2)

    np.testing.assert_allclose(pb.grad(f)(X), 12 * X)
    f.__kwdefaults__["b"] = 5.0  # in place
    np.testing.assert_allclose(pb.grad(f)(X), 20 * X)
    f.__defaults__ = (1.0,)
    np.testing.assert_allclose(pb.grad(f)(X), 10 * X)


def test_a_rebound_array_is_a_new_program_input():
    global ARR

    def f(x):
        return np.sum(ARR * x ** 2)

    jitted = pb.jit(f)
    saved = ARR
    try:
        for k in range(3):
            ARR = np.full(3, float(k))
            np.testing.assert_allclose(pb.grad(f)(X), 2 * ARR * X)
            np.testing.assert_allclose(jitted(X), np.sum(ARR * X ** 2))
    finally:
        ARR = saved


class Equal:
    """Two of these compare equal (and hash alike) whatever their weights."""

    def __init__(self, w):
        self.w = w

    def __eq__(self, other):
        return isinstance(other, Equal)

    def __hash__(self):
        return 0

    def weights(self):
        return self.w

    def __call__(self, x):
        return np.sum(self.weights() * x)  # ``self.w`` read through another method: not checked


def test_callables_that_compare_equal_have_programs_of_their_own():
    a, b = Equal(np.full(3, 1.0)), Equal(np.full(3, 5.0))
    np.testing.assert_allclose(pb.grad(a)(X), a.w)
    np.testing.assert_allclose(pb.grad(b)(X), b.w)
    assert api.held(a)._programs is not api.held(b)._programs


def test_the_hessian_vector_product_form_compiles_once_and_sees_the_inner_function_change():
    global LAM
    f = lambda x: LAM * np.sum(x ** 3)  # noqa: E731
    v = np.ones(3)
    for _ in range(3):
        np.testing.assert_allclose(pb.jvp(pb.grad(f), (X,), (v,))[1], 6 * LAM * X)
    assert programs(pb.grad(f)) == 2  # the primal (the gradient) and its JVP
    saved = LAM
    try:
        LAM = 4.0
        np.testing.assert_allclose(pb.jvp(pb.grad(f), (X,), (v,))[1], 24 * X)
    finally:
        LAM = saved


def test_vmap_sees_a_rebound_scalar():
    c = 2.0
    mapped = pb.vmap(lambda x: c * np.sum(x))
    rows = np.arange(6.0).reshape(2, 3)
    np.testing.assert_allclose(mapped(rows), 2 * rows.sum(1))
    c = 3.0
    np.testing.assert_allclose(mapped(rows), 3 * rows.sum(1))


def test_a_trace_that_counts_itself_is_not_traced_at_every_call():
    """What a function reads is recorded after its trace, so the trace's own rebinding of a
    counter does not make every later call trace again."""
    traces = 0

    def f(x):
        nonlocal traces
        traces += 1
        return np.sum(x ** 2)

    jitted = pb.jit(f)
    for _ in range(4):
        jitted(X)
    assert traces == 1


def _one_off(n: int):
    big = np.full(n, 2.0)
    return (lambda x: np.sum(big[:3] * x)), big


def test_one_off_functions_and_what_they_capture_are_freed_with_them():
    """The function forms' entry of a function does not keep it alive: a lambda made per call,
    and the array it captures, are freed after the call (JAX keeps none either)."""
    before = len(api._HELD)
    refs = []
    for _ in range(5):
        f, big = _one_off(1 << 20)
        np.testing.assert_allclose(pb.grad(f)(X), big[:3])
        np.testing.assert_allclose(pb.jvp(pb.grad(f), (X,), (X,))[1], 0.0)
        refs += [weakref.ref(f), weakref.ref(big)]
        del f, big
    gc.collect()
    assert all(r() is None for r in refs) and len(api._HELD) == before


def test_a_held_gradient_keeps_its_function():
    f, big = _one_off(3)
    g, ref = pb.grad(f), weakref.ref(f)
    del f
    gc.collect()
    assert ref() is not None
    np.testing.assert_allclose(g(X), big)


def test_callables_that_cannot_be_weakly_referenced_are_held_in_a_bounded_cache():
    held = cache.IdentityCache(4)
    keys = [(k,) for k in range(10)]  # tuples cannot be weakly referenced
    for k in keys:
        held.put(k, "tail", k[0])
    assert len(held) == 4 and held.get(keys[-1], "tail") == 9 and held.get(keys[0], "tail") is None
    np.testing.assert_allclose(pb.grad(np.sin)(0.5), np.cos(0.5))  # a ufunc: held, and keyed by identity


def test_a_snapshot_keeps_what_it_compares_alive():
    """So that a rebound value's address cannot be taken by the next value while it is compared."""
    class Value:
        pass

    value = Value()
    get = lambda: value  # noqa: E731
    seen = cache.snapshot(get)
    kept = weakref.ref(value)
    assert seen(get)
    value = Value()
    gc.collect()
    assert kept() is not None and not seen(get)


# --- random sequences of rebinding, resetting, calling, dropping --------------------------------
# Each step changes what some function reads, or calls one and compares with the closed form of
# its gradient at the values it reads now, 2 lam arr x, computed by NumPy.

_EXAMPLES = os.environ.get("PULLBACK_HYPOTHESIS_EXAMPLES")
G_LAM, G_ARR = 1.0, np.ones(3)


def global_loss(x):
    return G_LAM * np.sum(G_ARR * x ** 2)


def _scaled_loss(x, *, lam, arr):
    return lam * np.sum(arr * x ** 2)


class _Model:
    def __init__(self, lam, arr):
        self.lam, self.arr = lam, arr

    def __call__(self, x):
        return self.lam * np.sum(self.arr * x ** 2)


class _World:
    """The functions under test, what they read, and how to change it."""

    def __init__(self):
        lam, arr = 1.0, np.ones(3)

        def closure(x):
            return lam * np.sum(arr * x ** 2)

        def set_cells(new_lam, new_arr):
            nonlocal lam, arr
            lam = arr = None  # the old values are freed: their addresses are free to be reused
            gc.collect()
            lam, arr = new_lam, new_arr

        self.closure, self.set_cells = closure, set_cells
        self.cells = lambda: (lam, arr)
        self.partial = functools.partial(_scaled_loss, lam=1.0, arr=np.ones(3))
        self.model = _Model(1.0, np.ones(3))
        self.held: dict = {}
        self.lambdas: list = []

    def read_by(self, name: str):
        return {"global": lambda: (G_LAM, G_ARR), "closure": self.cells,
                "partial": lambda: (self.partial.keywords["lam"], self.partial.keywords["arr"]),
                "model": lambda: (self.model.lam, self.model.arr)}[name]()

    def function(self, name: str):
        return {"global": global_loss, "closure": self.closure, "partial": self.partial, "model": self.model}[name]

    def rebind(self, name: str, lam: float, arr: np.ndarray) -> None:
        global G_LAM, G_ARR
        if name == "global":
            G_LAM, G_ARR = lam, arr
        elif name == "closure":
            self.set_cells(lam, arr)
        elif name == "partial":
            self.partial.keywords.update(lam=lam, arr=arr)
        else:
            self.model.lam, self.model.arr = lam, arr

    def check(self, name: str, how: str) -> None:
        lam, arr = self.read_by(name)
        f = self.function(name)
        if how == "form":
            got = pb.grad(f)(X)
        elif how == "hvp":
            got = pb.jvp(pb.grad(f), (X,), (X,))[1]  # the Hessian is 2 lam diag(arr)
        else:
            held = self.held.get((name, how))
            if held is None:
                held = self.held[name, how] = pb.differentiate(f) if how == "differentiate" else pb.jit(f)
            got = held.grad(X) if how == "differentiate" else held(X)
        want = lam * np.sum(arr * X ** 2) if how == "jit" else 2 * lam * arr * X
        np.testing.assert_allclose(got, want, rtol=1e-13, err_msg=f"{how} of {name}")


_NAMES = ("global", "closure", "partial", "model")
_step = st.one_of(
    st.tuples(st.just("rebind"), st.sampled_from(_NAMES), st.sampled_from([0.5, 0.9, 1.0, 2.0]),
              st.sampled_from([0.5, 1.0, 3.0])),
    st.tuples(st.just("in place"), st.sampled_from(_NAMES), st.sampled_from([0.5, 2.0])),
    st.tuples(st.just("check"), st.sampled_from(_NAMES), st.sampled_from(["form", "hvp", "differentiate", "jit"])),
    st.tuples(st.just("lambda"), st.sampled_from([0.5, 1.0, 2.0]), st.booleans()),
    st.tuples(st.just("drop")),
)


@settings(max_examples=int(_EXAMPLES) if _EXAMPLES else 40 if full() else 6, deadline=None,
          derandomize=not _EXAMPLES, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_step, min_size=1, max_size=25))
def test_random_sequences_of_changes_never_give_a_stale_gradient(steps):
    global G_LAM, G_ARR
    saved, world = (G_LAM, G_ARR), _World()
    G_LAM, G_ARR = 1.0, np.ones(3)
    try:
        for step in steps:
            if step[0] == "rebind":  # new objects, often equal to the old ones
                _, name, lam, scale = step
                world.rebind(name, round(lam * 1.0, 8), np.full(3, scale) * [1.0, 2.0, 3.0])
            elif step[0] == "in place":  # the array is read at each call: no trace needed
                world.read_by(step[1])[1][...] *= step[2]
            elif step[0] == "check":
                world.check(step[1], step[2])
            elif step[0] == "lambda":  # a one-off function, kept for later calls or not
                c, keep = round(step[1] * 1.0, 8), step[2]
                f = lambda x, c=c: c * np.sum(np.sin(x))  # noqa: E731
                np.testing.assert_allclose(pb.grad(f)(X), c * np.cos(X), rtol=1e-13)
                if keep:
                    world.lambdas.append((f, c))
                for g, c in world.lambdas:
                    np.testing.assert_allclose(pb.grad(g)(X), c * np.cos(X), rtol=1e-13)
            else:  # drop the held objects and the kept lambdas
                world.held.clear()
                world.lambdas.clear()
                gc.collect()
    finally:
        G_LAM, G_ARR = saved
