"""Numba's compile of a program's loops, run in a subprocess while the program goes on as NumPy.

``compile="auto"`` runs a program whose compiled loops Numba's on-disk cache lacks as NumPy, and compiles
them once its calls have taken ``numba_loops.AUTO_WARM_SECONDS`` (``api.transforms.Staged._warming``). That
compile takes seconds of LLVM (about 19 CPU seconds for a Kalman filter's loops), and Numba holds the GIL while
it compiles, so a thread would not hide it. A separate interpreter does: ``Warming`` starts
``sys.executable`` (a new process, never a fork), which executes the printed module from its file, as
``compiler.compile_program`` does, and calls its function once on the arguments and constants of the
call that crossed the threshold, pickled through its standard input: Numba compiles every loop for the
types the program will call it with, and writes the machine code to its on-disk cache. The calls run
NumPy meanwhile; once the subprocess has ended and the cache holds the loops (``numba_loops.cached``),
the program imports Numba and loads them (0.1 to 0.6 s, measured by ``benchmarks/tiering.py``) and runs
compiled.

Sound by construction: the subprocess reads all its input before it does anything else (the parent's
write cannot wait on it), writes its errors to an unnamed temporary file (no pipe to fill), and is reaped
by ``poll`` from the caller's next call. It runs at the caller's priority: at a lower one, on a busy
machine, it waited behind every other process (the Kalman filter's compile had not ended after 90 s on 2
cores at a load of 7; at the caller's priority it ended within the next run's 2 minutes). Nothing waits
for it: a process that exits first leaves it to finish, and the next run of the program finds the cache
warm. A subprocess that ends without filling the cache (a loop Numba cannot compile, a killed process)
leaves the program NumPy for good, said once in the log.
"""

from __future__ import annotations

import pickle
import subprocess
import sys
import tempfile
import threading
from typing import Any, NamedTuple

from pullback.backends import numba_loops
from pullback.log import logger


class Deferred(NamedTuple):
    """What compiles a program's loops later: the printed module's file (``numba_loops.module_file``), its
    source, its function's name and the constants the function takes as keywords."""

    path: str
    source: str
    name: str
    constants: dict[str, Any]


# What the subprocess runs: the printed module, registered under the name ``numba_loops.module_namespace``
# gives it (Numba's cache imports the loops' module by it), its function called once. Its standard input
# is read first, whole.
_CHILD = """\
import sys
payload = sys.stdin.buffer.read()
import pickle
import types

path, module_name, name = sys.argv[1:4]
args, constants = pickle.loads(payload)
module = types.ModuleType(module_name)
module.__file__ = path
sys.modules[module_name] = module
with open(path, encoding="utf-8") as f:
    code = compile(f.read(), path, "exec")
exec(code, module.__dict__)
module.__dict__[name](*args, **constants)
"""


class Warming:
    """A subprocess compiling ``deferred``'s loops into Numba's on-disk cache (see the module docstring);
    ``poll``: whether it has, once it has ended."""

    def __init__(self, deferred: Deferred, args: tuple):
        """Start it, for the call of ``args``; raises what pickling them or starting a process raises (the
        caller compiles in its own process then)."""
        if not sys.executable:
            raise OSError("no Python executable to start (sys.executable is empty)")
        self.deferred = deferred
        payload = pickle.dumps((tuple(args), deferred.constants), protocol=pickle.HIGHEST_PROTOCOL)
        self._errors = tempfile.TemporaryFile()  # unnamed: nothing left behind, whoever ends first
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-c", _CHILD, deferred.path, numba_loops.module_name(deferred.path), deferred.name],
                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=self._errors, close_fds=True)
        except BaseException:
            self._errors.close()
            raise
        try:
            self.process.stdin.write(payload)  # type: ignore[union-attr]
            self.process.stdin.close()  # type: ignore[union-attr]
        except OSError:  # it ended already (poll says how)
            pass
        self.result: bool | None = None
        self._lock = threading.Lock()

    def poll(self) -> bool | None:
        """None while the subprocess runs; once it has ended (and been reaped), whether Numba's cache holds
        the loops, said in the log if it does not."""
        with self._lock:
            if self.result is None and self.process.poll() is not None:
                self._ended()
        return self.result

    def _ended(self) -> None:
        self.result = numba_loops.cached(self.deferred.path, self.deferred.source)
        if not self.result:
            self._errors.seek(0)
            lines = self._errors.read().decode(errors="replace").strip().splitlines()
            logger.warning("%s: compiling its loops in a subprocess failed (exit status %s%s); they run as NumPy",
                           self.deferred.name, self.process.returncode, f": {lines[-1][:200]}" if lines else "")
        self._errors.close()

    def wait(self, timeout: float | None = None) -> bool | None:
        """``poll`` once the subprocess has ended, or after ``timeout`` seconds (None: it still runs)."""
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        return self.poll()


def start(deferred: Deferred, args: tuple) -> Warming | None:
    """A ``Warming`` of ``deferred`` for the call of ``args``, or None where none can start (arguments that
    do not pickle, no process to start: said in the log at debug level)."""
    try:
        return Warming(deferred, args)
    except (OSError, pickle.PicklingError, TypeError, AttributeError, ValueError) as e:
        logger.debug("%s: compiling in this process (no subprocess: %s: %s)", deferred.name, type(e).__name__, e)
        return None
