import os
from pathlib import Path

import numpy as np
import pytest

GOLDEN = Path(__file__).parent / "golden"


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
