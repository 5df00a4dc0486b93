"""The converted copy of the user's code behaves as the original, Python's semantics included:
closures and ``nonlocal``, globals written, defaults, private names and ``super()``, decorators,
several lambdas on one line, comprehensions, frame functions; code without source runs as it is."""

import functools
import linecache
import textwrap

import numpy as np
import pytest
from scipy.special import logsumexp

import pullback as pb
from pullback.frontend import convert

COUNTER = 0


def _bump(x):
    global COUNTER
    COUNTER += 1
    return logsumexp(x)


def test_globals_written_by_traced_code_land_in_the_users_module():
    global COUNTER
    COUNTER = 0
    pb.jit(_bump)(np.zeros(2))
    assert COUNTER == 1


def test_closures_and_nonlocal_share_the_original_cells():
    calls = 0
    scale = 2.0

    def f(x):
        nonlocal calls
        calls += 1
        return logsumexp(np.array([x[0] * scale, x[1]]))

    x = np.array([0.5, 1.0])
    g = pb.grad(f)(x)
    assert calls == 1
    e = np.exp([x[0] * scale, x[1]])
    np.testing.assert_allclose(g, [scale * e[0] / e.sum(), e[1] / e.sum()], rtol=1e-12)


def test_defaults_keyword_only_defaults_and_star_arguments():
    def f(x, a=2.0, *rest, b=3.0, **extra):
        return logsumexp(np.array([x * a, x * b, *rest])) + extra.get("c", 0.0)

    want = np.log(np.exp(2.0) + np.exp(3.0))
    assert pb.jit(f)(1.0) == pytest.approx(want, rel=1e-14)
    assert pb.jit(lambda x: f(x, 2.0, 0.5, b=1.0, c=1.0))(1.0) == pytest.approx(
        np.log(np.exp(2.0) + np.exp(1.0) + np.exp(0.5)) + 1.0, rel=1e-14)


class _Base:
    def scale(self, x):
        return x * 2.0


class _Model(_Base):
    def __init__(self):
        self.__w = np.array([1.0, 2.0])

    def scale(self, x):
        return super().scale(x) + 1.0

    def loss(self, x):
        return logsumexp(np.array([self.scale(x[0]), x[1]])) + np.sum(self.__w * x)


def test_methods_keep_private_names_and_zero_argument_super():
    m = _Model()
    x = np.array([0.3, -0.2])
    e = np.exp([2 * x[0] + 1, x[1]])
    np.testing.assert_allclose(pb.grad(m.loss)(x), [2 * e[0] / e.sum() + 1.0, e[1] / e.sum() + 2.0], rtol=1e-12)


def _twice(fn):
    @functools.wraps(fn)
    def wrapper(x):
        return fn(x) * 2.0

    return wrapper


@_twice
def _decorated(x):
    return logsumexp(np.array([x, 0.0]))


def test_decorated_functions_and_several_lambdas_on_one_line():
    assert pb.jit(_decorated)(0.0) == pytest.approx(2 * np.log(2.0), rel=1e-14)
    f, g = (lambda x: logsumexp(np.array([x, 1.0]))), (lambda x: logsumexp(np.array([x, 2.0])) * 3)
    assert pb.jit(f)(0.0) == pytest.approx(np.log(1 + np.e), rel=1e-14)
    assert pb.jit(g)(0.0) == pytest.approx(3 * np.log(1 + np.e ** 2), rel=1e-14)


def test_comprehensions_frame_functions_and_generators():
    def f(x):
        rows = [np.array([x[i], x[i] * 2]) for i in range(2)]  # np.array of tracers, inside a comprehension
        names = sorted(locals())  # reads this frame, not the dispatcher's
        total = sum(logsumexp(r) for r in rows)
        return total, len(names)

    x = np.array([0.1, 0.2])
    total, n = pb.jit(f)(x)
    assert total == pytest.approx(sum(logsumexp([v, 2 * v]) for v in x), rel=1e-14) and n == 2


def test_code_without_source_runs_unconverted_and_edited_source_is_not_used(tmp_path):
    namespace = {"np": np}
    exec(compile("def f(x):\n    return np.sum(np.exp(x))\n", "<no source>", "exec"), namespace)
    assert pb.jit(namespace["f"])(np.zeros(2)) == 2.0  # NumPy's protocols still reach pullback
    assert convert.converted_code(namespace["f"]) is None

    path = tmp_path / "edited.py"
    path.write_text("def f(x):\n    return np.sum(np.exp(x))\n")
    namespace = {"np": np}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    linecache.cache[str(path)] = (0, None, ["def f(x):\n", "    return xp.sum(xp.cos(x))\n"], str(path))
    try:  # the source no longer names ``np``, which the function's code reads: not converted
        assert convert.converted_code(namespace["f"]) is None
        assert pb.jit(namespace["f"])(np.zeros(2)) == 2.0
    finally:
        del linecache.cache[str(path)]


def test_the_converted_code_keeps_the_users_file_and_lines():
    def f(x):
        y = x * 2.0
        return logsumexp(y) / 0.0 if False else np.sum(y[10])  # out of bounds: an error at this line

    with pytest.raises(Exception) as e:
        pb.jit(f)(np.zeros(3))
    assert f"{__file__.rstrip('c')}:" in str(e.value) or "test_convert.py" in "".join(
        __import__("traceback").format_exception(e.value))
    src = textwrap.dedent(pb.differentiate(lambda x: np.sum(x * 2.0)).source(np.zeros(2)))
    assert "test_convert.py" in src


def test_index_assignment_and_reads_keep_pythons_semantics():
    """Converted ``a[k] = v``, ``a[k] += v`` and reads through the dispatchers, on objects that are no
    arrays: the value before the target (left to right), in-place operators on the element, chained
    targets, slices as keys, and no new name in ``locals()``."""
    order = []

    def note(tag, value):
        order.append(tag)
        return value

    def f(x):
        d, lists = {}, [[1], [2]]
        alias = lists[0]
        note("target", d)[note("key", "a")] = note("value", x)
        lists[0] += [3]  # list.__iadd__: in place, so the alias sees it
        first = second = [0, 0, 0]
        first[1:] = second[0], 5
        d["b"] = d["c"] = 2.0
        seen.append(sorted(locals()))
        return d["a"] * d["b"] * d["c"] * len(alias), first

    seen = []
    value, first = pb.jit(f)(3.0)
    assert value == 3.0 * 4.0 * 2 and list(first) == [0, 0, 5]
    assert order == ["value", "target", "key"]
    assert seen == [["alias", "d", "first", "lists", "note", "second", "seen", "x"]]  # free variables too, as Python


def test_match_statements_keep_their_patterns():
    def f(x, kind):
        match kind:
            case np.inf:
                return np.sum(x) * 2
            case functools.partial():
                return np.sum(x)
            case _ if kind > 1:
                return logsumexp(x)  # found by identity: the function is converted
        return x[0]

    x = np.array([0.5, 1.5])
    assert convert.converted_code(f) is not None
    assert pb.jit(f, static_argnums=1)(x, np.inf) == 4.0
    assert pb.jit(f, static_argnums=1)(x, 3) == pytest.approx(logsumexp(x), rel=1e-14)


class _Keys:
    """Records the keys its subscripts are given."""

    def __init__(self):
        self.seen = []

    def __getitem__(self, key):
        self.seen.append(key)
        return 1.0


def test_subscripts_with_slices_get_pythons_keys():
    """A key holding slices and more (``a[1:, k]``), an argument of the dispatcher, is the key Python
    builds, its parts evaluated once, in order; basic slicing alone (``a[::2]``) stays a subscript."""
    keys, order = _Keys(), []

    def k(v):
        order.append(v)
        return v

    def f(x):
        return x * keys[k(1):k(2), k(3)] + keys[::2] + keys[k(4), ..., None:1] + np.sum(np.r_[0:2, x])

    assert pb.jit(f)(1.0) == 5.0
    assert keys.seen == [(slice(1, 2), 3), slice(None, None, 2), (4, Ellipsis, slice(None, 1))]
    assert order == [1, 2, 3, 4]
    assert convert.converted(f) is not f
