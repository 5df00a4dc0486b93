"""jit, differentiate and vmap objects, and the function forms' callables, pickle as their function
and options (issue 25): round trips give the results of SciPy's Rosenbrock function and gradient,
process pools (fork, spawn, concurrent.futures, SciPy's differential_evolution) run them, and a
function that pickle cannot find by name is refused with a TypeError naming it."""

import concurrent.futures
import copy
import multiprocessing
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.optimize import rosen, rosen_der, rosen_hess

import pullback as pb
from tests import pickled

ROOT = Path(__file__).parent.parent
X = np.array([[0.5, -0.3, 1.2], [1.0, 1.0, 1.0], [-1.5, 2.0, 0.1], [0.2, 0.4, 0.8]])


def test_round_trips_rebuild_from_the_function_and_options_without_compiled_programs():
    x = X[0]
    cases = [
        (pb.jit(pickled.rosen), rosen(x)),
        (pb.differentiate(pickled.rosen).grad, rosen_der(x)),
        (pb.grad(pickled.rosen), rosen_der(x)),
        (pb.value_and_grad(pickled.rosen), (rosen(x), rosen_der(x))),
        (pb.hessian(pickled.rosen), rosen_hess(x)),
        (pb.grad(pickled.rosen_with_aux, has_aux=True), (rosen_der(x), {"residual": 1.0 - x[:-1]})),
        (pickled.decorated, rosen(x)),
    ]
    for f, want in cases:
        f(x)  # compiled here: what pickles must not carry the program
        data = pickle.dumps(f)
        assert len(data) < 400 and b"def " not in data
        got = pickle.loads(data)(x)
        for g, w in zip(pb.tree.flatten(got)[0], pb.tree.flatten(want)[0], strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-12)
    assert pickle.loads(pickle.dumps(pickled.decorated)) is pickled.decorated  # @pb.jit: pickled by name
    j = pb.jit(pickled.rosen, static_argnames="unused_name")
    again = pickle.loads(pickle.dumps(j))
    assert type(again) is pb.jit and again is not j and again.static_argnames == j.static_argnames
    assert pickle.loads(pickle.dumps(j))._programs is again._programs  # shared per function and options, per process
    np.testing.assert_allclose(pickle.loads(pickle.dumps(pb.vmap(pickled.rosen)))(X), [rosen(r) for r in X])
    np.testing.assert_allclose(copy.deepcopy(pb.jit(pickled.rosen))(x), rosen(x))


def test_a_function_pickle_cannot_find_by_name_is_refused_naming_it():
    def nested(x):
        return x

    for f, what in [(pb.jit(lambda x: x), "jit of .*<lambda>"), (pb.grad(nested), "differentiate of .*<locals>.nested"),
                    (pb.vmap(lambda x: x), "vmap of .*<lambda>")]:
        with pytest.raises(TypeError, match=rf"cannot pickle pullback\.{what} defined at .*test_pickle\.py:\d+: "
                                            "pickle needs a module-level function"):
            pickle.dumps(f)


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_multiprocessing_pools_run_jit_and_grad(method):
    if method not in multiprocessing.get_all_start_methods():
        pytest.skip(f"no {method} start method here")
    with multiprocessing.get_context(method).Pool(2) as pool:  # a worker that cannot unpickle would hang map
        values = pool.map_async(pb.jit(pickled.rosen), X).get(timeout=60)
        grads = pool.map_async(pb.grad(pickled.rosen), X).get(timeout=60)
    np.testing.assert_allclose(values, [rosen(x) for x in X], rtol=1e-12)
    np.testing.assert_allclose(grads, [rosen_der(x) for x in X], rtol=1e-12)


def test_process_pool_executor_runs_value_and_grad():
    with concurrent.futures.ProcessPoolExecutor(2) as pool:
        got = list(pool.map(pb.value_and_grad(pickled.rosen), X, timeout=60))
    for (value, g), x in zip(got, X):
        np.testing.assert_allclose([value, *g], [rosen(x), *rosen_der(x)], rtol=1e-12)


DIFFERENTIAL_EVOLUTION = """
import numpy as np, pullback as pb
from scipy.optimize import differential_evolution, rosen
from tests import pickled
bounds = [(-2.0, 2.0)] * 2
ours = differential_evolution(pb.jit(pickled.rosen), bounds, workers=2, updating="deferred", maxiter=5, popsize=5,
                              seed=1, polish=False)
numpy = differential_evolution(rosen, bounds, updating="deferred", maxiter=5, popsize=5, seed=1, polish=False)
np.testing.assert_allclose(ours.x, numpy.x, rtol=1e-12)
print(ours.nfev, numpy.nfev, ours.fun)
"""


def test_differential_evolution_with_workers():
    """SciPy's pool sends the objective to its workers by pickle (it hung when they could not unpickle
    it): run in a child process, under a timeout, and compared with the NumPy objective's run."""
    run = subprocess.run([sys.executable, "-c", DIFFERENTIAL_EVOLUTION], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    nfev, nfev_numpy, _ = run.stdout.split()
    assert nfev == nfev_numpy
