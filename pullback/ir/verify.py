"""The IR type-checker: SSA discipline and output types re-derived from shape rules.

Tests run it after every transform; a failure names the offending equation.
"""

from __future__ import annotations

from pullback.ir.core import Literal, Program, ShapeError, Var, output_types, shape_rules


class VerificationError(Exception):
    """A program breaks the IR's invariants (SSA: each value defined once, before its use; every
    output type the one its primitive's shape rule derives). A bug in a transform, never in user code.

    >>> program = pb.make_ir(lambda x: np.sin(x))(np.ones(2))
    >>> without_inputs = pb.Program((), program.eqns, program.outputs)
    >>> try:
    ...     pb.verify(without_inputs)
    ... except pb.VerificationError as e:
    ...     print(str(e).endswith("x:f64[2] is used before it is defined"))
    True
    """


def verify(program: Program) -> Program:
    """Check ``program``; return it unchanged so calls can be chained.

    Raises ``VerificationError`` naming the first broken invariant. The tests run it after every
    transform; users writing their own transforms of ``Program`` can too.

    >>> program = pb.make_ir(lambda x: np.sin(x) * x)(np.ones(3))
    >>> pb.verify(program) is program
    True
    """
    defined: set[int] = set()

    def define(v, where: str) -> None:
        if not isinstance(v, Var):
            raise VerificationError(f"{where}: {v!r} is not a Var")
        if id(v) in defined:
            raise VerificationError(f"{where}: {v!r} is defined more than once")
        defined.add(id(v))

    def use(a, where: str) -> None:
        if isinstance(a, Literal):
            if a.type.shape != ():
                raise VerificationError(f"{where}: literal {a!r} must have shape ()")
            return
        if not isinstance(a, Var):
            raise VerificationError(f"{where}: {a!r} is neither a Var nor a Literal")
        if id(a) not in defined:
            raise VerificationError(f"{where}: {a!r} is used before it is defined")

    if len(program.constvars) != len(program.constvals):
        raise VerificationError("constvars and constvals differ in length")
    for v in program.inputs:
        define(v, "input")
    for v in program.constvars:
        define(v, "constant")
    for i, eqn in enumerate(program.eqns):
        where = f"equation {i} ({eqn.prim.name}{'' if eqn.source is None else ' from ' + str(eqn.source)})"
        if eqn.prim not in shape_rules:
            raise VerificationError(f"{where}: primitive has no shape rule")
        for a in eqn.inputs:
            use(a, where)
        try:
            expected = output_types(eqn.prim, eqn.inputs, eqn.params)
        except (ShapeError, TypeError, ValueError) as e:
            raise VerificationError(f"{where}: {e}") from e
        actual = tuple(v.type for v in eqn.outputs)
        if expected != actual:
            raise VerificationError(
                f"{where}: outputs typed {', '.join(map(str, actual))} but the shape rule gives "
                f"{', '.join(map(str, expected))}"
            )
        for v in eqn.outputs:
            define(v, where)
        for body in eqn.params.values():
            if isinstance(body, Program):
                try:
                    verify(body)
                except VerificationError as e:
                    raise VerificationError(f"{where}, body: {e}") from None
    for a in program.outputs:
        use(a, "program output")
    return program
