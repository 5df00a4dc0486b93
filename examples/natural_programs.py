"""Programs written as NumPy users write them, differentiated as written: a fixed-point solve with
``while``, a Taylor series summed until a term falls below a tolerance, a minibatch objective
indexed by the iteration number, and a stochastic objective that draws its noise at every call.

Run ``python examples/natural_programs.py`` to print each gradient beside finite differences and the
printed program of the fixed-point solve (a Python ``while`` forward, a reversed loop backward).
"""

import numpy as np

import pullback as pb


def fixed_point(a, tol=1e-12):
    """The x with x = cos(a x), by iterating until it stops moving: the number of steps depends on a."""
    x = 1.0
    while np.abs(np.cos(a * x) - x) > tol:
        x = np.cos(a * x)
    return x


def exp_series(x, tol=1e-16):
    """e^x as its Taylor series, summed until a term falls below ``tol`` (relative)."""
    term, total, n = 1.0, 1.0, 1
    while np.abs(term) > tol * np.abs(total):
        term = term * x / n
        total = total + term
        n = n + 1
    return total


def _data(n: int = 64, d: int = 3, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    y = (X @ np.array([1.0, -2.0, 0.5]) + 0.1 * rng.standard_normal(n) > 0).astype(float)
    return X, y


X, Y = _data()
BATCH = 16


def minibatch_loss(w, it):
    """Logistic loss of the ``it``-th minibatch: ``it`` is an ordinary integer argument, traced, so one
    program serves every iteration (the slice is a window at a traced start)."""
    start = (it % (len(X) // BATCH)) * BATCH
    Xb, yb = X[start:start + BATCH], Y[start:start + BATCH]
    z = Xb @ w
    return np.mean(np.logaddexp(0.0, z) - yb * z)


def sgd(steps: int = 200, lr: float = 0.5):
    """Plain SGD over the minibatches: the gradient program is compiled once."""
    grad = pb.grad(minibatch_loss)
    w = np.zeros(X.shape[1])
    for it in range(steps):
        w = w - lr * grad(w, it)
    return w


RNG = np.random.RandomState(0)


def elbo_estimate(params, n_samples=8):
    """A reparameterised Monte Carlo estimate of a Gaussian's negative ELBO against N(1, 0.5^2): every
    call draws fresh noise from ``RNG``, as eager NumPy would."""
    mu, log_sigma = params[0], params[1]
    z = RNG.normal(mu, np.exp(log_sigma), size=n_samples)
    log_p = -0.5 * ((z - 1.0) / 0.5) ** 2 - np.log(0.5)
    return -np.mean(log_p) - log_sigma


def _fd(f, x, eps=1e-6):
    x = np.asarray(x, float)
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[i] = eps
        g[i] = (f(x + e) - f(x - e)) / (2 * eps)
    return g


if __name__ == "__main__":
    print("fixed point, d/da at 0.5:", pb.grad(fixed_point)(0.5), "finite differences:", _fd(fixed_point, 0.5))
    print("exp series, d/dx at 1.3:", pb.grad(exp_series)(1.3), "e^1.3:", np.exp(1.3))
    w = np.array([0.1, 0.2, 0.3])
    print("minibatch 5 gradient:", pb.grad(minibatch_loss)(w, 5), "finite differences:",
          _fd(lambda v: minibatch_loss(v, 5), w))
    print("SGD weights:", sgd())
    print("ELBO gradient (one draw):", pb.grad(elbo_estimate)(np.array([0.0, 0.0])))
    print(pb.differentiate(fixed_point).source(0.5))
