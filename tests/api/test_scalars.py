"""Python scalar arguments: values derived from them through operators stay Python scalars at run
time, so the generated code makes arrays of those that reach a method call (``.astype``)."""

import numpy as np
import pytest

import pullback as pb


def test_comparison_of_scalars_then_cast():
    f = lambda x, y: np.sum(x < y) + 0.0  # noqa: E731
    assert pb.jit(f)(2.0, 3.0) == f(2.0, 3.0) == 1.0
    assert pb.jit(f)(3.0, 2.0) == 0.0


def test_jvp_of_maximum_of_a_scalar_with_itself():
    y, y_dot = pb.jvp(lambda x: np.maximum(x, x), (1.0,), (1.0,))
    assert y == 1.0
    assert y_dot == 1.0  # NumPy's maximum(x, x) is x: half the tangent through each side


def test_expand_dims_of_a_scalar_product():
    f = lambda s: np.expand_dims(s * 2., 0)  # noqa: E731
    out = pb.jit(f)(2.)
    np.testing.assert_array_equal(out, f(2.))
    assert out.shape == (1,)


@pytest.mark.parametrize("s, expected", [(1., 1.), (0.1, 0.)])
def test_grad_of_maximum_with_a_constant(s, expected):
    assert pb.grad(lambda s: np.maximum(s, .25))(s) == expected


def test_printed_module_runs_standalone_on_python_scalars():
    src = pb.source(lambda x, y: np.sum(x < y) + 0.0, 2.0, 3.0)
    namespace: dict = {}
    exec(compile(src, "<generated>", "exec"), namespace)
    assert namespace["f"](2.0, 3.0) == 1.0 and namespace["f"](3.0, 2.0) == 0.0


def test_scalars_used_only_by_operators_stay_scalars():
    src = pb.source(lambda x, y: x * y + 1.0, 2.0, 3.0)
    assert "asarray" not in src
    assert pb.jit(lambda x, y: x * y + 1.0)(2.0, 3.0) == 7.0
