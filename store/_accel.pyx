# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled fast paths of the CommitLog record codec (store/record_codec.py stays the reference).

Each function here handles the common, valid case in C and hands every other case (a
malformed, torn or CRC-bad record, a buffer it cannot read directly, an encode that fails
validation) to the pure-Python function it replaces, so errors, their messages and every
edge case are the reference's by construction. `bind` receives that reference module.
tests/store/test_accel.py proves byte- and parse-identity with hypothesis.
"""

cimport cython
from cpython.object cimport PyObject_GenericSetAttr
from cpython.buffer cimport PyBUF_SIMPLE, PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcmp, memcpy
from cpython.memoryview cimport PyMemoryView_FromMemory
from cpython.buffer cimport PyBUF_READ

import zlib

cdef uint32_t MAGIC_V1 = 0xDAA320A7
cdef uint32_t MAGIC_V2 = 0xDAA320AB
cdef uint32_t MAGIC_BLANK = 0xCBD43194
cdef int32_t HEAD_SIZE = 48
cdef int32_t BORNHOST_V6 = 0x10
cdef int32_t STOREHOST_V6 = 0x20

# bound by `bind`: the reference module's classes and functions
cdef object _Decoded, _StoredMessage, _DispatchRequest, _MESSAGE, _BLANK
cdef object _py_decode_record, _py_decode_dispatch
cdef object _decode_host, _tags_code, _msg_id_prefix, _crc32 = zlib.crc32

ctypedef unsigned long (*crc32_fn)(unsigned long, const unsigned char*, unsigned int) noexcept nogil
cdef crc32_fn _c_crc32 = NULL  # zlib's own crc32, when store.accel found the library


def bind_crc32(size_t address) -> None:
    """Call zlib's C `crc32` at `address` (store.accel finds it with ctypes in the libz that
    Python's zlib module uses) instead of zlib.crc32 through Python: same function, same
    answers, without a Python call and a memoryview per record. 0 unbinds."""
    global _c_crc32
    _c_crc32 = <crc32_fn>address


cdef inline int64_t crc_of(const uint8_t* p, Py_ssize_t n) except -1:
    """The body CRC as the store keeps it (zlib CRC32 & 0x7FFFFFFF)."""
    if _c_crc32 != NULL and n <= 0x7FFFFFFF:
        return <int64_t>(_c_crc32(0, p, <unsigned int>n) & 0x7FFFFFFF)
    return _crc32(PyMemoryView_FromMemory(<char*>p, n, PyBUF_READ)) & 0x7FFFFFFF
cdef object _EMPTY = b""
cdef dict _hosts = {}  # 8 IPv4 host bytes as an int → 'ip:port'
cdef tuple _stored_fields = (), _decoded_fields = ()
cdef object _new = object.__new__
cdef object _tuple_new = tuple.__new__


def bind(m) -> None:
    """Take the reference implementations and result classes from store.record_codec."""
    global _Decoded, _StoredMessage, _DispatchRequest, _MESSAGE, _BLANK
    global _py_decode_record, _py_decode_dispatch
    global _decode_host, _tags_code, _msg_id_prefix
    _Decoded, _StoredMessage, _DispatchRequest = m.Decoded, m.StoredMessage, m.DispatchRequest
    _MESSAGE, _BLANK = m.RecordKind.MESSAGE, m.RecordKind.BLANK
    _py_decode_record, _py_decode_dispatch = m.py_decode_record, m.py_decode_dispatch
    _decode_host, _tags_code, _msg_id_prefix = m.decode_host, m.tags_code, m.msg_id_prefix
    global _stored_fields, _decoded_fields
    _stored_fields = _slot_fields(_StoredMessage)
    _decoded_fields = _slot_fields(_Decoded)


def _slot_fields(cls) -> tuple:
    """The attrs fields of a frozen class that `build` may fill directly: all of them when
    the class is slotted and has no validators, converters or post-init, else () (then
    `build` calls the class)."""
    import attrs
    fields = attrs.fields(cls)
    if ("__slots__" not in cls.__dict__ or hasattr(cls, "__attrs_post_init__")
            or any(f.validator is not None or f.converter is not None for f in fields)):
        return ()
    return tuple(f.name for f in fields)


cdef object build(object cls, tuple names, tuple values):
    """cls(*values) for an attrs frozen slotted class, without its __init__'s Python-level
    setattr per field (object.__setattr__ in C, as that __init__ does it): ~5x faster."""
    cdef Py_ssize_t i
    if not names:
        return cls(*values)
    obj = _new(cls)
    for i in range(len(names)):
        PyObject_GenericSetAttr(obj, names[i], values[i])
    return obj


cdef inline int32_t rd32(const uint8_t* p) noexcept nogil:
    return <int32_t>((<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3])


cdef inline uint32_t rdu32(const uint8_t* p) noexcept nogil:
    return (<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3]


cdef inline int64_t rd64(const uint8_t* p) noexcept nogil:
    return <int64_t>((<uint64_t>rdu32(p) << 32) | rdu32(p + 4))


cdef inline int16_t rd16(const uint8_t* p) noexcept nogil:
    return <int16_t>((<uint16_t>p[0] << 8) | p[1])


cdef object host_at(const uint8_t* p, bint v6):
    """'ip:port' of the 8 (or 20) host bytes at p; IPv4 hosts are cached by value."""
    cdef uint64_t key
    if v6:
        return _decode_host(PyBytes_FromStringAndSize(<const char*>p, 20))
    key = (<uint64_t>rdu32(p) << 32) | rdu32(p + 4)
    host = _hosts.get(key)
    if host is None:
        host = _decode_host(PyBytes_FromStringAndSize(<const char*>p, 8))
        if len(_hosts) >= 4096:
            _hosts.clear()
        _hosts[key] = host
    return host


cdef object utf8(const uint8_t* p, Py_ssize_t n):
    """The text of n UTF-8 bytes, or None when they are not valid UTF-8."""
    try:
        return PyUnicode_DecodeUTF8(<const char*>p, n, NULL)
    except UnicodeDecodeError:
        return None


cdef inline Py_ssize_t segment_end(const uint8_t* p, Py_ssize_t n, Py_ssize_t i,
                                   Py_ssize_t* sep) noexcept nogil:
    """The end of the properties segment starting at i (the next 0x02, or n); *sep is its
    first 0x01, or -1."""
    sep[0] = -1
    while i < n and p[i] != 2:
        if p[i] == 1 and sep[0] < 0:
            sep[0] = i
        i += 1
    return i


cdef object properties_at(const uint8_t* p, Py_ssize_t n):
    """decode_properties(bytes.decode('utf-8')) of n bytes, or None when any byte is not
    UTF-8 (the caller then runs the reference). The separators 0x01 and 0x02 never occur
    inside a multi-byte UTF-8 sequence, so splitting the bytes first and decoding each
    piece gives the reference's dict, and checks every byte."""
    cdef dict props = {}
    cdef Py_ssize_t i = 0, start, sep
    while i <= n:
        start = i
        i = segment_end(p, n, i, &sep)
        # segment [start, i)
        if sep > start and sep + 1 < i:
            name = utf8(p + start, sep - start)
            value = utf8(p + sep + 1, i - sep - 1)
            if name is None or value is None:
                return None
            props[name] = value
        elif i > start and utf8(p + start, i - start) is None:
            return None
        i += 1
    return props


cdef inline bint get_buffer(object buf, Py_buffer* view):
    """A direct view of buf's bytes, or False (the caller then runs the reference)."""
    try:
        PyObject_GetBuffer(buf, view, PyBUF_SIMPLE)
    except (TypeError, BufferError, ValueError):
        return False
    return True


cdef struct Fields:
    int32_t total, body_crc, queue_id, flag, sys_flag, reconsume, body_len, topic_len, props_len
    int64_t queue_offset, phys, born_ts, store_ts, prepared
    Py_ssize_t born_at, store_host_at, body_at, topic_at, props_at
    uint32_t magic


cdef bint parse_fields(const uint8_t* b, Py_ssize_t pos, Py_ssize_t end, Fields* f) noexcept nogil:
    """Read the fields of a message record at pos; False unless every field lies inside the
    record, the lengths are not negative, they add up to TOTALSIZE and the record does not
    end in a NUL (the checks of the reference, which reports whichever fails)."""
    cdef Py_ssize_t p, rec_end
    cdef const uint8_t* h = b + pos
    f.total = rd32(h)
    f.magic = rdu32(h + 4)
    if f.magic != MAGIC_V1 and f.magic != MAGIC_V2:
        return False
    if f.total < HEAD_SIZE or f.total > end - pos:
        return False
    rec_end = pos + f.total
    f.body_crc = rd32(h + 8)
    f.queue_id = rd32(h + 12)
    f.flag = rd32(h + 16)
    f.queue_offset = rd64(h + 20)
    f.phys = rd64(h + 28)
    f.sys_flag = rd32(h + 36)
    f.born_ts = rd64(h + 40)
    p = pos + HEAD_SIZE
    f.born_at = p
    p += 20 if f.sys_flag & BORNHOST_V6 else 8
    if p + 8 > rec_end:
        return False
    f.store_ts = rd64(b + p)
    p += 8
    f.store_host_at = p
    p += 20 if f.sys_flag & STOREHOST_V6 else 8
    if p + 16 > rec_end:
        return False
    f.reconsume = rd32(b + p)
    f.prepared = rd64(b + p + 4)
    f.body_len = rd32(b + p + 12)
    p += 16
    if f.body_len < 0 or f.body_len > rec_end - p:
        return False
    f.body_at = p
    p += f.body_len
    if f.magic == MAGIC_V1:
        if p + 1 > rec_end:
            return False
        f.topic_len = <int8_t>b[p]
        p += 1
    else:
        if p + 2 > rec_end:
            return False
        f.topic_len = rd16(b + p)
        p += 2
    if f.topic_len < 0 or f.topic_len > rec_end - p:
        return False
    f.topic_at = p
    p += f.topic_len
    if p + 2 > rec_end:
        return False
    f.props_len = rd16(b + p)
    p += 2
    if f.props_len < 0 or p + f.props_len != rec_end:
        return False
    f.props_at = p
    if f.props_len:
        return b[rec_end - 1] != 0
    if f.topic_len:
        return b[rec_end - 3] != 0
    return True


cdef object message_at(const uint8_t* b, Fields* f, bint check_crc, bint read_body):
    """The StoredMessage of parsed fields, or None when the reference must decide (text that
    is not UTF-8, a CRC mismatch)."""
    topic = utf8(b + f.topic_at, f.topic_len)
    if topic is None:
        return None
    props = properties_at(b + f.props_at, f.props_len)
    if props is None:
        return None
    body = _EMPTY
    if read_body:
        body = PyBytes_FromStringAndSize(<const char*>(b + f.body_at), f.body_len)
        if check_crc and crc_of(b + f.body_at, f.body_len) != f.body_crc:
            return None
    return build(_StoredMessage, _stored_fields, (
        f.total, 1 if f.magic == MAGIC_V1 else 2, f.body_crc, f.queue_id, f.flag,
        f.queue_offset, f.phys, f.sys_flag, f.born_ts,
        host_at(b + f.born_at, f.sys_flag & BORNHOST_V6), f.store_ts,
        host_at(b + f.store_host_at, f.sys_flag & STOREHOST_V6), f.reconsume, f.prepared,
        body, topic, props, True,
    ))


def decode_record(buf, Py_ssize_t pos=0, *, bint check_crc=True, bint read_body=True, limit=None):
    """store.record_codec.decode_record, compiled for valid message records."""
    cdef Py_buffer view
    cdef Fields f
    cdef Py_ssize_t end
    cdef uint32_t magic
    if not get_buffer(buf, &view):
        return _py_decode_record(buf, pos, check_crc=check_crc, read_body=read_body, limit=limit)
    try:
        end = view.len if limit is None else limit
        if pos < 0 or end > view.len or end - pos < 8:
            msg = None
        else:
            magic = rdu32(<const uint8_t*>view.buf + pos + 4)
            if magic != MAGIC_V1 and magic != MAGIC_V2:
                msg = None
            elif parse_fields(<const uint8_t*>view.buf, pos, end, &f):
                msg = message_at(<const uint8_t*>view.buf, &f, check_crc, read_body)
            else:
                msg = None
    finally:
        PyBuffer_Release(&view)
    if msg is None:
        return _py_decode_record(buf, pos, check_crc=check_crc, read_body=read_body, limit=limit)
    return build(_Decoded, _decoded_fields, (_MESSAGE, f.total, msg, ""))


def decode_dispatch(buf, Py_ssize_t pos, Py_ssize_t limit):
    """store.record_codec.decode_dispatch, compiled for valid message records."""
    cdef Py_buffer view
    cdef Fields f
    cdef bint ok = False
    if not get_buffer(buf, &view):
        return _py_decode_dispatch(buf, pos, limit)
    try:
        if 0 <= pos and limit <= view.len and limit - pos >= 8 and parse_fields(
                <const uint8_t*>view.buf, pos, limit, &f) and f.total >= 80:
            topic = utf8(<const uint8_t*>view.buf + f.topic_at, f.topic_len)
            props = properties_at(<const uint8_t*>view.buf + f.props_at, f.props_len)
            ok = topic is not None and props is not None
    finally:
        PyBuffer_Release(&view)
    if not ok:
        return _py_decode_dispatch(buf, pos, limit)
    tags = props.get("TAGS")
    request = _tuple_new(_DispatchRequest, (  # a NamedTuple's own __new__ is Python code
        topic, f.queue_id, f.phys, f.total, _tags_code(tags) if tags else 0, f.store_ts,
        f.queue_offset, props.get("KEYS", ""), props.get("UNIQ_KEY"), f.sys_flag,
    ))
    return _MESSAGE, f.total, request, ""


cdef inline void set_item(tuple t, Py_ssize_t i, object v):
    Py_INCREF(v)
    PyTuple_SET_ITEM(t, i, v)


cdef object split_keys_list(object raw):
    if not raw:
        return []
    return [k for k in raw.split(" ") if k]


def scan_rows(buf, Py_ssize_t pos, Py_ssize_t end, int64_t segment_start, list rows,
              Py_ssize_t max_rows, *, bint verify_crc, bint include_body, topics,
              start_time, end_time, tuple extra):
    """store.record_rows.scan_rows, compiled: see there."""
    cdef Py_buffer view
    cdef Fields f
    cdef const uint8_t* b
    cdef bint need_body = include_body or verify_crc
    cdef bint has_t0 = start_time is not None, has_t1 = end_time is not None
    cdef int64_t t0 = start_time if has_t0 else 0, t1 = end_time if has_t1 else 0
    cdef Py_ssize_t n_extra = len(extra), i
    cdef tuple row
    cdef object last_store_host = None, prefix = None
    if not get_buffer(buf, &view):
        return _py_scan_rows(buf, pos, end, segment_start, rows, max_rows, verify_crc=verify_crc,
                             include_body=include_body, topics=topics, start_time=start_time,
                             end_time=end_time, extra=extra)
    b = <const uint8_t*>view.buf
    try:
        while pos < end and len(rows) < max_rows:
            if pos < 0 or view.len - pos < 8 or not parse_fields(b, pos, view.len, &f):
                break
            topic = utf8(b + f.topic_at, f.topic_len)
            props = properties_at(b + f.props_at, f.props_len)
            if topic is None or props is None:
                break
            if topics is not None and topic not in topics:
                pos += f.total
                continue
            if (has_t0 and f.store_ts < t0) or (has_t1 and f.store_ts > t1):
                pos += f.total
                continue
            if f.phys != segment_start + pos:
                break
            body = None
            crc_ok = None
            if need_body:
                body = PyBytes_FromStringAndSize(<const char*>(b + f.body_at), f.body_len)
                if verify_crc:
                    if crc_of(b + f.body_at, f.body_len) != f.body_crc:
                        break
                    crc_ok = True
                if not include_body:
                    body = None
            store_host = host_at(b + f.store_host_at, f.sys_flag & STOREHOST_V6)
            if store_host is not last_store_host:
                last_store_host = store_host
                prefix = _msg_id_prefix(store_host)
            row = PyTuple_New(19 + n_extra)
            set_item(row, 0, topic)
            set_item(row, 1, f.queue_id)
            set_item(row, 2, f.queue_offset)
            set_item(row, 3, f.phys)
            set_item(row, 4, f.total)
            set_item(row, 5, body)
            set_item(row, 6, f.body_crc)
            set_item(row, 7, crc_ok)
            set_item(row, 8, f.flag)
            set_item(row, 9, f.sys_flag)
            set_item(row, 10, f.born_ts)
            set_item(row, 11, host_at(b + f.born_at, f.sys_flag & BORNHOST_V6))
            set_item(row, 12, f.store_ts)
            set_item(row, 13, store_host)
            set_item(row, 14, f.reconsume)
            set_item(row, 15, props.get("TAGS"))
            set_item(row, 16, split_keys_list(props.get("KEYS")))
            set_item(row, 17, props)
            set_item(row, 18, prefix + format(f.phys, "016X"))
            for i in range(n_extra):
                set_item(row, 19 + i, extra[i])
            rows.append(row)
            pos += f.total
    finally:
        PyBuffer_Release(&view)
    return pos


cdef object _py_scan_rows = None


def bind_rows(scan_rows_reference) -> None:
    """Take the reference scan_rows (store.record_rows), for buffers read indirectly."""
    global _py_scan_rows
    _py_scan_rows = scan_rows_reference


# ---------------------------------------------------------------------------------------
# columns: clean message records as column buffers (Arrow's layouts), no object per row

from libc.stdlib cimport free, realloc


cdef char _NOTHING = 0


# A few large blocks kept when their Buf goes (Arrow dropped the batch holding it) and
# handed to the next large reserve: a scan makes one multi-megabyte body buffer per batch,
# and malloc would give back fresh pages each time (mmap'd above its threshold, or
# trimmed), each first write a page fault. Only touched with the GIL held (Buf's
# allocation and deallocation), so no lock.
DEF POOL_SLOTS = 4
DEF POOL_MIN = 1 << 20
cdef char* _pool_data[POOL_SLOTS]
cdef Py_ssize_t _pool_cap[POOL_SLOTS]
cdef int _pool_n = 0


cdef char* pool_take(Py_ssize_t want, Py_ssize_t* cap) noexcept:
    """The smallest kept block of at least `want` bytes (its size in cap), or NULL."""
    global _pool_n
    cdef int i, best = -1
    cdef char* p
    for i in range(_pool_n):
        if _pool_cap[i] >= want and (best < 0 or _pool_cap[i] < _pool_cap[best]):
            best = i
    if best < 0:
        return NULL
    p, cap[0] = _pool_data[best], _pool_cap[best]
    _pool_n -= 1
    _pool_data[best], _pool_cap[best] = _pool_data[_pool_n], _pool_cap[_pool_n]
    return p


cdef void pool_give(char* p, Py_ssize_t cap) noexcept:
    """Keep a large block for the next Buf, or free it."""
    global _pool_n
    if p != NULL and cap >= POOL_MIN and _pool_n < POOL_SLOTS:
        _pool_data[_pool_n], _pool_cap[_pool_n] = p, cap
        _pool_n += 1
    else:
        free(p)


@cython.final  # methods called directly (and inlined), not through a vtable
cdef class Buf:
    """A growable byte buffer."""
    cdef char* data
    cdef Py_ssize_t size, cap

    def __dealloc__(self):
        pool_give(self.data, self.cap)

    cdef int reserve(self, Py_ssize_t n) except -1:
        cdef Py_ssize_t cap = self.cap or 4096
        cdef char* p
        if self.size + n <= self.cap:
            return 0
        while cap < self.size + n:
            cap *= 2
        if self.data == NULL and cap >= POOL_MIN:
            p = pool_take(cap, &self.cap)
            if p != NULL:
                self.data = p
                return 0
        p = <char*>realloc(self.data, cap)
        if p == NULL:
            raise MemoryError()
        self.data, self.cap = p, cap
        return 0

    cdef inline int put(self, const void* src, Py_ssize_t n) except -1:
        if self.size + n > self.cap:
            self.reserve(n)
        memcpy(self.data + self.size, src, n)
        self.size += n
        return 0

    cdef inline int i32(self, int32_t v) except -1:
        return self.put(&v, 4)  # native order, as Arrow stores it

    cdef inline int i64(self, int64_t v) except -1:
        return self.put(&v, 8)

    cdef Buf value(self):
        """Itself, to be read through the buffer protocol (no copy); written no more."""
        return self

    def __getbuffer__(self, Py_buffer* view, int flags):
        view.buf = self.data if self.data != NULL else &_NOTHING  # Arrow wants an address
        view.len = self.size
        view.obj = self
        view.readonly = 1
        view.itemsize = 1
        view.format = NULL
        view.ndim = 1
        view.shape = NULL
        view.strides = NULL
        view.suboffsets = NULL
        view.internal = NULL

    def __releasebuffer__(self, Py_buffer* view):
        pass

    def __len__(self):
        return self.size


@cython.final
cdef class Text:
    """A string or binary column: int32 offsets and data, and validity bits once a null
    comes (a column without nulls carries none, as Arrow allows)."""
    cdef Buf offsets, data, valid
    cdef Py_ssize_t n, nulls

    def __cinit__(self):
        self.offsets, self.data, self.valid = Buf(), Buf(), Buf()
        self.offsets.i32(0)

    cdef inline int add(self, const void* p, Py_ssize_t length) except -1:
        cdef Buf data = self.data, offsets = self.offsets
        if data.size + length > data.cap:
            data.reserve(length)
        if offsets.size + 4 > offsets.cap:
            offsets.reserve(4)
        memcpy(data.data + data.size, p, length)
        data.size += length
        (<int32_t*>(offsets.data + offsets.size))[0] = <int32_t>data.size  # aligned: offsets only
        offsets.size += 4
        if self.nulls:
            self._bit(1)
        else:
            self.n += 1
        return 0

    cdef inline int null(self) except -1:
        cdef uint8_t ones = 0xFF
        cdef Py_ssize_t i
        if not self.nulls:  # the first null: the bits of the rows so far, all valid
            for i in range((self.n + 7) // 8):
                self.valid.put(&ones, 1)
        self.offsets.i32(<int32_t>self.data.size)
        self._bit(0)
        self.nulls += 1
        return 0

    cdef inline int _bit(self, bint on) except -1:
        cdef uint8_t zero = 0
        cdef uint8_t* bits
        if self.n % 8 == 0:
            self.valid.put(&zero, 1)
        bits = <uint8_t*>self.valid.data
        if on:
            bits[self.n // 8] |= <uint8_t>(1 << (self.n % 8))
        else:
            bits[self.n // 8] &= <uint8_t>~(1 << (self.n % 8))
        self.n += 1
        return 0

    cdef tuple parts(self):
        return (self.valid if self.nulls else None, self.offsets, self.data)


cdef inline bint ascii(const uint8_t* p, Py_ssize_t n) noexcept nogil:
    """Whether n bytes are all below 0x80: eight at a time."""
    cdef uint64_t word, high = 0
    cdef Py_ssize_t i = 0
    while i + 8 <= n:
        memcpy(&word, p + i, 8)
        high |= word
        i += 8
    high &= 0x8080808080808080ULL
    while i < n:
        high |= p[i] & 0x80
        i += 1
    return high == 0


cdef inline bint valid_utf8(const uint8_t* p, Py_ssize_t n):
    """Whether n bytes are UTF-8 as Python's strict decoder reads it (ASCII checked here)."""
    return ascii(p, n) or utf8(p, n) is not None


cdef dict _host_cols = {}  # (host bytes, is a store host) → host_col's answer


@cython.final
cdef class HostCache:
    """The last host a scan met (hosts rarely change between records) and its columns."""
    cdef uint8_t[20] raw
    cdef Py_ssize_t length
    cdef bint store
    cdef bytes text, prefix

    def __cinit__(self, bint store):
        self.store = store
        self.length = -1

    cdef inline int get(self, const uint8_t* p, bint v6) except -1:
        cdef Py_ssize_t n = 20 if v6 else 8
        if n == self.length and memcmp(p, self.raw, n) == 0:
            return 0
        got = host_col(p, v6, self.store)
        self.text, self.prefix = got
        memcpy(self.raw, p, n)
        self.length = n
        return 0


cdef tuple host_col(const uint8_t* p, bint v6, bint store):
    """(host text as UTF-8, and for a store host its msgId prefix as ASCII)."""
    raw = PyBytes_FromStringAndSize(<const char*>p, 20 if v6 else 8)
    got = _host_cols.get((raw, store))
    if got is None:
        text = _decode_host(raw)
        got = (text.encode("utf-8"), _msg_id_prefix(text).encode("ascii") if store else None)
        if len(_host_cols) >= 4096:
            _host_cols.clear()
        _host_cols[(raw, store)] = got
    return got


cdef char* HEX = "0123456789ABCDEF"


cdef inline void hex16(char* out, uint64_t v) noexcept nogil:
    cdef int i
    for i in range(15, -1, -1):
        out[i] = HEX[v & 0xF]
        v >>= 4


cdef int add_props(const uint8_t* p, Py_ssize_t n, Buf map_offsets, Text names, Text values,
                   Text tags, Buf key_offsets, Text keys) except -2:
    """Add one record's properties to the map, tags and keys columns; -1 (adding nothing)
    when they need the reference's reading: a malformed segment (the reference drops it), a
    repeated name (the reference keeps the first position, the last value) or bytes that
    are not UTF-8."""
    cdef Py_ssize_t i = 0, start, sep, j, k, count = 0, seg
    cdef Py_ssize_t tag_at = -1, tag_len = 0, keys_at = -1, keys_len = 0
    cdef Py_ssize_t[64] name_at, name_len, value_len
    cdef bint all_ascii = ascii(p, n)  # the usual case: one pass checks every byte
    while i < n:
        start = i
        i = segment_end(p, n, i, &sep)
        if not (sep > start and sep + 1 < i) or count == 64:
            return -1
        if not all_ascii and not valid_utf8(p + start, i - start):
            return -1
        for seg in range(count):
            if name_len[seg] == sep - start and memcmp(p + name_at[seg], p + start, sep - start) == 0:
                return -1
        name_at[count], name_len[count], value_len[count] = start, sep - start, i - sep - 1
        count += 1
        if sep - start == 4 and memcmp(p + start, b"TAGS", 4) == 0:
            tag_at, tag_len = sep + 1, i - sep - 1
        elif sep - start == 4 and memcmp(p + start, b"KEYS", 4) == 0:
            keys_at, keys_len = sep + 1, i - sep - 1
        i += 1  # past the 0x02 (a trailing one ends the loop)
    # all checked: add
    for seg in range(count):
        names.add(p + name_at[seg], name_len[seg])
        values.add(p + name_at[seg] + name_len[seg] + 1, value_len[seg])
    map_offsets.i32(<int32_t>names.n)
    if tag_at >= 0:
        tags.add(p + tag_at, tag_len)
    else:
        tags.null()
    if keys_at >= 0:
        j = keys_at
        k = keys_at + keys_len
        while j < k:
            start = j
            while j < k and p[j] != 32:
                j += 1
            if j > start:
                keys.add(p + start, j - start)
            j += 1
    key_offsets.i32(<int32_t>keys.n)
    return 0


def scan_columns(buf, Py_ssize_t pos, Py_ssize_t end, int64_t segment_start,
                 Py_ssize_t max_rows, *, bint verify_crc, bint include_body, topics,
                 start_time, end_time):
    """The rows store.record_rows.scan_rows would give (without `extra`), as columns:
    (position it stopped at, rows, {column: buffers}). Fixed-width columns are native-order
    int32/int64 bytes; text and binary columns (validity or None, int32 offsets, data);
    keys and properties add their list/map offsets. It also stops (for the caller's row
    path) at a record whose properties the reference reads specially (see add_props), and
    before a batch's body bytes would pass 1 GiB."""
    cdef Py_buffer view
    cdef Fields f
    cdef const uint8_t* b
    cdef bint need_body = include_body or verify_crc
    cdef bint has_t0 = start_time is not None, has_t1 = end_time is not None
    cdef int64_t t0 = start_time if has_t0 else 0, t1 = end_time if has_t1 else 0
    cdef Py_ssize_t rows = 0, mark_names, mark_keys
    cdef char[17] hexbuf
    cdef Buf queue_id = Buf(), queue_offset = Buf(), phys = Buf(), size = Buf(), crc = Buf()
    cdef Buf flag = Buf(), sysflag = Buf(), born_ts = Buf(), store_ts = Buf(), reconsume = Buf()
    cdef Buf map_offsets = Buf(), key_offsets = Buf()
    cdef Text topic = Text(), body = Text(), born_host = Text(), store_host = Text()
    cdef Text tags = Text(), keys = Text(), names = Text(), values = Text(), msg_id = Text()
    cdef HostCache born = HostCache(False), stored = HostCache(True)
    cdef Py_ssize_t expect = min(max_rows, max(end - pos, 0) // 64 + 1)  # rows, at most
    for fixed in (queue_id, size, crc, flag, sysflag, reconsume, map_offsets, key_offsets):
        (<Buf>fixed).reserve(4 * expect + 4)  # no growth by copying in the row loop
    for fixed in (queue_offset, phys, born_ts, store_ts):
        (<Buf>fixed).reserve(8 * expect)
    for column in (topic, born_host, store_host, msg_id, tags):
        (<Text>column).offsets.reserve(4 * expect)
    map_offsets.i32(0)
    if include_body:
        body.offsets.reserve(4 * expect)
        body.data.reserve(min(end - pos, 1 << 24))  # grown by copying otherwise
    key_offsets.i32(0)
    if not get_buffer(buf, &view):
        return pos, 0, None
    b = <const uint8_t*>view.buf
    try:
        while pos < end and rows < max_rows:
            if pos < 0 or view.len - pos < 8 or not parse_fields(b, pos, view.len, &f):
                break
            if not valid_utf8(b + f.topic_at, f.topic_len):
                break
            if topics is not None or has_t0 or has_t1:
                if topics is not None and utf8(b + f.topic_at, f.topic_len) not in topics:
                    if utf8(b + f.props_at, f.props_len) is None:
                        break  # the reference rejects the record even when filtered out
                    pos += f.total
                    continue
                if (has_t0 and f.store_ts < t0) or (has_t1 and f.store_ts > t1):
                    if utf8(b + f.props_at, f.props_len) is None:
                        break
                    pos += f.total
                    continue
            if f.phys != segment_start + pos:
                break
            if need_body:
                if verify_crc and crc_of(b + f.body_at, f.body_len) != f.body_crc:
                    break
                if include_body and rows and body.data.size + f.body_len > (1 << 30):
                    break
            mark_names, mark_keys = names.n, keys.n
            if add_props(b + f.props_at, f.props_len, map_offsets, names, values, tags,
                         key_offsets, keys) < 0:
                break
            topic.add(b + f.topic_at, f.topic_len)
            if include_body:
                body.add(b + f.body_at, f.body_len)
            born.get(b + f.born_at, f.sys_flag & BORNHOST_V6)
            born_host.add(PyBytes_AS_STRING(born.text), PyBytes_GET_SIZE(born.text))
            stored.get(b + f.store_host_at, f.sys_flag & STOREHOST_V6)
            store_host.add(PyBytes_AS_STRING(stored.text), PyBytes_GET_SIZE(stored.text))
            hex16(hexbuf, <uint64_t>f.phys)
            msg_id.data.put(PyBytes_AS_STRING(stored.prefix), PyBytes_GET_SIZE(stored.prefix))
            msg_id.add(hexbuf, 16)
            queue_id.i32(f.queue_id)
            queue_offset.i64(f.queue_offset)
            phys.i64(f.phys)
            size.i32(f.total)
            crc.i32(f.body_crc)
            flag.i32(f.flag)
            sysflag.i32(f.sys_flag)
            born_ts.i64(f.born_ts)
            store_ts.i64(f.store_ts)
            reconsume.i32(f.reconsume)
            rows += 1
            pos += f.total
    finally:
        PyBuffer_Release(&view)
    return pos, rows, {
        "topic": topic.parts(), "queue_id": queue_id.value(), "queue_offset": queue_offset.value(),
        "commitlog_offset": phys.value(), "size": size.value(),
        "body": body.parts() if include_body else None, "body_crc": crc.value(),
        "flag": flag.value(), "sysflag": sysflag.value(), "born_timestamp": born_ts.value(),
        "born_host": born_host.parts(), "store_timestamp": store_ts.value(),
        "store_host": store_host.parts(), "reconsume_times": reconsume.value(),
        "tags": tags.parts(), "keys": (key_offsets.value(), keys.parts()),
        "properties": (map_offsets.value(), names.parts(), values.parts()),
        "msg_id": msg_id.parts(),
    }


# ---------------------------------------------------------------------------------------
# the segment walker's bulk path: hop over clean records, build nothing

cdef object _py_skip_clean = None


def bind_walker(skip_clean_reference) -> None:
    """Take the reference skip_clean (store.segment_walker), for buffers read indirectly."""
    global _py_skip_clean
    _py_skip_clean = skip_clean_reference


def skip_clean(buf, Py_ssize_t pos, Py_ssize_t stop, int64_t segment_start, bint check_crc):
    """store.segment_walker.skip_clean, compiled: a record is clean when parse_fields takes
    it, its topic and properties are UTF-8 (what decode_record decodes), its PHYSICALOFFSET
    is its position and, with check_crc, its body CRC matches."""
    cdef Py_buffer view
    cdef Fields f
    cdef const uint8_t* b
    if not get_buffer(buf, &view):
        return _py_skip_clean(buf, pos, stop, segment_start, check_crc)
    b = <const uint8_t*>view.buf
    try:
        while pos < stop:
            if pos < 0 or view.len - pos < 8 or not parse_fields(b, pos, view.len, &f):
                break
            if f.phys != segment_start + pos:
                break
            if not valid_utf8(b + f.topic_at, f.topic_len) or not valid_utf8(b + f.props_at, f.props_len):
                break
            if check_crc and crc_of(b + f.body_at, f.body_len) != f.body_crc:
                break
            pos += f.total
    finally:
        PyBuffer_Release(&view)
    return pos


# ---------------------------------------------------------------------------------------
# encoding

import time as _time

cdef object _PreparedRecord, _encode_host, _py_prepare_record, _py_record_parts
cdef int64_t MAX_PROPS = 32767, MAX_TOPIC = 127, MAX_EXTRA = 64 * 1024


def bind_encoder(m) -> None:
    global _PreparedRecord, _encode_host, _py_prepare_record, _py_record_parts
    _PreparedRecord, _encode_host = m.PreparedRecord, m.encode_host
    _py_prepare_record, _py_record_parts = m.py_prepare_record, m.py_record_parts


cdef object properties_bytes(msg):
    """encode_properties(all_properties() without WAIT) as UTF-8, or None for the reference
    (a name or value that is not a str)."""
    props = msg.properties
    tags = msg.tags
    keys = msg.keys
    if tags or keys or "WAIT" in props:
        props = dict(props)
        if tags:
            props["TAGS"] = tags
        if keys:
            props["KEYS"] = " ".join(keys)
        props.pop("WAIT", None)
    parts = []
    for k, v in props.items():
        if v is None:
            continue
        if type(k) is not str or type(v) is not str:
            return None
        parts.append(k + "\x01" + v)
    return "\x02".join(parts).encode("utf-8")


def prepare_record(msg, store_host, max_message_size):
    """store.record_codec.prepare_record, compiled; every refusal is the reference's."""
    try:
        got = _prepare(msg, store_host, max_message_size)
    except Exception:
        got = None
    if got is None:
        return _py_prepare_record(msg, store_host, max_message_size)
    return got


cdef dict _encoded_hosts = {}  # 'ip:port' → its 8 or 20 record bytes (a node sees few peers)


cdef object host_bytes(object host):
    got = _encoded_hosts.get(host)
    if got is None:
        got = _encode_host(host)
        if len(_encoded_hosts) >= 4096:
            _encoded_hosts.clear()
        _encoded_hosts[host] = got
    return got


cdef object tail_bytes(bytes topic_bytes, bytes props_bytes):
    """TOPICLENGTH TOPIC PROPERTIESLENGTH PROPERTIES, as a record ends."""
    cdef Py_ssize_t tl = len(topic_bytes), pl = len(props_bytes)
    tail = PyBytes_FromStringAndSize(NULL, 1 + tl + 2 + pl)
    cdef uint8_t* t = <uint8_t*>PyBytes_AS_STRING(tail)
    t[0] = <uint8_t>tl
    memcpy(t + 1, PyBytes_AS_STRING(topic_bytes), tl)
    t += 1 + tl
    t[0] = <uint8_t>(pl >> 8)
    t[1] = <uint8_t>(pl & 0xFF)
    memcpy(t + 2, PyBytes_AS_STRING(props_bytes), pl)
    return tail


cdef object _prepare(msg, store_host, max_message_size):
    cdef int64_t total, limit, sys_flag
    cdef int32_t q, fl, rc
    cdef int64_t born_ts, prepared
    props_bytes = properties_bytes(msg)
    if props_bytes is None or b"\x00" in props_bytes or len(props_bytes) > MAX_PROPS:
        return None
    topic = msg.topic
    if type(topic) is not str:
        return None
    topic_bytes = topic.encode("utf-8")
    if b"\x00" in topic_bytes or len(topic_bytes) > MAX_TOPIC:
        return None
    body = msg.body
    if type(body) is not bytes or type(max_message_size) is not int or len(body) > max_message_size:
        return None
    born = host_bytes(msg.born_host or store_host)
    store = host_bytes(store_host)
    if type(msg.sys_flag) is not int:
        return None
    sys_flag = (<int64_t>msg.sys_flag) & ~(BORNHOST_V6 | STOREHOST_V6)
    if len(born) == 20:
        sys_flag |= BORNHOST_V6
    if len(store) == 20:
        sys_flag |= STOREHOST_V6
    total = 48 + len(born) + 8 + len(store) + 16 + len(body) + 1 + len(topic_bytes) + 2 + len(props_bytes)
    limit = max_message_size
    if total > limit + MAX_EXTRA or not (-2**31 <= sys_flag < 2**31):
        return None
    born_ts = msg.born_timestamp if msg.born_timestamp is not None else int(_time.time() * 1000)
    q, fl, rc, prepared = msg.queue_id, msg.flag, msg.reconsume_times, msg.prepared_transaction_offset
    if (type(msg.queue_id) is not int or type(msg.flag) is not int
            or type(msg.reconsume_times) is not int or type(msg.prepared_transaction_offset) is not int):
        return None  # the reference packs what struct takes (an IntEnum...); it decides
    return _tuple_new(_PreparedRecord, (  # a NamedTuple's own __new__ is Python code
        total, q, fl, crc_of(<const uint8_t*>PyBytes_AS_STRING(body), PyBytes_GET_SIZE(body)), sys_flag, born_ts, born, store, rc, prepared,
        body, tail_bytes(topic_bytes, props_bytes),
    ))


cdef inline void put32(uint8_t* p, uint32_t u) noexcept nogil:
    p[0] = u >> 24
    p[1] = (u >> 16) & 0xFF
    p[2] = (u >> 8) & 0xFF
    p[3] = u & 0xFF


cdef inline void put64(uint8_t* p, uint64_t u) noexcept nogil:
    put32(p, <uint32_t>(u >> 32))
    put32(p + 4, <uint32_t>u)


def record_parts(rec, queue_offset, physical_offset, store_timestamp):
    """store.record_codec.record_parts, compiled; values out of range go to the reference."""
    try:
        fixed = fixed_part(rec, queue_offset, physical_offset, store_timestamp)
    except (TypeError, ValueError, OverflowError):
        fixed = None
    if fixed is None:
        return _py_record_parts(rec, queue_offset, physical_offset, store_timestamp)
    return fixed, rec.body, rec.tail


cdef inline bint as_int64(object v, int64_t* out):
    """`v` as an int64 when it is an int in range (anything else is the reference's)."""
    if type(v) is not int:
        return False
    try:
        out[0] = v
    except OverflowError:
        return False
    return True


cdef inline bint as_int32(object v, int64_t* out):
    return as_int64(v, out) and -2147483648 <= out[0] <= 2147483647


cdef object fixed_part(rec, int64_t qo, int64_t po, int64_t st):
    """A record's fixed fields (all but body, topic and properties) packed, or None for a
    record the reference must pack (a field out of its range, an odd host)."""
    cdef Py_ssize_t born_len, store_len, n
    cdef uint8_t* p
    cdef int64_t total, crc, queue_id, flag, sys_flag, reconsume, born_ts, prepared
    born, store = rec.born_host, rec.store_host
    if type(born) is not bytes or type(store) is not bytes:
        return None
    born_len, store_len = len(born), len(store)
    if born_len not in (8, 20) or store_len not in (8, 20):
        return None
    if not (as_int32(rec.total, &total) and as_int32(rec.body_crc, &crc) and as_int32(rec.queue_id, &queue_id)
            and as_int32(rec.flag, &flag) and as_int32(rec.sys_flag, &sys_flag)
            and as_int32(rec.reconsume_times, &reconsume) and as_int64(rec.born_timestamp, &born_ts)
            and as_int64(rec.prepared_transaction_offset, &prepared)):
        return None
    n = 48 + born_len + 8 + store_len + 16
    fixed = PyBytes_FromStringAndSize(NULL, n)
    p = <uint8_t*>PyBytes_AS_STRING(fixed)
    put32(p, <uint32_t>total)
    put32(p + 4, MAGIC_V1)
    put32(p + 8, <uint32_t>crc)
    put32(p + 12, <uint32_t>queue_id)
    put32(p + 16, <uint32_t>flag)
    put64(p + 20, <uint64_t>qo)
    put64(p + 28, <uint64_t>po)
    put32(p + 36, <uint32_t>sys_flag)
    put64(p + 40, <uint64_t>born_ts)
    memcpy(p + 48, PyBytes_AS_STRING(born), born_len)
    p += 48 + born_len
    put64(p, <uint64_t>st)
    memcpy(p + 8, PyBytes_AS_STRING(store), store_len)
    p += 8 + store_len
    put32(p, <uint32_t>reconsume)
    put64(p + 4, <uint64_t>prepared)
    put32(p + 12, <uint32_t>len(rec.body))
    return fixed


cdef object _py_place_records = None


def bind_place(m) -> None:
    global _py_place_records
    _py_place_records = m.py_place_records


def place_records(records, list parts, queue_offset, physical_offset, store_timestamp, id_prefix):
    """store.record_codec.place_records, compiled: the same parts and answer, or the reference's
    for a group with any record it must pack."""
    cdef int64_t qo, po, st, phys, total
    cdef Py_ssize_t count, plen
    cdef list placed = []
    cdef char* out
    try:
        qo, po, st = queue_offset, physical_offset, store_timestamp
        if type(id_prefix) is not str or not id_prefix.isascii() or po < 0 or type(records) is not list:
            raise ValueError
        count = len(records)
        if count == 0:
            raise ValueError
        prefix = id_prefix.encode("ascii")
        plen = len(prefix)
        ids = PyBytes_FromStringAndSize(NULL, count * (plen + 17) - 1)
        out = PyBytes_AS_STRING(ids)
        phys = po
        for rec in records:
            counts = (rec.sys_flag & 0xC) in (0, 0x8)  # TRANSACTION_MASK: none or commit
            fixed = fixed_part(rec, qo if counts else 0, phys, st)
            if fixed is None or type(rec.body) is not bytes or type(rec.tail) is not bytes:
                raise ValueError
            placed.append(fixed)
            placed.append(rec.body)
            placed.append(rec.tail)
            if out != PyBytes_AS_STRING(ids):
                out[0] = 44  # ','
                out += 1
            memcpy(out, PyBytes_AS_STRING(prefix), plen)
            hex16(out + plen, <uint64_t>phys)
            out += plen + 16
            total = rec.total
            if total < 0 or phys > 0x7FFFFFFFFFFFFFFF - total or (counts and qo == 0x7FFFFFFFFFFFFFFF):
                raise OverflowError  # past int64: the reference's answer
            phys += total
            if counts:
                qo += 1
    except (TypeError, ValueError, OverflowError):
        return _py_place_records(records, parts, queue_offset, physical_offset, store_timestamp, id_prefix)
    parts.extend(placed)
    return ids.decode("ascii"), qo


cdef object _py_prepare_plain = None
def bind_plain(m) -> None:
    global _py_prepare_plain
    _py_prepare_plain = m.py_prepare_plain


cdef dict _plain_tails = {}  # (topic, tags) → the record's tail, or None when the reference decides


cdef object plain_tail(topic, tags):
    """TOPICLENGTH TOPIC PROPERTIESLENGTH PROPERTIES of a plain message (its properties
    are its tags), or None for one the reference must encode (a NUL, a surrogate, a
    topic or tags out of bounds)."""
    key = (topic, tags)
    try:
        return _plain_tails[key]
    except KeyError:
        pass
    tail = None
    try:
        topic_bytes = topic.encode("utf-8")
        props_bytes = b"TAGS\x01" + tags.encode("utf-8") if tags else _EMPTY
    except UnicodeEncodeError:
        topic_bytes = None
    if not (topic_bytes is None or b"\x00" in topic_bytes or len(topic_bytes) > MAX_TOPIC or b"\x00" in props_bytes
            or b"\x02" in props_bytes or props_bytes.count(b"\x01") > 1 or len(props_bytes) > MAX_PROPS):
        tail = tail_bytes(topic_bytes, props_bytes)
    if len(_plain_tails) >= 4096:
        _plain_tails.clear()
    _plain_tails[key] = tail
    return tail


cdef object props_tail(topic, tags, properties, keys):
    """The tail of a message with other properties and keys (a remoting send's), encoded as
    `Message.all_properties` orders them (its own, then TAGS, then KEYS), or None for one
    the reference must encode (WAIT, TAGS or KEYS among its own, a name or value that is
    not a str, a NUL, a surrogate, a topic or properties out of bounds)."""
    if type(properties) is not dict or type(topic) is not str:
        return None
    if "WAIT" in properties or "TAGS" in properties or "KEYS" in properties:
        return None
    parts = []
    for k, v in (<dict>properties).items():
        if type(k) is not str or type(v) is not str:
            return None
        parts.append(k + "\x01" + v)
    if tags:
        parts.append("TAGS\x01" + tags)
    if keys:
        for k in keys:
            if type(k) is not str:
                return None
        parts.append("KEYS\x01" + " ".join(keys))
    try:
        topic_bytes = topic.encode("utf-8")
        props_bytes = "\x02".join(parts).encode("utf-8")
    except UnicodeEncodeError:
        return None
    if (b"\x00" in topic_bytes or len(topic_bytes) > MAX_TOPIC or b"\x00" in props_bytes
            or len(props_bytes) > MAX_PROPS):
        return None
    return tail_bytes(topic_bytes, props_bytes)


def prepare_plain(topic, body, queue_id, tags, flag, born_timestamp, born_host, store_host, max_message_size,
                  properties=None, keys=()):
    """store.record_codec.prepare_plain, compiled: the record of a send with a body, a topic,
    tags, and keys and other properties, without building its Message; anything out of
    the common case is the reference's."""
    cdef int64_t total, born_ts = -1, q = -1, fl = 0, limit = 0
    cdef int32_t sys_flag = 0
    cdef Py_ssize_t n
    if (type(topic) is str and type(body) is bytes and type(queue_id) is int and type(flag) is int
            and type(max_message_size) is int and (tags is None or type(tags) is str)
            and (properties is None or type(properties) is dict) and (type(keys) is tuple or type(keys) is list)):
        tail = props_tail(topic, tags, properties, keys) if properties or keys else plain_tail(topic, tags)
        try:
            q, fl, limit = queue_id, flag, max_message_size
            born = host_bytes(born_host or store_host)
            store = host_bytes(store_host)
            if born_timestamp is None:
                born_ts = <int64_t>(_time.time() * 1000)
            elif type(born_timestamp) is int:
                born_ts = born_timestamp
            else:
                tail = None
        except Exception:  # out of range, a bad host: the reference says so
            tail = None
        n = PyBytes_GET_SIZE(body)
        if (tail is not None and 0 <= q < 2**31 and -2**31 <= fl < 2**31 and born_ts >= 0 and n <= limit):
            if len(born) == 20:
                sys_flag |= BORNHOST_V6
            if len(store) == 20:
                sys_flag |= STOREHOST_V6
            total = 48 + len(born) + 8 + len(store) + 16 + n + len(tail)
            if total <= limit + MAX_EXTRA:
                return _tuple_new(_PreparedRecord, (
                    total, queue_id, flag, crc_of(<const uint8_t*>PyBytes_AS_STRING(body), n), sys_flag,
                    born_ts, born, store, 0, 0, body, tail,
                ))
    return _py_prepare_plain(topic, body, queue_id, tags, flag, born_timestamp, born_host, store_host,
                             max_message_size, properties, keys)


def java_string_hash(str s):
    """Java's String.hashCode over `s`'s UTF-16 code units, as a signed int32
    (store/message.py's reference): an IndexFile key and a tag code are hashed per message."""
    cdef uint32_t h = 0, u
    cdef Py_UCS4 c
    for c in s:
        u = <uint32_t>c
        if u > 0xFFFF:  # a supplementary character: its two surrogates
            u -= 0x10000
            h = 31 * h + (0xD800 + (u >> 10))
            h = 31 * h + (0xDC00 + (u & 0x3FF))
        else:
            h = 31 * h + u
    return <int32_t>h


cdef inline void put_i32(uint8_t* p, int32_t v) noexcept nogil:
    cdef uint32_t u = <uint32_t>v
    p[0] = <uint8_t>(u >> 24)
    p[1] = <uint8_t>(u >> 16)
    p[2] = <uint8_t>(u >> 8)
    p[3] = <uint8_t>u


cdef inline void put_i64(uint8_t* p, int64_t v) noexcept nogil:
    cdef uint64_t u = <uint64_t>v
    put_i32(p, <int32_t>(<uint32_t>(u >> 32)))
    put_i32(p + 4, <int32_t>(<uint32_t>u))


def index_put(buf, Py_ssize_t slot_pos, Py_ssize_t entry_pos, int32_t key_hash, int64_t phy_offset,
              int32_t time_diff, int32_t index_count, int64_t store_timestamp, int32_t hash_slot_count):
    """IndexFile.put_key's writes (store/index_file.py holds the reference): the entry at
    `entry_pos` chained to the slot's previous entry, the slot pointed at it, and the
    header's counts and end values. Returns the previous entry (0: none, the slot was
    empty and `hash_slot_count` + 1 is written)."""
    cdef Py_buffer view
    cdef uint8_t* p
    cdef int32_t prev
    PyObject_GetBuffer(buf, &view, PyBUF_WRITABLE)
    try:
        if slot_pos < 0 or entry_pos < 0 or slot_pos + 4 > view.len or entry_pos + 20 > view.len or view.len < 40:
            raise ValueError("index position out of the file")
        p = <uint8_t*>view.buf
        prev = <int32_t>((<uint32_t>p[slot_pos] << 24) | (<uint32_t>p[slot_pos + 1] << 16)
                         | (<uint32_t>p[slot_pos + 2] << 8) | p[slot_pos + 3])
        if prev <= 0 or prev > index_count:
            prev = 0
        put_i32(p + entry_pos, key_hash)
        put_i64(p + entry_pos + 4, phy_offset)
        put_i32(p + entry_pos + 12, time_diff)
        put_i32(p + entry_pos + 16, prev)
        put_i32(p + slot_pos, index_count)
        if prev == 0:
            put_i32(p + 32, hash_slot_count + 1)
        put_i32(p + 36, index_count + 1)
        put_i64(p + 24, phy_offset)
        put_i64(p + 8, store_timestamp)
        return prev
    finally:
        PyBuffer_Release(&view)
