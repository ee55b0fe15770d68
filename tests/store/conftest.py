"""`both_codecs`: run a test module once with the compiled codec (store._accel) and once
with the pure-Python reference, by pointing every imported codec name at one of them."""

from __future__ import annotations

import sys

import pytest

# every store module that imports a codec name, loaded before a fixture repoints them
from store import commit_log, message_store, queue_tools, record_codec, reput, tools  # noqa: F401

CODEC_NAMES = ("decode_record", "decode_dispatch", "prepare_record", "record_parts")


@pytest.fixture(scope="module", params=["compiled", "pure"])
def both_codecs(request):
    if request.param == "compiled" and record_codec.COMPILED is None:
        pytest.skip("store._accel not loaded (TIDEMQ_PURE=1 or not built)")
    with pytest.MonkeyPatch.context() as mp:
        if request.param == "pure" and record_codec.COMPILED is not None:
            compiled = {name: getattr(record_codec.COMPILED, name) for name in CODEC_NAMES}
            for mod in [m for name, m in sys.modules.items()
                        if name.startswith(("store.", "tests.store.")) and m is not record_codec.COMPILED]:
                for name in CODEC_NAMES:
                    if getattr(mod, name, None) is compiled[name]:
                        mp.setattr(mod, name, getattr(record_codec, f"py_{name}"))
            assert reput.decode_dispatch is record_codec.py_decode_dispatch
        yield request.param
