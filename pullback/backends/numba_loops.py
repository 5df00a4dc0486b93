"""Loops compiled by Numba: each ``scan`` or ``while`` of a program whose bodies Numba can compile is
printed as a module-level function under ``@numba.njit(cache=True, error_model="numpy")`` (a division
by zero is inf or nan, as in NumPy, not Python's ZeroDivisionError; but without NumPy's warning) and
called from the printed
Python program, so that a loop of many small steps costs a compiled loop, not a Python statement and
a NumPy dispatch (about a microsecond each) per operation per step.

The compiled function is the loop as the NumPy backend prints it (ordinary Python, readable, runnable
without pullback and, with the decorator removed, without Numba), with three differences Numba
needs: no ``del`` and no ``out=`` (both unsupported; the kernel's locals die with it), stacked results
preallocated rather than kept in lists, and 0-d operands passed as scalars (``np.float64(c)``:
inside, a 0-d array and the float it becomes cannot share a name) and returned results made NumPy
scalars again. A reshape of a 0-d value (``np.stack`` of scalars) is printed as a broadcast, which
takes Numba's floats, and a reshape to a 0-d value (``np.ravel``'s derivative) as an index, which
gives them.

Inside a compiled loop a few operations print otherwise (``emitter``): a Cholesky factor and triangular
solves and products as the small compiled functions of ``HELPERS`` (a Kalman filter's step and its
transpose), NumPy spellings Numba lacks in ones it has, and a run of elementwise arithmetic on vectors,
reading shifted or padded copies of vectors (``np.roll``, a stencil), as loops over the grid (``grids``).

Which loops (``compile=``): ``"numba"`` every loop Numba can compile; ``"auto"`` those where the
per-operation dispatch saved outweighs the compile (``worth_compiling``: many small steps, not a few
large BLAS calls) and, where Numba's on-disk cache lacks them, compiled in a subprocess once the program
has run for ``AUTO_WARM_SECONDS`` as NumPy, its calls running NumPy meanwhile (``numba_warming``,
``api.transforms.Staged._warming``); ``"numpy"`` none. A loop that
stays NumPy under ``"numba"`` says why, in the log and in a comment above the printed function. The
printed module is written to a cache directory under the hash of its source (``module_file``), as
Numba's on-disk cache needs a real file: the compiled machine code is reused across calls and processes.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import sys
import types
from collections.abc import Iterator

import libcst as cst

from pullback.backends import syntax as s
from pullback.ir.core import WITH_BODIES, Eqn, Opaque, Params, Primitive, Program, Var, sub_programs
from pullback.ir.types import StackType
from pullback.log import logger
from pullback.primitives import contractions, control, cumulative, elementwise, indexing, reductions, structural
from pullback.primitives.linalg import factorizations as la

MODES = ("auto", "numba", "numpy")

njit_p = Primitive("njit", multiple_results=True, registered=False)  # made while printing only
WITH_BODIES.add(njit_p)

# Whose printed NumPy Numba compiles (some spellings aside: a product printed as ``np.einsum``, a
# reshape of a non-contiguous view, which then fail to compile and the program runs as NumPy).
_FAMILIES = (elementwise, structural, reductions, contractions, indexing, cumulative)
# Scatters print as ``np.add.at``, which Numba lacks.
# The factorisation and triangular products of a Kalman filter's step print as the small functions of
# ``HELPERS`` (real matrices, unbatched: ``linalg_obstacle``).
LINALG = frozenset({la.potrf_p, la.trsm_p, la.trmm_p})
COMPILABLE = frozenset(v for m in _FAMILIES for v in vars(m).values() if isinstance(v, Primitive)) - {
    indexing.scatter_p, indexing.scatter_add_p} | {control.scan_p, control.while_p, control.cond_p} | LINALG

# ``auto``: a loop is compiled when it prints at least this many operations per call (steps times
# operations per step; about a microsecond of Python and NumPy dispatch each, so half a millisecond
# a call) and its step's largest array is small: beyond a few thousand numbers NumPy's own loops dominate
# the dispatch, and the seconds of a first compile are not repaid soon (a fluid simulation's 110 x 110 grid:
# its first call went from 1.8x to 2.2x an eager autograd call when compiled).
AUTO_MIN_OPERATIONS = 500
AUTO_MAX_ELEMENTS = 2_048
# ... and its factorisations and triangular solves are of matrices at most this wide: ``HELPERS`` are plain
# loops, about as fast as a LAPACK call's dispatch at 16 (a Kalman filter of 64 states runs 2x faster as NumPy).
AUTO_MAX_FACTOR_N = 16
# ... and, where Numba's on-disk cache lacks its compiled functions (``cached``), compiled in a subprocess once the
# program has spent this long running as NumPy (``numba_warming``), its calls running NumPy meanwhile. Measured
# (``benchmarks/tiering.py``): a cold compile takes 3 to 18 CPU seconds, a compiled call saves 1.4 to 60 ms, so the
# compile pays for itself after 500 to 5,000 calls, 4 to 40 s of NumPy calls, which a program run once never
# reaches. In a subprocess the compile costs the calls nothing but the switch (importing Numba and loading the
# loops from the cache: 0.3 to 0.6 s), so it starts once the calls have taken twice that; the CPU it spends on
# another core (once: the cache keeps the code for the next run) is the price of a program that stops before.
AUTO_WARM_SECONDS = 1.0
# Where no subprocess can start, the loops compile in the calling process, which waits, once the calls have taken
# as long as that compile should (ski rental: at most twice the better of never compiling and compiling at once,
# had the compile's time been known): about this long per compiled function (1.6 to 3.7 CPU s each, measured;
# the printed lines predict it no better), which balances the worst cases of the estimate's errors at 2.5x.
AUTO_COMPILE_SECONDS_PER_FUNCTION = 2.5


def compile_estimate(source: str) -> float:
    """The seconds Numba should take to compile the functions of the printed module ``source`` (see
    ``AUTO_COMPILE_SECONDS_PER_FUNCTION``)."""
    return AUTO_COMPILE_SECONDS_PER_FUNCTION * source.count("@numba.njit")


def check_mode(mode: str) -> str:
    """``mode`` if it is one of ``MODES``, else a ValueError naming them."""
    if mode not in MODES:
        raise ValueError(f"compile={mode!r}: expected one of {', '.join(map(repr, MODES))} "
                         "(Numba-compiled loops, chosen by size, always, or never)")
    return mode


def default_mode() -> str:
    """``compile=``'s value when none is given: ``$PULLBACK_COMPILE``, else ``"auto"``."""
    mode = os.environ.get("PULLBACK_COMPILE") or "auto"
    if mode not in MODES:
        raise ValueError(f"PULLBACK_COMPILE={mode!r}: expected one of {', '.join(map(repr, MODES))}")
    return mode


@functools.cache
def available() -> bool:
    """Whether Numba is installed (``pip install "pullback[numba]"``): found, not imported, since importing
    it (LLVM) costs a second and 100 MB, paid only by a program that compiles something."""
    if "numba" in sys.modules:  # imported, or blocked (None)
        return sys.modules["numba"] is not None
    return importlib.util.find_spec("numba") is not None


# Operations Numba compiles on arrays but not on a 0-d value (``np.clip`` of a float64 scalar is a
# TypingError), found by the randomised loop bodies of tests/backends/test_numba_loops.py
SCALAR_UNSUPPORTED = frozenset({elementwise.clip_p})


def compile_errors() -> tuple[type[BaseException], ...]:
    """What a Numba function raises when it cannot compile what it was given."""
    if not available():
        return ()
    from numba.core.errors import NumbaError

    return (NumbaError, NotImplementedError)


def _eqns(program: Program) -> Iterator[Eqn]:
    for eqn in program.eqns:
        yield eqn
        for body in sub_programs(eqn):
            yield from _eqns(body)


def obstacle(eqn: Eqn) -> str | None:
    """Why Numba cannot compile the loop ``eqn`` (None if it can): a primitive it does not know (the
    LAPACK calls, random draws), values of unknown length (a while loop's recorded steps), or a 0-d value
    given to an operation Numba types for arrays only (``SCALAR_UNSUPPORTED``)."""
    for e in [eqn, *_eqns(eqn.params.get("body") or eqn.params["cond"])]:
        if e.prim not in COMPILABLE:
            return f"Numba cannot compile {e.prim.name}"
        if any(isinstance(v.type, StackType) for v in [*e.outputs, *(a for a in e.inputs if isinstance(a, Var))]):
            return "its steps are recorded in a list of unknown length"
        if any(isinstance(v, Opaque) for v in e.params.values()):
            return f"{e.prim.name} uses a Python object"
        if e.prim in SCALAR_UNSUPPORTED and any(isinstance(a, Var) and a.type.shape == () for a in e.inputs):
            return f"Numba cannot compile {e.prim.name} of a 0-d value"
        if e.prim is elementwise.logistic_p and e.outputs[0].type.dtype != "float64":
            return "Numba cannot compile scipy.special.expit"  # spelled out for float64 only: see _logistic
        if e.prim in LINALG and not all(a.type.ndim == 2 and a.type.dtype.kind == "f" for a in e.inputs):
            return f"the compiled {e.prim.name} takes single real matrices only"
    return None


def operations(program: Program) -> int:
    """The operations one run of ``program`` prints, a loop's body counted once per step (a while
    loop's, 100 times)."""
    n = 0
    for eqn in program.eqns:
        if eqn.prim is control.scan_p:
            n += (eqn.params["length"] or 100) * operations(eqn.params["body"])
        elif eqn.prim is control.while_p:
            n += 100 * (operations(eqn.params["body"]) + operations(eqn.params["cond"]))
        elif eqn.prim is control.cond_p:
            n += 1 + max(operations(b) for b in eqn.params["branches"])
        else:
            n += 1
    return n


def largest(eqn: Eqn) -> int:
    """The number of elements of the largest array a loop's step makes or reads (the step's, not the
    loop's stacked inputs and outputs: 200 steps of 128 points are steps of 128)."""
    sizes = [v.type.size for e in _eqns(eqn.params.get("body") or eqn.params["cond"])
             for v in [*e.outputs, *(a for a in e.inputs if isinstance(a, Var))] if not isinstance(v.type, StackType)]
    return max(sizes, default=0)


def worth_compiling(eqn: Eqn) -> bool:
    """``auto``'s choice for the loop ``eqn``: many small steps (see ``AUTO_MIN_OPERATIONS``)."""
    widest = max((e.inputs[0].type.shape[-1] for e in _eqns(eqn.params.get("body") or eqn.params["cond"])
                  if e.prim in LINALG), default=0)
    return (operations(Program((), (eqn,), ())) >= AUTO_MIN_OPERATIONS and largest(eqn) <= AUTO_MAX_ELEMENTS
            and widest <= AUTO_MAX_FACTOR_N)


def outline(program: Program, mode: str) -> tuple[Program, list[str]]:
    """``program`` with each loop chosen for Numba (see the module docstring) wrapped in an ``njit``
    equation whose body is the loop alone, and the reasons the others stay NumPy (under ``"numba"``)."""
    if mode == "numpy":
        return program, []
    if not available():
        loops = [e for e in program.eqns if e.prim in (control.scan_p, control.while_p)]
        if mode == "auto" or not loops:
            return program, []
        note = f"{len(loops)} loop(s) stay NumPy: Numba is not installed (pip install \"pullback[numba]\")"
        logger.info("%s: %s", program.name, note)
        return program, [note]
    eqns, notes = [], []
    for eqn in program.eqns:
        if eqn.prim not in (control.scan_p, control.while_p):
            eqns.append(eqn)
            continue
        why = obstacle(eqn)
        if why is None and (mode == "numba" or worth_compiling(eqn)):
            eqns.append(_wrapped(eqn))
            continue
        if why is not None and mode == "numba":
            where = f" at {os.path.basename(eqn.source.filename)}:{eqn.source.lineno}" if eqn.source else ""
            notes.append(f"the {eqn.prim.name} loop{where} stays NumPy: {why}")
            logger.info("%s: %s", program.name, notes[-1])
        eqns.append(eqn)
    if not any(e.prim is njit_p for e in eqns):
        return program, notes
    return Program(program.inputs, tuple(eqns), program.outputs, program.constvars, program.constvals,
                   program.name), notes


def _wrapped(eqn: Eqn) -> Eqn:
    """The loop as the one equation of an ``njit`` body, its operands and results the body's inputs
    and outputs (the same vars: the call reads as the loop would)."""
    seen: dict[int, Var] = {}
    for a in eqn.inputs:
        if isinstance(a, Var):
            seen.setdefault(id(a), a)
    loop = _scalar_reshapes(eqn)
    params = {k: grids(v) if isinstance(v, Program) else v for k, v in loop.params.items()}
    loop = Eqn(loop.prim, loop.inputs, loop.outputs, Params(params), loop.source)
    body = Program(tuple(seen.values()), (loop,), tuple(eqn.outputs), name="loop")
    return Eqn(njit_p, body.inputs, body.outputs, Params({"body": body}), eqn.source)


def _scalar_reshapes(eqn: Eqn) -> Eqn:
    """``eqn`` with each reshape of a 0-d value in its bodies a broadcast (Numba's floats have no
    ``reshape``; a broadcast of a 0-d value to any shape of one element is the same array), and each
    reshape to a 0-d value an index, ``x[0, 0]`` (Numba types no ``reshape(())``; inside, 0-d values are
    its floats, which the index gives)."""
    params = dict(eqn.params)
    changed = False
    for key, value in eqn.params.items():
        if isinstance(value, Program):
            params[key] = _program_scalar_reshapes(value)
            changed |= params[key] is not value
        elif isinstance(value, tuple) and value and all(isinstance(b, Program) for b in value):
            params[key] = tuple(_program_scalar_reshapes(b) for b in value)
            changed |= any(b is not c for b, c in zip(params[key], value))
    return Eqn(eqn.prim, eqn.inputs, eqn.outputs, Params(params), eqn.source) if changed else eqn


def _program_scalar_reshapes(program: Program) -> Program:
    eqns = []
    for e in program.eqns:
        if e.prim is structural.reshape_p and e.inputs[0].type.ndim == 0:
            e = Eqn(structural.broadcast_in_dim_p, e.inputs, e.outputs,
                    Params({"shape": e.outputs[0].shape, "broadcast_dimensions": ()}), e.source)
        elif e.prim is structural.reshape_p and e.outputs[0].type.ndim == 0:  # ``x[0]``: Numba types no reshape(())
            e = Eqn(indexing.gather_p, e.inputs, e.outputs,
                    Params({"index": (indexing.Int(0),) * e.inputs[0].type.ndim, "unique_indices": True}), e.source)
        elif e.prim in WITH_BODIES:
            e = _scalar_reshapes(e)
        eqns.append(e)
    if all(a is b for a, b in zip(eqns, program.eqns)):
        return program
    return Program(program.inputs, tuple(eqns), program.outputs, program.constvars, program.constvals, program.name)


def cache_dir() -> str:
    """Where printed modules with compiled loops are written: ``$PULLBACK_CACHE_DIR``, else
    ``pullback/numba`` under the user's cache directory (``$XDG_CACHE_HOME`` or ``~/.cache``)."""
    root = os.environ.get("PULLBACK_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "pullback", "numba")
    return root


def module_file(source: str, name: str) -> str:
    """The path of a file holding ``source``, named by its hash, written once (its modification time,
    with which Numba's cache checks its entries, stays the same across processes)."""
    directory = cache_dir()
    os.makedirs(directory, exist_ok=True)
    digest = hashlib.sha256(source.encode()).hexdigest()[:24]
    path = os.path.join(directory, f"{name}_{digest}.py")
    if not os.path.exists(path):
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(source)
        os.replace(tmp, path)  # atomic: a concurrent writer writes the same text
    return path


def numba_cache_directory(path: str) -> str:
    """Where Numba's cache keeps the compiled functions of the module at ``path``: under ``$NUMBA_CACHE_DIR``
    where it is set (a directory per module directory, as Numba's ``UserProvidedCacheLocator`` names it),
    else in the module's ``__pycache__``."""
    user = os.environ.get("NUMBA_CACHE_DIR")
    if user:
        directory = os.path.dirname(os.path.abspath(path))
        return os.path.join(user, f"{os.path.basename(directory)}_{hashlib.sha1(directory.encode()).hexdigest()}")
    return os.path.join(os.path.dirname(path), "__pycache__")


def cached(path: str, source: str) -> bool:
    """Whether Numba's on-disk cache holds an index for every compiled function of the module written at
    ``path`` (``module_file``): a call then loads machine code instead of compiling it."""
    stem = os.path.splitext(os.path.basename(path))[0]
    try:
        names = os.listdir(numba_cache_directory(path))
    except OSError:
        return False
    found = sum(1 for n in names if n.startswith(f"{stem}.") and n.endswith(".nbi"))
    return found >= source.count("@numba.njit")


def module_name(path: str) -> str:
    """The name under which the module written at ``path`` is registered, in every process."""
    return "_pullback_" + os.path.splitext(os.path.basename(path))[0]


def module_namespace(path: str) -> dict:
    """The namespace of a module registered in ``sys.modules`` under a name made from ``path`` (the same
    in every process for the same source): Numba's cache, loading a compiled loop, imports the module
    of the loop's globals by that name."""
    name = module_name(path)
    module = sys.modules.get(name)
    if module is None:
        module = types.ModuleType(name)
        module.__file__ = path
        sys.modules[name] = module
    return module.__dict__


def log_fallback(name: str, error: BaseException) -> None:
    first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    logger.warning("%s: Numba could not compile a loop (%s: %s); running it as NumPy", name,
                   type(error).__name__, first[:200])



# --- printing inside a compiled loop ---------------------------------------------------------------------
# Inside a Numba function, a few operations print otherwise than the NumPy backend prints them: NumPy
# spellings Numba lacks (``np.multiply.outer``, the ``diagonal`` method), and the LAPACK/BLAS calls of
# factorisations and triangular solves, which print as the small functions below. A loop's matrices are
# small (``worth_compiling``): a call into LAPACK through Numba costs more than the arithmetic there.

HELPERS = {
    "cholesky_lower": '''
@numba.njit(cache=True, error_model="numpy")
def cholesky_lower(a):
    """The lower Cholesky factor of a, read from its lower triangle (LAPACK's potrf for a small matrix),
    and potrf's info: the order of the first leading minor not positive definite, 0 if none."""
    n = a.shape[0]
    l = np.zeros((n, n), dtype=a.dtype)
    for j in range(n):
        d = a[j, j]
        for p in range(j):
            d -= l[j, p] * l[j, p]
        if not d > 0:
            return l, j + 1
        l[j, j] = np.sqrt(d)
        for i in range(j + 1, n):
            v = a[i, j]
            for p in range(j):
                v -= l[i, p] * l[j, p]
            l[i, j] = v / l[j, j]
    return l, 0
''',
    "solve_triangular": '''
@numba.njit(cache=True, error_model="numpy")
def solve_triangular(a, b, lower, unit):
    """x with a x = b, only a's lower (or upper) triangle read and, with unit, its diagonal taken as ones:
    substitution row by row (BLAS's trsm for a small matrix)."""
    n, k = b.shape
    x = np.empty((n, k), dtype=b.dtype)
    for r in range(n):
        i = r if lower else n - 1 - r
        start, stop = (0, i) if lower else (i + 1, n)
        for j in range(k):
            x[i, j] = b[i, j]
        for p in range(start, stop):
            for j in range(k):
                x[i, j] -= a[i, p] * x[p, j]
        if not unit:
            for j in range(k):
                x[i, j] /= a[i, i]
    return x
''',
    "triangular_product": '''
@numba.njit(cache=True, error_model="numpy")
def triangular_product(a, b, lower, unit):
    """a b, only a's lower (or upper) triangle read and, with unit, its diagonal taken as ones (BLAS's
    trmm for a small matrix)."""
    n, k = b.shape
    x = np.empty((n, k), dtype=b.dtype)
    for i in range(n):
        start, stop = (0, i) if lower else (i + 1, n)
        for j in range(k):
            x[i, j] = b[i, j] if unit else a[i, i] * b[i, j]
        for p in range(start, stop):
            for j in range(k):
                x[i, j] += a[i, p] * b[p, j]
    return x
''',
}


def emitter(eqn: Eqn):
    """How ``eqn`` prints inside a compiled loop where not as the NumPy backend prints it (None there)."""
    if eqn.prim in _EMITTERS:
        return _EMITTERS[eqn.prim]
    if eqn.prim is structural.diagonal_p and eqn.inputs[0].type.ndim == 2:
        return _diagonal
    if eqn.prim is contractions.dot_general_p and _outer(eqn):
        return _outer_product
    if eqn.prim is contractions.dot_general_p and _scaling(eqn):
        return _scaled
    if eqn.prim is structural.convert_element_type_p and eqn.inputs[0].type.ndim == 0:
        return _scalar_cast
    if (eqn.prim is structural.broadcast_in_dim_p and isinstance(eqn.inputs[0], Var)
            and eqn.inputs[0].type.ndim == 0 and eqn.outputs[0].type.ndim):
        return _filled
    return None


def _scaling(eqn: Eqn) -> bool:
    """A product with no contracted nor batch axis of which an operand is 0-d: a scaling."""
    d = eqn.params["dims"]
    return not d.lhs_contract and not d.lhs_batch and any(a.type.ndim == 0 for a in eqn.inputs)


def _scaled(ctx, eqn, ins, outs):
    """``a * b`` (a 0-d operand is a Numba scalar, which ``np.multiply.outer`` does not take; found by the
    random loop bodies: the derivative of ``r @ r`` for ``r = np.ravel(c)`` of a 0-d carry)."""
    return s.binop(ins[0], "*", ins[1])


def _filled(ctx, eqn, ins, outs):
    """``np.full(shape, x)``: a 0-d value is a Numba scalar, which ``np.broadcast_to`` does not take."""
    return s.call("np.full", s.ints(eqn.outputs[0].type.shape), ins[0])


def _scalar_cast(ctx, eqn, ins, outs):
    """``np.float64(x)``: a 0-d value is a Numba scalar, which has no ``astype`` (found by the random loop
    bodies: the derivative of ``np.maximum`` of a 0-d carry casts its comparisons)."""
    return s.call(s.dtype(eqn.outputs[0].type.dtype), ins[0])


def _outer(eqn: Eqn) -> bool:
    d = eqn.params["dims"]
    return not d.lhs_contract and not d.lhs_batch and all(a.type.ndim for a in eqn.inputs)


def _outer_product(ctx, eqn, ins, outs):
    """``np.outer(a, b)`` (Numba has no ``np.multiply.outer``), reshaped unless both are vectors."""
    product = s.call("np.outer", *ins)
    if all(a.type.ndim == 1 for a in eqn.inputs):
        return product
    return s.method(product, "reshape", *map(s.number, eqn.outputs[0].shape))


def _diagonal(ctx, eqn, ins, outs):
    """``np.diag(x, k)`` (Numba has no ``diagonal`` method)."""
    offset = eqn.params["offset"]
    return s.call("np.diag", ins[0], *([s.number(offset)] if offset else []))


def helper(name: str, helpers: dict[str, str] = HELPERS) -> cst.FunctionDef:
    """The printed definition of the function ``name`` of ``helpers`` (these loops', or a backend's)."""
    return cst.ensure_type(cst.parse_statement(helpers[name].lstrip()), cst.FunctionDef).with_changes(
        leading_lines=[cst.EmptyLine(), cst.EmptyLine()])


def _helper(ctx, name: str) -> cst.Name:
    ctx.helpers.add(name)
    return s.name(name)


def _raise_if(test, ctx, message: str) -> cst.If:
    """``if test: raise np.linalg.LinAlgError("...")``: a constant message (Numba formats none), ours."""
    where = f" (at {ctx.where})" if ctx.where else ""
    text = message + where  # ours, and the user's file:line, sanitised (``Context.where``)
    literal = f'"{text}"' if '"' not in text and "\\" not in text else repr(text)
    exc = cst.Raise(exc=s.call("np.linalg.LinAlgError", cst.SimpleString(literal)))
    return cst.If(test=test, body=cst.IndentedBlock([s.statement(exc)]))


def _logistic(ctx, eqn, ins, outs):
    """``1.0 / (1.0 + np.exp(-x))``: Numba compiles no ``scipy.special`` (which computes expit so; float64
    only, as a float32 scalar would compute in float64 here)."""
    return s.binop(s.number(1.0), "/", s.parens(s.binop(s.number(1.0), "+", s.call("np.exp", s.neg(ins[0])))))


def _potrf(ctx, eqn, ins, outs):
    """``L, info = cholesky_lower(a)``, raising as LAPACK's check does where the program checks."""
    stmts: list = [s.assign(outs, s.call(_helper(ctx, "cholesky_lower"), ins[0]))]
    if eqn.params["check"]:
        stmts.append(_raise_if(outs[1], ctx, "cholesky: a leading minor is not positive definite"))
    return stmts


def _triangular(ctx, eqn, ins, outs, name: str):
    """op(A) X = alpha B as ``solve_triangular(M, B)`` with M = op(A), the matrix on the left, a view:
    A or A.T, whose triangle is the other one; X op(A) = alpha B as its transpose, op(A)^T X^T =
    alpha B^T, on the views B.T and X.T (``triangular_product`` likewise)."""
    (a, b), p = ins, eqn.params
    left, transposed = p["left"], p["trans"] != la.Trans.N  # real matrices: A^H = A^T
    matrix = s.attribute(a, "T") if transposed == left else a
    lower = p["lower"] != (transposed == left)
    rhs = b if left else s.attribute(b, "T")
    alpha = float(p.get("alpha", 1.0))
    if alpha != 1.0:
        rhs = s.binop(s.number(alpha), "*", rhs)
    result = s.call(_helper(ctx, name), matrix, rhs, cst.Name(str(lower)), cst.Name(str(p["unit_diagonal"])))
    stmts: list = []
    if p.get("check") and not p["unit_diagonal"]:
        stmts.append(_raise_if(cst.UnaryOperation(cst.Not(), s.call("np.all", s.call("np.diag", a))), ctx,
                               "solve_triangular: singular matrix: a diagonal element is zero"))
    return [*stmts, s.assign(outs, result if left else s.attribute(result, "T"))]


_EMITTERS = {
    elementwise.logistic_p: _logistic,
    la.potrf_p: _potrf,
    la.trsm_p: lambda ctx, eqn, ins, outs: _triangular(ctx, eqn, ins, outs, "solve_triangular"),
    la.trmm_p: lambda ctx, eqn, ins, outs: _triangular(ctx, eqn, ins, outs, "triangular_product"),
}


# --- elementwise steps fused into one loop over the grid ---------------------------------------------------
# In a compiled loop, a run of elementwise operations on vectors of one length, reading shifted or padded
# copies of vectors made before the run (``np.roll``'s slices and concatenation, a stencil's pads), prints
# as one loop over the grid, each value an expression of the index: a heat equation's step is one pass over
# its points, not a dozen temporaries. A value the run makes and reads shifted ends the run there.

grid_p = Primitive("grid", multiple_results=True, registered=False)  # made while printing only
WITH_BODIES.add(grid_p)

_REMAPS = frozenset({structural.slice_p, structural.concatenate_p, structural.pad_p, structural.broadcast_in_dim_p})
_SCALAR_OPS = frozenset({elementwise.add_p, elementwise.sub_p, elementwise.mul_p, elementwise.div_p,
                         elementwise.neg_p, elementwise.integer_pow_p, elementwise.exp_p, elementwise.log_p,
                         elementwise.tanh_p, elementwise.sin_p, elementwise.cos_p, elementwise.sqrt_p,
                         elementwise.max_p, elementwise.min_p, elementwise.logistic_p})


def _gridded(eqn: Eqn) -> bool:
    """Whether ``eqn`` can join a run: arithmetic of real vectors (and scalars), or a slice, pad (of unit
    stride), concatenation of vectors or broadcast of a scalar."""
    out = eqn.outputs[0].type
    if len(eqn.outputs) != 1 or out.ndim != 1 or out.dtype.kind != "f":
        return False
    vars_ = [a for a in eqn.inputs if isinstance(a, Var)]
    if eqn.prim in _SCALAR_OPS:
        return all(a.type.shape in ((), out.shape) for a in vars_)
    if eqn.prim is structural.broadcast_in_dim_p:
        return all(a.type.ndim == 0 for a in vars_)
    if eqn.prim is structural.pad_p and eqn.params["strides"] != (1,):
        return False
    return eqn.prim in _REMAPS and all(a.type.ndim == 1 for a in vars_)


def grids(program: Program) -> Program:
    """``program`` with each run of operations that ``_gridded`` admits, at least two of them arithmetic
    on vectors of one length, one ``grid`` equation (see above)."""
    eqns: list[Eqn] = []
    run: list[Eqn] = []
    made: set[int] = set()  # ids of the values the run computes (not shifted copies of its operands)
    n: int | None = None

    def close(end: int) -> None:
        nonlocal run, n
        if sum(e.prim in _SCALAR_OPS for e in run) >= 2:
            eqns.extend(_grid(run, n, program.eqns[end:], program.outputs))
        else:
            eqns.extend(run)
        run, n = [], None
        made.clear()

    for i, eqn in enumerate(program.eqns):
        if not _gridded(eqn):
            close(i)
            eqns.append(eqn)
            continue
        length = eqn.outputs[0].type.shape[0]
        if (eqn.prim in _REMAPS and any(id(a) in made for a in eqn.inputs)) or (
                eqn.prim in _SCALAR_OPS and n is not None and length != n):
            close(i)
        run.append(eqn)
        if eqn.prim in _SCALAR_OPS:
            n = length
            made.add(id(eqn.outputs[0]))
    close(len(program.eqns))
    if len(eqns) == len(program.eqns) and not any(e.prim is grid_p for e in eqns):
        return program
    return Program(program.inputs, tuple(eqns), program.outputs, program.constvars, program.constvals, program.name)


def _grid(run: list[Eqn], n: int, after, outputs) -> list[Eqn]:
    """The ``grid`` equation of ``run`` over vectors of length ``n``, after the shifted copies that the
    code after it reads (printed as they are: the loop reads its operands by index, not them)."""
    inside = {id(v) for e in run for v in e.outputs}
    inputs: dict[int, Var] = {}
    for e in run:
        for a in e.inputs:
            if isinstance(a, Var) and id(a) not in inside:
                inputs.setdefault(id(a), a)
    read_after = {id(a) for e in after for a in e.inputs} | {id(a) for a in outputs}
    remaps = [e for e in run if e.prim in _REMAPS]
    needed = {id(v) for e in remaps for v in e.outputs if id(v) in read_after}
    for e in reversed(remaps):  # and the shifted copies those read
        if id(e.outputs[0]) in needed:
            needed |= {id(a) for a in e.inputs}
    kept = [e for e in remaps if id(e.outputs[0]) in needed]
    body = Program(tuple(inputs.values()), tuple(run), tuple(
        v for e in run if e.prim in _SCALAR_OPS for v in e.outputs if id(v) in read_after), name="grid")
    return [*kept, Eqn(grid_p, body.inputs, body.outputs, Params({"body": body, "n": n}), run[-1].source)]


def grid_statements(eqn: Eqn, ins: list, namer, emitters, ctx, hint) -> list[cst.BaseStatement]:
    """``out = np.empty(n); for i in range(n): out[i] = ...``: the run of a ``grid`` equation as loops over
    its entries, each shifted or padded operand read at its index (``u[i - 1]`` for ``np.roll(u, 1)``'s
    part). The range is cut where a part of a concatenation or a pad's border begins or ends, one loop
    a piece, so that each loop's body is straight arithmetic (no test per entry: LLVM vectorises it)."""
    body = eqn.params["body"]
    n = eqn.params["n"]
    code = cst.Module([]).code_for_node
    i = namer.fresh("i", "i")
    names = {id(v): code(e) for v, e in zip(body.inputs, ins)}
    made = {id(e.outputs[0]): e for e in body.eqns}
    returned = {id(v) for v in body.outputs}
    cuts: set[int] = set()  # where the tests of i change

    def index(a: int, b: int) -> str:
        term = i if a == 1 else f"-{i}" if a == -1 else f"{a} * {i}"
        return term if b == 0 else f"{term} + {b}" if b > 0 else f"{term} - {-b}"

    def below(stop: int, piece: str, other: str, a: int, b: int, span: tuple[int, int]) -> str:
        """``piece if a * i + b < stop else other``, the test made where i's range ``span`` decides it."""
        if a != 1:
            return f"({piece} if {index(a, b)} < {stop} else {other})"
        if span[1] <= stop - b:
            return piece
        if span[0] >= stop - b:
            return other
        cuts.add(stop - b)
        return f"({piece} if {i} < {stop - b} else {other})"

    def at(v, a: int, b: int, span: tuple[int, int]) -> str:
        """The expression of ``v``'s entry a * i + b, for i in ``span``."""
        if not isinstance(v, Var):
            return code(s.number(v.value))
        if id(v) in names and id(v) not in made:
            return names[id(v)] if v.type.ndim == 0 else f"{names[id(v)]}[{index(a, b)}]"
        e = made[id(v)]
        if e.prim in _SCALAR_OPS:
            return names[id(v)] + (f"[{i}]" if id(v) in returned else "")
        x = e.inputs[0]
        if e.prim is structural.broadcast_in_dim_p:
            return at(x, 0, 0, span)
        if e.prim is structural.slice_p:
            start, step = e.params["start_indices"][0], e.params["strides"][0]
            return at(x, a * step, start + b * step, span)
        if e.prim is structural.pad_p:
            lo, hi = e.params["start_indices"][0], e.params["limit_indices"][0]
            inner = below(hi, at(x, a, b - lo, span), "0.0", a, b, span)
            return below(lo, "0.0", inner, a, b, span)
        parts, offset = [], 0  # concatenate
        for part in e.inputs:
            parts.append((offset + part.type.shape[0], part, offset))
            offset += part.type.shape[0]
        text = at(parts[-1][1], a, b - parts[-1][2], span)
        for stop, part, start in reversed(parts[:-1]):
            if a == 1 and (stop - b <= span[0] or start - b >= span[1]):
                continue  # a part no i here reads
            text = below(stop, at(part, a, b - start, span), text, a, b, span)
        return text

    def step(span: tuple[int, int]) -> list[cst.BaseStatement]:
        loop = []
        for e in body.eqns:
            if e.prim not in _SCALAR_OPS:
                continue
            v = e.outputs[0]
            texts = [at(a, 1, 0, span) for a in e.inputs]
            if e.prim in (elementwise.add_p, elementwise.sub_p) and "0.0" in texts[e.prim is elementwise.sub_p:]:
                value = texts[1] if texts[0] == "0.0" else texts[0]  # a pad's zero border: x + 0.0 is x
            else:
                operands = [cst.parse_expression(t) for t in texts]
                value = code((emitter(e) or emitters[e.prim])(ctx, e, operands, []))
            if id(v) not in names:  # (named once: each piece of the range assigns the same names)
                names[id(v)] = namer.name(v, v.hint, hint(e)) if id(v) in returned else namer.fresh(
                    v.hint or hint(e), "t")  # an array the loop fills, or a scalar of this entry
            target = f"{names[id(v)]}[{i}]" if id(v) in returned else names[id(v)]
            loop.append(cst.parse_statement(f"{target} = {value}"))
        return loop

    step((0, n))  # (the cuts)
    bounds = sorted({0, n} | {c for c in cuts if 0 < c < n})
    loops = [cst.For(target=s.name(i), iter=s.call("range", *map(s.number, [lo, hi] if lo else [hi])),
                     body=cst.IndentedBlock(step((lo, hi)))) for lo, hi in zip(bounds, bounds[1:])]
    head = [cst.parse_statement(f"{names[id(v)]} = np.empty(({n},), dtype=np.{v.type.dtype.name})")
            for v in body.outputs]
    return [*head, *loops]
