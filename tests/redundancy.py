"""Count the redundancies an expert would not write in printed gradient source, by parsing it
with ``ast`` (issue 16's review): each pattern is a function of one block's statements.

- ``copy``: ``y = x.copy()`` whose source ``x`` is dead afterwards (the next mention is its ``del``):
  the update that follows could have written into ``x``;
- ``broadcast``: ``b = np.broadcast_to(e, shape)`` read only as an operand of elementwise arithmetic
  next to an array that is not itself such a broadcast (NumPy broadcasts ``e`` itself), or of the
  shape ``e`` already has (``np.broadcast_to(x.reshape(n, 1), (n, 1))``);
- ``negation``: ``n = -x`` read only by ``+``, ``-``, ``@`` or a BLAS call, or ``m = x * -c`` read
  (through reshapes) only by a BLAS call: the sign belongs in the subtraction or in alpha;
- ``transpose``: ``t = x.T`` later read as ``t.T`` (but for the F-view ``t.T`` handed to BLAS);
  ``(x.T).T``; ``t = (a @ b).T`` (``b.T @ a.T``);
- ``unit_slice``: ``p = v[i:i + 1]`` (or ``v[:1]``, ``v[n - 1:]``) then ``p.reshape(...)``: ``v[i]``;
- ``doubled``: ``x + x``, ``a + b`` where both are scalings of one array (``z * 0.5 + 0.5 * z``), and
  ``P @ Q + P.T @ Q`` (one product of ``P + P.T``, or twice one when P is symmetric);
- ``symmetrised``: ``x + x.T`` of an ``x`` already symmetric (``a @ a.T``, ``y + y.T``);
- ``alpha``: ``y = c * x`` or ``y = -x`` (``c`` a literal) of an ``x = <BLAS call with alpha>`` read nowhere
  else, or ``y = c * x`` read (through reshapes) only as a BLAS call's operand: the scalar belongs in
  alpha (``dtrsm(0.5, L, x)``; a negation feeding BLAS counts as ``negation``).
"""

from __future__ import annotations

import ast
from collections import Counter

PATTERNS = ("copy", "broadcast", "negation", "transpose", "unit_slice", "doubled", "symmetrised", "alpha")


def count(source: str) -> Counter:
    """Pattern name -> occurrences in ``source`` (every pattern present, zero when absent)."""
    found: Counter = Counter(dict.fromkeys(PATTERNS, 0))
    for node in ast.walk(ast.parse(source)):
        for field in ("body", "orelse"):
            block = getattr(node, field, None)
            if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                _block(block, found)
    return found


def _name(e) -> str | None:
    return e.id if isinstance(e, ast.Name) else None


def _assigned(stmt) -> tuple[str, ast.expr] | None:
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
        return stmt.targets[0].id, stmt.value
    return None


def _is_call(e, *names: str) -> bool:
    return isinstance(e, ast.Call) and ast.unparse(e.func) in names


def _is_method(e, method: str) -> bool:
    return isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr == method


def _blas(e) -> bool:
    return isinstance(e, ast.Call) and ast.unparse(e.func).startswith(("scipy.linalg.blas.", "scipy.linalg.lapack."))


# the BLAS calls with an alpha that scales their result (ger's and syr's adds into A, whose scale they do not take)
_ALPHA = ("trsm", "trmm", "gemm", "syrk", "herk", "symm", "hemm")


def _alpha_blas(e) -> bool:
    """A BLAS call (or its ``.T``) whose alpha scales its whole result."""
    e = e.value if isinstance(e, ast.Attribute) and e.attr == "T" else e
    return _blas(e) and ast.unparse(e.func).rsplit(".", 1)[-1][1:] in _ALPHA


def _f_view(use, parents: dict[int, ast.AST]):
    """The call reading ``x.T`` when ``use`` is that ``.T`` (an F-view handed to BLAS), else ``use``."""
    return parents.get(id(use), use) if isinstance(use, ast.Attribute) and use.attr == "T" else use


def _scales(e) -> bool:
    """A BLAS call whose alpha scales its operands' product (ger's too: alpha x y^T)."""
    return _alpha_blas(e) or (_blas(e) and ast.unparse(e.func).rsplit(".", 1)[-1][1:] in ("ger", "geru", "syr"))


def _scaled_name(e) -> str | None:
    """``x`` of ``-x``, ``c * x`` or ``x * c`` (``c`` a literal)."""
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.USub):
        return _name(e.operand)
    if isinstance(e, ast.BinOp) and isinstance(e.op, ast.Mult):
        if _literal(e.left):
            return _name(e.right)
        if _literal(e.right):
            return _name(e.left)
    return None


def _negative(e) -> bool:
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.USub) and isinstance(e.operand, ast.Constant):
        return True
    return isinstance(e, ast.Constant) and isinstance(e.value, int | float) and e.value < 0


def _literal(e) -> bool:
    return isinstance(e, ast.Constant) or (isinstance(e, ast.UnaryOp) and isinstance(e.operand, ast.Constant))


def _block(stmts: list[ast.stmt], found: Counter) -> None:
    """Count the patterns among one block's statements (nested blocks are counted on their own)."""
    defs: dict[str, ast.expr] = {}
    parents: dict[int, ast.AST] = {}
    loads: dict[str, list[ast.Name]] = {}
    for stmt in stmts:
        for node in _shallow(stmt):
            for child in ast.iter_child_nodes(node):
                parents[id(child)] = node
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                loads.setdefault(node.id, []).append(node)
    for i, stmt in enumerate(stmts):
        target = _assigned(stmt)
        if target is None:
            continue
        name, value = target
        defs[name] = value
        negations = found["negation"]
        uses = [parents.get(id(n)) for n in loads.get(name, [])]
        if _is_method(value, "copy") and _name(value.func.value) and _dead_after(stmts, i, value.func.value.id):
            found["copy"] += 1
        if _is_call(value, "np.broadcast_to") and uses and (
                _same_shape_reshape(value) or all(_elementwise_next_to_array(u, name, defs) for u in uses)):
            found["broadcast"] += 1
        if isinstance(value, ast.UnaryOp) and isinstance(value.op, ast.USub) and _name(value.operand) and uses \
                and all(isinstance(u, ast.BinOp) and isinstance(u.op, ast.Add | ast.Sub | ast.MatMult)
                        or _blas(u) for u in uses):
            found["negation"] += 1
        if isinstance(value, ast.BinOp) and isinstance(value.op, ast.Mult) and (
                _negative(value.left) or _negative(value.right)) and uses and all(
                _feeds_blas(u, parents, loads) for u in uses):
            found["negation"] += 1
        base = _scaled_name(value)
        if base is not None and _alpha_blas(defs.get(base)) and len(loads.get(base, [])) == 1:
            found["alpha"] += 1  # a scaling of a BLAS result read nowhere else
        elif base is not None and found["negation"] == negations and uses and all(
                _feeds_blas(_f_view(u, parents), parents, loads, _scales) for u in uses):
            found["alpha"] += 1  # a scaling read only by BLAS calls (as itself or as its F-view), not a negation
        if isinstance(value, ast.Attribute) and value.attr == "T":
            inner = value.value
            if isinstance(inner, ast.BinOp) and isinstance(inner.op, ast.MatMult):
                found["transpose"] += 1
            elif _name(inner) and isinstance(defs.get(inner.id), ast.BinOp) and isinstance(
                    defs[inner.id].op, ast.MatMult) and len(loads.get(inner.id, [])) == 1:
                found["transpose"] += 1  # t = dot.T of a product read nowhere else
            if _name(inner) is not None:  # but the F-view ``L.T`` handed to BLAS is the idiom
                found["transpose"] += sum(isinstance(u, ast.Attribute) and u.attr == "T"
                                          and not _blas(parents.get(id(u))) for u in uses)
        if _is_method(value, "reshape") and _name(value.func.value) and _unit_slice(defs.get(value.func.value.id)):
            found["unit_slice"] += 1
        if isinstance(value, ast.BinOp) and isinstance(value.op, ast.Add):
            a, b = _scaled_base(value.left, defs), _scaled_base(value.right, defs)
            if a is not None and a == b or _same_product(value.left, value.right, defs):
                found["doubled"] += 1
            if _name(value.left) and isinstance(value.right, ast.Attribute) and value.right.attr == "T" \
                    and _name(value.right.value) == value.left.id and _symmetric(defs.get(value.left.id), defs):
                found["symmetrised"] += 1
    for stmt in stmts:
        for node in _shallow(stmt):
            if isinstance(node, ast.Attribute) and node.attr == "T" and isinstance(node.value, ast.Attribute) \
                    and node.value.attr == "T":
                found["transpose"] += 1


def _shallow(stmt: ast.stmt):
    """The nodes of ``stmt`` outside nested blocks (a loop's body is a block of its own)."""
    todo = [stmt]
    while todo:
        node = todo.pop()
        yield node
        for value in (v for _, v in ast.iter_fields(node)):
            children = value if isinstance(value, list) else [value]
            if children and isinstance(children[0], ast.stmt | ast.excepthandler):
                continue
            todo.extend(c for c in children if isinstance(c, ast.AST))


def _dead_after(stmts: list[ast.stmt], i: int, name: str) -> bool:
    """Whether the first statement after ``i`` that mentions ``name`` deletes it."""
    for stmt in stmts[i + 1:]:
        names = {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name)}
        if name in names:
            return isinstance(stmt, ast.Delete)
    return False


def _same_shape_reshape(call: ast.Call) -> bool:
    arg, shape = call.args[0], call.args[1]
    if not _is_method(arg, "reshape"):
        return False
    dims = arg.args[0] if len(arg.args) == 1 else ast.Tuple(arg.args)
    return ast.unparse(dims).strip("()").rstrip(",") == ast.unparse(shape).strip("()").rstrip(",")


def _elementwise_next_to_array(use, name: str, defs: dict[str, ast.expr]) -> bool:
    if isinstance(use, ast.AugAssign) and _name(use.value) == name:
        return True
    if not isinstance(use, ast.BinOp) or isinstance(use.op, ast.MatMult):
        return False
    other = use.right if _name(use.left) == name else use.left
    return _name(other) is not None and not _is_call(defs.get(other.id), "np.broadcast_to")


def _feeds_blas(use, parents: dict[int, ast.AST], loads: dict[str, list[ast.Name]], blas=_blas) -> bool:
    """Whether ``use`` is a BLAS call, or ``y = x.reshape(...)`` with ``y`` read only by BLAS calls (``blas``
    says which calls)."""
    if blas(use):
        return True
    if isinstance(use, ast.Attribute) and use.attr == "reshape":
        call = parents.get(id(use))
        stmt = parents.get(id(call))
        target = _assigned(stmt) if isinstance(stmt, ast.stmt) else None
        if target is not None:
            reads = [parents.get(id(n)) for n in loads.get(target[0], [])]
            return bool(reads) and all(blas(u) for u in reads)
    return False


def _unit_slice(e) -> bool:
    if not isinstance(e, ast.Subscript) or not isinstance(e.slice, ast.Slice) or e.slice.step is not None:
        return False
    lower, upper = e.slice.lower, e.slice.upper
    if lower is None:
        return isinstance(upper, ast.Constant) and upper.value == 1
    if isinstance(lower, ast.Constant) and isinstance(upper, ast.Constant):
        return upper.value - lower.value == 1
    if isinstance(upper, ast.BinOp) and isinstance(upper.op, ast.Add) and ast.unparse(upper.left) == ast.unparse(
            lower) and isinstance(upper.right, ast.Constant) and upper.right.value == 1:
        return True
    return False


def _scaled_base(e, defs: dict[str, ast.expr]) -> str | None:
    """``x`` for ``x``, ``x * c``, ``c * x`` or ``x.T``-free names assigned as such a scaling."""
    if _name(e):
        d = defs.get(e.id)
        if isinstance(d, ast.BinOp) and isinstance(d.op, ast.Mult):
            if _literal(d.left) and _name(d.right):
                return d.right.id
            if _literal(d.right) and _name(d.left):
                return d.left.id
        return e.id
    if isinstance(e, ast.BinOp) and isinstance(e.op, ast.Mult):
        if _literal(e.left) and _name(e.right):
            return e.right.id
        if _literal(e.right) and _name(e.left):
            return e.left.id
    return None


def _product(e, defs: dict[str, ast.expr]):
    """``(P, Q)`` source texts of ``e`` (or the name assigned it) when it is ``P @ Q``."""
    e = defs.get(e.id, e) if _name(e) else e
    if isinstance(e, ast.BinOp) and isinstance(e.op, ast.MatMult):
        return ast.unparse(e.left), ast.unparse(e.right)
    return None


def _same_product(a, b, defs: dict[str, ast.expr]) -> bool:
    """``P @ Q`` and ``P.T @ Q`` (or ``P @ Q`` and ``P @ Q.T``)."""
    pa, pb = _product(a, defs), _product(b, defs)
    if pa is None or pb is None:
        return False
    return (pa[1] == pb[1] and {pa[0], pb[0]} in ({pa[0], pa[0] + ".T"}, {pb[0], pb[0] + ".T"})
            and pa[0] != pb[0]) or (pa[0] == pb[0] and pa[1] != pb[1] and (
                pa[1] + ".T" == pb[1] or pb[1] + ".T" == pa[1]))


def _symmetric(e, defs: dict[str, ast.expr]) -> bool:
    """``a @ a.T``, ``a.T @ a`` or ``y + y.T``."""
    if not isinstance(e, ast.BinOp):
        return False

    def text(x) -> str:  # a name assigned ``y.T`` reads as ``y.T``
        d = defs.get(x.id) if _name(x) else None
        return ast.unparse(d if isinstance(d, ast.Attribute) and d.attr == "T" and _name(d.value) else x)

    left, right = text(e.left), text(e.right)
    if isinstance(e.op, ast.MatMult):
        return right == left + ".T" or left == right + ".T"
    return isinstance(e.op, ast.Add) and right == left + ".T"
