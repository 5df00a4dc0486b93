"""The printed programs as a reviewer reads them: the loops of the Kalman filter and of RK4 (plain and
checkpointed) against golden sources, and every golden source and a sample of generated programs
clean under ruff with the project's own settings (pyproject.toml)."""

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import pullback as pb
from pullback.backends import codegen, lines
from pullback.backends.numpy import backend as numpy_backend
from pullback.frontend.loops import block_length
from tests.conftest import GOLDEN, check_golden
from tests.oracles import central_differences

sys.path.insert(0, str(Path(__file__).parents[2] / "examples"))

import gp_regression as gpr  # noqa: E402
import kalman_filter as kf  # noqa: E402
import natural_programs as natural  # noqa: E402
import sequence_models as seq  # noqa: E402

PYPROJECT = Path(__file__).parents[2] / "pyproject.toml"
THETA, U0 = np.array([1.5, 1.0, 3.0, 1.0]), np.array([1.0, 1.0])


def kalman_args(T=30):
    A, B, v = kf.simulate(T=T)
    return A, B, np.log(0.09), np.log(0.01), v, np.zeros(2), np.eye(2)


def kalman_source(checkpoint=None, T=30):
    def kalman_nll(A, B, log_qh, log_qv, v, mu0, S0):
        return kf.kalman_nll(A, B, log_qh, log_qv, v, mu0, S0, checkpoint=checkpoint)

    return pb.differentiate(kalman_nll, argnums=(0, 1, 2, 3)).source(*kalman_args(T))


def rk4_source(steps=1000, checkpoint=None):
    def prey_at_end(theta, u0):
        return seq.rk4_final_state(theta, u0, 1e-3, steps, checkpoint=checkpoint)[0]

    return pb.differentiate(prey_at_end).source(THETA, U0)


def ruff(source: str) -> str:
    """ruff's findings on ``source`` under the project's settings ('' when clean)."""
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--config", str(PYPROJECT), "--no-cache",
                           "--output-format", "concise", "--stdin-filename", "generated.py", "-"],
                          input=source, capture_output=True, text=True)
    return "" if done.returncode == 0 else done.stdout + done.stderr


def _loop_lines(src: str) -> list[str]:
    return [line.strip() for line in src.splitlines() if line.lstrip().startswith("for ")]


def test_kalman_scan_golden():
    src = kalman_source()
    check_golden("kalman_scan_grad.py.txt", src)
    assert _loop_lines(src) == ["for t in range(30):", "for t in range(29, -1, -1):"]
    # the carries are the user's variables (``mu_h, S_hh, nll = carry``), their cotangents after them
    assert "mu_h = mu0" in src and "S_hh = S0" in src and "mu_h_bar" in src and "carry_0" not in src
    assert "S_v_bar_sum" in src and "S_h_bar_sum" in src  # the parameters' gradients accumulate by name
    assert src.count("if info:") == 1  # one Cholesky per step, checked once
    # B.T and A.T are read in the step as written (free views), so each of A and B sums its cotangent in one
    # accumulator, A_bar_sum and B_bar_sum, returned as they are: none for B.T beside it, transposed after
    # the loop; and the transpose of A.T in the backward step is A
    assert "S_hh_Bt = S_hh @ B.T" in src and "= S_hh_bar @ A\n" in src and "_T = " not in src
    assert "carry" not in src and "return nll, (A_bar_sum, B_bar_sum, log_qh_bar, log_qv_bar)" in src


def test_kalman_checkpointed_golden():
    """30 steps in 6 blocks of 5: two nested loops forward, the blocks recomputed and transposed backward."""
    src = kalman_source(checkpoint=True)
    check_golden("kalman_checkpointed_grad.py.txt", src)
    assert [line.split(" in ")[1] for line in _loop_lines(src)] == [
        "range(6):", "range(5):", "range(5, -1, -1):", "range(5):", "range(4, -1, -1):"]
    # the blocks' carries after the user's (``mu_h_block``, a block's first ``mu_h``), kept in ``mu_h_blocks``;
    # the blocks of ``v`` read as ``v_block = v_blocks[t]``
    assert "mu_h = mu_h_block\n" in src and "mu_h_blocks[t] = mu_h_block\n" in src and "return nll_block, " in src
    assert "v_block = v_blocks[t]" in src and "v_t = v_block[t_1]" in src
    assert not re.search(r"\b(c|c_\d|carry\w*|xb)\b", src)
    # the cotangent seed a recomputed block returns as it came is no carry of the blocks' loop (no copy of it)
    assert not re.search(r"^\s*(\w+)_1 = \1$", src, re.M) and "nll_block_bar," not in src


def test_kalman_checkpointed_prime_golden():
    """31 observations (a prime: no divisor near sqrt(31)): 6 blocks of 6, the last of 1, as one loop over the
    blocks, each reading its 6 rows of v (padded with zeros to 36 rows) and running ``min(6, 31 - 6 i)``
    steps: the step printed once forward, once recomputed and once transposed, one Cholesky per pass. The
    value is the unrolled NumPy filter's, the gradient its central differences' and the plain scan's."""
    src = kalman_source(checkpoint=True, T=31)
    check_golden("kalman_checkpointed_prime_grad.py.txt", src)
    assert [line.split(" in ")[1] for line in _loop_lines(src)] == [
        "range(6):", "range(steps):", "range(5, -1, -1):", "range(steps):", "range(steps - 1, -1, -1):"]
    assert "v_padded[:31] = v" in src and "v_block = v_blocks[t]" in src and "steps = np.minimum(6, " in src
    assert src.count("dpotrf(") == 2 and src.count("dtrmm(") == 1 and len(src.splitlines()) < 330
    assert "31," not in src.replace("31 - ", "").replace("[:31]", "")  # nothing kept per step of the 31
    # each block sums the cotangents of the loop's constants under their names (S_v_bar_sum_1), added to
    # the whole loop's (S_v_bar_sum) after it
    assert "carry" not in src and "S_v_bar_sum = S_v_bar_sum + S_v_bar_sum_1" in src
    assert "S_hh = S_hh_block_1\n" in src and "S_hh_block_1 = S_hh_blocks[t]" in src

    args = kalman_args(31)
    d = pb.differentiate(lambda *a: kf.kalman_nll(*a, checkpoint=True), argnums=(0, 1, 2, 3))
    value, grads = d.value_and_grad(*args)
    np.testing.assert_allclose(value, kf.kalman_nll_unrolled(*args), rtol=1e-12)
    for i, g in enumerate(grads):
        np.testing.assert_allclose(g, central_differences(kf.kalman_nll_unrolled, args, i), rtol=1e-6, atol=1e-7)
    for a, b in zip(grads, kf.nll.grad(*args)):
        np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-13)


def test_rk4_golden():
    src = rk4_source()
    check_golden("rk4_grad.py.txt", src)
    assert len(_loop_lines(src)) == 2 and src.count("k2 = lotka_volterra") == 2  # the step, forward and back
    # theta's entries, read in each of the four calls of a step, are read once before the loop under the
    # user's names, and the backward loop sums one cotangent for each (16 sums and 12 adds before)
    assert "a = theta[0]" in src and "d = theta[3]" in src
    assert sorted(set(re.findall(r"(\w+_bar_sum) = ", src))) == ["a_bar_sum", "b_bar_sum", "c_bar_sum", "d_bar_sum"]
    # the cotangents of ``u[0]`` and ``u[1]`` add to u_bar as one array, not as two zero-padded ones each step
    assert src.count("np.zeros((2,)") == 1 and "u_bar = add_21 + stacked_3" in src
    # ``np.stack`` of scalars (a reshape of each and a concatenation in the IR) prints as the vector of them,
    # forward, in its transpose, and for theta's gradient, the four sums of its entries' cotangents
    assert src.count("np.array((") == 9 and "np.concatenate" not in src and ".reshape(1)" not in src
    assert "theta_bar = np.array((a_bar_sum, b_bar_sum, c_bar_sum, d_bar_sum))\n" in src


def test_rk4_checkpointed_golden():
    """1000 steps: 40 blocks of 25 (a divisor near sqrt(1000)), so no shorter last block prints the step
    again: the step once forward, and once recomputed and once transposed in the backward loop."""
    src = rk4_source(checkpoint=True)
    check_golden("rk4_checkpointed_grad.py.txt", src)
    assert [line.split(" in ")[1] for line in _loop_lines(src)] == [
        "range(40):", "range(25):", "range(39, -1, -1):", "range(25):", "range(24, -1, -1):"]
    assert src.count("k2 = lotka_volterra") == 3
    assert len(src.splitlines()) < 500  # 1,244 lines when a tail block printed the step again, twice


def test_rk4_checkpointed_prime_golden():
    """997 steps (a prime: no divisor near sqrt(997)): 32 blocks of 32, the last of 29, as one loop over
    the blocks and a loop of ``min(32, 997 - 32 i)`` steps in each, the step printed once forward, once
    recomputed and once transposed, never again for the shorter block. The gradient matches the plain
    scan's; what is kept is a carry per block and one block's steps (O(sqrt T))."""
    src = rk4_source(steps=997, checkpoint=True)
    check_golden("rk4_checkpointed_prime_grad.py.txt", src)
    assert [line.split(" in ")[1] for line in _loop_lines(src)] == [
        "range(32):", "range(steps):", "range(31, -1, -1):", "range(steps):", "range(steps - 1, -1, -1):"]
    assert "steps = np.minimum(32, " in src
    assert src.count("k2 = lotka_volterra") == 3 and len(src.splitlines()) < 400
    assert "np.empty((32, 2)" in src and "997," not in src.replace("997 - ", "")  # nothing kept per step
    # a block's first state is ``u_block``, kept per block in ``u_blocks``, read back as the steps' ``u``
    assert "u = u_block\n" in src and "u_blocks[t] = u_block\n" in src and "carry" not in src

    def prey_at_end(theta, u0, checkpoint):
        return seq.rk4_final_state(theta, u0, 1e-3, 997, checkpoint=checkpoint)[0]

    v, g = pb.differentiate(lambda th, u: prey_at_end(th, u, True)).value_and_grad(THETA, U0)
    v_plain, g_plain = pb.differentiate(lambda th, u: prey_at_end(th, u, None)).value_and_grad(THETA, U0)
    np.testing.assert_allclose(v, v_plain, rtol=1e-14)
    np.testing.assert_allclose(g, g_plain, rtol=1e-11)


def test_kalman_rerolled_golden():
    """The Kalman filter written as a Python loop (``mu_h = A @ f if t else f``), rerolled: one loop of all
    30 steps from mu0, S0 and nll = 0, the prediction ending each step; no step 0 printed before it. The
    step's body once forward and once backward, one Cholesky error check."""
    src = kf.nll_unrolled.source(*kalman_args())
    check_golden("kalman_rerolled_grad.py.txt", src)
    assert _loop_lines(src) == ["for t in range(30):", "for t in range(29, -1, -1):"]
    assert "mu_h = mu0" in src and "S_hh = S0" in src and "nll = np.float64(0.0)" in src
    assert src.count("dpotrf(") == 1 and src.count("if info") == 1 and src.count("dtrmm(") == 1
    assert "carry" not in src and "return nll, (A_bar_sum, B_bar_sum, log_qh_bar, log_qv_bar)" in src
    forward = src.split("for t in range(30):")[0]
    assert "dpotrf" not in forward and "v[0]" not in forward and len(src.splitlines()) < 240


@pytest.mark.parametrize("n, k", [(1000, 25), (30, 5), (100, 10), (97, 10), (1, 1), (2, 1), (10_000, 100)])
def test_checkpoint_block_length(n, k):
    assert block_length(n) == k


def test_golden_sources_pass_ruff():
    goldens = sorted(GOLDEN.glob("*.py.txt"))
    assert len(goldens) >= 7
    findings = {p.name: ruff(p.read_text()) for p in goldens}
    assert not any(findings.values()), findings


def test_golden_sources_quote_a_line_once_where_it_starts():
    """A user's line is quoted once above the statements it makes: not again over the next statement at the
    same depth (a loop's carry starts and its ``for`` share one comment), and again after a loop only where
    the line's statements go on."""
    for path in sorted(GOLDEN.glob("*.py.txt")):
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            if line.lstrip().startswith("# ") and ".py:" in line:
                depth = len(line) - len(line.lstrip())
                nxt = [t for t in lines[i + 1:i + 6] if len(t) - len(t.lstrip()) == depth]
                again = nxt.index(line) if line in nxt else None
                assert again is None or again > 1, (path.name, i + 1, line)


def _checkpointed_while(x):
    def body(v):  # each step adds at least 0.5 to each entry: a few steps
        return v + 0.5 * np.cos(v) + 1.0

    return np.sum(pb.while_loop(lambda v: np.sum(v) < 10.0, body, x, checkpoint=True) ** 2)


def test_a_checkpointed_while_loop_quotes_each_line_above_statements():
    """Every comment stands over a statement (none over another comment: a checkpoint's body printed in the
    backward loop starts under its own line), and the ``while_loop`` line is said once before the forward
    loop (its condition's statements not again) and once before the backward one."""
    d = pb.differentiate(_checkpointed_while)
    src = d.source(np.ones(3))
    lines = src.splitlines()
    assert not any(a.lstrip().startswith("#") and b.lstrip().startswith("#") for a, b in zip(lines, lines[1:]))
    assert sum("pb.while_loop(" in line for line in lines) == 2
    x, h = np.ones(3), 1e-6
    fd = [(_checkpointed_while(x + h * e) - _checkpointed_while(x - h * e)) / (2 * h) for e in np.eye(3)]
    np.testing.assert_allclose(d.grad(x), fd, rtol=1e-6)


def _sample() -> dict[str, str]:
    """Generated programs of many kinds: loops (scan, rerolled, checkpointed, while), LAPACK calls with
    their error checks, a model's parameters in a tuple, a Gaussian process."""
    params, h0, xs, targets = seq.gru_data(T=12)
    X, y = gpr.synthetic_data(n=20)
    A, B, v = kf.simulate(T=12)
    kal = (A, B, np.log(0.09), np.log(0.01), v, np.zeros(2), np.eye(2))

    def solve_batched(a, b):
        return np.sum(np.linalg.solve(a, b) ** 2) + np.sum(np.linalg.inv(a[0]))

    def norms(x):
        return np.linalg.norm(x) + np.sum(np.linalg.eigh(x @ x.T)[0]) + np.sum(np.linalg.svd(x)[1])

    a = np.eye(3) * 2 + 0.1 * np.arange(9.0).reshape(3, 3)
    return {
        "kalman_unrolled": kf.nll_unrolled.source(*kal),
        "kalman_unrolled_not_rerolled": pb.differentiate(kf.kalman_nll_unrolled, argnums=(0, 1, 2, 3),
                                                         reroll=False).source(*kal),
        "gru": pb.differentiate(seq.gru_loss).source(params, h0, xs, targets),
        "gp": gpr.neg_log_marginal_likelihood.source(np.array([0.0, 0.0, -1.0]), X, y),
        "fixed_point": pb.differentiate(natural.fixed_point).source(0.5),
        "exp_series": pb.differentiate(natural.exp_series).source(0.7),
        "solve_batched": pb.differentiate(solve_batched).source(np.stack([a, a.T]), np.ones((2, 3, 2))),
        "norms": pb.differentiate(norms).source(a),
        "jit_kalman": pb.jit(kf.kalman_nll).source(*kal),
    }


def test_generated_programs_pass_ruff():
    findings = {name: ruff(src) for name, src in _sample().items()}
    assert not any(findings.values()), findings


def test_small_values_are_not_deleted():
    """``del`` frees arrays that matter (64 KiB and up), not scalars and 2 x 2 matrices: none in the Kalman
    filter's gradient (a quarter of its lines were dels)."""
    assert "del " not in kalman_source()

    def big(x):
        y = np.exp(x)
        z = np.sin(y)
        return np.sum(z * y)

    src = pb.differentiate(big).source(np.ones((200, 200)))  # 320 KB arrays: each freed after its last use
    assert "del " in src
    small = pb.differentiate(big).source(np.ones(3))
    assert "del " not in small


def chain_of(steps: int):
    def chain(x):
        for _ in range(steps):
            x = np.sin(x) * 0.9 + 0.1 * x
        return np.sum(x)
    return pb.differentiate(chain, reroll=False, compile="numpy")


def test_small_values_of_a_long_program_are_not_deleted():
    """A long unrolled program of small arrays keeps them to its end: they weigh less than its own code
    (``codegen.KEEP_PER_EQN``), so no line is a del; a program of 20 KB arrays frees them past its budget."""
    x = np.linspace(0.1, 0.9, 3)
    g = chain_of(2000)
    src = g.source(x)
    assert len(src.splitlines()) > 4000 and "del " not in src
    value, grad = g.value_and_grad(x)
    eps = 1e-6
    fd = (chain_of(2000).value_and_grad(x + eps * np.eye(3)[0])[0] - value) / eps
    assert abs(grad[0] - fd) < 1e-4 * max(1.0, abs(fd))
    grid = np.linspace(0.1, 0.9, 2500).reshape(50, 50)  # 20 KB: under DEL_BYTES, but 8,000 of them are 160 MB
    src = chain_of(2000).source(grid)
    held = [line for line in src.splitlines() if line.lstrip().startswith("del ")]
    assert held and len(held) < len(src.splitlines()) / 2


def test_long_lines_break_as_a_formatter_breaks_them():
    long_call = "x = f(" + ", ".join(f"argument_{k}" for k in range(20)) + ")\n"
    out, _ = lines.fit("    " + long_call, width=60)
    assert all(len(line) <= 60 for line in out.splitlines())
    compile("def g():\n" + out, "<test>", "exec")
    dels = "    del " + ", ".join(f"value_{k}" for k in range(30)) + "\n"
    out, _ = lines.fit(dels, width=60)
    assert all(line.startswith("    del ") and len(line) <= 60 for line in out.splitlines())
    message = '        raise ValueError(f"the value {x} is out of range " "(at a_rather_long_file_name.py:1234)")\n'
    out, _ = lines.fit(message, width=60)
    assert all(len(line) <= 60 for line in out.splitlines())
    ns: dict = {}
    exec(compile("def g(x):\n    if x:\n" + out, "<test>", "exec"), ns)
    with pytest.raises(ValueError, match=r"the value 3 is out of range \(at a_rather_long_file_name.py:1234\)"):
        ns["g"](3)


def test_comments_shortened_still_map_to_the_users_line():
    """A comment cut to the line length still maps the generated line back to the user's (warnings)."""
    program = pb.differentiate(kf.kalman_nll, argnums=(0, 1, 2, 3)).ir(*kalman_args(), stage="grad")
    gen = codegen.generate(program, numpy_backend)
    comments = {line.strip() for line in gen.source.splitlines() if line.strip().startswith("# ")}
    assert comments <= set(gen.statements)
    assert any(c.endswith("...") for c in comments)


def sq_loss(w, X, y):
    r = X @ w - y
    return np.sum(r ** 2)


@pytest.mark.parametrize("form, name", [(pb.grad, "sq_loss_grad"), (pb.jacrev, "sq_loss_jacrev"),
                                        (pb.hessian, "sq_loss_hessian")])
def test_transforms_print_the_functions_name_parameters_and_lines(form, name):
    """``pb.source(pb.grad(f))`` is ``f``'s gradient: ``def f_grad`` with ``f``'s parameters, its comments
    quoting ``f``'s lines (not the line that called pb.source), its cotangent ``w_bar``."""
    w, X, y = np.ones(3), np.arange(12.0).reshape(4, 3), np.ones(4)
    src = pb.source(form(sq_loss), w, X, y)
    assert f"def {name}(w, X, y):" in src
    comments = [line.strip() for line in src.splitlines() if line.strip().startswith("# ")]
    assert comments and all("r = X @ w - y" in c or "return np.sum(r ** 2)" in c for c in comments), comments
    assert "pb.source" not in src
    if form is pb.grad:  # the value is not computed: grad drops it
        assert "w_bar = " in src and "= np.sum(" not in src
    np.testing.assert_allclose(pb.jit(form(sq_loss))(w, X, y), form(sq_loss)(w, X, y))


def test_vmap_of_grad_prints_the_functions_name_and_lines():
    W, X, y = np.ones((2, 3)), np.arange(12.0).reshape(4, 3), np.ones(4)
    src = pb.source(pb.vmap(pb.grad(sq_loss), in_axes=(0, None, None)), W, X, y)
    assert "def sq_loss_grad(w, X, y):" in src and "r = X @ w - y" in src


def mlp(params, x):
    W, b = params
    lo, hi = x
    h = np.tanh(W @ lo + b)
    return np.sum(h * hi)


def test_unpacked_names_are_kept():
    """A structured argument's leaves take the names it is unpacked into (``W, b = params``), and an
    array unpacked (``lo, hi = x``) gives its rows those names, not ``params_0`` and ``picked``."""
    src = pb.differentiate(mlp).source((np.ones((2, 2)), np.ones(2)), np.ones((2, 2)))
    assert "def mlp_grad(W, b, x):" in src
    assert "lo = x[0]" in src and "hi = x[1]" in src and "picked" not in src
    assert "return total, (W_bar, b_bar)" in src


def predator_prey(theta, u0):
    def step(u, _):
        x, y = u
        a, b, c, d = theta
        return u + 0.01 * np.stack([a * x - b * x * y, d * x * y - c * y]), None

    u, _ = pb.scan(step, u0, None, length=50)
    return np.sum(u ** 2)


def test_a_loops_unpacked_carry_and_parameters_keep_their_names():
    """``x, y = u`` and ``a, b, c, d = theta`` in a scan's step: the step reads ``x = u[0]`` (no ``picked``),
    the backward loop sums one accumulator per parameter (``a_bar_sum``, ..., no ``carry_k``) and adds the
    cotangents of ``x`` and ``y`` to ``u_bar`` as one array (no zero-padded array per component); the
    gradient is the finite differences' of the NumPy loop."""
    theta, u0 = np.array([1.5, 1.0, 3.0, 1.0]), np.array([1.0, 0.5])
    d = pb.differentiate(predator_prey, argnums=(0, 1), compile="numpy")
    src = d.source(theta, u0)
    assert "x = u[0]" in src and "y = u[1]" in src and "picked" not in src and "carry" not in src
    assert sorted(set(re.findall(r"(\w+_bar_sum) = ", src))) == ["a_bar_sum", "b_bar_sum", "c_bar_sum", "d_bar_sum"]
    backward = src.split("for t in range(49, -1, -1):")[1]
    assert "np.zeros" not in backward and "u_bar = u_bar + stacked" in backward

    def numpy_loop(theta, u0):
        u = u0
        for _ in range(50):
            x, y = u
            a, b, c, dd = theta
            u = u + 0.01 * np.array([a * x - b * x * y, dd * x * y - c * y])
        return np.sum(u ** 2)

    g_theta, g_u0 = d.grad(theta, u0)
    eps = 1e-6
    for g, i in ((g_theta, 0), (g_u0, 1)):
        args = [theta, u0]
        fd = [(numpy_loop(*[a + eps * e if k == i else a for k, a in enumerate(args)])
               - numpy_loop(*[a - eps * e if k == i else a for k, a in enumerate(args)])) / (2 * eps)
              for e in np.eye(len(args[i]))]
        np.testing.assert_allclose(g, fd, rtol=1e-7)


def weighted_positions(x):
    n = x.shape[0]
    idx = np.arange(n)
    w = np.full(n, 2.0)
    return np.sum(x * idx) + np.sum(w * x ** 2)


def test_arrays_made_from_shapes_print_as_the_call_that_makes_them():
    """``np.arange(n)`` and ``np.full(n, 2.0)`` made while tracing print as those calls under the user's
    names, not as keyword constants ``c`` passed in; the values are right (a finite-difference check)."""
    x = np.array([0.5, -1.0, 2.0, 3.0])
    d = pb.differentiate(weighted_positions)
    src = d.source(x)
    assert "idx = np.arange(4, dtype=np.int64)" in src and "*, c" not in src and "Keyword-only" not in src
    eps, g = 1e-6, d.grad(x)
    fd = [(weighted_positions(x + eps * e) - weighted_positions(x - eps * e)) / (2 * eps) for e in np.eye(4)]
    np.testing.assert_allclose(g, fd, rtol=1e-7)


L_CAPTURED = np.tril(np.arange(1.0, 10.0).reshape(3, 3)) + 3 * np.eye(3)


def through_views(x):
    return np.sum(L_CAPTURED.T @ x) + np.sum(L_CAPTURED[:2] @ x)


def test_views_of_captured_arrays_are_named_after_them():
    """A captured array's view (``L.T``, ``L[:2]``) is a keyword constant named after the array
    (``L_CAPTURED_T``, ``L_CAPTURED_view``), not ``c``; the gradient is NumPy's."""
    x = np.array([1.0, -2.0, 0.5])
    d = pb.differentiate(through_views)
    src = d.source(x)
    assert "L_CAPTURED_T" in src and "L_CAPTURED_view" in src and "*, c" not in src
    np.testing.assert_allclose(d.grad(x), L_CAPTURED.sum(axis=1) + L_CAPTURED[:2].sum(axis=0))


def squashed(w, x):
    z = np.tanh(x @ w)
    return np.sum(z ** 2)


@pytest.mark.parametrize("form", ["jacrev", "jacfwd", "hessian"])
def test_composed_transforms_keep_the_functions_names_and_lines(form):
    """``pb.jacrev(f)``, ``pb.jacfwd(f)``, ``pb.hessian(f)`` print ``f``'s names on the values they name
    (``z`` is the tanh, not a derivative) and quote only ``f``'s lines, never the caller's."""
    import inspect

    lines, first = inspect.getsourcelines(squashed)
    own = set(range(first, first + len(lines)))
    w, x = np.array([0.3, -0.2, 0.1]), np.arange(12.0).reshape(4, 3) / 10
    src = pb.source(getattr(pb, form)(squashed), w, x)
    quoted = [int(m) for m in re.findall(r"# test_printed_programs\.py:(\d+)", src)]
    assert quoted and set(quoted) <= own, (quoted, own)
    assert re.search(r"^    z = np\.tanh\(", src, re.M)
    assert not re.search(r"^    z(_\d+)? = (?!np\.tanh)", src, re.M), src


@pytest.mark.parametrize("n", [12, 13])  # blocks of 4 (equal), and of 4 with a last of 1 (ragged)
def test_checkpointed_pytree_carry_names(n):
    """A dict carry's leaves name the blocks' carries after the step's (``state_h_block``), ragged or not;
    values and gradients those of the plain scan."""
    def run(w, x0, checkpoint, n):
        def step(state, x):
            h = np.tanh(w * state["h"] + x)
            return {"h": h, "total": state["total"] + np.sum(h ** 2)}, None

        xs = np.linspace(-1.0, 1.0, n * 3).reshape(n, 3)
        out, _ = pb.scan(step, {"h": x0, "total": 0.0}, xs, checkpoint=checkpoint)
        return out["total"]

    w, x0 = np.array([0.5, -0.3, 0.8]), np.array([0.1, 0.2, -0.4])
    d = pb.differentiate(lambda w, x0: run(w, x0, True, n), argnums=(0, 1))
    src = d.source(w, x0)
    assert "state_h = state_h_block" in src and "state_h_blocks[t] = state_h_block" in src
    assert "carry" not in src and "c_0" not in src
    value, grads = d.value_and_grad(w, x0)
    plain = pb.differentiate(lambda w, x0: run(w, x0, None, n), argnums=(0, 1)).value_and_grad(w, x0)
    np.testing.assert_allclose(value, plain[0], rtol=1e-13)
    for a, b in zip(grads, plain[1]):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
