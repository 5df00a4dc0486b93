"""The CuPy backend: every program the NumPy backend prints, printed for the GPU.

CuPy mirrors NumPy's API, so the NumPy emitters serve here with their ``np.`` calls
renamed ``cp.`` (``np.linalg.LinAlgError`` and host-side ``np.ndindex`` loops stay).
The linear-algebra primitives print as cuSOLVER and cuBLAS calls:

- ``potrf`` and ``getrf`` call cuSOLVER through CuPy's thin wrappers, keeping ``info`` on
  the device; a checked factorisation reads it back once (``if info:``, one
  device-to-host synchronisation), the ``_ex`` variants never do. ``getrf`` also copies
  its pivots to the host once to build the row permutation (a sequence of swaps);
- ``trsm`` calls cuBLAS trsm on the C arrays' buffers (the CPU backend's F-view trick: no
  transposing copies, in place when the right-hand side is dead); ``trmm`` and ``syrk``
  are cuBLAS products (CuPy exposes no trmm); ``potri`` is two cuBLAS triangular solves in an
  identity (CuPy binds no potri);
- QR/LQ, eigh and SVD are ``cp.linalg`` (cuSOLVER geqrf/orgqr, syevd/heevd, gesvd),
  with the CPU backend's deterministic phases for complex vectors (real ones keep cuSOLVER's
  signs, as NumPy's keep LAPACK's);
- complete pivoting is the CPU backend's kernel in CuPy array operations (it reads each
  pivot's position back, one synchronisation per step).

Generated CuPy source imports only ``numpy`` and ``cupy``/``cupyx``.
"""

from __future__ import annotations

import libcst as cst
import numpy as np

from pullback.backends import syntax as s
from pullback.backends.codegen import DEL_BYTES
from pullback.backends.numpy import backend as npb
from pullback.backends.numpy import indexing as numpy_indexing
from pullback.backends.numpy import linalg as npl
from pullback.backends.numpy import random as numpy_random
from pullback.backends.numpy import signal as numpy_signal
from pullback.backends.numpy import special as numpy_special
from pullback.backends.numpy.backend import Context
from pullback.backends.stacked import stack_p
from pullback.backends.syntax import Expr
from pullback.ir.core import Literal
from pullback.primitives import elementwise as ew
from pullback.primitives import indexing as ix
from pullback.primitives import random as rnd
from pullback.primitives import signal as sg
from pullback.primitives import special as sp
from pullback.primitives import structural as st
from pullback.primitives.linalg import factorizations as la
from pullback.primitives.linalg import rank_update as rk

IMPORTS = {"np": "numpy", "cp": "cupy"}
IN_PLACE = npb.IN_PLACE
OPTIONAL_RESULTS = npb.OPTIONAL_RESULTS  # results the emitters leave unassigned when nothing reads them
SCALARS_AS_ARRAYS = True  # Python scalar arguments go to the device as 0-d arrays
FUSE = "cp.fuse"  # runs of elementwise operations print as one @cp.fuse() kernel (see fusion.py)
KEEP_NUMPY = frozenset({"linalg", "ndindex"})  # np.linalg.LinAlgError; host loops over batch indices


class _HostNumPy(cst.Name):
    """An ``np`` that stays NumPy in a CuPy program: a host value, such as cuBLAS's alpha."""


class _ToCuPy(cst.CSTTransformer):
    """``np.exp`` -> ``cp.exp``."""

    def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute) -> cst.Attribute:
        if isinstance(original.value, _HostNumPy):  # (libcst rebuilds the child as a plain Name)
            return updated
        if isinstance(updated.value, cst.Name) and updated.value.value == "np" and updated.attr.value not in KEEP_NUMPY:
            return updated.with_changes(value=cst.Name("cp"))
        return updated


_TO_CUPY = _ToCuPy()


def to_cupy(node):
    return [n.visit(_TO_CUPY) for n in node] if isinstance(node, list) else node.visit(_TO_CUPY)


def _renamed(emit):
    return lambda ctx, eqn, ins, outs: to_cupy(emit(ctx, eqn, ins, outs))


def empty(t):
    return to_cupy(npb.empty(t))


def zeros(t):
    return to_cupy(npb.zeros(t))


def configure(ctx: Context, program) -> None:
    ctx.use("cp")


def in_place(eqn, ins, k, where: str = "", ctx=None):  # CuPy's add.at is atomic adds: kept (no ctx below)
    if eqn.prim is st.add_diagonal_p:
        return [_diagonal_update(ins[0], ins[1])]
    return _by_parts(eqn, to_cupy(npb.in_place(eqn, ins, k, where)))


def _by_parts(eqn, stmts: list) -> list:
    """``cupy.add.at`` takes no complex values: a repeated-index update of a complex array adds the
    real and the imaginary parts, each through its view (``x.real``, ``x.imag``)."""
    if not (eqn.prim is ix.scatter_add_p and eqn.outputs[0].dtype.kind == "c" and not eqn.params["unique_indices"]):
        return stmts
    call = stmts[-1].body[0].value  # cp.add.at(x, key, v)
    x, key, v = (a.value for a in call.args)
    return [*stmts[:-1], *(s.statement(s.call("cp.add.at", s.attribute(x, part), key, s.attribute(v, part)))
                           for part in ("real", "imag"))]


def _diagonal_update(x: Expr, v: Expr) -> cst.SimpleStatementLine:
    """``cp.diagonal(x)[...] += v``: CuPy's diagonal is a writable view, so one small kernel
    updates x (``x[cp.diag_indices(n)]`` would build index arrays and gather, then scatter)."""
    view = s.subscript(s.call("cp.diagonal", x), [cst.Ellipsis()])
    return s.statement(cst.AugAssign(view, cst.AddAssign(), v))


def constant(value):
    """Program constants (closed-over NumPy arrays) move to the device once, at compile time;
    objects the program calls (a random generator whose draws it makes) stay as they are."""
    import cupy

    return cupy.asarray(value) if isinstance(value, np.ndarray | np.generic | int | float | complex) else value


def asarray(value):
    import cupy

    return cupy.asarray(value)


EMITTERS = {p: _renamed(e) for p, e in npb.EMITTERS.items()}
EMITTERS[st.broadcast_in_dim_p] = _renamed(npb.broadcast_array)  # (a 0-d fill: a device array too)
EMITTERS[ix.scatter_add_p] = lambda ctx, eqn, ins, outs: _by_parts(eqn, to_cupy(numpy_indexing.scatter(
    ctx, eqn, ins, outs, sums=False)))


def emits(prim):
    def register(fn):
        EMITTERS[prim] = _renamed(npl.batched(fn))
        return fn

    return register


def _cusolver(ctx: Context, name: str, dtype) -> Expr:
    return s.dotted(f"cp.cuda.cusolver.{npl.PREFIX[np.dtype(dtype)]}{name}")


def _cublas(name: str, dtype) -> Expr:
    return s.dotted(f"cp.cuda.cublas.{npl.PREFIX[np.dtype(dtype)]}{name}")


def _enum(name: str) -> Expr:
    return s.dotted(f"cp.cuda.cublas.CUBLAS_{name}")


def _ptr(x: Expr) -> Expr:
    return s.attribute(s.attribute(x, "data"), "ptr")


def _cupyx(ctx: Context, name: str) -> Expr:
    ctx.use("cupyx.scipy.linalg")
    return s.dotted(f"cupyx.scipy.linalg.{name}")


def _workspace(ctx, work: cst.Name, size: Expr, dtype) -> cst.SimpleStatementLine:
    return s.assign([work], s.call("cp.empty", size, dtype=s.dtype(dtype)))


def _free_workspace(work: cst.Name, matrix) -> list[cst.SimpleStatementLine]:
    """``del work`` after a cuSOLVER call where the workspace may weigh as much as an array the printed
    programs free (its size, known on the device only, grows with the matrix's: ``codegen.DEL_BYTES``);
    a library handle or a 0-d host scalar (cuBLAS's alpha) is never worth a ``del``."""
    return [s.statement(cst.Del(work))] if matrix.size * matrix.dtype.itemsize >= DEL_BYTES else []


@emits(la.potrf_p)
def _potrf(ctx, eqn, ins, outs):
    """cuSOLVER reads the C array column-major, as A^T = conj(A): its upper factor U
    (conj(A) = U^H U), read back row-major, is L = U^T (CuPy's own cholesky does this)."""
    (a,), (l, info) = ins, outs
    dt, n = eqn.inputs[0].dtype, eqn.inputs[0].shape[-1]
    handle, work = s.name(ctx.fresh("handle")), s.name(ctx.fresh("work"))
    upper = _enum("FILL_MODE_UPPER")
    size = s.call(_cusolver(ctx, "potrf_bufferSize", dt), handle, upper, s.number(n), _ptr(l), s.number(n))
    stmts = [
        s.assign([l], s.call("cp.ascontiguousarray", a) if 0 in ctx.reusable else s.method(a, "copy")),
        s.assign([info], s.call("cp.zeros", s.ints(()), dtype=s.dtype(np.int32))),
        s.assign([handle], s.call("cp.cuda.device.get_cusolver_handle")),
        _workspace(ctx, work, size, dt),
        s.statement(s.call(_cusolver(ctx, "potrf", dt), handle, upper, s.number(n), _ptr(l), s.number(n),
                           _ptr(work), s.attribute(work, "size"), _ptr(info))),
        *_free_workspace(work, eqn.inputs[0].type),
    ]
    if eqn.params["check"]:
        stmts.append(npl.raise_if(info, ctx, "cholesky: the leading minor of order {} is not positive definite "
                                             "(cuSOLVER potrf info={})", s.call("int", info), s.call("int", info)))
    return [*stmts, s.assign([l], s.call("cp.tril", l))]


@emits(la.trsm_p)
def _trsm(ctx, eqn, ins, outs):
    """cuBLAS trsm on the C arrays' buffers, read column-major as their transposes:
    op(A) X = B is X^T op(A)^T = B^T, the other side and the other triangle with the same op
    (as the CPU backend's F-views). No transposing copies; B is solved in place when dead.
    A single column is its own transpose: it is solved from the left (a right-side solve
    of one row is several times slower in cuBLAS), with op(A) = op'(A^T)."""
    (a, b), (x,) = ins, outs
    return [
        *to_cupy(npl.singular_check(ctx, eqn, a)),
        s.assign([x], s.call("cp.ascontiguousarray", b) if 1 in ctx.reusable else s.method(b, "copy")),
        *_trsm_in_place(ctx, a, x, eqn.params, eqn.inputs[0].dtype, eqn.inputs[1].shape[-2:], eqn.inputs[0].shape[-1]),
    ]


def _trsm_in_place(ctx, a: Expr, x: Expr, p, dt, shape: tuple[int, int], order: int) -> list:
    """The cuBLAS call solving in the C array ``x`` (``shape``) by the ``order`` x ``order`` triangle ``a``,
    as trsm with params ``p``."""
    m, n = shape
    trans = 1 if int(p["trans"]) == 2 and dt.kind != "c" else int(p["trans"])
    alpha = float(p.get("alpha", 1.0))  # cuBLAS reads alpha through a host pointer
    handle, one = s.name(ctx.fresh("handle")), s.name(ctx.fresh("one" if alpha == 1.0 else "alpha"))
    column = p["left"] and n == 1 and trans != 2
    if column:
        side, op, (m, n) = "SIDE_LEFT", ("OP_T", "OP_N")[trans], (n, m)
    else:
        side, op = "SIDE_RIGHT" if p["left"] else "SIDE_LEFT", ("OP_N", "OP_T", "OP_C")[trans]
    flags = [_enum(side), _enum("FILL_MODE_UPPER" if p["lower"] else "FILL_MODE_LOWER"), _enum(op),
             _enum("DIAG_UNIT" if p["unit_diagonal"] else "DIAG_NON_UNIT")]
    k = s.number(order)
    head = [handle, *flags, s.number(n), s.number(m), s.attribute(s.attribute(one, "ctypes"), "data"),
            _ptr(s.call("cp.ascontiguousarray", a)), k]
    return [
        s.assign([handle], s.call("cp.cuda.device.get_cublas_handle")),
        s.assign([one], s.call(cst.Attribute(_HostNumPy("np"), cst.Name("ones")), s.ints(()), dtype=s.dtype(dt))
                 if alpha == 1.0 else s.call(cst.Attribute(_HostNumPy("np"), cst.Name("full")), s.ints(()),
                                             s.number(alpha), dtype=s.dtype(dt))),
        s.statement(s.call(_cublas("trsm", dt), *head, _ptr(x), s.number(n))),
    ]


def _op(x: Expr, trans: int, complex_: bool) -> Expr:
    if trans == 0:
        return x
    return s.attribute(s.method(x, "conj") if trans == 2 and complex_ else x, "T")


@emits(la.trmm_p)
def _trmm(ctx, eqn, ins, outs):
    """A triangular product is a cuBLAS product with the other triangle masked off
    (CuPy exposes no cuBLAS trmm)."""
    (a, b), (y,) = ins, outs
    p = eqn.params
    n = eqn.inputs[0].shape[-1]
    dt = eqn.inputs[0].dtype
    tri = "cp.tril" if p["lower"] else "cp.triu"
    if p["unit_diagonal"]:
        t = s.binop(s.call(tri, a, s.number(-1 if p["lower"] else 1)), "+",
                    s.call("cp.eye", s.number(n), dtype=s.dtype(dt)))
    else:
        t = s.call(tri, a)
    t = _op(t, int(p["trans"]), dt.kind == "c")
    product = s.binop(t, "@", b) if p["left"] else s.binop(b, "@", t)
    alpha = p.get("alpha", 1.0)
    return [s.assign([y], product if alpha == 1.0 else s.binop(s.number(float(alpha)), "*", product))]


@emits(la.potri_p)
def _potri(ctx, eqn, ins, outs):
    """(L L^H)^{-1} = L^{-H} (L^{-1} I): two cuBLAS triangular solves in place in an identity, as the
    triangular solves print (no explicit product, no copy of the factor)."""
    (l,), (b,) = ins, outs
    n, dt = eqn.inputs[0].shape[-1], eqn.inputs[0].dtype
    solve = {"left": True, "lower": True, "unit_diagonal": False}
    return [
        s.assign([b], s.call("cp.eye", s.number(n), dtype=s.dtype(dt))),
        *_trsm_in_place(ctx, l, b, {**solve, "trans": 0}, dt, (n, n), n),
        *_trsm_in_place(ctx, l, b, {**solve, "trans": 2}, dt, (n, n), n),
    ]


@emits(la.geqrf_p)
def _geqrf(ctx, eqn, ins, outs):
    return [s.assign(outs, s.call("cp.linalg.qr", ins[0]))]


@emits(la.gelqf_p)
def _gelqf(ctx, eqn, ins, outs):
    """LQ of A is the transposed QR of A^T, as on the CPU (the same factors, phases included)."""
    (a,), (l, q) = ins, outs
    q_t, r_t = s.name(ctx.fresh("q_t")), s.name(ctx.fresh("r_t"))
    return [
        s.assign([q_t, r_t], s.call("cp.linalg.qr", s.attribute(a, "T"))),
        s.assign([l], s.attribute(r_t, "T")),
        s.assign([q], s.attribute(q_t, "T")),
    ]


@emits(la.syevd_p)
def _syevd(ctx, eqn, ins, outs):
    (a,), (w, v) = ins, outs
    n, dt = eqn.inputs[0].shape[-1], eqn.inputs[0].dtype
    upper = {} if eqn.params["lower"] else {"UPLO": cst.SimpleString('"U"')}
    stmts = [s.assign([w, v], s.call("cp.linalg.eigh", a, **upper))]
    return stmts + (npl._fix_phase(ctx, v, n, [], True) if dt.kind == "c" else [])  # real: cuSOLVER's signs


@emits(la.gesvd_p)
def _gesvd(ctx, eqn, ins, outs):
    (a,), (u, sv, vh) = ins, outs
    k, dt = min(eqn.inputs[0].shape[-2:]), eqn.inputs[0].dtype
    stmts = [s.assign([u, sv, vh], s.call("cp.linalg.svd", a, full_matrices=s.number(False)))]
    return stmts + (npl._fix_phase(ctx, u, k, [vh], True) if dt.kind == "c" else [])  # real: cuSOLVER's signs


@emits(la.getrf_p)
def _getrf(ctx, eqn, ins, outs):
    """cuSOLVER getrf on a column-major copy; 1-based pivots made 0-based; the row
    permutation applies the pivots' swaps in order, on the host (one copy of k integers)."""
    (a,), (lu, piv, perm, info) = ins, outs
    dt, (m, n) = eqn.inputs[0].dtype, eqn.inputs[0].shape[-2:]
    k = min(m, n)
    handle, work = s.name(ctx.fresh("handle")), s.name(ctx.fresh("work"))
    i, j = s.name(ctx.fresh("i")), s.name(ctx.fresh("j"))
    size = s.call(_cusolver(ctx, "getrf_bufferSize", dt), handle, s.number(m), s.number(n), _ptr(lu), s.number(m))
    stmts = [
        s.assign([lu], s.call("cp.asfortranarray" if 0 in ctx.reusable else "cp.array", a,
                              **({} if 0 in ctx.reusable else {"order": cst.SimpleString("'F'")}))),
        s.assign([piv], s.call("cp.empty", s.number(k), dtype=s.dtype(np.int32))),
        s.assign([info], s.call("cp.zeros", s.ints(()), dtype=s.dtype(np.int32))),
        s.assign([handle], s.call("cp.cuda.device.get_cusolver_handle")),
        _workspace(ctx, work, size, dt),
        s.statement(s.call(_cusolver(ctx, "getrf", dt), handle, s.number(m), s.number(n), _ptr(lu), s.number(m),
                           _ptr(work), _ptr(piv), _ptr(info))),
        *_free_workspace(work, eqn.inputs[0].type),
        s.statement(cst.AugAssign(piv, cst.SubtractAssign(), s.number(1))),
    ]
    if eqn.params["check"]:
        stmts.append(npl.raise_if(s.binop(info, ">", s.number(0)), ctx,
                                  "singular matrix: U[{}, {}] is exactly zero (cuSOLVER getrf info={})",
                                  s.binop(s.call("int", info), "-", s.number(1)),
                                  s.binop(s.call("int", info), "-", s.number(1)), s.call("int", info)))
    if 2 in ctx.unused:  # nothing reads the permutation (OPTIONAL_RESULTS): no host copy of the pivots
        return stmts
    swap = cst.Assign([cst.AssignTarget(s.tuple_([s.subscript(perm, [i]), s.subscript(perm, [j])], parens=False))],
                      s.tuple_([s.subscript(perm, [j]), s.subscript(perm, [i])], parens=False))
    return [
        *stmts,
        s.assign([perm], s.call("list", s.call("range", s.number(m)))),
        cst.For(target=s.tuple_([i, j], parens=False),
                iter=s.call("enumerate", s.method(s.method(piv, "get"), "tolist")),
                body=cst.IndentedBlock([s.statement(swap)])),
        s.assign([perm], s.call("cp.asarray", perm, dtype=s.dtype(np.int32))),
    ]


def _expit(ctx, eqn, ins, outs):
    ctx.use("cupyx.scipy.special")
    return s.call("cupyx.scipy.special.expit", ins[0])


EMITTERS[ew.logistic_p] = _expit
# cupyx.scipy.special has no Bessel function of a real order, and real-only erf and erfc
CUPYX_LACKS = frozenset({sp.jv_p, sp.yv_p, sp.iv_p, sp.ive_p, sp.kv_p, sp.kve_p})
CUPYX_REAL_ONLY = frozenset({sp.erf_p, sp.erfc_p})


def lacks(eqn) -> bool:
    """Whether CuPy has no routine for ``eqn``, so that printing it for CuPy raises."""
    return (eqn.prim in CPU_ONLY or eqn.prim in CUPYX_LACKS
            or (eqn.prim in CUPYX_REAL_ONLY and eqn.inputs[0].dtype.kind == "c"))


def _cupyx_special(name: str):
    emit = numpy_special.emitter("cupyx.scipy.special", name)

    def checked(ctx, eqn, ins, outs):
        if eqn.prim in CUPYX_LACKS:
            raise NotImplementedError(f"scipy.special.{name} ({eqn.prim.name}) has no CuPy emitter: "
                                      f"cupyx.scipy.special has no {name}; run it on the CPU")
        if lacks(eqn):
            raise NotImplementedError(f"scipy.special.{name} of complex values has no CuPy emitter: "
                                      f"cupyx.scipy.special.{name} takes real values only; run it on the CPU")
        return emit(ctx, eqn, ins, outs)

    return checked


for _p, _name in sp.SCIPY_NAMES.items():
    EMITTERS[_p] = _cupyx_special(_name)
def _conv_method(eqn) -> sg.ConvMethod:
    """cupyx chooses a method for 1-D operands only: of more axes, ``auto`` prints the one SciPy's
    estimate mostly picks, direct sums for small operands and FFTs (inexact dtypes) for large."""
    a, b = eqn.inputs
    if eqn.params["method"] is not sg.ConvMethod.AUTO or a.type.ndim == 1:
        return eqn.params["method"]
    large = a.dtype.kind in "fc" and a.type.size * b.type.size > 1 << 16
    return sg.ConvMethod.FFT if large else sg.ConvMethod.DIRECT


EMITTERS[sg.convolve_p] = EMITTERS[sg.correlate_p] = numpy_signal.emitter("cupyx.scipy.signal", _conv_method)
EMITTERS[rnd.draw_p] = numpy_random.emitter("cp.asarray")


def _yn(ctx, eqn, ins, outs):
    """cupyx's yn is nan at negative orders: there Y_{-n} = (-1)^n Y_n."""
    n = eqn.inputs[0]
    if isinstance(n, Literal) and n.value >= 0:
        return _cupyx_special("yn")(ctx, eqn, ins, outs)
    (out,) = outs
    ctx.use("cupyx.scipy.special")
    if isinstance(n, Literal):
        order = numpy_special.order_expr(Literal.of(-n.value, n.dtype), s.number(-n.value), "yn",
                                         eqn.inputs[1].dtype, False)
        y = s.call("cupyx.scipy.special.yn", order, ins[1])
        return [s.assign(outs, s.neg(y) if int(n.value) % 2 else y)]
    y = s.call("cupyx.scipy.special.yn", s.call("cp.abs", ins[0]), ins[1])
    odd = s.binop(s.binop(ins[0], "%", s.number(2)), "==", s.number(1))
    odd_negative = s.binop(s.binop(ins[0], "<", s.number(0)), "&", odd)
    return [s.assign(outs, y), s.assign(outs, s.call("cp.where", odd_negative, s.neg(out), out))]


EMITTERS[sp.yn_p] = _yn


# One kernel reads x.T well enough on a GPU; the CPU's cache tiling would be 1000 launches.
EMITTERS[stack_p] = _renamed(npb.stacked_arrays)  # ``cp.stack`` of 0-d arrays too (no ``cp.array`` of a tuple)
EMITTERS[st.add_transpose_p] = lambda ctx, eqn, ins, outs: s.binop(ins[0], "+", s.attribute(ins[0], "T"))


@emits(rk.ger_p)
def _ger(ctx, eqn, ins, outs):
    """A + alpha x y^T; CuPy's elementwise outer product (cuBLAS ger has no SciPy-style binding in CuPy)."""
    a, x, y = ins
    alpha = eqn.params.get("alpha", 1.0)
    outer = s.call("cp.multiply.outer", x if alpha == 1.0 else s.binop(x, "*", s.number(float(alpha))), y)
    return [s.assign(outs, s.binop(a, "+", outer))]


# --- pullback.primitives.linalg.matrix_functions ------------------------------------------------------------

from pullback.primitives.linalg import banded as bd  # noqa: E402
from pullback.primitives.linalg import matrix_functions as lx  # noqa: E402

_PERMUTATION = """
{perm} = []
for {piv_k} in {piv}.get().reshape(-1, {n}).tolist():
    {p} = list(range({n}))
    for {i}, {j} in enumerate({piv_k}):
        {p}[{i}], {p}[{j}] = {p}[{j}], {p}[{i}]
    {perm}.append({p})
{perm} = cp.asarray({perm}, dtype=cp.int32).reshape({shape})
"""


def _pivots_to_permutation(ctx, eqn, ins, outs):
    """The pivots' swaps on the host, in Python lists, between one copy each way (as getrf prints
    them): an element of a CuPy array is a view, so a tuple swap on the device would copy one entry
    over the other, and each would be a kernel."""
    shape = eqn.inputs[0].shape
    names = {h: s.name(ctx.fresh(h)) for h in ("piv_k", "p", "i", "j")}
    module = cst.helpers.parse_template_module(_PERMUTATION, perm=outs[0], piv=ins[0], n=s.number(shape[-1]),
                                               shape=s.ints(shape), **names)
    return list(module.body)


EMITTERS[lx.pivots_to_permutation_p] = _pivots_to_permutation


@emits(lx.pinv_p)
def _pinv(ctx, eqn, ins, outs):
    """CuPy's pinv (cuSOLVER gesvd), one matrix at a time."""
    return [s.assign(outs, s.call("cp.linalg.pinv", *ins, rcond=s.number(eqn.params["rcond"])))]



@emits(lx.geev_p)
def _geev(ctx, eqn, ins, outs):
    """``cp.linalg.eig`` (CuPy >= 14, cuSOLVER Xgeev): complex results, cuSOLVER's order
    (which may differ from LAPACK's), then pullback's phase."""
    (a,), (w, v) = ins, outs
    dt, n = eqn.outputs[1].dtype, eqn.inputs[0].shape[-1]
    return [s.assign([w, v], s.call("cp.linalg.eig", a)),
            s.assign([w], s.method(w, "astype", s.dtype(dt), copy=s.number(False))),
            s.assign([v], s.method(v, "astype", s.dtype(dt), copy=s.number(False))),
            *npl._fix_phase(ctx, v, n, [], True)]


@emits(lx.expm_p)
def _expm(ctx, eqn, ins, outs):
    return [s.assign(outs, s.call(_cupyx(ctx, "expm"), *ins))]


@emits(lx.expm_frechet_p)
def _expm_frechet(ctx, eqn, ins, outs):
    """L(A, E) as the upper right block of expm([[A, E], [0, A]]) (cupyx has no expm_frechet)."""
    (a, e), (out,) = ins, outs
    n = eqn.inputs[0].shape[-1]
    block = s.name(ctx.fresh("block"))
    top, bottom, left, right = (s.slice_(None, n, None), s.slice_(n, None, None)) * 2
    put = [s.statement(cst.Assign([cst.AssignTarget(s.subscript(block, [r, c]))], x))
           for r, c, x in ((top, left, a), (top, right, e), (bottom, right, a))]
    return [s.assign([block], s.call("cp.zeros", s.ints((2 * n, 2 * n)), dtype=s.dtype(eqn.inputs[0].dtype))),
            *put, s.assign([out], s.subscript(s.call(_cupyx(ctx, "expm"), block), [top, right]))]


def _cpu_only(name: str, missing: str):
    def emit(ctx, eqn, ins, outs):
        raise NotImplementedError(f"{name} ({eqn.prim.name}) has no CuPy emitter: CuPy has no {missing}; "
                                  "run it on the CPU")

    return emit


CPU_ONLY = {lx.sqrtm_p: "sqrtm", lx.trsyl_p: "solve_sylvester", bd.gbsv_p: "solve_banded"}  # printing them raises
_MISSING = {bd.gbsv_p: "banded solver"}
for _prim, _name in CPU_ONLY.items():
    EMITTERS[_prim] = _cpu_only(_name, _MISSING.get(_prim, "Schur decomposition"))

from pullback.backends.cupy import factor_solves as cupy_factored  # noqa: E402,F401  (getrs, getri, potrs)
