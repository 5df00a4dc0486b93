"""autograd.scipy.signal: autograd's own N-d ``convolve`` (with ``axes`` and ``dot_axes``) has no
SciPy counterpart; without them it is ``scipy.signal.convolve``."""

import scipy.signal as _signal


def convolve(A, B, axes=None, dot_axes=[(), ()], mode="full"):  # noqa: B006  (autograd's signature)
    if axes is not None or dot_axes != [(), ()]:
        raise NotImplementedError("autograd.scipy.signal.convolve with axes/dot_axes (autograd's own "
                                  "generalised convolution) has no pullback equivalent")
    return _signal.convolve(A, B, mode=mode)
