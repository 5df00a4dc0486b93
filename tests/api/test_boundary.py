"""The boundary between the caller's objects and compiled programs: results are fresh arrays,
arguments of any ndarray type are keyed by shape and dtype, promotion follows NEP 50 (NumPy's
own result is the oracle throughout), static and keyword arguments, and (co)tangent checks."""

import subprocess
import sys

import numpy as np
import pytest

import pullback as pb
from pullback.tree import flatten, unflatten
from tests import sample


def assert_fresh(outputs, *inputs) -> None:
    """No output shares memory with an input, a constant or another output."""
    outs, ins = flatten(outputs)[0], flatten(inputs)[0]
    for i, a in enumerate(outs):
        for j, b in enumerate(outs[i + 1:] + ins, start=i + 1):
            assert not np.shares_memory(a, b), f"output {i} shares memory with {'output' if j < len(outs) else 'input'}"


C = np.arange(6.0).reshape(2, 3)  # a closed-over constant
x23 = np.linspace(-1.0, 1.0, 6).reshape(2, 3)

# (name, function, arguments): each returns arguments, constants, or views of them, as NumPy would
ALIASING = [
    ("identity", lambda x: x, (x23,)),
    ("transpose", lambda x: x.T, (x23,)),
    ("reshape", lambda x: x.reshape(3, 2), (x23,)),
    ("slice", lambda x: x[:, 1:], (x23,)),
    ("flip", np.flip, (x23,)),
    ("real", lambda x: np.real(x), (x23,)),
    ("twice", lambda x: (x, x), (x23,)),
    ("value-and-view", lambda x: (np.exp(x), np.exp(x).T), (x23,)),
    ("two-views-of-one", lambda x: (np.exp(x)[0], np.exp(x)[1]), (x23,)),
    ("same-result", lambda x, y: (x * y, x * y), (x23, x23 + 1)),
    ("constant", lambda x: (x * 2, C), (x23,)),
    ("constant-view", lambda x: C.T + 0 * x.T, (x23,)),
    ("constant-alone", lambda x: C.T, (x23,)),
    ("pass-through", lambda x, y: (y, x + 1.0), (x23, np.ones(4))),
    ("0-d array", lambda s: s, (np.array(2.0),)),
    ("0-d reshape", lambda x: x.reshape(()), (np.ones(1),)),
    ("scalar", lambda s: (s, s), (2.0,)),
    ("sums", lambda x: (np.sum(x), np.sum(x)), (x23,)),
    ("complex", lambda z: (z.conj().conj(), z), (x23 + 1j,)),
    ("int", lambda n: (n, n[::-1]), (np.arange(4),)),
]


@pytest.mark.parametrize("name, fn, args", ALIASING, ids=[c[0] for c in ALIASING])
def test_jit_results_are_fresh(name, fn, args):
    out = pb.jit(fn)(*args)
    want = fn(*args)
    for o, w in zip(flatten(out)[0], flatten(want)[0]):
        np.testing.assert_array_equal(o, w)
        assert np.asarray(o).dtype == np.asarray(w).dtype
    assert_fresh((out, C), *args)
    for o in flatten(out)[0]:  # writing into a result leaves the arguments as they were
        if isinstance(o, np.ndarray) and o.size:
            before = [np.copy(a) for a in args]
            o[...] = 7
            for a, b in zip(args, before):
                np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(C, np.arange(6.0).reshape(2, 3))


@pytest.mark.parametrize("name, fn, args", [c for c in ALIASING if np.asarray(c[2][0]).dtype.kind == "f"],
                         ids=[c[0] for c in ALIASING if np.asarray(c[2][0]).dtype.kind == "f"])
def test_jvp_and_vjp_results_are_fresh(name, fn, args):
    tangents = tuple(np.ones_like(a) for a in args)
    out, t_out = pb.jvp(fn, args, tangents)
    assert_fresh((out, t_out, C), *args, *tangents)
    out, vjp_fn = pb.vjp(fn, *args)
    leaves, treedef = flatten(out)
    cts = [np.ones_like(c) for c in leaves]
    grads = vjp_fn(unflatten(treedef, cts))
    assert_fresh((out, grads, C), *args, *cts)


def test_gradient_is_not_the_argument():
    x, y = np.ones(3), np.arange(3.0)
    g = pb.grad(lambda x, y: np.sum(x * y))(x, y)
    np.testing.assert_array_equal(g, y)
    g *= 0.1  # a learning rate applied in place
    np.testing.assert_array_equal(y, np.arange(3.0))


def test_gradient_is_not_a_constant_nor_another_gradient():
    g = pb.grad(lambda x: np.sum(x * C))(np.ones((2, 3)))
    np.testing.assert_array_equal(g, C)
    assert not np.shares_memory(g, C)
    y = np.arange(3.0)
    g0, g1 = pb.grad(lambda x, y: np.sum(x + y), argnums=(0, 1))(np.ones(3), y)
    np.testing.assert_array_equal(g0, np.ones(3))
    np.testing.assert_array_equal(g1, np.ones(3))
    assert_fresh((g0, g1), y)


def test_passed_in_tangents_and_cotangents_are_not_returned():
    x, t = np.ones(3), np.arange(3.0)
    _, t_out = pb.jvp(lambda x: x + 1.0, (x,), (t,))
    np.testing.assert_array_equal(t_out, t)
    assert not np.shares_memory(t_out, t)
    _, lin = pb.linearize(lambda x: x + 1.0, x)
    assert not np.shares_memory(lin(t), t)
    _, vjp_fn = pb.vjp(lambda x: x + 1.0, x)
    (ct_out,) = vjp_fn(t)
    np.testing.assert_array_equal(ct_out, t)
    assert not np.shares_memory(ct_out, t)


def _code(src: str) -> str:
    return "\n".join(line for line in src.splitlines() if not line.strip().startswith("#"))


def test_copies_only_where_an_output_would_alias():
    src = _code(pb.jit(lambda x: (np.exp(x), x.T, x)).source(x23))
    assert src.count(".copy()") == 2
    assert "exp.copy()" not in src
    assert ".copy()" not in _code(pb.jit(lambda x: np.exp(x) * 2.0).source(x23))


# --- what arguments are accepted, and how they are keyed -------------------------------------


def test_memmaps_are_keyed_by_shape_and_dtype(tmp_path):
    def memmap(name, values):
        m = np.memmap(tmp_path / name, dtype=np.float64, mode="w+", shape=(len(values),))
        m[:] = values
        return m

    f = pb.jit(np.mean)
    a, b = memmap("a", [1.0, 2.0]), memmap("b", [1.0, 2.0, 3.0, 10.0])
    assert f(a) == 1.5
    assert f(b) == 4.0 == np.mean(b)
    assert f(a) == 1.5
    g = pb.grad(lambda x: np.sum(x**2))(b)
    assert type(g) is np.ndarray
    np.testing.assert_array_equal(g, 2 * np.asarray(b))
    out = pb.jit(lambda x: x * 2.0)(b)
    assert type(out) is np.ndarray and not np.shares_memory(out, b)


class Tagged(np.ndarray):
    pass


def test_ndarray_subclasses_are_plain_arrays_inside():
    x = np.arange(4.0).view(Tagged)
    out = pb.jit(lambda x: np.sum(x * x))(x)
    assert out == 14.0
    y = pb.jit(lambda x: x[::-1])(x)
    assert type(y) is np.ndarray and not np.shares_memory(y, x)
    np.testing.assert_array_equal(pb.grad(lambda x: np.sum(x**3))(x), 3 * np.arange(4.0) ** 2)
    # the same signature as a plain ndarray: one program serves both
    f = pb.jit(lambda x: x + 1.0)
    np.testing.assert_array_equal(f(x), f(np.asarray(x)))


def test_matrix_is_refused():
    m = np.matrix([[1.0, 2.0], [3.0, 4.0]])
    with pytest.raises(TypeError, match=r"np\.matrix"):
        pb.jit(lambda x: x * x)(m)
    with pytest.raises(TypeError, match=r"np\.matrix"):
        pb.grad(lambda x: np.sum(x * x))(m)


def test_matrix_constant_is_refused():
    m = np.matrix([[1.0, 2.0], [3.0, 4.0]])  # np.ones((2, 2)) * m is a matrix product in NumPy
    with pytest.raises(TypeError, match=r"np\.matrix"):
        pb.jit(lambda x: np.sum(x * m))(np.ones((2, 2)))


MASKED = np.ma.masked_array([1.0, 2.0, 3.0, 4.0], mask=[False, False, True, False])
X4 = np.arange(1.0, 5.0)


class _Holder:
    m = MASKED


HOLDER = _Holder()


# each reads the masked array MASKED with the traced x: NumPy skips the masked entry, pullback would not
MASKED_USES = {
    "closure": lambda x: np.sum(x * MASKED),
    "closure_first": lambda x: np.sum(MASKED * x),
    "attribute": lambda x: np.sum(x * HOLDER.m),
    "ufunc": lambda x: np.sum(np.add(MASKED, x)),
    "array_function": lambda x: np.sum(np.concatenate([x, MASKED])),
    "where": lambda x: np.sum(np.where(MASKED > 1.5, x, 0.0)),
    "ma_function": lambda x: np.sum(np.ma.add(x, MASKED)),
    "ma_constructor": lambda x: np.sum(np.ma.masked_array(x, mask=[0, 1, 0, 0])),
    "index": lambda x: np.sum(x[np.ma.masked_array([0, 1], mask=[False, True])]),
}


@pytest.mark.parametrize("use", MASKED_USES.values(), ids=MASKED_USES.keys())
def test_masked_array_in_a_trace_is_refused(use):
    with pytest.raises(TypeError, match="masked arrays") as e:
        pb.grad(use)(X4)
    assert "np.where(mask, 0, x)" in str(e.value) and __file__ in str(e.value)


@pytest.mark.parametrize("transform", [pb.jit, pb.grad, lambda f: pb.differentiate(f).grad])
def test_masked_array_argument_is_refused(transform):
    with pytest.raises(TypeError, match="masked arrays"):
        transform(lambda x: np.sum(x * x))(MASKED)
    with pytest.raises(TypeError, match="masked arrays"):
        transform(lambda x, m: np.sum(x * m))(X4, MASKED)


def test_masked_tangent_and_cotangent_are_refused():
    with pytest.raises(TypeError, match="masked arrays"):
        pb.jvp(np.sin, (X4,), (MASKED,))
    _, vjp_fn = pb.vjp(np.sin, X4)
    with pytest.raises(TypeError, match="masked arrays"):
        vjp_fn(MASKED)


def test_masked_array_spelled_with_where():
    """The spelling the error names gives NumPy's masked result (21.0; 30.0 without the mask)."""
    mask, data = np.ma.getmaskarray(MASKED), MASKED.filled(0.0)
    expected = float(np.sum(X4 * MASKED))
    assert expected == 21.0
    assert pb.jit(lambda x: np.sum(np.where(mask, 0.0, x * data)))(X4) == expected
    np.testing.assert_array_equal(pb.grad(lambda x: np.sum(np.where(mask, 0.0, x * data)))(X4), [1.0, 2.0, 0.0, 4.0])


@pytest.mark.parametrize("dtype", [">f8", ">f4", ">c16", ">i4", ">i8"])
def test_big_endian_input(dtype):
    x = (np.arange(1, 7).reshape(2, 3) * (1 + 1j if dtype[1] == "c" else 1)).astype(dtype)
    f = lambda x: x * x + x.sum(axis=0)  # noqa: E731
    out = pb.jit(f)(x)
    want = f(x)
    assert out.dtype == want.dtype.newbyteorder("=") and out.dtype.isnative
    np.testing.assert_array_equal(out, want)
    if dtype[1] == "f":
        np.testing.assert_allclose(pb.grad(lambda x: np.sum(x**2))(x), 2 * x.astype(x.dtype.newbyteorder("=")))
    const = x[0]  # closed over: converted as arguments are
    np.testing.assert_array_equal(pb.jit(lambda y: y * const)(np.ones(3, x.dtype.newbyteorder("="))), x[0])


# --- NEP 50 promotion -----------------------------------------------------------------------

DTYPES = [np.bool_, np.int32, np.int64, np.float16, np.float32, np.float64, np.complex64, np.complex128]
OPERANDS = ([("py-bool", True), ("py-int", 3), ("py-float", 2.5), ("py-complex", 1 + 2j)]
            + [(f"np.{d.__name__}", d(1)) for d in DTYPES]
            + [(f"0-d {np.dtype(d).name}", np.asarray(d(1))) for d in DTYPES]
            + [(f"array {np.dtype(d).name}", np.ones(2, d)) for d in DTYPES])


def _bool(a) -> bool:
    return np.asarray(a).dtype == np.bool_


# the default run: one right operand per dtype, its kind (Python scalar, NumPy scalar, 0-d, array)
# rotating (tests/sample.py); each meets every left operand
@pytest.mark.parametrize("b", sample.sample([pytest.param(o, id=n) for n, o in OPERANDS],
                                            key=lambda p: np.asarray(p.values[0]).dtype))
def test_promotion_follows_numpy(b):
    f = pb.jit(lambda a, b: a * b - b)
    for _, a in OPERANDS:
        if _bool(a) and _bool(b):
            continue  # arithmetic on two booleans is NumPy's logical or/and
        want = np.asarray(a * b - b).dtype
        got = np.asarray(f(a, b)).dtype
        assert got == want, (a, b)


def test_numpy_float64_scalar_is_strong():
    out = pb.jit(lambda x, s: x * s)(np.ones(3, np.float32), np.float64(2.0))
    assert out.dtype == np.float64
    out = pb.jit(lambda x, s: x * s)(np.ones(3, np.float32), 2.0)
    assert out.dtype == np.float32
    out = pb.jit(lambda x, s: np.deg2rad(x) * s)(np.ones(3, np.float32), np.complex128(1.0))
    assert out.dtype == np.complex128


@pytest.mark.parametrize("fn", [
    lambda a, s: a + np.sin(s), lambda a, s: a + np.sum(s), lambda a, s: a + np.multiply(s, 2.0),
    lambda a, s: a + s * 2.0, lambda a, s: a + abs(s), lambda a, s: np.where(a > 0, s, a), lambda a, s: a * np.real(s),
    lambda a, s: a + np.imag(s), lambda a, s: np.outer(a, s), lambda a, s: np.dot(a, s), lambda a, s: np.dot(a, 2.0),
    lambda a, s: np.tensordot(a, s, 0), lambda a, s: np.einsum("i,->i", a, s), lambda a, s: np.inner(a, s),
    lambda a, s: np.kron(a, s),
], ids=["sin", "sum", "np.multiply", "operator", "abs", "where", "real", "imag", "outer", "dot", "dot-literal",
        "tensordot", "einsum", "inner", "kron"])
def test_python_scalar_argument_through_numpy_functions(fn):
    """NumPy's ufuncs and functions return strong values even from Python scalars; functions that
    call np.asarray on their operands make a Python scalar strong; operators keep it weak."""
    a = np.array([0.5, 1.0], np.float32)
    out, want = pb.jit(fn)(a, 0.5), fn(a, 0.5)
    assert out.dtype == want.dtype
    np.testing.assert_allclose(out, want, rtol=1e-6)


# --- static and keyword arguments -------------------------------------------------------------


def test_static_arguments_are_keyed_by_type_and_value():
    f = pb.jit(lambda x, n: x * n, static_argnums=1)
    x = np.arange(3)
    assert f(x, 2).dtype == np.int64
    assert f(x, 2.0).dtype == np.float64
    assert f(x, True).dtype == np.int64
    np.testing.assert_array_equal(f(x, True), x)
    g = pb.jit(lambda x, ns: x * ns[0], static_argnums=1)
    assert g(x, (2,)).dtype == np.int64 and g(x, (2.0,)).dtype == np.float64


def test_static_argument_errors():
    with pytest.raises(TypeError, match="static_argnums"):
        pb.jit(lambda x, n: x, static_argnums=1)(np.ones(2), [1, 2])
    with pytest.raises(ValueError, match="static_argnums"):
        pb.jit(lambda x: x, static_argnums=3)(np.ones(2))


def test_keyword_arguments_are_traced_not_differentiated():
    def f(x, y, *, scale=1.0):
        return np.sum(x * y) * scale

    x, y = np.arange(3.0), np.array([1.0, -2.0, 0.5])
    jf = pb.jit(f)
    assert jf(x, y=y) == f(x, y)
    assert jf(x, y, scale=3.0) == f(x, y, scale=3.0)
    assert jf(x, y, scale=-1.0) == f(x, y, scale=-1.0)  # traced: a new value, the same program
    assert jf(x, y, scale=np.float32(2.0)) == f(x, y, scale=2.0)
    np.testing.assert_allclose(pb.grad(f)(x, y=y, scale=2.0), 2 * y)
    np.testing.assert_allclose(pb.grad(f, argnums=1)(x, y, scale=2.0), 2 * x)
    with pytest.raises(ValueError, match="argnums"):
        pb.grad(f, argnums=1)(x, y=y)
    out, vjp_fn = pb.differentiate(f).vjp(x, y=y, scale=2.0)
    np.testing.assert_allclose(vjp_fn(1.0)[0], 2 * y)
    _, lin = pb.differentiate(f).linearize(x, y=y)
    assert lin(np.ones(3)) == np.sum(y)


def test_keyword_arguments_and_a_positional_dict_compile_apart():
    def h(x, *rest, **kw):
        return x * rest[0]["y"] if rest else x + kw["y"]

    jh, x = pb.jit(h), np.arange(3.0)
    np.testing.assert_array_equal(jh(x, {"y": 2.0}), 2 * x)
    np.testing.assert_array_equal(jh(x, y=2.0), x + 2)


def test_keyword_leaves_named_by_their_keys():
    d = pb.differentiate(lambda x, *, weight: np.sum(x * weight))
    prog = d._stage("primal", (np.ones(2), pb.api._Kwargs(weight=np.ones(2))))
    assert [v.hint for v in prog.program.inputs] == ["x", "weight"]


def test_static_argument_before_dynamic_ones_keeps_the_names():
    prog = pb.make_ir(lambda n, x: x * n, static_argnums=0)(3, np.ones(2))
    assert [v.hint for v in prog.inputs] == ["x"]


# --- tangents and cotangents ------------------------------------------------------------------


def test_linearize_checks_tangent_shapes():
    _, lin = pb.linearize(lambda x: x * 2.0, np.ones(3))
    with pytest.raises(ValueError, match=r"shape \(3,\)"):
        lin(np.ones(4))
    np.testing.assert_array_equal(lin(np.arange(3.0)), 2 * np.arange(3.0))


def test_complex_tangents_for_real_inputs_are_refused():
    f = lambda x: x * 2.0  # noqa: E731
    x, z = np.ones(3), np.ones(3) * 1j
    with pytest.raises(TypeError, match="complex"):
        pb.jvp(f, (x,), (z,))
    _, lin = pb.linearize(f, x)
    with pytest.raises(TypeError, match="complex"):
        lin(z)
    _, vjp_fn = pb.vjp(f, x)
    with pytest.raises(TypeError, match="complex"):
        vjp_fn(z)
    # a real tangent for a complex input is fine (NumPy casts it exactly)
    _, t = pb.jvp(f, (x + 0j,), (np.ones(3),))
    np.testing.assert_array_equal(t, 2 * np.ones(3))


# --- the package's surface and names ---------------------------------------------------------


def test_linalg_is_an_attribute_of_the_package():
    code = "import numpy as np, pullback as pb; print(pb.linalg.cholesky(np.eye(2) * 4.0)[1, 1])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "2.0"


def test_lambda_values_do_not_take_the_assignment_target_name():
    mul = np.ones(3)
    d = pb.source(lambda x: np.sum(x * x), mul)
    assert not any(line.strip().startswith("d =") for line in d.splitlines())

    def f(x):
        t = x * x
        return np.sum(t)

    assert "t = x * x" in pb.source(f, mul)
