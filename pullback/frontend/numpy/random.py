"""Random draws in traced code: ``np.random.randn(3)``, ``rs.standard_normal(3)``,
``gen.normal(mu, sigma)``, ``scipy.stats.norm.rvs(loc, scale, size, random_state=rs)``.

A call of a generator's method becomes a ``draw`` equation that calls the same method on the same
object when the program runs (``np.random.randn`` is a method of NumPy's global ``RandomState``),
so every call of the program consumes the numbers the eager call would. When tracing, the call runs
once on a copy of the generator, only to learn the result's type: the user's stream is untouched.

A traced parameter enters by reparameterisation, with the arithmetic NumPy's C code does, so the
numbers are the very same: ``normal(loc, scale)`` is ``loc + scale * standard_normal``,
``uniform(low, high)`` is ``low + (high - low) * random``, ``exponential(scale)`` is
``scale * standard_exponential``. Other methods take constant parameters only.

A generator made inside the traced function (``np.random.default_rng(0)``) is made anew by every
eager call, so its numbers are the same at every call: they are computed when tracing, as
constants. Made without a seed, its numbers would differ at every call: refused.
"""

from __future__ import annotations

import copy
import sys

import numpy as np

from pullback.errors import TracingError
from pullback.ir.core import Opaque
from pullback.ir.tracer import PYTHON_SCALARS, Tracer, bind, current_builder, located, user_frame
from pullback.ir.types import ArrayType
from pullback.primitives.random import GLOBAL_CODE, Slot, draw_p

GENERATORS = (np.random.RandomState, np.random.Generator)
_GLOBAL = np.random.mtrand._rand  # what ``np.random.randn`` and friends draw from

# Methods that change or read the generator other than by drawing: not recorded
_REFUSED = frozenset({"shuffle", "permuted", "set_state", "get_state", "seed", "bit_generator", "spawn", "jumped",
                      "__getstate__", "__setstate__", "__reduce__", "advance", "bytes", "tomaxint"})

# method -> (its parameters in order with defaults, the standard draw, how the parameters enter)
_REPARAMETERISED = {
    "normal": ((("loc", 0.0), ("scale", 1.0)), "standard_normal", lambda eps, loc, scale: loc + scale * eps),
    "uniform": ((("low", 0.0), ("high", 1.0)), None, lambda u, low, high: low + (high - low) * u),
    "exponential": ((("scale", 1.0),), "standard_exponential", lambda e, scale: scale * e),
}


def _refuse(name: str):
    raise TracingError(located(
        f"{name} is not supported in a traced function; pullback records draws (methods returning arrays) only: "
        f"seed or set the generator outside the function, or make one inside it with np.random.default_rng(seed)"))


def module_functions() -> dict:
    """``np.random``'s functions that are not methods of the global generator, by what they do."""
    def refused(name):
        return lambda *args, **kwargs: _refuse(f"np.random.{name}")

    def sample(*args, **kwargs):
        return draw(_GLOBAL, "random_sample", args, kwargs)

    return {np.random.ranf: sample, np.random.sample: sample, np.random.seed: refused("seed"),
            np.random.get_bit_generator: refused("get_bit_generator"),
            np.random.set_bit_generator: refused("set_bit_generator")}


def _holds_tracer(x) -> bool:
    return isinstance(x, Tracer) or (isinstance(x, list | tuple) and any(map(_holds_tracer, x)))


def draw(generator, method: str, args: tuple, kwargs: dict):
    """``generator.method(*args, **kwargs)`` called from traced code."""
    made = current_builder().generators.get(id(generator))
    if made is not None and made[0] is generator:  # made by this trace: the same numbers at every call
        if not made[1]:
            raise TracingError(located(
                "a random generator made inside the traced function without a seed draws other numbers at "
                "every call, which a compiled program cannot repeat; make it outside the function "
                "(rng = np.random.default_rng()) and read it there: pullback draws from it at every call"))
        return getattr(generator, method)(*args, **kwargs)
    if method in _REFUSED:
        _refuse(f"{_name(generator)}.{method}")
    if any(map(_holds_tracer, args)) or any(map(_holds_tracer, kwargs.values())):
        return _reparameterised(generator, method, args, kwargs)
    return _record(generator, method, args, kwargs)


def _record(generator, method: str, args: tuple, kwargs: dict):
    """A ``draw`` equation for a call with constant arguments."""
    operands: list = []

    def static(value):
        if isinstance(value, np.ndarray):
            operands.append(value)
            return Slot(len(operands) - 1)
        if isinstance(value, GENERATORS):  # scipy.stats' random_state=
            return _opaque(value)
        if isinstance(value, tuple | list) and not any(isinstance(v, np.ndarray) for v in value):
            return tuple(static(v) for v in value)
        if value is None or type(value) in PYTHON_SCALARS or isinstance(value, np.generic):
            return value.item() if isinstance(value, np.generic) else value
        if isinstance(value, np.dtype | type) or (isinstance(value, str) and _is_dtype(value)):
            return np.dtype(value)
        raise TracingError(located(
            f"{_name(generator)}.{method}: an argument of type {type(value).__name__} is not supported in a "
            f"traced function (arrays, numbers, tuples and dtypes are)"))

    static_args = tuple(static(a) for a in args)
    static_kwargs = tuple((k, static(v)) for k, v in kwargs.items())
    copies = copy.deepcopy((generator, args, kwargs))  # the type, without using the user's stream
    example = getattr(copies[0], method)(*copies[1], **copies[2])
    if not isinstance(example, np.ndarray | np.generic | int | float | complex | bool):
        raise TracingError(located(f"{_name(generator)}.{method} returns {type(example).__name__}, not an array"))
    out = ArrayType.of(np.asarray(example))
    result = bind(draw_p, *operands, generator=_opaque(generator), method=method,
                  args=static_args, kwargs=static_kwargs, out=out, weak=type(example) in PYTHON_SCALARS)
    if type(example) in PYTHON_SCALARS:
        result.weak = True
    return result


def _is_dtype(text: str) -> bool:
    try:
        np.dtype(text)
    except TypeError:
        return False
    return True


def _reparameterised(generator, method: str, args: tuple, kwargs: dict):
    """``loc + scale * generator.standard_normal(size)`` for ``generator.normal(loc, scale, size)`` with
    traced parameters (and likewise ``uniform``, ``exponential``): NumPy's own arithmetic on the same draw."""
    from pullback.frontend import numpy as api

    found = _REPARAMETERISED.get(method)
    if found is None:
        raise TracingError(located(
            f"{_name(generator)}.{method} with traced parameters is not differentiable by pullback; draw the "
            f"standard variate with constant parameters and transform it (loc + scale * rng.standard_normal(size))"))
    params, standard, transform = found
    names = [name for name, _ in params] + ["size"]
    if len(args) > len(names) or set(kwargs) - set(names):
        raise TypeError(located(f"{method}() got unexpected arguments"))
    bound = dict(params) | {"size": None} | dict(zip(names, args)) | kwargs
    size = bound.pop("size")
    if _holds_tracer(size):
        raise TracingError(located(f"{_name(generator)}.{method}: size must be constant"))
    values = [api.astype(api._lift(v), np.float64) if _holds_tracer(v)
              else float(v) if type(v) in PYTHON_SCALARS else np.asarray(v, np.float64) for v in bound.values()]
    shape = tuple(np.atleast_1d(size)) if size is not None else np.broadcast_shapes(*(np.shape(v) for v in values))
    if standard is None:
        standard = "random" if isinstance(generator, np.random.Generator) else "random_sample"
    eps = _record(generator, standard, (shape,), {})
    out = transform(eps, *values)
    if size is None and not shape and isinstance(out, Tracer):  # NumPy returns a Python float
        out.weak = True
    return out


def _opaque(generator) -> Opaque:
    if generator is _GLOBAL:
        return Opaque(generator, "np_random", code=GLOBAL_CODE)
    return Opaque(generator, _name(generator))



def _name(generator) -> str:
    """The user's name for ``generator``: ``np.random`` for NumPy's global one, else the variable in
    the calling code that holds it (or an attribute of one: ``self.rng``), else ``rng``."""
    if generator is _GLOBAL:
        return "np.random"
    frame = user_frame(1)
    scopes = [frame.f_locals, frame.f_globals] if frame is not None else []
    for scope in scopes:
        for name, value in scope.items():
            if value is generator and name.isidentifier() and not name.startswith("_"):
                return name
    for scope in scopes:
        for value in scope.values():
            attrs = getattr(value, "__dict__", None)
            if isinstance(attrs, dict) and not isinstance(value, type(sys)):
                for name, v in attrs.items():
                    if v is generator and name.isidentifier() and not name.startswith("_"):
                        return name
    return getattr(generator, "name", None) or "rng"  # a SciPy distribution: its own name (``norm``)


_BIT_GENERATORS = (np.random.PCG64, np.random.PCG64DXSM, np.random.MT19937, np.random.Philox, np.random.SFC64)
MAKERS = (np.random.default_rng, np.random.RandomState, np.random.Generator, *_BIT_GENERATORS)


def making(maker):
    """``maker`` (``np.random.default_rng``, ``RandomState``, a bit generator) called from traced code:
    the object it makes is noted as made by this trace, seeded or not (see the module's doc). A
    generator wrapping a bit generator from outside the trace draws from that stream: not noted."""
    def call(*args, **kwargs):
        out = maker(*args, **kwargs)
        seed = args[0] if args else next(iter(kwargs.values()), None)
        made = current_builder().generators
        if isinstance(seed, GENERATORS):  # default_rng(rng) is rng itself
            return out
        if isinstance(seed, np.random.BitGenerator):
            found = made.get(id(seed))
            if found is not None and found[0] is seed:
                made[id(out)] = (out, found[1])
            return out
        made[id(out)] = (out, seed is not None)
        return out

    return call


def rvs(dist, args: tuple, kwargs: dict):
    """``dist.rvs(*shapes, loc, scale, size, random_state)`` of a SciPy distribution: SciPy computes
    ``standard * scale + loc`` after its standard draw, so a traced ``loc`` or ``scale`` enters there,
    and the draw is ``dist.rvs(*shapes, size=..., random_state=...)`` with constant shapes."""
    from pullback.frontend import numpy as api

    kwargs = dict(kwargs)
    random_state, size = kwargs.pop("random_state", None), kwargs.pop("size", None)
    shapes, loc, scale = dist._parse_args(*args, **kwargs)[:3] if hasattr(dist, "_parse_args") else ((), 0, 1)
    if any(map(_holds_tracer, shapes)) or _holds_tracer(size):
        raise TracingError(located(f"{dist.name}.rvs: shape parameters and size must be constant in a traced "
                                   f"function (loc and scale may be traced)"))
    if isinstance(random_state, int | np.integer):  # a new generator of that seed at every call: constants
        random_state = np.random.RandomState(random_state)
        current_builder().generators[id(random_state)] = (random_state, True)
    traced = _holds_tracer(loc) or _holds_tracer(scale)
    if size is None and traced:
        size = np.broadcast_shapes(*(np.shape(v) for v in (*shapes, loc, scale)))
    draw_kwargs = {"size": size} | ({"random_state": random_state} if random_state is not None else {})
    made = current_builder().generators.get(id(random_state))
    if made is not None and made[0] is random_state:
        standard = dist.rvs(*shapes, **draw_kwargs)
    else:
        standard = _record(dist, "rvs", tuple(shapes), draw_kwargs)
    if not traced:
        return standard * scale + loc if (np.any(np.asarray(scale) != 1) or np.any(np.asarray(loc) != 0)) \
            else standard
    return api.add(api.multiply(standard, scale), loc)


def made(generator, seeded: bool) -> None:
    """Note that traced code made ``generator`` (``np.random.default_rng(seed)``): see the module's doc."""
    current_builder().generators[id(generator)] = (generator, seeded)
