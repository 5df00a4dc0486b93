"""autograd.scipy.*: the SciPy modules themselves (pullback dispatches on SciPy functions it knows,
and names the pullback.linalg function to use where SciPy converts a traced value)."""

import sys as _sys

import scipy.integrate as integrate
import scipy.linalg as linalg
import scipy.special as special
import scipy.stats as stats

from autograd.scipy import signal

misc = special  # autograd.scipy.misc.logsumexp lives in scipy.special now

for _name, _module in {"integrate": integrate, "linalg": linalg, "signal": signal, "special": special,
                       "stats": stats, "misc": misc}.items():
    _sys.modules[f"{__name__}.{_name}"] = _module
for _dist in ("norm", "t", "beta", "gamma", "chi2", "poisson", "dirichlet", "multivariate_normal"):
    _sys.modules[f"{__name__}.stats.{_dist}"] = getattr(stats, _dist)
