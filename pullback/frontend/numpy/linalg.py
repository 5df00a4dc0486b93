"""``np.linalg`` on traced arrays: NumPy's names and conventions over ``pullback.linalg`` (the
one module of each namespace: ``np.linalg`` here, ``scipy.linalg`` in ``frontend.scipy.linalg``,
``pullback.linalg`` in ``frontend.linalg``, all over the primitives of ``primitives.linalg``)."""

import numpy as np

from pullback.frontend import linalg
from pullback.frontend.numpy import FUNCTIONS, multi_dot, unsupported


def _linalg(name):
    return getattr(linalg, name)


def _np_cholesky(a, /, *, upper=False):
    return _linalg("cholesky")(a, lower=not upper)


def _np_qr(a, mode="reduced"):
    return _linalg("qr")(a, mode=mode)


def _np_eigh(a, UPLO="L"):
    return _linalg("eigh")(a, UPLO=UPLO)


def _np_svd(a, full_matrices=True, compute_uv=True, hermitian=False):
    if hermitian:
        unsupported("np.linalg.svd with hermitian=True")
    return _linalg("svd")(a, full_matrices=full_matrices, compute_uv=compute_uv)


FUNCTIONS.update({
    np.linalg.cholesky: _np_cholesky, np.linalg.qr: _np_qr, np.linalg.eigh: _np_eigh,
    np.linalg.eigvalsh: lambda a, UPLO="L": _np_eigh(a, UPLO)[0], np.linalg.svd: _np_svd,
    np.linalg.solve: _linalg("solve"), np.linalg.inv: _linalg("inv"), np.linalg.det: _linalg("det"),
    np.linalg.slogdet: _linalg("slogdet"),
})
FUNCTIONS.update({  # the rest of np.linalg (pullback.linalg)
    np.linalg.norm: _linalg("norm"), np.linalg.matrix_power: _linalg("matrix_power"),
    np.linalg.matrix_rank: _linalg("matrix_rank"), np.linalg.pinv: _linalg("pinv"), np.linalg.lstsq: _linalg("lstsq"),
    np.linalg.eig: _linalg("eig"), np.linalg.eigvals: _linalg("eigvals"), np.linalg.multi_dot: multi_dot,
})
