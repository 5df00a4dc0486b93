"""Where the printed programs free memory: a ``del`` only where it frees memory that matters. None just
before the function returns (returning frees it, when what comes after allocates little), and none of a
name whose buffer lives on as a result written into it (``np.tanh(mul, out=mul); t_1 = mul``)."""

import re

import numpy as np

import pullback as pb


def decay(a, x0):
    x = x0
    for _ in range(300):
        x = np.tanh(a * x) * np.exp(-0.01 * x)
    return np.sum(x)


def big_then_small(x):
    y = np.exp(x)
    z = np.sin(y)
    return np.sum(z * y)


def _top_level_after_last_loop(src: str) -> list[str]:
    """The function's own statements after its last loop (the loop's body left out)."""
    lines = [ln for ln in src.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    last_for = max(i for i, ln in enumerate(lines) if ln.startswith("    for "))
    return [ln.strip() for ln in lines[last_for + 1:] if re.match(r"    \S", ln)]


def _aliased_then_deleted(src: str) -> list[str]:
    """``a = b`` followed at once by a ``del`` of ``b``: the del frees nothing (``a`` holds the array)."""
    lines = [ln.strip() for ln in src.splitlines()]
    found = []
    for first, second in zip(lines, lines[1:]):
        m = re.fullmatch(r"\w+ = (\w+)", first)
        if m and second.startswith("del ") and m.group(1) in re.split(r"[ ,]+", second[4:]):
            found.append(f"{first}; {second}")
    return found


def test_no_del_before_the_return_nor_of_a_buffer_that_lives_on():
    """A rerolled loop over 160 KB steps: the step's temporaries written in place (``np.tanh(mul, out=mul)``)
    keep their buffers as the step's results, so no del follows them; after the backward loop only scalars
    are made, so the step lists die with the return, not in a del. The gradient is the finite differences'."""
    a, x0 = 0.7, np.linspace(0.1, 0.9, 20_000)
    d = pb.differentiate(decay, argnums=(0, 1), compile="numpy")
    src = d.source(a, x0)
    assert "for t in range(300):" in src and "out=" in src  # in-place writes into dead buffers
    tail = _top_level_after_last_loop(src)
    assert tail[-1].startswith("return") and not any(s.startswith("del ") for s in tail), tail
    assert not _aliased_then_deleted(src), _aliased_then_deleted(src)
    assert "\n    del x\n" in src  # the forward loop's last carry (x), freed before the backward loop runs
    g_a, _ = d.grad(a, x0)
    eps = 1e-6
    np.testing.assert_allclose(g_a, (decay(a + eps, x0) - decay(a - eps, x0)) / (2 * eps), rtol=1e-6)


def test_a_large_array_is_freed_while_large_work_follows():
    """320 KB arrays: freed after their last use while later statements allocate as much, not after the last
    of those statements."""
    x = np.linspace(0.0, 1.0, 40_000).reshape(200, 200)
    d = pb.differentiate(big_then_small)
    src = d.source(x)
    stmts = [ln.strip() for ln in src.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    assert any(s.startswith("del ") for s in stmts) and not stmts[-2].startswith("del "), src
    y = np.exp(x)
    np.testing.assert_allclose(d.grad(x), (np.sin(y) + y * np.cos(y)) * y, rtol=1e-13)
