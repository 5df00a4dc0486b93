"""autograd's internals (boxes, vspaces, tracer, graph utilities) have no pullback counterpart.
Importing a name from them succeeds, so a test file collects; *using* one raises ``NotApplicable``,
which tools/autograd_replay.py reports as "not applicable" rather than as a pullback failure."""

from __future__ import annotations


class NotApplicable(Exception):
    """A test used a piece of autograd's internals."""


class Internal:
    def __init__(self, name: str):
        self._name = name

    def _refuse(self, *args, **kwargs):
        raise NotApplicable(f"autograd internal {self._name}")

    __call__ = _refuse

    def __getattr__(self, attr: str):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return Internal(f"{self._name}.{attr}")

    def __getitem__(self, key):
        return Internal(f"{self._name}[...]")


def module_getattr(module: str):
    def __getattr__(name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return Internal(f"{module}.{name}")

    return __getattr__
