"""store/transient_store_pool.py: a fixed number of write buffers, borrowed and given back;
an empty pool says so and the caller writes straight into the file."""

from __future__ import annotations

import logging

from store.transient_store_pool import TransientStorePool

SIZE = 64 * 1024


def test_borrow_and_give_back_within_the_pool_size(caplog):
    pool = TransientStorePool(2, SIZE)
    assert pool.available == 0  # nothing mapped before allocate (the store lock comes first)
    pool.allocate()
    pool.allocate()  # idempotent: still two buffers
    assert pool.available == 2
    a, b = pool.borrow(), pool.borrow()
    assert a is not None and b is not None and a is not b and len(a) == len(b) == SIZE
    with caplog.at_level(logging.WARNING, logger="tidemq.store"):
        assert pool.borrow() is None
    assert "pool is empty" in caplog.text
    a[:5] = b"hello"
    pool.give_back(a)
    assert pool.available == 1
    again = pool.borrow()
    assert again is a  # a returned buffer is reused as it is: the MappedFile zeroes what it needs
    pool.give_back(again)
    pool.give_back(b)
    pool.destroy()
    assert pool.available == 0
    assert a.closed and b.closed


def test_unlockable_memory_is_a_warning_not_an_error(caplog):
    pool = TransientStorePool(1, SIZE)
    pool.allocate()
    # either mlock worked, or it was refused once with a warning; the buffer works either way
    assert pool.locked_in_memory or "mlock of" in caplog.text
    buf = pool.borrow()
    buf[:3] = b"abc"
    assert buf[:3] == b"abc"
    pool.give_back(buf)
    pool.destroy()
