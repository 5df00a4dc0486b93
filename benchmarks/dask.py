"""``python -m benchmarks.dask [--rows N] [--quick]``: the Dask backend on a LocalCluster.

Logistic regression's value and gradient over a dataset streamed from disk (``da.to_npy_stack``,
read back with ``da.from_npy_stack``: each call reads every chunk), on worker processes with a
memory limit the dataset exceeds at least four times: rows per second for pullback's printed
Dask program and for dask-glm's hand-written loss and gradient (``dask_glm.families.Logistic``,
computed together as its L-BFGS does, its parameters scattered), with 1 and 2 workers; the NumPy
backend's rows per second on an in-memory slice (the per-row floor: no reading, no scheduling);
the tasks per call (the graph the scheduler receives), the CPU seconds per call (the workers'
processes and the client's together: on a shared machine, the wall time alone says little) and the peak
resident memory of each worker (sampled by its monitor). dask-glm's rows are left out where it is not
installed. Then a GP's negative log likelihood and gradient with the blocked Cholesky against the
NumPy backend (the squared distances as ``|x|^2 + |y|^2 - 2 X X^T``: no n x n x d intermediate), on
workers given room for n x n blocks (``--gp-memory-limit``). Times are medians of the repeats; this
machine is shared, so they are noisy, and the page cache may hold the files (the "disk" is then
memory, read through ``np.load``).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import statistics
import tempfile
import time

import dask
import dask.array as da
import numpy as np
import psutil
import scipy.linalg
from distributed import Client, LocalCluster

import pullback as pb


@pb.differentiate
def logistic(w, X, y):
    """The summed negative log-likelihood (dask-glm's ``Logistic.pointwise_loss``)."""
    z = X @ w
    return np.sum(np.logaddexp(0.0, z) - y * z)


def gp_nll(theta, X, y):
    sq = np.sum(X ** 2, axis=1)
    d2 = sq[:, None] + sq[None, :] - 2.0 * (X @ X.T)
    K = np.exp(theta[0]) * np.exp(-0.5 * d2 / np.exp(2 * theta[1])) + np.exp(theta[2]) * np.eye(X.shape[0])
    L = np.linalg.cholesky(K)
    a = scipy.linalg.solve_triangular(L, y, lower=True)
    return 0.5 * a @ a + np.sum(np.log(np.diag(L)))


def dask_glm_loss_grad(beta, X, y, client):
    """dask-glm's L-BFGS evaluation (``algorithms.lbfgs.compute_loss_grad``): beta scattered (as its
    ``utils.scatter_array``, with ``hash=False``: one beta's key reused by successive calls races with
    its release), the loss and the gradient computed together."""
    from dask_glm.families import Logistic

    future = client.scatter(beta, hash=False) if client is not None else None
    b = da.from_delayed(future, shape=beta.shape, dtype=beta.dtype) if future is not None else beta
    loss, grad = dask.compute(Logistic.pointwise_loss(b, X, y), Logistic.pointwise_gradient(b, X, y))
    return loss, grad


def write(directory: str, n: int, d: int, rows_per_chunk: int) -> None:
    X = da.random.default_rng(0).standard_normal((n, d), chunks=(rows_per_chunk, d))
    y = (da.random.default_rng(1).random(n, chunks=rows_per_chunk) < 0.5).astype(float)
    da.to_npy_stack(f"{directory}/X", X)
    da.to_npy_stack(f"{directory}/y", y)


def tasks_per_call(fn, *args) -> int:
    """The number of tasks in the graph one call hands the scheduler (run on the local threads)."""
    counted = []

    def get(dsk, keys, **kwargs):
        counted.append(len(dsk.__dask_graph__() if hasattr(dsk, "__dask_graph__") else dsk))
        return dask.threaded.get(dsk, keys, **kwargs)

    with dask.config.set(scheduler=get):
        fn(*args)
    return sum(counted)


def _peak_rss_mb(dask_worker) -> float:
    """The largest resident memory the worker's monitor sampled (every 0.5 s; ``ru_maxrss`` would be
    the parent's: Linux keeps it across fork and exec)."""
    return max(dask_worker.monitor.quantities["memory"], default=0) / 2**20  # a restarted worker: none yet


def median_time(fn, repeats: int) -> float:
    return median_times(fn, repeats)[0]


def _cpu_s(dask_worker=None) -> float:
    """This process's CPU seconds, user and system (on a worker, through ``client.run``)."""
    t = psutil.Process().cpu_times()
    return t.user + t.system


def median_times(fn, repeats: int, client=None, out: list | None = None) -> tuple[float, float]:
    """The medians of the wall seconds and of the CPU seconds (the client's process and, with a
    ``client``, its workers' processes) per call; ``out`` receives the last call's result."""
    walls, cpus = [], []
    for _ in range(repeats):
        before = _cpu_s() + (sum(client.run(_cpu_s).values()) if client is not None else 0.0)
        t = time.perf_counter()
        result = fn()
        walls.append(time.perf_counter() - t)
        after = _cpu_s() + (sum(client.run(_cpu_s).values()) if client is not None else 0.0)
        cpus.append(after - before)
    if out is not None:
        out.append(result)
    return statistics.median(walls), statistics.median(cpus)


def load() -> str:
    """The load averages over 1, 5 and 15 minutes (``uptime``'s): the machine is shared."""
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def logistic_rows(directory: str, n: int, d: int, memory_limit: str, repeats: int) -> list[str]:
    w = np.random.default_rng(2).standard_normal(d) / np.sqrt(d)
    rows = ["| implementation | workers | median s per call | CPU s per call | rows/s | tasks per call "
            "| peak RSS per worker, MB | load (1/5/15 min) |", "|---|---|---|---|---|---|---|---|"]
    reference = None
    glm = importlib.util.find_spec("dask_glm") is not None
    X, y = da.from_npy_stack(f"{directory}/X"), da.from_npy_stack(f"{directory}/y")
    tasks = {"pullback": tasks_per_call(lambda: logistic.value_and_grad(w, X, y))}
    if glm:
        tasks["dask-glm"] = tasks_per_call(lambda: dask_glm_loss_grad(w, X, y, None))
    names = ["pullback (Dask backend)", *(["dask-glm (hand-written)"] if glm else [])]
    for workers in (1, 2):
        for name in names:
            with LocalCluster(n_workers=workers, threads_per_worker=1, memory_limit=memory_limit,
                              dashboard_address=None) as cluster, Client(cluster) as client:
                X, y = da.from_npy_stack(f"{directory}/X"), da.from_npy_stack(f"{directory}/y")
                if name.startswith("pullback"):
                    call = lambda X=X, y=y: logistic.value_and_grad(w, X, y)  # noqa: E731
                else:
                    call = lambda X=X, y=y, client=client: dask_glm_loss_grad(w, X, y, client)  # noqa: E731
                try:
                    value, grad = call()  # the first call (prints and compiles pullback's program)
                    if reference is None:
                        reference = (value, grad)
                    np.testing.assert_allclose(value, reference[0], rtol=1e-9)
                    np.testing.assert_allclose(grad, reference[1], rtol=1e-8,
                                               atol=1e-8 * np.abs(reference[1]).max())
                    now = load()
                    t, cpu = median_times(call, repeats, client)
                except Exception as e:  # a worker killed for memory (its nanny restarts it) loses the call
                    rows.append(f"| {name} | {workers} | failed: {type(e).__name__} | - | - | "
                                f"{tasks[name.split()[0]]} | {max(client.run(_peak_rss_mb).values()):.0f} | {load()} |")
                    continue
                peak = max(client.run(_peak_rss_mb).values())
            rows.append(f"| {name} | {workers} | {t:.2f} | {cpu:.2f} | {n / t:,.0f} | {tasks[name.split()[0]]} "
                        f"| {peak:.0f} | {now} |", )
            print(rows[-1], flush=True)
    return rows


def numpy_floor(directory: str, n_slice: int, d: int, repeats: int) -> str:
    X = np.load(f"{directory}/X/0.npy")[:n_slice]
    y = np.load(f"{directory}/y/0.npy")[:n_slice]
    w = np.random.default_rng(2).standard_normal(d) / np.sqrt(d)
    f = pb.differentiate(logistic.fn)
    f.value_and_grad(w, X, y)
    now = load()
    t, cpu = median_times(lambda: f.value_and_grad(w, X, y), repeats)
    return (f"| NumPy backend, in memory ({n_slice:,} rows of chunk 0) | 1 process | {t:.4f} | {cpu:.4f} "
            f"| {n_slice / t:,.0f} | - | - | {now} |")


def gp_rows(n: int, block: int, repeats: int, workers: tuple[int, ...], memory_limit: str) -> list[str]:
    rng = np.random.default_rng(3)
    X, y = rng.standard_normal((n, 2)), rng.standard_normal(n)
    theta = np.array([0.0, 0.3, -1.0])
    f = pb.differentiate(gp_nll)
    head = ["| implementation | workers | median s per call | CPU s per call | ratio to NumPy (wall) "
            "| peak RSS, MB | load (1/5/15 min) |", "|---|---|---|---|---|---|---|"]
    print(*head, sep="\n", flush=True)
    f.source(theta, X, y)  # printed and compiled: every call is timed (at large n one call takes minutes)
    now, out = load(), []
    t_np, cpu = median_times(lambda: f.value_and_grad(theta, X, y), repeats, out=out)
    value0, grad0 = out[0]
    rows = [f"| NumPy backend (LAPACK potrf, potri) | 1 process | {t_np:.2f} | {cpu:.2f} | 1.00 "
            f"| {_max_rss_mb():.0f} | {now} |"]
    print(rows[-1], flush=True)
    Xd, yd = da.from_array(X, chunks=(block, 2)), da.from_array(y, chunks=block)
    for k in workers:
        with LocalCluster(n_workers=k, threads_per_worker=1, memory_limit=memory_limit,
                          dashboard_address=None) as cluster, Client(cluster) as client:
            f.source(theta, Xd, yd)
            now, out = load(), []
            t, cpu = median_times(lambda: f.value_and_grad(theta, Xd, yd), repeats, client, out)
            value, grad = out[0]
            np.testing.assert_allclose(value, value0, rtol=1e-8)
            np.testing.assert_allclose(grad, grad0, rtol=1e-6)
            peak = max(client.run(_peak_rss_mb).values())
        rows.append(f"| pullback (Dask backend, blocked Cholesky, {block} x {block} blocks) | {k} | {t:.2f} "
                    f"| {cpu:.2f} | {t / t_np:.2f} | {peak:.0f} per worker | {now} |")
        print(rows[-1], flush=True)
    return [*head, *rows]


def _max_rss_mb() -> float:
    """This process's peak resident memory (``ru_maxrss``, kB on Linux)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=15_000_000)
    parser.add_argument("--features", type=int, default=20)
    parser.add_argument("--chunk", type=int, default=250_000)
    parser.add_argument("--memory-limit", default="600MB")
    parser.add_argument("--gp-n", type=int, default=4000)
    parser.add_argument("--gp-block", type=int, default=1000)
    parser.add_argument("--gp-workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--gp-memory-limit", default="8GB")
    parser.add_argument("--data-dir", default=None, help="where the dataset is written (a fresh folder in it)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--gp-repeats", type=int, default=None, help="calls per GP row (default: --repeats)")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", choices=("logistic", "gp"), default=None)
    a = parser.parse_args()
    if a.quick:
        a.rows, a.chunk, a.gp_n, a.gp_block, a.repeats = 400_000, 50_000, 600, 200, 2
    if a.data_dir:
        os.makedirs(a.data_dir, exist_ok=True)
    directory = tempfile.mkdtemp(prefix="pullback-dask-", dir=a.data_dir)
    try:
        print(f"## Dask backend (`python -m benchmarks.dask`), load {load()} at the start\n")
        if a.only != "gp":
            t = time.perf_counter()
            write(directory, a.rows, a.features, a.chunk)
            gb = a.rows * (a.features + 1) * 8 / 1e9
            print(f"Logistic regression value and gradient over {a.rows:,} rows x {a.features} features ({gb:.2f} GB "
                  f"as .npy chunks of {a.chunk:,} rows, written in {time.perf_counter() - t:.0f} s), workers of one "
                  f"thread and a {a.memory_limit} memory limit each; medians of {a.repeats} calls.\n")
            rows = logistic_rows(directory, a.rows, a.features, a.memory_limit, a.repeats)
            rows.append(numpy_floor(directory, min(a.chunk, 200_000), a.features, a.repeats * 3))
            print("", *rows, sep="\n", flush=True)
            shutil.rmtree(directory, ignore_errors=True)
        if a.only != "logistic":
            print(f"\nGP negative log likelihood and gradient (RBF kernel, 3 hyperparameters), n = {a.gp_n:,}, "
                  f"X chunked in {a.gp_block}-row blocks (K in {a.gp_block} x {a.gp_block} blocks); medians of "
                  f"{a.gp_repeats or a.repeats} calls.\n")
            gp_rows(a.gp_n, a.gp_block, a.gp_repeats or a.repeats, tuple(a.gp_workers), a.gp_memory_limit)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
