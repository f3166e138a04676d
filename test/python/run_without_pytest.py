#!/usr/bin/env python3
"""Runs test/python/test_*.py where pytest is not installed, with a stand-in for the few pytest
features the suites use: pytest.raises(match=) and its .value, pytest.skip, pytest.mark.parametrize (stacked) and
other marks (ignored). Prints one PASSED / FAILED / SKIPPED line per case and, last,
"N passed, M failed, K skipped"; exits 1 if any case failed.

    python3 test/python/run_without_pytest.py [test_cpu.py test_gpu.py ...] [-k SUBSTRING]
"""
from __future__ import annotations

import argparse
import importlib
import itertools
import re
import sys
import traceback
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent


class Skipped(Exception):
    pass


class _Raises:
    def __init__(self, error, match=None):
        self.error, self.match = error, match

    def __enter__(self):
        return self

    def __exit__(self, kind, value, tb):
        if kind is None:
            raise AssertionError(f"DID NOT RAISE {self.error.__name__}")
        if not issubclass(kind, self.error):
            return False
        if self.match and not re.search(self.match, str(value)):
            raise AssertionError(f"{kind.__name__}({value!s}) does not match {self.match!r}")
        self.value = value  # as pytest's ExceptionInfo.value
        return True


class _Mark:
    def parametrize(self, names, values, **_):
        names = [n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)

        def mark(fn):
            fn.__dict__.setdefault("_params", []).insert(0, (names, list(values)))
            return fn
        return mark

    def __getattr__(self, _name):  # any other mark: a decorator (or a value) that does nothing
        return lambda *a, **k: (a[0] if len(a) == 1 and callable(a[0]) and not k else (lambda fn: fn))


def _skip(reason=""):
    raise Skipped(reason)


def install_stand_in() -> None:
    stand_in = types.ModuleType("pytest")
    stand_in.raises, stand_in.skip, stand_in.mark = _Raises, _skip, _Mark()
    sys.modules["pytest"] = stand_in


def cases(fn):
    """(id, kwargs) for every combination of the function's stacked parametrize marks."""
    axes = []
    for names, values in fn.__dict__.get("_params", []):
        axes.append([dict(zip(names, v if len(names) > 1 else (v,))) for v in values])
    for combo in itertools.product(*axes):
        kwargs = {k: v for d in combo for k, v in d.items()}
        yield "-".join(str(v) for v in kwargs.values()), kwargs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="*", default=sorted(p.name for p in HERE.glob("test_*.py")))
    parser.add_argument("-k", default="", help="run only cases whose name contains this")
    args = parser.parse_args()
    install_stand_in()
    sys.path.insert(0, str(HERE))
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    for file in args.files:
        module = importlib.import_module(Path(file).stem)
        for name, fn in vars(module).items():
            if not (name.startswith("test_") and callable(fn)):
                continue
            for case_id, kwargs in cases(fn):
                full = f"{Path(file).name}::{name}" + (f"[{case_id}]" if case_id else "")
                if args.k not in full:
                    continue
                try:
                    fn(**kwargs)
                    result = "passed"
                    print(f"{full} PASSED", flush=True)
                except Skipped as s:
                    result = "skipped"
                    print(f"{full} SKIPPED ({s})", flush=True)
                except Exception:  # noqa: BLE001  (a failing case is reported, the next one runs)
                    result = "failed"
                    print(f"{full} FAILED\n{traceback.format_exc()}", flush=True)
                counts[result] += 1
    print(f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped")
    return 1 if counts["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
