import logging
import os
import tempfile
import threading
from pathlib import Path

import numpy as np
import pytest

from tests.sample import full, mark_grids

GOLDEN = Path(__file__).parent / "golden"

# The suite checks the NumPy programs it prints unless a test asks for Numba's loops (compile="numba" or
# "auto": tests/test_numba_loops.py); compiled loops go to a fresh cache directory per run.
os.environ.setdefault("PULLBACK_COMPILE", "numpy")
os.environ.setdefault("PULLBACK_CACHE_DIR", tempfile.mkdtemp(prefix="pullback-numba-"))


def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true",
                     help="run the tests marked slow (every case of the exhaustive families, full hypothesis "
                          "example counts), as PULLBACK_SLOW=1 does")


def pytest_configure(config):
    if config.getoption("--runslow"):
        os.environ["PULLBACK_SLOW"] = "1"  # before the test modules are imported: they read it (tests/sample.py)


@pytest.hookimpl(tryfirst=True)  # before ``-m`` selects by marker
def pytest_collection_modifyitems(config, items):
    """Deselect the slow tests unless asked for: --runslow, PULLBACK_SLOW=1, ``-m`` naming ``slow``,
    or the test named by its node id on the command line."""
    mark_grids(items)
    if full() or "slow" in (config.getoption("markexpr") or ""):
        return
    named = set(config.args)
    slow = [item for item in items if item.get_closest_marker("slow") and item.nodeid not in named]
    if slow:
        chosen = set(map(id, slow))
        items[:] = [item for item in items if id(item) not in chosen]
        config.hook.pytest_deselected(items=slow)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def check_golden(name: str, text: str) -> None:
    """Compare ``text`` with tests/golden/NAME; PULLBACK_REGEN_GOLDEN=1 rewrites it."""
    path = GOLDEN / name
    if os.environ.get("PULLBACK_REGEN_GOLDEN"):
        path.write_text(text)
    assert path.exists(), f"missing golden file {path}; run with PULLBACK_REGEN_GOLDEN=1"
    assert text == path.read_text()


class _Lines(logging.Handler):
    """pullback's log messages, from any thread."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.lines: list[str] = []
        self._guard = threading.Lock()

    def emit(self, record):
        with self._guard:
            self.lines.append(record.getMessage())


@pytest.fixture
def pullback_log():
    """The messages pullback logs at INFO and above during the test (threads' too), as a list."""
    logger = logging.getLogger("pullback")
    handler, level = _Lines(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield handler.lines
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
