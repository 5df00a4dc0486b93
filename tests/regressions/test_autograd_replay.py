"""The classifier of tools/autograd_replay.py (the replay itself needs autograd's sdist and is run by hand)."""

import importlib.util
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[1] / "tools" / "autograd_replay.py"
_spec = importlib.util.spec_from_file_location("autograd_replay", _PATH)
replay = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(replay)

TRACING = "TracingError PullbackError Exception BaseException object"
CONCRETE = "ConcretizationError TracingError PullbackError TypeError Exception BaseException object"


@pytest.mark.parametrize("exc, message, where, origin, expected", [
    (TRACING, "/t/test_numpy.py:12: numpy.prod is not supported on traced values by pullback", "", "",
     ("unsupported", "numpy.prod")),
    (TRACING, "t.py:3: numpy.erf is not supported on traced values by pullback", "", "",
     ("unsupported", "scipy.special.erf")),
    (TRACING, "t.py:3: np.linalg.norm with ord='nuc' is not supported on traced values by pullback", "", "",
     ("unsupported", "np.linalg.norm with ord='nuc'")),
    (CONCRETE, "t.py:9: scipy.linalg.sqrtm calls np.asarray on a traced value, so it cannot be traced; ...", "", "",
     ("unsupported", "scipy.linalg.sqrtm")),
    (CONCRETE, "t.py:9: a traced value f64[3] cannot be converted to a NumPy array (np.asarray/np.array); ...",
     "", "scipy.stats.norm.logpdf", ("unsupported", "np.asarray of a traced value in scipy.stats.norm.logpdf")),
    (CONCRETE, "t.py:1: bool() of a traced value f64[]: Python control flow ...", "", "",
     ("unsupported", "bool() of a traced value (Python control flow/conversion)")),
    ("NotImplementedError RuntimeError Exception", "autograd.grad_named has no pullback equivalent", "", "",
     ("unsupported", "autograd.grad_named has no pullback equivalent")),
    ("NotApplicable Exception", "autograd internal autograd.misc.flatten", "", "",
     ("n/a", "autograd internal autograd.misc.flatten")),
    ("AssertionError Exception", "Derivative (VJP) check failed:\nanalytic: 1", "/s/autograd/test_util.py", "",
     ("wrong", "Derivative (VJP) check failed:")),
    ("AssertionError Exception", "bad IR", "/work/pullback/ir/verify.py", "", ("crash", "AssertionError: bad IR")),
    ("AssertionError Exception", "", "<pullback:f_grad:7>", "", ("crash", "AssertionError: ")),
    (TRACING, "t.py:4: cannot reshape array of shape (2, 1, 4) into (2, 1)", "", "",
     ("crash", "TracingError: cannot reshape array of shape (2, 1, 4) into (2, 1)")),
    ("AttributeError Exception", "'bool' object has no attribute 'astype'", "<pullback:f_grad:3>", "",
     ("crash", "AttributeError: 'bool' object has no attribute 'astype'")),
])
def test_classify(exc, message, where, origin, expected):
    assert replay.classify(exc, message, where, origin) == expected


def test_origin_names_the_library_function_or_the_test_line():
    pullback = ("/r/pullback/ir/tracer.py", "pullback.ir.tracer", "__array__", "", "Tracer")
    test = ("/t/test_scipy.py", "test_scipy", "fun", "return np.sum(stats.norm.logpdf(x))", "")
    scipy_public = ("/s/scipy/stats/_distn_infrastructure.py", "scipy.stats._distn_infrastructure", "logpdf", "",
                    "norm_gen")
    scipy_private = ("/s/scipy/stats/_distn_infrastructure.py", "scipy.stats._distn_infrastructure", "_argcheck",
                     "", "norm_gen")
    assert replay.origin_of([test, scipy_public, scipy_private, pullback]) == "scipy.stats.norm.logpdf"
    array_line = ("/t/test_numpy.py", "test_numpy", "fun", "return np.array([x, y])", "")
    assert replay.origin_of([array_line, pullback]) == "np.array (test code)"
    assert replay.origin_of([array_line]) == ""


@pytest.mark.parametrize("blocker, family", [
    ("numpy.fft.rfft", "numpy.fft"), ("numpy.prod", "numpy"), ("np.linalg.norm with ord=3", "numpy.linalg"),
    ("scipy.special.logsumexp", "scipy.special"),
    ("np.asarray of a traced value in scipy.stats.norm.cdf", "scipy.stats (np.asarray of a traced value)"),
    ("//", "//"),
])
def test_family(blocker, family):
    assert replay.family_of(blocker) == family
