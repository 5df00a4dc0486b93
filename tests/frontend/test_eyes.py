"""Arrays made while tracing (``frontend.eyes``): ranges, fills, arithmetic on them and NumPy's scalars
print as the program's own calls, not keyword constants ``c``; a constant that stays one is named after
where it came from. Each printed program's gradient is checked against finite differences."""

import ast
import re
import sys
from pathlib import Path

import numpy as np
import pytest

import pullback as pb

ROOT = Path(__file__).resolve().parents[2]


def _keyword_only(src: str) -> list[str]:
    fn = next(n for n in ast.parse(src).body if isinstance(n, ast.FunctionDef) and not n.decorator_list)
    return [a.arg for a in fn.args.kwonlyargs]


def _fd_along(f, x, d, eps=1e-6):
    return (f(x + eps * d) - f(x - eps * d)) / (2 * eps)


def ranges(x):
    n = x.shape[0]
    k = np.arange(1, n + 1)
    even = np.arange(0, 2 * n, 2)
    w = np.arange(n, dtype=float)
    t = np.linspace(0.0, 1.0, n)
    return np.sum(x * k) + np.sum(x ** 2 * even) + np.sum(np.sin(x) * w) + np.sum(np.cos(x * t))


def test_ranges_with_a_start_or_a_step_print_as_arange_arithmetic():
    """``np.arange(1, n + 1)``, ``np.arange(0, 2 n, 2)``, ``np.arange(n, dtype=float)`` and ``np.linspace(0, 1, n)``
    (where NumPy's values are ``arange * step + start``) are the program's: no keyword constants."""
    x = np.array([0.3, -1.2, 0.7, 2.0, -0.4])
    d = pb.differentiate(ranges)
    src = d.source(x)
    assert _keyword_only(src) == [], src
    assert "k = arange + 1" in src and "even = arange * 2" in src, src
    assert "np.arange(5, dtype=np.float64)" in src and "* 0.25" in src, src  # w, and t = arange * 0.25
    direction = np.random.default_rng(0).standard_normal(5)
    np.testing.assert_allclose(d.grad(x) @ direction, _fd_along(ranges, x, direction), rtol=1e-7)


def test_a_linspace_numpy_ends_otherwise_prints_as_the_linspace_call():
    """``np.linspace(0, 1, 50)``: NumPy sets its last value to ``stop``, which ``arange * step`` misses by an
    ulp; the program makes it by the call itself, ``t = np.linspace(0.0, 1.0, 50)``: no keyword constant."""
    def f(x):
        t = np.linspace(0.0, 1.0, x.shape[0])
        return np.sum(np.sin(x) * t)

    x = np.linspace(-1.0, 1.0, 50)
    src = pb.source(pb.grad(f), x)
    assert _keyword_only(src) == [] and "t = np.linspace(0.0, 1.0, 50)\n" in src, src
    np.testing.assert_allclose(pb.grad(f)(x), np.cos(x) * np.linspace(0.0, 1.0, 50), rtol=1e-15)
    direction = np.random.default_rng(2).standard_normal(50)
    np.testing.assert_allclose(pb.grad(f)(x) @ direction, _fd_along(f, x, direction), rtol=1e-7)


def test_every_linspace_of_2_to_299_samples_is_the_programs_with_numpys_values():
    """For each n in 2..299, ``np.linspace(0, 1, n)`` is made by the program, never a keyword constant:
    as ``arange`` arithmetic where that gives NumPy's values, else as the ``np.linspace`` call itself (the n
    where NumPy's last value, ``stop``, differs from ``arange * step``'s); the gradient is NumPy's."""
    def f(x):
        return np.sum(np.sin(x) * np.linspace(0.0, 1.0, x.shape[0]))

    called = []
    for n in range(2, 300):
        x = np.cos(np.arange(n) + 0.5)
        d = pb.differentiate(f)
        src = d.source(x)
        assert _keyword_only(src) == [], (n, src)
        ramp = np.linspace(0.0, 1.0, n)
        if f"np.linspace(0.0, 1.0, {n})" in src:
            called.append(n)
        else:
            assert "np.arange(" in src, (n, src)
        np.testing.assert_array_equal(d.grad(x), np.cos(x) * ramp)
    differs = [n for n in range(2, 300)
               if not np.array_equal(np.arange(n) * (1.0 / (n - 1)), np.linspace(0.0, 1.0, n))]
    assert len(differs) == 14 and set(differs) <= set(called), (differs, called)


def test_arithmetic_on_an_identity_is_the_programs():
    """``JITTER * np.eye(u)`` (the sparse GP's) is ``1e-06 * eye`` in the program, not a folded constant ``c``;
    kept by the user past the trace, it is a constant named after the variable (in-place changes seen)."""
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        import sparse_gp
    finally:
        sys.path.remove(str(ROOT / "examples"))
    rng = np.random.default_rng(0)
    X = rng.uniform(-3, 3, (30, 2))
    y = np.sin(X[:, 0]) * np.cos(X[:, 1])
    Z = X[:5].copy()
    d = pb.differentiate(sparse_gp.sgp_bound, argnums=0)
    src = d.source(Z, 0.0, 0.0, -2.0, X, y)
    assert _keyword_only(src) == [], src
    assert re.search(r"\w+ = 1e-06 \* eye\b", src), src
    direction = rng.standard_normal(Z.shape)
    fd = _fd_along(lambda z: sparse_gp.sgp_bound(z, 0.0, 0.0, -2.0, X, y), Z, direction)
    np.testing.assert_allclose(np.sum(d.grad(Z, 0.0, 0.0, -2.0, X, y) * direction), fd, rtol=1e-6)

    kept = []

    def g(x):
        A = 2.0 * np.eye(3)
        kept.append(A)
        return np.sum((A @ x) ** 2)

    x = np.array([1.0, -2.0, 0.5])
    f = pb.differentiate(g)
    assert _keyword_only(f.source(x)) == ["A"]
    np.testing.assert_allclose(f.grad(x), 8.0 * x)


def test_zeros_rolled_are_zeros_and_adding_them_is_dropped():
    """``np.roll`` of ``np.zeros`` (the Jacobi sweeps of the fluid and wing examples, from p = 0) is a fill,
    and ``x + 0`` is ``x``: no keyword constant, no addition of zeros."""
    def f(x):
        p = np.zeros(x.shape)
        p = (x + np.roll(p, 1) + np.roll(p, -1)) / 4.0
        p = (x + np.roll(p, 1) + np.roll(p, -1)) / 4.0
        return np.sum(p ** 2)

    x = np.array([0.5, -1.0, 2.0, 3.0])
    src = pb.source(pb.grad(f), x)
    assert _keyword_only(src) == [] and "np.zeros" not in src, src
    assert "p = x / 4.0" in src, src  # the first sweep: (x + 0 + 0) / 4
    direction = np.array([0.3, 1.0, -0.2, 0.7])
    np.testing.assert_allclose(pb.grad(f)(x) @ direction, _fd_along(f, x, direction), rtol=1e-8)


def test_the_wing_adds_no_zero_constants():
    """The wing example: its first pressure sweep read eight all-zero keyword constants ``c .. c_7`` and
    added them; now only its scope's arrays (and the meshgrids it computes, named) are constants."""
    sys.path.insert(0, str(ROOT))
    from benchmarks import fluid_examples as fe

    obj, params = fe.wing_objective(np, steps=1, rows=32, cols=32), fe.wing_params(32, 32)
    d = pb.differentiate(obj)
    src = d.source(params)
    names = _keyword_only(src)
    assert not [n for n in names if re.fullmatch(r"c(_\d+)?", n)], names
    assert sorted(set(names)) == sorted(set(names) & {"mask", "init_vx", "init_vy"}), names  # meshgrids: the program's
    assert "cell_xs = np.broadcast_to(" in src and "cell_ys = np.broadcast_to(" in src, src
    direction = np.random.default_rng(1).standard_normal(params.shape)
    np.testing.assert_allclose(d.grad(params) @ direction, _fd_along(obj, params, direction), rtol=1e-5)


def test_an_ode_solvers_scalars_are_literals_and_its_tableau_named():
    """``odeint``'s state starts from NumPy scalars (``np.bool_(False)``, ``np.int64(0)``, a step of 0.0): fills
    and literals, not keyword constants; the RK45 tableau's arrays are named after it (``RK45_E``)."""
    from scipy.integrate import odeint

    def f(y0, k):
        ys = odeint(lambda y, t, k: -k * y, y0, np.linspace(0.0, 1.0, 3), args=(k,))
        return np.sum(ys)

    y0, k = np.array([1.0, 2.0]), 0.5
    src = pb.source(pb.grad(f, argnums=(0, 1)), y0, k)
    assert _keyword_only(src) == ["RK45_E", "RK45_P"], src
    g_y0, g_k = pb.grad(f, argnums=(0, 1))(y0, k)
    jf = pb.jit(f)
    np.testing.assert_allclose(g_k, _fd_along(lambda k: jf(y0, k), k, 1.0), rtol=1e-5)
    np.testing.assert_allclose(g_y0 @ np.array([1.0, -0.5]), _fd_along(lambda y: jf(y, k), y0, np.array([1.0, -0.5])),
                               rtol=1e-5)


def test_dop853s_tables_and_the_output_times_are_named():
    """``solve_ivp(..., method="DOP853", t_eval=[0.5, 1.0])``: its error and interpolant tables are named
    after SciPy's (``DOP853_E5``, ``DOP853_D``, a row of ``A_EXTRA``), the times ``t_eval``; no ``c``."""
    import scipy.integrate

    def f(y0, k):
        return np.sum(scipy.integrate.solve_ivp(lambda t, y: -k * y, (0.0, 1.0), y0, method="DOP853",
                                                t_eval=[0.5, 1.0]).y)

    y0, k = np.array([1.0, 2.0]), 0.5
    src = pb.source(pb.grad(f, argnums=1), y0, k)
    assert _keyword_only(src) == ["DOP853_E5", "DOP853_E3", "DOP853_A_EXTRA_0", "DOP853_A_EXTRA_1",
                                  "DOP853_A_EXTRA_2", "DOP853_D", "t_eval"], src
    jf = pb.jit(f)
    np.testing.assert_allclose(pb.grad(f, argnums=1)(y0, k), _fd_along(lambda k: jf(y0, k), k, 1.0), rtol=1e-5)


def made_from_ranges(x):
    n = x.shape[0]
    ys, xs = np.meshgrid(np.arange(n), np.arange(n))
    r = np.arange(n).reshape(n, 1)
    o = np.outer(np.arange(1, n + 1), np.ones(n))
    s = np.sqrt(np.arange(n, dtype=float) + 1.0)
    st = np.stack([np.arange(n), 2 * np.arange(n)], axis=1)
    t = np.tile(np.arange(2), n // 2)
    return (np.sum(x * xs) + np.sum(x ** 2 * ys) + np.sum(x * r) + np.sum(np.sin(x) * o) + np.sum(x[0] * s)
            + np.sum(x[:, :2] * st) + np.sum(x[1] ** 3 * t))


def test_numpy_functions_and_methods_of_made_arrays_are_the_programs():
    """``np.meshgrid``, ``np.outer``, ``np.stack``, ``np.tile``, ``np.sqrt`` and ``.reshape`` of ranges and fills
    the trace made are made again by the program, each at its own line: no keyword constants."""
    x = np.random.default_rng(2).standard_normal((4, 4))
    d = pb.differentiate(made_from_ranges)
    src = d.source(x)
    assert _keyword_only(src) == [], src
    for made in ("xs = np.broadcast_to(", "arange.reshape(4, 1)", "o = np.multiply.outer(", "s = np.sqrt(",
                 "st = np.stack(", "t = "):
            assert made in src, (made, src)
    assert re.search(r"# test_eyes.py:\d+  ys, xs = np.meshgrid\(np.arange\(n\), np.arange\(n\)\)\n.*arange", src), src
    direction = np.random.default_rng(3).standard_normal(x.shape)
    np.testing.assert_allclose(np.sum(d.grad(x) * direction), _fd_along(made_from_ranges, x, direction), rtol=1e-7)


def test_made_arrays_from_scope_changed_or_kept_stay_constants():
    """Only arrays the trace made and left as made qualify: a meshgrid of an array read from scope, one
    changed in place after it was made, and one the user keeps past the trace are constants (read at
    every call: a change to the scope's array is seen)."""
    grid = np.arange(3.0)
    kept = []

    def f(x):
        a, _ = np.meshgrid(grid, np.arange(2))  # of the scope's array
        b = np.outer(np.arange(2), np.ones(3))
        b[0, 0] = 5.0  # changed after it was made
        c, _ = np.meshgrid(np.arange(3), np.arange(2))
        kept.append(c)
        return np.sum(x * a) + np.sum(x * b) + np.sum(x ** 2 * c)

    x = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]])
    d = pb.differentiate(f)
    assert sorted(_keyword_only(d.source(x))) == ["b", "c", "grid"]  # (a: the program's meshgrid of grid)
    b = np.outer(np.arange(2), np.ones(3))
    b[0, 0] = 5.0
    c = np.meshgrid(np.arange(3), np.arange(2))[0]
    np.testing.assert_allclose(d.grad(x), np.meshgrid(grid, np.arange(2))[0] + b + 2 * x * c)
    grid[1] = 10.0  # the scope's array, changed: the program reads it again
    np.testing.assert_allclose(d.grad(x), np.meshgrid(grid, np.arange(2))[0] + b + 2 * x * c)
    kept[-1][1, 2] = 7.0  # the kept array, changed in place: the program reads it again
    c[1, 2] = 7.0
    np.testing.assert_allclose(d.grad(x), np.meshgrid(grid, np.arange(2))[0] + b + 2 * x * c)


def test_the_fluid_reads_no_meshgrid_constants():
    """The fluid example's ``np.meshgrid(np.arange(rows), np.arange(cols))`` is the program's; its gradient
    matches finite differences."""
    sys.path.insert(0, str(ROOT))
    from benchmarks import fluid_examples as fe

    smoke, target = fe.fluid_data(8)
    obj = fe.fluid_objective(np, smoke, target, steps=1)
    params = 0.3 * np.random.default_rng(5).uniform(-1, 1, 2 * 8 * 8)  # no cell centre on a grid line
    d = pb.differentiate(obj)
    src = d.source(params)
    assert not {"cell_xs", "cell_ys"} & set(_keyword_only(src)), _keyword_only(src)
    assert "cell_xs = np.broadcast_to(" in src and "cell_ys = np.broadcast_to(" in src, src
    direction = np.random.default_rng(4).standard_normal(params.shape)
    np.testing.assert_allclose(d.grad(params) @ direction, _fd_along(obj, params, direction), rtol=1e-5)


def test_the_wings_jacobi_loop_says_its_line():
    """The wing's rolled Jacobi loop, compiled by Numba (as ``compile="auto"`` finds), a function of its own:
    its first statement (the first roll of the carry ``p``, the user's, in ``p = (div + np.roll(p, 1, axis=1)
    ...``) carries its source line's comment, though the statement before the loop's call said that line."""
    pytest.importorskip("numba")
    sys.path.insert(0, str(ROOT))
    from benchmarks import fluid_examples as fe

    f = pb.differentiate(fe.wing_objective(np, steps=1, rows=32, cols=32), compile="auto")  # (the loop: Numba's)
    src = f.source(fe.wing_params(32, 32))
    body = src.split("for t in range(50):\n", 1)[1].splitlines()
    assert body[0].strip().startswith("# fluid_examples.py:122  p = (div + np.roll(p, 1, axis=1)"), body[:3]
    assert body[1].strip() == "part_24 = p[:, 31:]", body[:3]
    assert "carry" not in src.split("for t in range(50):\n", 1)[1].split("return", 1)[0], src


def shaped(x):
    n = x.shape[0]
    T = np.tri(n)
    W = np.eye(n) + np.tri(n, k=-1, dtype=np.float32) * np.hanning(n)
    return np.sum(T @ np.sin(x)) + np.sum(W @ x ** 2) + np.sum(np.indices((n, 2))[0] * x[:, None])


def test_numpy_functions_of_shapes_alone_print_as_their_calls():
    """``np.tri``, ``np.hanning`` and ``np.indices`` of ``n`` (``structural.shaped_p``) and arithmetic on them are
    the program's: the calls themselves, under the user's names, no keyword constants; the gradient is
    the central differences' and runs the same on a second argument."""
    x = np.array([0.3, -1.2, 0.7, 2.0])
    d = pb.differentiate(shaped)
    src = d.source(x)
    assert _keyword_only(src) == []
    assert "T = np.tri(4)" in src and "np.tri(4, k=-1, dtype=np.float32)" in src and "np.hanning(4)" in src
    assert "np.indices((4, 2))" in src
    for v in (x, -2 * x):
        fd = [_fd_along(shaped, v, e) for e in np.eye(4)]
        np.testing.assert_allclose(d.grad(v), fd, rtol=1e-7)
    assert "cp.tri(4)" in d.source(x, device="cuda")


def indexed_by_ranges(x):
    idx = np.arange(x.shape[0])
    i = np.arange(2)
    return np.sum(x[idx[::-1]] * x) + np.sum(np.outer(x, x)[i, i + 1])


def test_slices_of_made_ranges_used_as_indices_are_the_programs():
    """``idx[::-1]`` of ``idx = np.arange(n)`` and ``i + 1`` as indices are made by the program (no keyword
    constant ``c``), the index named as the user's; the gradient is the central differences'."""
    x = np.array([0.3, -1.2, 0.7, 2.0])
    d = pb.differentiate(indexed_by_ranges)
    src = d.source(x)
    assert _keyword_only(src) == []
    assert "idx_view = arange[::-1]" in src and "i = np.arange(2, dtype=np.int64)" in src
    fd = [_fd_along(indexed_by_ranges, x, e) for e in np.eye(4)]
    np.testing.assert_allclose(d.grad(x), fd, rtol=1e-7)


def listed_indices(x):
    perm = np.array([2, 0, 1])
    return np.sum(x[perm] * x) + np.sum(x[perm[:2]])


def test_an_index_array_of_the_users_data_is_a_constant_named_after_it():
    x = np.array([0.5, -1.0, 2.0])
    d = pb.differentiate(listed_indices)
    assert _keyword_only(d.source(x)) == ["perm", "perm_view"]
    fd = [_fd_along(listed_indices, x, e) for e in np.eye(3)]
    np.testing.assert_allclose(d.grad(x), fd, rtol=1e-7)
