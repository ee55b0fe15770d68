"""Which implementation of the record codec runs: the compiled accelerator (store._accel,
built from store/_accel.pyx by `pip install` when a C compiler is there) or the pure-Python
reference in store/record_codec.py and store/record_rows.py.

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
    """store._accel when it was built, else None (whatever TIDEMQ_PURE says); its CRC is
    zlib's C function when the library can be found (else zlib.crc32 through Python)."""
    try:
        from store import _accel
    except ImportError:
        return None
    address = crc32_address()
    if address:
        _accel.bind_crc32(address)
    compiled: ModuleType = _accel  # no stubs for the extension: typed as the module it is
    return compiled


def crc32_address() -> int | None:
    """The address of a C CRC32 that answers as zlib.crc32 does: zlib-ng's `zng_crc32` (its
    Python package's extension exports it; PCLMUL/VPCLMUL, several times zlib's speed), else
    zlib's `crc32` in the libz Python's zlib module loads; each is checked on a probe.
    None when neither is found (store._accel then calls zlib.crc32 through Python)."""
    import ctypes
    import ctypes.util
    import zlib

    places = [("libz.so.1", "crc32"), (ctypes.util.find_library("z"), "crc32")]
    try:
        from zlib_ng import zlib_ng

        places.insert(0, (zlib_ng.__file__, "zng_crc32"))
    except ImportError:
        pass
    probe = b"tidemq crc probe " * 5
    for library, symbol in places:
        if not library:
            continue
        try:
            fn = getattr(ctypes.CDLL(library), symbol)
        except (OSError, AttributeError):
            continue
        fn.restype, fn.argtypes = ctypes.c_ulong, (ctypes.c_ulong, ctypes.c_char_p, ctypes.c_uint)
        if fn(0, probe, len(probe)) & 0xFFFFFFFF == zlib.crc32(probe):
            return ctypes.cast(fn, ctypes.c_void_p).value
    return None


COMPILED: ModuleType | None = None if forced_pure() else load_compiled()
"""The accelerator the codec modules (record_codec.py, record_rows.py) bind, or None: chosen here,
once, so they import the choice instead of this module importing them back."""


def implementation() -> str:
    """'compiled' or 'pure': what store.record_codec's codec functions are."""
    return "compiled" if COMPILED is not None else "pure"
