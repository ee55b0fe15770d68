"""Which implementation of the record codec runs: the compiled accelerator (store._accel,
built from store/_accel.pyx by `pip install` when a C compiler is there) or the pure-Python
reference in store/message.py and store/record_rows.py.

The compiled one is used when it was built, unless TIDEMQ_PURE=1. An install without a
compiler (or with a failed build) has no store._accel, and everything runs pure: the two
give identical bytes and parses (tests/store/test_accel.py).
"""

from __future__ import annotations

import os
from types import ModuleType

PURE_ENV = "TIDEMQ_PURE"


def forced_pure() -> bool:
    return os.environ.get(PURE_ENV, "").strip().lower() in ("1", "true", "yes")


def load_compiled() -> ModuleType | None:
    """store._accel when it was built, else None (whatever TIDEMQ_PURE says)."""
    try:
        from store import _accel
    except ImportError:
        return None
    return _accel


COMPILED: ModuleType | None = None if forced_pure() else load_compiled()
"""The accelerator the codec modules (message.py, record_rows.py) bind, or None: chosen here,
once, so they import the choice instead of this module importing them back."""


def implementation() -> str:
    """'compiled' or 'pure': what store.message's codec functions are."""
    return "compiled" if COMPILED is not None else "pure"
