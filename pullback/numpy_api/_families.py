"""Imports every family module of ``pullback.numpy_api`` so that each registers its
functions; a family is added by importing it here."""

import pullback.numpy_api.construct  # noqa: F401
import pullback.numpy_api.fft  # noqa: F401
import pullback.numpy_api.indexing  # noqa: F401
import pullback.numpy_api.integrate  # noqa: F401
import pullback.numpy_api.manipulation  # noqa: F401
import pullback.numpy_api.polynomial  # noqa: F401
import pullback.numpy_api.scipy_linalg  # noqa: F401
import pullback.numpy_api.signal  # noqa: F401
import pullback.numpy_api.spatial  # noqa: F401
import pullback.numpy_api.special  # noqa: F401
import pullback.numpy_api.statistics  # noqa: F401
import pullback.numpy_api.stats  # noqa: F401
import pullback.numpy_api.ufuncs  # noqa: F401
