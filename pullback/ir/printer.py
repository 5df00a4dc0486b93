"""The IR as text: one line per equation, every value with its type."""

from __future__ import annotations

from pullback.ir.core import Atom, Literal, Program
from pullback.ir.names import Namer


def print_program(program: Program, namer: Namer | None = None, indent: str = "") -> str:
    """One line per equation; a sub-program (a scan's body) follows its equation, indented."""
    namer = namer or Namer(reserved=frozenset())

    def atom(a: Atom) -> str:
        if isinstance(a, Literal):
            return repr(a.value)
        return namer.name(a, a.hint, 't')

    def typed(v) -> str:
        return f"{atom(v)}: {v.type}"

    ins = ", ".join(typed(v) for v in program.inputs)
    header = f"program {namer.fresh(program.name, 'f')}({ins})"
    if program.constvars:
        header += " constants(" + ", ".join(typed(v) for v in program.constvars) + ")"
    lines = [indent + header + ":"]
    for eqn in program.eqns:
        outs = ", ".join(typed(v) for v in eqn.outputs)
        bodies = {k: v for k, v in eqn.params.items() if isinstance(v, Program)}
        shown = ", ".join(f"{k}={'<' + k + '>' if k in bodies else v}" for k, v in eqn.params.items())
        params = f"[{shown}]" if eqn.params else ""
        args = " ".join(atom(a) for a in eqn.inputs)
        lines.append(f"{indent}  {outs} = {eqn.prim.name}{params} {args}".rstrip())
        for body in bodies.values():
            lines.append(print_program(body, namer, indent + "    "))
    lines.append(indent + "  return " + ", ".join(atom(a) for a in program.outputs))
    return "\n".join(lines)
