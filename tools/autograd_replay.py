"""Replay HIPS autograd's own test suite with pullback standing in for autograd.

Usage (by hand; needs the autograd 1.9.1 sdist, nothing in CI runs this)::

    pip download --no-deps --no-binary :all: autograd==1.9.1 && tar xzf autograd-1.9.1.tar.gz
    python tools/autograd_replay.py --sdist autograd-1.9.1                 # every file
    python tools/autograd_replay.py --sdist autograd-1.9.1 test_numpy.py test_fft.py -k sum
    python tools/autograd_replay.py --out replay.md --json replay.json      # keep the report
    python tools/autograd_replay.py --compare tools/autograd_replay_baseline.json   # what changed

``tools/autograd_replay_baseline.{md,json}`` hold a run on main 5962b0b.

``tools/autograd_shim`` goes first on ``sys.path``: its ``autograd.numpy`` *is* NumPy, so the
tests run plain NumPy on pullback's tracers; ``autograd.scipy.*`` are the SciPy modules; the
differential operators and ``autograd.test_util.check_grads`` are built on ``pb.grad``,
``pb.jvp`` and ``pb.vjp`` (forward and reverse mode against central finite differences, to the
requested order). Each file runs in its own pytest subprocess; every test outcome is one of

- ``pass``;
- ``unsupported``: pullback refused (a TracingError saying "not supported", a ConcretizationError,
  a NotImplementedError); the operation is parsed from the message and the report ranks these
  "blockers" by how many tests they block;
- ``wrong``: an assertion on a value or derivative failed (outside pullback's own code);
- ``crash``: any other exception (an internal error, a TracingError that is not a refusal);
- ``timeout``: the test ran past ``--timeout`` seconds;
- ``n/a``: the test used autograd's internals (boxes, vspaces, tracer, graph utilities), which
  the shim provides as names that raise when used.

Files that test autograd's internals as a whole are not run at all (``NOT_APPLICABLE``). The
other files are split into the "NumPy and linear algebra" part and the "SciPy and FFT" part.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
SHIM = HERE / "autograd_shim"
REPO = HERE.parent
DEFAULT_SDIST = Path("/tmp/ag/autograd-1.9.1")

NOT_APPLICABLE = {
    "test_core.py": "autograd's core: make_vjp/make_jvp internals, primitive definitions, unary_to_nary",
    "test_vspaces.py": "autograd's vector spaces (vspace objects and their methods)",
    "test_wrappers.py": "autograd's wrapper machinery (checkpoint, grad_named, multigrad_dict, "
                        "differential-operator metadata)",
    "test_tests.py": "tests of autograd.test_util itself against deliberately wrong VJPs/JVPs",
    "test_performance.py": "no tests",
}
# Tests that assert autograd refuses something pullback supports: not applicable either way.
SUPPORTED_HERE = {
    "test_graphs.py::test_assignment_raises_error": "index assignment, which autograd refuses, traces in pullback",
    "test_fft.py::test_rfftn_odd_not_implemented": "odd-length rfftn, which autograd refuses, traces in pullback",
}
SCIPY_FFT = ("test_scipy.py", "test_fft.py")
CATEGORIES = ("pass", "unsupported", "wrong", "crash", "timeout", "n/a")

# --- classification ---------------------------------------------------------------------------

_LOCATION = re.compile(r"^(?:\S+?:\d+: )+")
_TYPE = re.compile(r"\b(?:bool|[uif](?:8|16|32|64)|c(?:64|128)|f16)\[[^\]]*\]")
_NOT_SUPPORTED = re.compile(r"^(.*?) is not supported on traced values by pullback")
_SCIPY = re.compile(r"^(scipy\.[\w.]+) calls np\.asarray on a traced value")
_NO_IMPL = re.compile(r"no implementation found for '([\w.]+)' on types that implement __array_function__")


def _public(name: str) -> str:
    """``numpy.erf`` -> ``scipy.special.erf``: pullback names every ufunc after NumPy."""
    m = re.fullmatch(r"numpy\.(\w+)", name)
    if m:
        import numpy
        import scipy.special

        if not hasattr(numpy, m.group(1)) and hasattr(scipy.special, m.group(1)):
            return f"scipy.special.{m.group(1)}"
    return name


def blocker_of(message: str, origin: str = "") -> str:
    """The operation a pullback refusal names, without the user's file:line or the value's type;
    ``origin`` names the function that asked for a conversion of a traced value, if known."""
    text = _LOCATION.sub("", message.strip().splitlines()[0] if message.strip() else "")
    for pattern in (_NOT_SUPPORTED, _SCIPY, _NO_IMPL):
        m = pattern.search(text)
        if m:
            return _public(m.group(1))
    if "cannot be converted to a NumPy array" in text:
        return f"np.asarray of a traced value in {origin or 'unknown code'}"
    if "escaped the trace" in text:
        return "closing over a traced value of an enclosing trace (nested derivatives of closures)"
    m = re.match(r"^module 'numpy' has no attribute '(\w+)'", text)
    if m:
        return f"autograd.numpy.{m.group(1)} (autograd's own function, not NumPy's)"
    m = re.match(r"^(\S+(?: \S+)?) of a traced value", text)
    if m:
        return f"{m.group(1)} of a traced value (Python control flow/conversion)"
    return _TYPE.sub("T", text)


def classify(exc_type: str, message: str, innermost_file: str = "", origin: str = "") -> tuple[str, str]:
    """(category, detail) for a test that raised ``exc_type`` (its class names along the MRO,
    space separated) with ``message``; ``innermost_file`` is where it was raised, ``origin`` the
    function that asked pullback for a concrete value (see ``origin_of``)."""
    types = set(exc_type.split())
    if "NotApplicable" in types:
        return "n/a", message.strip()
    if "TimeoutError" in types and message.startswith("replay timeout"):
        return "timeout", message
    if "ConcretizationError" in types or "NotImplementedError" in types:
        return "unsupported", blocker_of(message, origin)
    if "TracingError" in types and re.search(r"not supported|escaped the trace|does not accept dtype", message):
        return "unsupported", blocker_of(message)
    if "AttributeError" in types and re.match(r"module 'numpy(\.\w+)?' has no attribute", message):
        return "unsupported", blocker_of(message)  # autograd's own extras (np.linalg._dot, ...)
    if "TypeError" in types and _NO_IMPL.search(message):
        return "unsupported", blocker_of(message)
    in_pullback = "/pullback/" in innermost_file.replace(os.sep, "/") or innermost_file.startswith("<pullback:")
    if "AssertionError" in types and not in_pullback:
        return "wrong", message.strip().splitlines()[0][:200] if message.strip() else "assertion"
    first = exc_type.split()[0] if exc_type else "Exception"
    line = _LOCATION.sub("", message.strip().splitlines()[0]) if message.strip() else ""
    return "crash", f"{first}: {_TYPE.sub('T', line)[:200]}"


def origin_of(frames: list[tuple[str, str, str, str, str]]) -> str:
    """Who asked pullback for a concrete value. ``frames`` are (file, module, function, source
    line, class of ``self`` or "") from outermost to innermost. Below the innermost run of
    pullback frames: the outermost of the NumPy/SciPy frames calling it, named publicly
    (``numpy.mean``, ``scipy.stats.norm.logpdf``), or, from test code (or a private library
    helper), the NumPy function the test's line calls (``np.array``)."""
    k = len(frames)
    while k and "/pullback/" in frames[k - 1][0].replace(os.sep, "/"):
        k -= 1
    if k == 0 or k == len(frames):
        return ""
    j = k
    while j and frames[j - 1][1].split(".")[0] in ("numpy", "scipy"):
        j -= 1
    if j < k:
        _, module, function, _, owner = frames[j]
        if not function.startswith("_"):
            if module.startswith("numpy"):
                return f"numpy.{function}"
            if owner.endswith("_gen"):
                return f"scipy.stats.{owner[:-4]}.{function}"
            return f"{'.'.join(module.split('.')[:2])}.{function}"
    if j == 0:
        return ""
    _, _, function, line, _ = frames[j - 1]
    calls = re.findall(r"\b(?:np|onp|npo|numpy|mvn|stats)\.(\w+(?:\.\w+)?)", line)
    return f"np.{calls[0]} (test code)" if calls else f"{function} (test code)"


# --- the worker: one pytest run inside this process -------------------------------------------


class _Recorder:
    def __init__(self, timeout: float):
        self.timeout = timeout
        self.records: list[dict] = []

    def pytest_runtest_call(self, item):
        import signal

        def on_alarm(signum, frame):
            raise TimeoutError(f"replay timeout after {self.timeout:g} s")

        signal.signal(signal.SIGALRM, on_alarm)
        signal.setitimer(signal.ITIMER_REAL, self.timeout)

    def pytest_runtest_teardown(self, item):
        import signal

        signal.setitimer(signal.ITIMER_REAL, 0)

    def pytest_runtest_makereport(self, item, call):
        if call.when != "call" and not (call.excinfo is not None and call.when == "setup"):
            return
        rec = {"nodeid": item.nodeid, "file": item.nodeid.split("::")[0]}
        if item.nodeid in SUPPORTED_HERE:
            rec.update(category="n/a", detail=SUPPORTED_HERE[item.nodeid])
        elif call.excinfo is None:
            rec.update(category="pass", detail="")
        elif call.excinfo.errisinstance(BaseException) and call.excinfo.typename == "Skipped":
            rec.update(category="skipped", detail=str(call.excinfo.value))
        else:
            exc = call.excinfo.value
            names = " ".join(c.__name__ for c in type(exc).__mro__)
            tb = call.excinfo.traceback
            innermost = str(tb[-1].path) if len(tb) else ""
            frames = [(str(e.path), e.frame.f_globals.get("__name__", ""), e.name, _line(e),
                       type(e.frame.f_locals["self"]).__name__ if "self" in e.frame.f_locals else "") for e in tb]
            category, detail = classify(names, str(exc), innermost, origin_of(frames))
            rec.update(category=category, detail=detail)
        self.records.append(rec)

    def pytest_collectreport(self, report):
        if report.failed:
            self.records.append({"nodeid": report.nodeid, "file": report.nodeid.split("::")[0],
                                 "category": "crash", "detail": f"collection error: {report.longreprtext[-300:]}"})


def _line(entry) -> str:
    try:
        return str(entry.statement).strip()
    except Exception:
        return ""


def _worker(tests_dir: Path, files: list[str], keyword: str | None, timeout: float, out: Path) -> None:
    import pytest

    sys.path.insert(0, str(SHIM))
    sys.path.insert(1, str(REPO))
    os.chdir(tests_dir)
    recorder = _Recorder(timeout)
    with tempfile.NamedTemporaryFile("w", suffix=".ini", delete=False) as ini:
        ini.write("[pytest]\n")
    args = ["-q", "-p", "no:cacheprovider", "-c", ini.name, "--rootdir", str(tests_dir), "--tb=no",
            "-W", "ignore", *files]
    if keyword:
        args += ["-k", keyword]
    pytest.main(args, plugins=[recorder])
    out.write_text(json.dumps(recorder.records))


# --- the driver ---------------------------------------------------------------------------------


def _part(file: str) -> str:
    if file in NOT_APPLICABLE:
        return "not applicable"
    return "SciPy and FFT" if file in SCIPY_FFT else "NumPy and linear algebra"


def _run_file(tests_dir: Path, file: str, keyword: str | None, timeout: float, file_timeout: float) -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "records.json"
        cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "--sdist", str(tests_dir.parent),
               "--timeout", str(timeout), "--records", str(out), file]
        if keyword:
            cmd += ["-k", keyword]
        try:
            subprocess.run(cmd, timeout=file_timeout, capture_output=True, check=False)
        except subprocess.TimeoutExpired:
            return [{"nodeid": file, "file": file, "category": "timeout",
                     "detail": f"file ran past {file_timeout:g} s"}]
        if not out.exists():
            return [{"nodeid": file, "file": file, "category": "crash", "detail": "the pytest worker died"}]
        return json.loads(out.read_text())


def family_of(blocker: str) -> str:
    """``numpy.fft.rfft`` -> ``numpy.fft``; conversions group by the module that asked."""
    conversion = blocker.startswith("np.asarray of a traced value")
    m = re.search(r"\b(?:numpy|np|scipy)\.\w+(?:\.\w+)?", blocker.split(" in ", 1)[-1] if conversion else blocker)
    if not m:
        return blocker
    parts = m.group(0).replace("np.", "numpy.", 1).split(".")
    name = ".".join(parts[:2]) if parts[1] in ("fft", "linalg", "special", "stats", "signal", "random") \
        or parts[0] == "scipy" else "numpy"
    return f"{name} (np.asarray of a traced value)" if conversion else name


def report(records: list[dict], files: list[str]) -> str:
    lines = ["# autograd test suite on pullback", ""]
    by_file: dict[str, Counter] = defaultdict(Counter)
    for r in records:
        by_file[r["file"]][r["category"]] += 1
    cols = [c for c in CATEGORIES] + (["skipped"] if any(r["category"] == "skipped" for r in records) else [])
    lines += ["| part | file | tests | " + " | ".join(cols) + " |", "|---|---|---|" + "---|" * len(cols)]
    parts: dict[str, Counter] = defaultdict(Counter)
    for f in sorted(files, key=lambda f: (_part(f), f)):
        c = by_file.get(f, Counter())
        parts[_part(f)].update(c)
        if f in NOT_APPLICABLE:
            continue
        lines.append(f"| {_part(f)} | {f} | {sum(c.values())} | " + " | ".join(str(c[k]) for k in cols) + " |")
    lines += ["", "| part | tests | " + " | ".join(cols) + " |", "|---|---|" + "---|" * len(cols)]
    total = Counter()
    for p in ("NumPy and linear algebra", "SciPy and FFT"):
        if p in parts:
            c = parts[p]
            total.update(c)
            lines.append(f"| {p} | {sum(c.values())} | " + " | ".join(str(c[k]) for k in cols) + " |")
    lines.append(f"| all | {sum(total.values())} | " + " | ".join(str(total[k]) for k in cols) + " |")
    na = [f for f in files if f in NOT_APPLICABLE]
    if na:
        lines += ["", "Not run (autograd internals):", ""] + [f"- {f}: {NOT_APPLICABLE[f]}" for f in na]
    for category, title in (("unsupported", "Unsupported operations, by tests blocked"),
                            ("crash", "Crashes, by message"), ("wrong", "Wrong results, by test"),
                            ("n/a", "Tests that use autograd internals"), ("timeout", "Timeouts")):
        rows = [r for r in records if r["category"] == category]
        if not rows:
            continue
        lines += ["", f"## {title}", ""]
        if category == "unsupported":
            families = Counter(family_of(r["detail"]) for r in rows)
            lines += ["| family | tests |", "|---|---|"]
            lines += [f"| {f} | {n} |" for f, n in sorted(families.items(), key=lambda kv: (-kv[1], kv[0]))]
            lines.append("")
        if category in ("unsupported", "crash", "n/a"):
            tests_by = defaultdict(list)
            for r in rows:
                tests_by[r["detail"]].append(r["nodeid"])
            ranked = sorted(tests_by.items(), key=lambda kv: (-len(kv[1]), kv[0]))
            lines += ["| rank | tests | " + ("operation" if category == "unsupported" else "message") + " |",
                      "|---|---|---|"]
            lines += [f"| {i} | {len(ids)} | `{d}` |" for i, (d, ids) in enumerate(ranked, 1)]
        else:
            lines += [f"- {r['nodeid']}: {r['detail']}" for r in rows]
    return "\n".join(lines) + "\n"


def compare(before: list[dict], after: list[dict]) -> str:
    """The tests whose category changed since ``before`` (tests not run now are left out)."""
    old = {r["nodeid"]: r["category"] for r in before}
    changed = [(r["nodeid"], old[r["nodeid"]], r["category"]) for r in after
               if r["nodeid"] in old and old[r["nodeid"]] != r["category"]]
    moves = Counter((a, b) for _, a, b in changed)
    lines = ["", f"## Changed since the earlier run ({len(changed)} tests)", ""]
    lines += [f"- {a} -> {b}: {n}" for (a, b), n in sorted(moves.items(), key=lambda kv: -kv[1])]
    lines += [""] + [f"- {nodeid}: {a} -> {b}" for nodeid, a, b in changed]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*", help="test files (default: every tests/test_*.py)")
    ap.add_argument("--sdist", type=Path, default=DEFAULT_SDIST, help="the unpacked autograd sdist")
    ap.add_argument("-k", dest="keyword", help="pytest -k expression")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per test (default 60)")
    ap.add_argument("--file-timeout", type=float, default=1800.0, help="seconds per file (default 1800)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="files run in parallel")
    ap.add_argument("--out", type=Path, help="write the Markdown report here (default: stdout)")
    ap.add_argument("--json", type=Path, help="write every test's record here")
    ap.add_argument("--compare", type=Path, help="a --json file of an earlier run: list the tests that changed")
    ap.add_argument("--include-not-applicable", action="store_true", help="run the internals' files too")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--records", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    tests_dir = args.sdist / "tests"
    if args.worker:
        _worker(tests_dir, args.files, args.keyword, args.timeout, args.records)
        return 0
    if not tests_dir.is_dir():
        ap.error(f"no tests/ in {args.sdist}: download and unpack the autograd sdist (see --help)")
    files = args.files or sorted(p.name for p in tests_dir.glob("test_*.py"))
    run = [f for f in files if f not in NOT_APPLICABLE or args.include_not_applicable]
    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        results = list(pool.map(lambda f: _run_file(tests_dir, f, args.keyword, args.timeout, args.file_timeout),
                                run))
    records = [r for rs in results for r in rs]
    text = report(records, files)
    if args.compare:
        text += compare(json.loads(args.compare.read_text()), records)
    if args.out:
        args.out.write_text(text)
    else:
        sys.stdout.write(text)
    if args.json:
        args.json.write_text(json.dumps(records, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
