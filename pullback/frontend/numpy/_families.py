"""Imports every family module of ``pullback.frontend.numpy`` so that each registers its
functions; a family is added by importing it here."""

import pullback.frontend.construct  # noqa: F401
import pullback.frontend.numpy.fft  # noqa: F401
import pullback.frontend.numpy.indexing  # noqa: F401
import pullback.frontend.numpy.manipulation  # noqa: F401
import pullback.frontend.numpy.polynomial  # noqa: F401
import pullback.frontend.numpy.statistics  # noqa: F401
import pullback.frontend.numpy.ufuncs  # noqa: F401
import pullback.frontend.scipy.integrate  # noqa: F401
import pullback.frontend.scipy.linalg  # noqa: F401
import pullback.frontend.scipy.signal  # noqa: F401
import pullback.frontend.scipy.spatial  # noqa: F401
import pullback.frontend.scipy.special  # noqa: F401
import pullback.frontend.scipy.stats  # noqa: F401
