"""The scripts' name for the ctypes mirror of include/hattn.h, which lives in the Python package
(src/python/hattn/capi.py). It is loaded from that file, not imported as hattn.capi, so scripts need
neither torch (the package's __init__ imports it) nor an installed package:

    import hattn_ctypes as hc              # with scripts/ on sys.path
"""
import importlib.util
import sys
from pathlib import Path

_CAPI = Path(__file__).resolve().parent.parent / "src" / "python" / "hattn" / "capi.py"
_spec = importlib.util.spec_from_file_location(__name__, _CAPI)
_module = importlib.util.module_from_spec(_spec)
sys.modules[__name__] = _module  # importers get capi.py itself under this module's name
_spec.loader.exec_module(_module)
