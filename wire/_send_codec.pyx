# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The compiled send path's codec (wire/send_codec.py holds the pure-Python reference and
chooses): splits a receive into frames, decodes the plain `send` requests among them
without building a map, and encodes `send` answers without one.

A frame is decoded here only when it is a plain send in the shape clients write (a
definite-length map of v, id, op, topic, body and optionally tags, queue_id, wait, flag,
born_timestamp, each valid as the request schema demands) or a plain send_batch (v, id,
op, topic, messages of a body and optional tags, optionally queue_id and wait); every
other frame is handed
back as its bytes for the reference decoder and the request schema, so an odd or bad
request gets exactly their answer. tests/wire/test_send_codec.py checks both ways.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport INT64_MAX as I64_MAX, INT64_MIN as I64_MIN, int64_t, uint8_t, uint64_t
from libc.string cimport memcmp, memcpy, strlen

cdef uint64_t INT64_MAX = 9223372036854775807ULL
cdef uint64_t INT32_MAX = 2147483647ULL

# the keys a plain request may hold, by bit
cdef int K_V = 1, K_ID = 2, K_OP = 4, K_TOPIC = 8, K_BODY = 16, K_TAGS = 32, K_QUEUE = 64, K_WAIT = 128
cdef int K_FLAG = 256, K_BORN = 512, K_MESSAGES = 1024
cdef int REQUIRED = 1 | 2 | 4 | 8  # v, id, op, topic; and a body (send) or messages (send_batch)
cdef int SEND_KEYS = 1 | 2 | 4 | 8 | 16 | 32 | 64 | 128 | 256 | 512
cdef int BATCH_KEYS = 1 | 2 | 4 | 8 | 64 | 128 | 1024
cdef object _PlainSend = tuple, _PlainBatch = tuple  # wire/send_codec.py binds its NamedTuples
cdef object _tuple_new = tuple.__new__


def bind(plain_send_class, plain_batch_class) -> None:
    global _PlainSend, _PlainBatch
    _PlainSend, _PlainBatch = plain_send_class, plain_batch_class


cdef struct Cursor:
    const uint8_t* p
    Py_ssize_t n
    Py_ssize_t i


cdef inline bint head(Cursor* c, int* major, uint64_t* value) noexcept nogil:
    """A CBOR item's head: its major type and argument; False when truncated, indefinite or
    reserved (the reference decides those)."""
    cdef uint8_t b, info
    cdef int k, size
    if c.i >= c.n:
        return False
    b = c.p[c.i]
    c.i += 1
    major[0] = b >> 5
    info = b & 31
    if info < 24:
        value[0] = info
        return True
    if info > 27:
        return False
    size = 1 << (info - 24)
    if c.i + size > c.n:
        return False
    value[0] = 0
    for k in range(size):
        value[0] = (value[0] << 8) | c.p[c.i + k]
    c.i += size
    return True


cdef inline bint text_at(Cursor* c, const uint8_t** s, Py_ssize_t* length) noexcept nogil:
    cdef int major
    cdef uint64_t v
    if not head(c, &major, &v) or major != 3 or v > <uint64_t>(c.n - c.i):
        return False
    s[0] = c.p + c.i
    length[0] = <Py_ssize_t>v
    c.i += <Py_ssize_t>v
    return True


cdef inline bint key_is(const uint8_t* s, Py_ssize_t n, const char* name, Py_ssize_t m) noexcept nogil:
    return n == m and memcmp(s, name, m) == 0


cdef const char* KEY_NAMES[11]  # bit k is KEY_NAMES[k]: K_V, K_ID, ... in order
KEY_NAMES[:] = [b"v", b"id", b"op", b"topic", b"body", b"tags", b"queue_id", b"wait", b"flag", b"born_timestamp",
                b"messages"]


cdef inline int key_bit(const uint8_t* s, Py_ssize_t n) noexcept nogil:
    """The bit of a plain request's key, 0 for any other key."""
    cdef int k
    for k in range(11):
        if key_is(s, n, KEY_NAMES[k], <Py_ssize_t>strlen(KEY_NAMES[k])):
            return 1 << k
    return 0

cdef inline bint int_at(Cursor* c, int64_t lo, int64_t hi, int64_t* out) noexcept nogil:
    """An integer in [lo, hi]."""
    cdef int major
    cdef uint64_t v
    if not head(c, &major, &v) or major > 1 or v > INT64_MAX:
        return False
    out[0] = <int64_t>v if major == 0 else -1 - <int64_t>v
    return lo <= out[0] <= hi


cdef object text_value(Cursor* c, bint tags):
    """A non-empty UTF-8 text (for `tags`, without \\x01 or \\x02), or None when it is not one."""
    cdef const uint8_t* ts
    cdef Py_ssize_t length, j
    if not text_at(c, &ts, &length) or length == 0:
        return None
    if tags:
        for j in range(length):
            if ts[j] == 1 or ts[j] == 2:
                return None
    try:
        return PyUnicode_DecodeUTF8(<const char*>ts, length, "strict")
    except UnicodeDecodeError:
        return None


cdef object body_value(Cursor* c):
    """A non-empty byte string, or None."""
    cdef int major
    cdef uint64_t v
    if not head(c, &major, &v) or major != 2 or v == 0 or v > <uint64_t>(c.n - c.i):
        return None
    body = PyBytes_FromStringAndSize(<const char*>(c.p + c.i), <Py_ssize_t>v)
    c.i += <Py_ssize_t>v
    return body


cdef object plain_message(Cursor* c):
    """One message of a plain batch, a map of a body and optionally tags: (body, tags),
    or None for anything else."""
    cdef int major, bit, seen = 0
    cdef uint64_t count, k
    cdef const uint8_t* s
    cdef Py_ssize_t length
    cdef object body = None, tags = None
    if not head(c, &major, &count) or major != 5 or count < 1 or count > 2:
        return None
    for k in range(count):
        if not text_at(c, &s, &length):
            return None
        bit = key_bit(s, length)
        if (bit != K_BODY and bit != K_TAGS) or seen & bit:
            return None
        seen |= bit
        if bit == K_BODY:
            body = body_value(c)
            if body is None:
                return None
        else:
            tags = text_value(c, True)
            if tags is None:
                return None
    if body is None:
        return None
    return (body, tags)


cdef object plain_request(const uint8_t* p, Py_ssize_t n, set good_topics):
    """A plain send (a PlainSend) or send_batch (a PlainBatch), or None for anything else."""
    cdef Cursor c
    cdef int major, seen = 0, bit, allowed = SEND_KEYS | BATCH_KEYS
    cdef uint64_t count, k, m
    cdef const uint8_t* s
    cdef Py_ssize_t length
    cdef int64_t request_id = 0, flag = 0, value
    cdef object topic = None, body = None, tags = None, queue_id = None, born = None
    cdef list messages = None
    cdef bint wait = True, batch = False
    c.p, c.n, c.i = p, n, 0
    if not head(&c, &major, &count) or major != 5 or count > 10:
        return None
    for k in range(count):
        if not text_at(&c, &s, &length):
            return None
        bit = key_bit(s, length)
        if not (bit & allowed) or seen & bit:
            return None
        seen |= bit
        if bit == K_OP:
            if not text_at(&c, &s, &length):
                return None
            if key_is(s, length, b"send", 4):
                allowed = SEND_KEYS
            elif key_is(s, length, b"send_batch", 10):
                allowed, batch = BATCH_KEYS, True
            else:
                return None
            if seen & ~allowed:
                return None
        elif bit == K_WAIT:
            if c.i >= c.n or (c.p[c.i] != 0xF5 and c.p[c.i] != 0xF4):
                return None
            wait = c.p[c.i] == 0xF5
            c.i += 1
        elif bit == K_TOPIC or bit == K_TAGS:
            text = text_value(&c, bit == K_TAGS)
            if text is None:
                return None
            if bit == K_TOPIC:
                topic = text
            else:
                tags = text
        elif bit == K_BODY:
            body = body_value(&c)
            if body is None:
                return None
        elif bit == K_MESSAGES:
            if not head(&c, &major, &m) or major != 4 or m == 0 or m > <uint64_t>(c.n - c.i):
                return None
            messages = []
            for _ in range(m):
                one = plain_message(&c)
                if one is None:
                    return None
                messages.append(one)
        elif bit == K_V:
            if not int_at(&c, 1, 1, &value):
                return None
        elif bit == K_ID:
            if not int_at(&c, I64_MIN, I64_MAX, &request_id):
                return None
        elif bit == K_FLAG:
            if not int_at(&c, -2147483648, 2147483647, &flag):
                return None
        elif bit == K_QUEUE:
            if not int_at(&c, 0, 2147483647, &value):
                return None
            queue_id = value
        else:  # born_timestamp
            if not int_at(&c, 0, I64_MAX, &value):
                return None
            born = value
    if c.i != n or (seen & REQUIRED) != REQUIRED or topic not in good_topics:
        return None
    if batch:
        if messages is None:
            return None
        return _tuple_new(_PlainBatch, (request_id, topic, queue_id, wait, messages))
    if body is None:
        return None
    return _tuple_new(_PlainSend, (request_id, topic, body, tags, queue_id, wait, born, flag))

def split_frames(data, Py_ssize_t max_frame_size, object good_topics):
    """The complete frames at the start of `data`: (items, bytes used, the size of an
    oversized frame's header or -1). An item is a plain send's fields (a tuple) when
    `good_topics` (the topics known valid) is a set, else the frame's bytes."""
    cdef Py_buffer view
    cdef const uint8_t* p
    cdef Py_ssize_t n, i = 0, size
    cdef list items = []
    cdef set topics = good_topics
    cdef bint plain = good_topics is not None
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        p = <const uint8_t*>view.buf
        n = view.len
        while n - i >= 4:
            size = (<Py_ssize_t>p[i] << 24) | (<Py_ssize_t>p[i + 1] << 16) | (<Py_ssize_t>p[i + 2] << 8) | p[i + 3]
            if size > max_frame_size:
                return items, i, size
            if n - i - 4 < size:
                break
            item = plain_request(p + i + 4, size, topics) if plain else None
            if item is None:
                item = PyBytes_FromStringAndSize(<const char*>(p + i + 4), size)
            items.append(item)
            i += 4 + size
        return items, i, -1
    finally:
        PyBuffer_Release(&view)


cdef inline Py_ssize_t put_head(uint8_t* out, int major, uint64_t v) noexcept nogil:
    """A CBOR head as cbor2 writes it (the shortest form); its length."""
    cdef int k, size
    major <<= 5
    if v < 24:
        out[0] = major | <uint8_t>v
        return 1
    if v < 0x100:
        out[0], size = major | 24, 1
    elif v < 0x10000:
        out[0], size = major | 25, 2
    elif v < 0x100000000ULL:
        out[0], size = major | 26, 4
    else:
        out[0], size = major | 27, 8
    for k in range(size):
        out[size - k] = <uint8_t>(v >> (8 * k))
    return 1 + size


cdef inline Py_ssize_t put_int(uint8_t* out, int64_t v) noexcept nogil:
    if v >= 0:
        return put_head(out, 0, <uint64_t>v)
    return put_head(out, 1, <uint64_t>(-1 - v))


cdef inline Py_ssize_t put_text(uint8_t* out, const char* s, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t h = put_head(out, 3, <uint64_t>n)
    memcpy(out + h, s, n)
    return h + n


def send_reply_frame(request_id, status, msg_id, queue_id, queue_offset, commitlog_offset):
    """The frame of a `send` answer (wire/send_codec.py's reference, byte for byte), or
    None when a value is out of the common case."""
    return reply_frame(request_id, status, msg_id, queue_id, queue_offset, commitlog_offset, False)


def send_batch_reply_frame(request_id, status, msg_ids, queue_id, queue_offset, commitlog_offset):
    """The frame of a `send_batch` answer; `msg_ids` is the ids joined by commas (as the
    CommitLog's append result holds them). None when a value is out of the common case."""
    return reply_frame(request_id, status, msg_ids, queue_id, queue_offset, commitlog_offset, True)


cdef object reply_frame(request_id, status, ids, queue_id, queue_offset, commitlog_offset, bint batch):
    """A SendReply's map ("msg_id": the id) or a SendBatchReply's ("msg_ids": the ids
    `ids` joins with commas) as encode_frame writes it."""
    cdef int64_t rid, qid, qo, co
    cdef Py_ssize_t i = 4, j, start, count = 1, n
    cdef const char* text
    cdef uint8_t* out
    if (type(request_id) is not int or type(status) is not str or type(ids) is not str
            or type(queue_id) is not int or type(queue_offset) is not int or type(commitlog_offset) is not int):
        return None
    if not (-2**63 <= request_id < 2**63 and -2**63 <= queue_id < 2**63 and -2**63 <= queue_offset < 2**63
            and -2**63 <= commitlog_offset < 2**63):
        return None
    st = status.encode("utf-8")
    m = ids.encode("utf-8")
    if len(st) > 64:
        return None
    rid, qid, qo, co = request_id, queue_id, queue_offset, commitlog_offset
    text, n = PyBytes_AS_STRING(m), len(m)
    if batch:
        for j in range(n):
            if text[j] == 44:  # ','
                count += 1
    frame = PyBytes_FromStringAndSize(NULL, 4 + 200 + 65 + 9 + 9 * count + n)
    out = <uint8_t*>PyBytes_AS_STRING(frame)
    out[i] = 0xA6
    i += 1
    i += put_text(out + i, b"id", 2)
    i += put_int(out + i, rid)
    i += put_text(out + i, b"status", 6)
    i += put_text(out + i, PyBytes_AS_STRING(st), len(st))
    if batch:
        i += put_text(out + i, b"msg_ids", 7)
        i += put_head(out + i, 4, <uint64_t>count)
        start = 0
        for j in range(n + 1):
            if j == n or text[j] == 44:
                i += put_text(out + i, text + start, j - start)
                start = j + 1
    else:
        i += put_text(out + i, b"msg_id", 6)
        i += put_text(out + i, text, n)
    i += put_text(out + i, b"queue_id", 8)
    i += put_int(out + i, qid)
    i += put_text(out + i, b"queue_offset", 12)
    i += put_int(out + i, qo)
    i += put_text(out + i, b"commitlog_offset", 16)
    i += put_int(out + i, co)
    out[0] = <uint8_t>((i - 4) >> 24)
    out[1] = <uint8_t>((i - 4) >> 16)
    out[2] = <uint8_t>((i - 4) >> 8)
    out[3] = <uint8_t>(i - 4)
    return frame[:i]
