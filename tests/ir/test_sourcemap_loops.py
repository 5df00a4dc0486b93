"""The user's loops as the source map reads them: the innermost loop holding all of a rolled step's lines
(a helper's lines, in another function, aside), its header as the line quoted for it, and the statement
that starts a carry before it."""

import inspect

import numpy as np

from pullback.ir import sourcemap
from pullback.ir.core import SourceInfo


def helper(v):
    return np.tanh(v)


def nested(x):
    s = 0.0
    for _ in range(3):
        for _ in range(4):
            x = helper(x) + 1.0
        s = s + np.sum(x)
    return s


def at(fn, text: str) -> SourceInfo:
    lines, first = inspect.getsourcelines(fn)
    return SourceInfo(__file__, first + next(i for i, line in enumerate(lines) if line.strip() == text))


def test_the_innermost_loop_holding_every_line_of_the_step():
    inner, outer, step, total = (at(nested, t) for t in ("for _ in range(4):", "for _ in range(3):",
                                                         "x = helper(x) + 1.0", "s = s + np.sum(x)"))
    loop = sourcemap.user_loop([at(helper, "return np.tanh(v)"), step])  # the helper's line first: aside
    assert sourcemap.header_source(loop) == inner
    loop = sourcemap.user_loop([step, total])
    assert sourcemap.header_source(loop) == outer
    assert sourcemap.user_loop([at(helper, "return np.tanh(v)")]) is None
    assert sourcemap.statement_text(__file__, sourcemap.statement_at(__file__, outer.lineno)) == "for _ in range(3):"


def test_a_carry_starts_at_its_last_assignment_before_the_loop():
    outer = sourcemap.user_loop([at(nested, "x = helper(x) + 1.0"), at(nested, "s = s + np.sum(x)")])
    assert sourcemap.start_source(outer, "s") == at(nested, "s = 0.0")
    assert sourcemap.start_source(outer, "x") is None  # a parameter: no statement of the function starts it
    assert sourcemap.start_source(None, "s") is None


_EVERY_BLOCK = '''
for a in x:
    pass
else:
    while b:
        pass
def f():
    try:
        for c in d:
            pass
    except E:
        while e:
            pass
    else:
        for g in h:
            pass
    finally:
        async def k():
            async for m in n:
                pass
    match p:
        case 1:
            for q in r:
                pass
    with s:
        if t:
            pass
        elif u:
            for v in w:
                [y for y in z]
class C:
    def m(self):
        while True:
            lambda: [i for i in j]
'''


def test_loops_found_in_every_kind_of_block():
    """Each ``for`` and ``while`` of a file, with its function, as a walk of every node finds them (``ast.walk``)."""
    import ast

    tree = ast.parse(_EVERY_BLOCK)
    functions = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    expected = []
    for node in ast.walk(tree):
        if isinstance(node, ast.For | ast.AsyncFor | ast.While):
            around = [f for f in functions if f.lineno < node.lineno <= f.end_lineno]
            fn = max(around, key=lambda f: f.lineno) if around else None
            held = (fn.lineno, fn.end_lineno) if fn else (0, 0)
            expected.append((node.lineno, node.lineno, node.end_lineno, *held))
    assert len(expected) == 9
    assert sourcemap._loops(_EVERY_BLOCK) == tuple(sorted(expected))
