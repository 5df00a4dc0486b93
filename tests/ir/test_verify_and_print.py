import numpy as np
import pytest

import pullback as pb
from pullback.ir.core import Eqn, Literal, Params, Program, Var
from pullback.ir.types import ArrayType
from pullback.primitives import elementwise as ew
from pullback.primitives import reductions as red
from tests.conftest import check_golden

F3 = ArrayType((3,), np.float64)


def test_types_print_compactly():
    assert str(ArrayType((3, 4), np.float64)) == "f64[3,4]"
    assert str(ArrayType((), np.complex128)) == "c128[]"
    assert str(ArrayType((5,), np.int64)) == "i64[5]"
    assert str(ArrayType((2,), np.float16)) == "f16[2]"
    with pytest.raises(TypeError, match="uint8 is not supported"):
        ArrayType((2,), np.uint8)


def test_verifier_accepts_a_good_program():
    x, y = Var(F3, "x"), Var(F3, "y")
    pb.verify(Program((x,), (Eqn(ew.exp_p, (x,), (y,)),), (y,)))


def test_verifier_rejects_use_before_def():
    x, y, z = Var(F3, "x"), Var(F3, "y"), Var(F3, "z")
    prog = Program((x,), (Eqn(ew.add_p, (x, z), (y,)), Eqn(ew.exp_p, (x,), (z,))), (y,))
    with pytest.raises(pb.VerificationError, match=r"equation 0 \(add\).*used before it is defined"):
        pb.verify(prog)


def test_verifier_rejects_wrong_output_type():
    x, y = Var(F3, "x"), Var(ArrayType((3,), np.float32), "y")
    with pytest.raises(pb.VerificationError, match="typed f32.3. but the shape rule gives f64.3."):
        pb.verify(Program((x,), (Eqn(ew.exp_p, (x,), (y,)),), (y,)))


def test_verifier_rejects_double_definition_and_bad_params():
    x, y = Var(F3, "x"), Var(F3, "y")
    with pytest.raises(pb.VerificationError, match="defined more than once"):
        pb.verify(Program((x,), (Eqn(ew.exp_p, (x,), (y,)), Eqn(ew.exp_p, (x,), (y,))), (y,)))
    s = Var(ArrayType((), np.float64))
    with pytest.raises(pb.VerificationError, match="reduction axes"):
        pb.verify(Program((x,), (Eqn(red.reduce_sum_p, (x,), (s,), Params({"axes": (1,)})),), (s,)))


def test_verifier_rejects_mismatched_operands_and_undefined_output():
    x, y = Var(F3, "x"), Var(ArrayType((4,), np.float64))
    with pytest.raises(pb.VerificationError, match="different shapes"):
        pb.verify(Program((x, y), (Eqn(ew.add_p, (x, y), (Var(F3),)),), ()))
    with pytest.raises(pb.VerificationError, match="program output"):
        pb.verify(Program((x,), (), (Var(F3),)))
    lit = Literal(2.0, ArrayType((), np.float64))
    z = Var(F3)
    pb.verify(Program((x,), (Eqn(ew.mul_p, (lit, x), (z,)),), (z,)))


def _model(w, X, y):
    margin = (X @ w) * y
    loss = np.log1p(np.exp(-margin))
    return loss.mean() + 0.5 * np.sum(w**2)


def test_printer_golden():
    prog = pb.make_ir(_model)(np.ones(3), np.ones((5, 3)), np.ones(5))
    check_golden("printer_model.txt", str(prog) + "\n")
