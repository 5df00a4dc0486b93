"""Two fluid simulations as autograd's examples write them, for the first-call benchmark.

Ports of autograd's ``examples/fluidsim/fluidsim.py`` and ``examples/fluidsim/wing.py``
(https://github.com/HIPS/autograd, MIT licence; both after Jos Stam, "Real-Time Fluid Dynamics
for Games", 2003): semi-Lagrangian advection by bilinear interpolation, then a pressure projection
by a fixed number of Jacobi sweeps, every step a Python loop over NumPy calls, as a user writes it.
The plotting is left out, and the images the fluid example loads (a smoke picture, a 220 x 220 skull
halved to 110 x 110) are replaced by smooth fields of the same size made here: the arithmetic, and
so the timing, does not depend on the pixels. Each function takes ``np`` so that the same source
runs under NumPy (pullback traces it) and ``autograd.numpy``.
"""

from __future__ import annotations

import numpy

FLUID_SIZE = 110  # the skull image, halved
FLUID_STEPS = 100
WING_ROWS, WING_COLS = 40, 60
WING_STEPS = 20


# --- fluidsim.py ------------------------------------------------------------------------------


def fluid_project(np, vx, vy):
    """Make the velocity field roughly divergence-free: ten Jacobi sweeps for the pressure."""
    h = 1.0 / vx.shape[0]
    div = -0.5 * h * (np.roll(vx, -1, axis=0) - np.roll(vx, 1, axis=0)
                      + np.roll(vy, -1, axis=1) - np.roll(vy, 1, axis=1))
    p = np.zeros(vx.shape)
    for _ in range(10):
        p = (div + np.roll(p, 1, axis=0) + np.roll(p, -1, axis=0)
             + np.roll(p, 1, axis=1) + np.roll(p, -1, axis=1)) / 4.0
    vx = vx - 0.5 * (np.roll(p, -1, axis=0) - np.roll(p, 1, axis=0)) / h
    vy = vy - 0.5 * (np.roll(p, -1, axis=1) - np.roll(p, 1, axis=1)) / h
    return vx, vy


def fluid_advect(np, f, vx, vy):
    """Carry the field ``f`` along the velocities (vx, vy): each cell takes the bilinear
    interpolation of ``f`` where its contents came from, the grid wrapping at the edges."""
    rows, cols = f.shape
    cell_ys, cell_xs = np.meshgrid(np.arange(rows), np.arange(cols))
    from_x = (cell_xs - vx).ravel()
    from_y = (cell_ys - vy).ravel()
    left = np.floor(from_x).astype(int)
    top = np.floor(from_y).astype(int)
    right_w = from_x - left
    bottom_w = from_y - top
    left = np.mod(left, rows)
    right = np.mod(left + 1, rows)
    top = np.mod(top, cols)
    bottom = np.mod(top + 1, cols)
    flat = ((1 - right_w) * ((1 - bottom_w) * f[left, top] + bottom_w * f[left, bottom])
            + right_w * ((1 - bottom_w) * f[right, top] + bottom_w * f[right, bottom]))
    return np.reshape(flat, (rows, cols))


def fluid_simulate(np, vx, vy, smoke, steps):
    for _ in range(steps):
        vx_moved = fluid_advect(np, vx, vx, vy)
        vy_moved = fluid_advect(np, vy, vx, vy)
        vx, vy = fluid_project(np, vx_moved, vy_moved)
        smoke = fluid_advect(np, smoke, vx, vy)
    return smoke


def fluid_data(size: int = FLUID_SIZE):
    """(initial smoke, target): a band of smoke and a ring to push it into."""
    y, x = numpy.mgrid[0:size, 0:size] / size
    smoke = numpy.exp(-((y - 0.3) ** 2) / 0.01)
    r = numpy.hypot(x - 0.5, y - 0.5)
    target = numpy.exp(-((r - 0.25) ** 2) / 0.003)
    return smoke, target


def fluid_objective(np, smoke, target, steps: int = FLUID_STEPS):
    """The example's objective: the mean squared distance of the final smoke from the target, as a
    function of the flattened initial velocities."""
    rows, cols = target.shape

    def objective(params):
        vx = np.reshape(params[:rows * cols], (rows, cols))
        vy = np.reshape(params[rows * cols:], (rows, cols))
        final = fluid_simulate(np, vx, vy, smoke, steps)
        return np.mean((target - final) ** 2)

    return objective


def fluid_params(size: int = FLUID_SIZE):
    """The example starts from zero velocities; a small swirl here, so that advection moves things."""
    y, x = numpy.mgrid[0:size, 0:size] / size
    return numpy.concatenate([(0.5 * numpy.sin(2 * numpy.pi * y)).ravel(), (0.5 * numpy.cos(2 * numpy.pi * x)).ravel()])


# --- wing.py ----------------------------------------------------------------------------------


def occlude(f, occlusion):
    return f * (1 - occlusion)


def make_continuous(np, f, occlusion):
    """Inside the obstacle, ``f`` becomes the average of its open neighbours."""
    open_ = 1 - occlusion
    num = (np.roll(f, 1, axis=0) * np.roll(open_, 1, axis=0) + np.roll(f, -1, axis=0) * np.roll(open_, -1, axis=0)
           + np.roll(f, 1, axis=1) * np.roll(open_, 1, axis=1) + np.roll(f, -1, axis=1) * np.roll(open_, -1, axis=1))
    den = (np.roll(open_, 1, axis=0) + np.roll(open_, -1, axis=0)
           + np.roll(open_, 1, axis=1) + np.roll(open_, -1, axis=1))
    return f * open_ + (1 - open_) * num / (den + 0.001)


def wing_project(np, vx, vy, occlusion):
    """Fifty Jacobi sweeps for the pressure, the obstacle's cells filled in after each."""
    div = -0.5 * (np.roll(vx, -1, axis=1) - np.roll(vx, 1, axis=1)
                  + np.roll(vy, -1, axis=0) - np.roll(vy, 1, axis=0))
    div = make_continuous(np, div, occlusion)
    p = np.zeros(vx.shape)
    for _ in range(50):
        p = (div + np.roll(p, 1, axis=1) + np.roll(p, -1, axis=1)
             + np.roll(p, 1, axis=0) + np.roll(p, -1, axis=0)) / 4.0
        p = make_continuous(np, p, occlusion)
    vx = vx - 0.5 * (np.roll(p, -1, axis=1) - np.roll(p, 1, axis=1))
    vy = vy - 0.5 * (np.roll(p, -1, axis=0) - np.roll(p, 1, axis=0))
    return occlude(vx, occlusion), occlude(vy, occlusion)


def wing_advect(np, f, vx, vy):
    """As ``fluid_advect``, with x along the columns."""
    rows, cols = f.shape
    cell_xs, cell_ys = np.meshgrid(np.arange(cols), np.arange(rows))
    from_x = (cell_xs - vx).ravel()
    from_y = (cell_ys - vy).ravel()
    left = np.floor(from_y).astype(int)
    top = np.floor(from_x).astype(int)
    right_w = from_y - left
    bottom_w = from_x - top
    left = np.mod(left, rows)
    right = np.mod(left + 1, rows)
    top = np.mod(top, cols)
    bottom = np.mod(top + 1, cols)
    flat = ((1 - right_w) * ((1 - bottom_w) * f[left, top] + bottom_w * f[left, bottom])
            + right_w * ((1 - bottom_w) * f[right, top] + bottom_w * f[right, bottom]))
    return np.reshape(flat, (rows, cols))


def wing_simulate(np, vx, vy, steps, occlusion):
    rows, cols = vx.shape
    occlusion = 0.5 * (np.tanh(occlusion) + 1.0)
    mask = numpy.zeros((rows, cols))
    mask[10:30, 10:30] = 1.0  # the wing may only grow here
    occlusion = occlusion * mask
    red = numpy.zeros((rows, cols))
    red[rows // 4:rows // 2] = 1
    blue = numpy.zeros((rows, cols))
    blue[rows // 2:3 * rows // 4] = 1
    vx, vy = wing_project(np, vx, vy, occlusion)
    for _ in range(steps):
        vx_moved = wing_advect(np, vx, vx, vy)
        vy_moved = wing_advect(np, vy, vx, vy)
        vx, vy = wing_project(np, vx_moved, vy_moved, occlusion)
        red = occlude(wing_advect(np, red, vx, vy), occlusion)
        blue = occlude(wing_advect(np, blue, vx, vy), occlusion)
    return vx, vy


def wing_objective(np, steps: int = WING_STEPS, rows: int = WING_ROWS, cols: int = WING_COLS):
    """The example's objective: minus lift over drag of the final flow, as a function of the
    flattened occlusion (the wing's shape, before a sigmoid)."""
    init_vx, init_vy = numpy.ones((rows, cols)), numpy.zeros((rows, cols))

    def objective(params):
        vx, vy = wing_simulate(np, init_vx, init_vy, steps, np.reshape(params, (rows, cols)))
        return -np.mean(vy - init_vy) / np.mean(init_vx - vx)

    return objective


def wing_params(rows: int = WING_ROWS, cols: int = WING_COLS):
    """The example's starting shape: a square block."""
    occlusion = -numpy.ones((rows, cols))
    occlusion[15:25, 15:25] = 0.0
    return occlusion.ravel()
