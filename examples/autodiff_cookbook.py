"""JAX's "Autodiff Cookbook", ported: ``jax.numpy`` became ``numpy`` and ``jax`` became
``pullback``; nothing else changed but the random numbers (NumPy's generator for JAX's keys).

    python examples/autodiff_cookbook.py
"""

import numpy as np

import pullback as pb

rng = np.random.default_rng(0)


# --- grad ---------------------------------------------------------------------------------------

grad_tanh = pb.grad(np.tanh)


def sigmoid(x):
    return 0.5 * (np.tanh(x / 2) + 1)


def predict(W, b, inputs):
    """The probability that a label is true."""
    return sigmoid(np.dot(inputs, W) + b)


inputs = np.array([[0.52, 1.12, 0.77],
                   [0.88, -1.08, 0.15],
                   [0.52, 0.06, -1.30],
                   [0.74, -2.49, 1.39]])
targets = np.array([True, True, False, True])


def loss(W, b):
    """Training loss: the negative log-likelihood of the training examples."""
    preds = predict(W, b, inputs)
    label_probs = preds * targets + (1 - preds) * (1 - targets)
    return -np.sum(np.log(label_probs))


W = rng.standard_normal(3)
b = rng.standard_normal()

W_grad = pb.grad(loss, argnums=0)(W, b)
b_grad = pb.grad(loss, 1)(W, b)
W_grad_2, b_grad_2 = pb.grad(loss, (0, 1))(W, b)
loss_value, Wb_grad = pb.value_and_grad(loss, (0, 1))(W, b)


# --- has_aux --------------------------------------------------------------------------------------


def loss_with_aux(W, b):
    preds = predict(W, b, inputs)
    label_probs = preds * targets + (1 - preds) * (1 - targets)
    return -np.sum(np.log(label_probs)), preds


W_grad_aux, preds_aux = pb.grad(loss_with_aux, has_aux=True)(W, b)


# --- jvp, vjp, Hessian-vector products ----------------------------------------------------------------


def hvp(f, x, v):
    """Forward-over-reverse: the JVP of the gradient."""
    return pb.jvp(pb.grad(f), (x,), (v,))[1]


def hvp_revrev(f, x, v):
    """Reverse-over-reverse: the gradient of <grad f, v>."""
    return pb.grad(lambda x: np.vdot(pb.grad(f)(x), v))(x)


y, u = predict(W, b, inputs), rng.standard_normal(3)
_, jvp_out = pb.jvp(lambda W: predict(W, b, inputs), (W,), (u,))
y_vjp, vjp_fun = pb.vjp(lambda W: predict(W, b, inputs), W)
(W_cotangent,) = vjp_fun(np.ones(4))

J_fwd = pb.jacfwd(predict, argnums=0)(W, b, inputs)
J_rev = pb.jacrev(predict, argnums=0)(W, b, inputs)
H = pb.hessian(loss)(W, b)

per_example_grads = pb.vmap(pb.grad(lambda W, x, t: -np.log(predict(W, b, x) * t + (1 - predict(W, b, x)) * (1 - t))),
                            in_axes=(None, 0, 0))(W, inputs, targets.astype(float))


# --- custom_jvp ------------------------------------------------------------------------------------


@pb.custom_jvp
def log1pexp(x):
    return np.log(1.0 + np.exp(x))


@log1pexp.defjvp
def log1pexp_jvp(primals, tangents):
    (x,), (x_dot,) = primals, tangents
    ans = log1pexp(x)
    ans_dot = (1 - 1 / (1 + np.exp(x))) * x_dot
    return ans, ans_dot


@pb.custom_jvp
def f(x):
    return x / (1 + np.sqrt(x))


@f.defjvp
def f_jvp(primals, tangents):
    (x,), (x_dot,) = primals, tangents
    ans = f(x)
    ans_dot = ((np.sqrt(x) + 2) / (2 * (np.sqrt(x) + 1) ** 2)) * x_dot
    return ans, ans_dot


# --- custom_vjp ------------------------------------------------------------------------------------


@pb.custom_vjp
def clip_gradient(lo, hi, x):
    return x  # identity function


def clip_gradient_fwd(lo, hi, x):
    return x, (lo, hi)  # save bounds as residuals


def clip_gradient_bwd(res, g):
    lo, hi = res
    return (None, None, np.clip(g, lo, hi))  # use None to indicate zero cotangents for lo and hi


clip_gradient.defvjp(clip_gradient_fwd, clip_gradient_bwd)


# --- stop_gradient: TD(0) learning --------------------------------------------------------------------


def value_fn(theta, state):
    return theta.dot(state)


def td_loss(theta, s_tm1, r_t, s_t):
    v_tm1 = value_fn(theta, s_tm1)
    target = r_t + value_fn(theta, s_t)
    return -0.5 * ((pb.stop_gradient(target) - v_tm1) ** 2)


theta = np.array([0.1, -0.1, 0.0])
s_tm1, r_t, s_t = np.array([1.0, 2.0, -1.0]), np.array(1.0), np.array([2.0, 1.0, 0.0])
delta_theta = pb.grad(td_loss)(theta, s_tm1, r_t, s_t)


def main():
    print("grad(tanh)(2.0) =", grad_tanh(2.0))
    print("grad(grad(grad(tanh)))(2.0) =", pb.grad(pb.grad(pb.grad(np.tanh)))(2.0))
    print("W_grad =", W_grad, " b_grad =", b_grad, " loss =", loss_value)
    print("Hessian-vector products agree:", np.allclose(hvp(lambda W: loss(W, b), W, u),
                                                     hvp_revrev(lambda W: loss(W, b), W, u)))
    print("jacfwd equals jacrev:", np.allclose(J_fwd, J_rev))
    print("log1pexp'(100.) =", pb.grad(log1pexp)(100.0), " f'(0.) =", pb.grad(f)(0.0))
    print("clipped gradient of sin at 2:", pb.grad(lambda x: clip_gradient(-0.75, 0.75, np.sin(x)))(2.0))
    print("TD(0) update:", delta_theta)


if __name__ == "__main__":
    main()
