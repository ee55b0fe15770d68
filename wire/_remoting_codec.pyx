# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The remoting send fast path's reader, compiled (wire/remoting/plain_send.py holds the
reference and chooses): a SEND_MESSAGE / SEND_MESSAGE_V2 frame's JSON header read straight
to the fields the node stores, without json.loads, the extFields dict or the
RemotingCommand.

It reads the header shapes clients write: an object of code, opaque, flag, version,
language, remark, serializeTypeCurrentRPC and extFields, each once; extFields an object of
strings and integers, each key once; strings with the JSON escapes but surrogates. Anything
else (a float, a literal, a nested value, an unknown top-level key, a duplicate, a
surrogate escape, a field the reference would read otherwise) is None, and the frame takes
the reference decoder and `plain_send`, which answer it as they answer any frame.
tests/wire/test_remoting_plain_send.py holds the two to each other.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.dict cimport PyDict_DelItem, PyDict_GetItem, PyDict_SetItem
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int64_t, uint8_t, uint32_t
from libc.stdio cimport snprintf
from libc.string cimport memcmp, strlen

cdef object _RemotingSend = tuple  # wire/remoting/plain_send.py binds its NamedTuple
cdef object _tuple_new = tuple.__new__

cdef int64_t INT32_MAX = 2147483647
cdef int64_t INT32_MIN = -2147483648
cdef int64_t PLAIN_MAX = 999999999999999999  # 18 digits: what the reference takes as a plain number
cdef enum:
    MAX_TEXT = 16384  # the longest string value unescaped on the stack; longer ones are None


def bind(remoting_send_class) -> None:
    global _RemotingSend
    _RemotingSend = remoting_send_class


cdef struct Cursor:
    const uint8_t* p
    Py_ssize_t n
    Py_ssize_t i


cdef struct Text:  # a JSON string's raw bytes (between the quotes) and whether it holds an escape
    const uint8_t* s
    Py_ssize_t n
    bint escaped


cdef inline void ws(Cursor* c) noexcept nogil:
    while c.i < c.n and (c.p[c.i] == 32 or c.p[c.i] == 9 or c.p[c.i] == 10 or c.p[c.i] == 13):
        c.i += 1


cdef inline bint eat(Cursor* c, uint8_t ch) noexcept nogil:
    ws(c)
    if c.i < c.n and c.p[c.i] == ch:
        c.i += 1
        return True
    return False


cdef inline int hex4(const uint8_t* s) noexcept nogil:
    """Four hex digits' value, or -1."""
    cdef int k, v = 0, d
    for k in range(4):
        d = s[k]
        if 48 <= d <= 57:
            d -= 48
        elif 97 <= d <= 102:
            d -= 87
        elif 65 <= d <= 70:
            d -= 55
        else:
            return -1
        v = v * 16 + d
    return v


cdef bint text_at(Cursor* c, Text* t) noexcept nogil:
    """A JSON string (the cursor on its opening quote after spaces): its raw bytes; False
    for a raw control character, a bad escape or a surrogate escape, or no string."""
    cdef const uint8_t* p = c.p
    cdef Py_ssize_t n = c.n, i
    cdef uint8_t b
    cdef int v
    ws(c)
    i = c.i
    if i >= n or p[i] != 34:
        return False
    i += 1
    t.s, t.escaped = p + i, False
    while i < n:
        b = p[i]
        if b > 34 and b != 92:  # the common byte
            i += 1
            continue
        if b == 34:
            t.n = p + i - t.s
            c.i = i + 1
            return True
        if b < 32:
            return False
        if b == 92:  # a backslash
            t.escaped = True
            if i + 1 >= n:
                return False
            b = p[i + 1]
            if b == 117:  # \uXXXX
                if i + 6 > n:
                    return False
                v = hex4(p + i + 2)
                if v < 0 or 0xD800 <= v <= 0xDFFF:
                    return False
                i += 6
                continue
            if b not in (34, 92, 47, 98, 102, 110, 114, 116):
                return False
            i += 2
            continue
        i += 1  # a space, ! (32, 33)
    return False


cdef Py_ssize_t unescape(Text* t, uint8_t* out) noexcept nogil:
    """A checked string's value as UTF-8 into `out` (at most t.n bytes); its length."""
    cdef Py_ssize_t i = 0, o = 0
    cdef uint8_t b
    cdef int v
    if not t.escaped:
        for i in range(t.n):
            out[i] = t.s[i]
        return t.n
    while i < t.n:
        b = t.s[i]
        if b != 92:
            out[o] = b
            o += 1
            i += 1
            continue
        b = t.s[i + 1]
        if b == 117:
            v = hex4(t.s + i + 2)
            if v < 0x80:
                out[o] = <uint8_t>v
                o += 1
            elif v < 0x800:
                out[o] = <uint8_t>(0xC0 | (v >> 6))
                out[o + 1] = <uint8_t>(0x80 | (v & 0x3F))
                o += 2
            else:
                out[o] = <uint8_t>(0xE0 | (v >> 12))
                out[o + 1] = <uint8_t>(0x80 | ((v >> 6) & 0x3F))
                out[o + 2] = <uint8_t>(0x80 | (v & 0x3F))
                o += 3
            i += 6
            continue
        if b == 98:
            out[o] = 8
        elif b == 102:
            out[o] = 12
        elif b == 110:
            out[o] = 10
        elif b == 114:
            out[o] = 13
        elif b == 116:
            out[o] = 9
        else:  # " \ /
            out[o] = b
        o += 1
        i += 2
    return o


cdef inline bint text_is(Text* t, const char* name, Py_ssize_t m) noexcept nogil:
    return not t.escaped and t.n == m and memcmp(t.s, name, m) == 0


cdef bint int_at(Cursor* c, int64_t* out, bint* big) noexcept nogil:
    """A JSON integer (no fraction or exponent); `big` when it has more than 18 digits
    (its value is then not read: no field this reader takes holds one)."""
    cdef bint negative = False
    cdef int digits = 0
    cdef int64_t v = 0
    ws(c)
    if c.i < c.n and c.p[c.i] == 45:  # '-'
        negative = True
        c.i += 1
    if c.i >= c.n or not (48 <= c.p[c.i] <= 57):
        return False
    if c.p[c.i] == 48 and c.i + 1 < c.n and 48 <= c.p[c.i + 1] <= 57:
        return False  # a leading zero: not JSON
    while c.i < c.n and 48 <= c.p[c.i] <= 57:
        if digits < 18:
            v = v * 10 + (c.p[c.i] - 48)
        digits += 1
        c.i += 1
    if c.i < c.n and (c.p[c.i] == 46 or c.p[c.i] == 101 or c.p[c.i] == 69):  # . e E: a float
        return False
    big[0] = digits > 18
    out[0] = -v if negative else v
    return True


cdef inline bint int32_at(Cursor* c, int64_t* out) noexcept nogil:
    cdef bint big
    return int_at(c, out, &big) and not big and INT32_MIN <= out[0] <= INT32_MAX


# the extFields the fast path reads, by their V1 names; SEND_MESSAGE_V2 writes one letter each
cdef enum:
    F_GROUP = 0
    F_TOPIC = 1
    F_QUEUE = 2
    F_SYSFLAG = 3
    F_BORN = 4
    F_FLAG = 5
    F_QUEUENUMS = 6
    F_RECONSUME = 7
    F_MAXRECONSUME = 8
    F_BATCH = 9
    F_PROPERTIES = 10
    F_OTHER = 11
    NFIELDS = 11
cdef const char* V1_NAMES[11]
V1_NAMES[:] = [b"producerGroup", b"topic", b"queueId", b"sysFlag", b"bornTimestamp", b"flag",
               b"defaultTopicQueueNums", b"reconsumeTimes", b"maxReconsumeTimes", b"batch", b"properties"]
cdef const char* V2_LETTERS = b"abefghdjlmi"  # V1_NAMES[k]'s SendMessageRequestHeaderV2 key


cdef int field_of(Text* key, bint v2) noexcept nogil:
    """Which field `key` names (F_OTHER for any other), or -1 for a key this reader does not
    take (an escaped key, a V1 name in a V2 header: the reference renames those)."""
    cdef int k
    cdef Py_ssize_t m
    if key.escaped:
        return -1
    if v2 and key.n == 1:
        for k in range(NFIELDS):
            if key.s[0] == V2_LETTERS[k]:
                return k
        return F_OTHER
    for k in range(NFIELDS):
        m = <Py_ssize_t>strlen(V1_NAMES[k])
        if key.n == m and memcmp(key.s, V1_NAMES[k], m) == 0:
            return -1 if v2 else k
    return F_OTHER


cdef struct Value:  # an extFields value: a string (its Text) or an integer
    bint is_int
    bint big
    int64_t number
    Text text


cdef bint value_at(Cursor* c, Value* v) noexcept nogil:
    ws(c)
    if c.i < c.n and c.p[c.i] == 34:
        v.is_int = False
        return text_at(c, &v.text)
    v.is_int = True
    return int_at(c, &v.number, &v.big)


cdef bint plain_number(Value* v, int64_t* out) noexcept nogil:
    """The reference's plain number: ASCII digits, at most 18 of them (a JSON integer: not
    negative), and its value."""
    cdef Py_ssize_t k
    cdef int64_t n = 0
    if v.is_int:
        if v.big or v.number < 0 or v.number > PLAIN_MAX:
            return False
        out[0] = v.number
        return True
    if v.text.escaped or v.text.n == 0 or v.text.n > 18:
        return False
    for k in range(v.text.n):
        if not (48 <= v.text.s[k] <= 57):
            return False
        n = n * 10 + (v.text.s[k] - 48)
    out[0] = n
    return True


cdef object text_value(Text* t):
    """A checked string as a str (None when it is not UTF-8 or too long to unescape here)."""
    cdef uint8_t buf[MAX_TEXT]
    cdef Py_ssize_t n
    if not t.escaped:
        try:
            return PyUnicode_DecodeUTF8(<const char*>t.s, t.n, "strict")
        except UnicodeDecodeError:
            return None
    if t.n > MAX_TEXT:
        return None
    n = unescape(t, buf)
    try:
        return PyUnicode_DecodeUTF8(<const char*>buf, n, "strict")
    except UnicodeDecodeError:
        return None


cdef inline bint has_byte(const uint8_t* s, Py_ssize_t n, uint8_t b) noexcept nogil:
    cdef Py_ssize_t k
    for k in range(n):
        if s[k] == b:
            return True
    return False


cdef object properties_of(Value* v, dict props):
    """decode_properties of the value into `props`; False when the reference would not
    take the send fast (a value with \\x01, TRAN_MSG or DELAY, not UTF-8) or the value is
    not a string this reader takes."""
    cdef uint8_t buf[MAX_TEXT]
    cdef Py_ssize_t n, start = 0, k, sep
    cdef const uint8_t* s
    if v.is_int or v.text.n > MAX_TEXT:
        return False
    n = unescape(&v.text, buf)
    while start <= n:
        k = start
        while k < n and buf[k] != 2:
            k += 1
        # the segment buf[start:k]: name \x01 value
        sep = start
        while sep < k and buf[sep] != 1:
            sep += 1
        if sep < k and sep > start and k > sep + 1:  # a name and a value
            if has_byte(buf + sep + 1, k - sep - 1, 1):
                return False  # the schema refuses a value with \x01
            try:
                name = PyUnicode_DecodeUTF8(<const char*>(buf + start), sep - start, "strict")
                value = PyUnicode_DecodeUTF8(<const char*>(buf + sep + 1), k - sep - 1, "strict")
            except UnicodeDecodeError:
                return False
            props[name] = value
        start = k + 1
    return True


def split_frames(data, Py_ssize_t max_frame_size, set checked_topics):
    """The complete frames at the start of `data`: (items, bytes used, an oversized
    frame's length or -1). An item is a RemotingSend when this reader reads the frame,
    else the frame's bytes without its length prefix (for decode_payload)."""
    cdef Py_buffer view
    cdef const uint8_t* p
    cdef Py_ssize_t n, i = 0, size
    cdef list items = []
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
            item = _read(p + i + 4, size, checked_topics) if size >= 4 else None
            if item is None:
                item = PyBytes_FromStringAndSize(<const char*>(p + i + 4), size)
            items.append(item)
            i += 4 + size
        return items, i, -1
    finally:
        PyBuffer_Release(&view)


def read_plain_send(buf, Py_ssize_t start, Py_ssize_t end, set checked_topics):
    """The frame buf[start:end] (without its length prefix) as a RemotingSend, or None."""
    cdef Py_buffer view
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        if start < 0 or end > view.len or end - start < 4:
            return None
        return _read(<const uint8_t*>view.buf + start, end - start, checked_topics)
    finally:
        PyBuffer_Release(&view)


cdef bint valid_utf8(const uint8_t* p, Py_ssize_t n):
    """json.loads takes UTF-8 only: the header is checked once (ASCII needs no decode), so
    every string in it is UTF-8, and so is every unescaped one (no surrogate escapes)."""
    cdef Py_ssize_t k
    for k in range(n):
        if p[k] >= 0x80:
            try:
                PyUnicode_DecodeUTF8(<const char*>p, n, "strict")
            except UnicodeDecodeError:
                return False
            return True
    return True


cdef bint read_ext(Cursor* c, bint v2, Value* fields, bint* present) noexcept nogil:
    """extFields (the cursor on its brace): the fields this reader takes into `fields`;
    False for a shape or key it does not take."""
    cdef Text key
    cdef Value value
    cdef int f
    if not eat(c, 123):
        return False
    if eat(c, 125):
        return True
    while True:
        if not text_at(c, &key) or not eat(c, 58) or not value_at(c, &value):
            return False
        f = field_of(&key, v2)
        if f < 0:
            return False
        if f != F_OTHER:
            if present[f]:
                return False
            present[f] = True
            fields[f] = value
        if eat(c, 125):
            return True
        if not eat(c, 44):
            return False


cdef object _read(const uint8_t* p, Py_ssize_t n, set checked_topics):
    cdef uint32_t type_and_len = (<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3]
    cdef Py_ssize_t header_len = type_and_len & 0xFFFFFF
    cdef Cursor c
    cdef Text key, t
    cdef Value fields[11]
    cdef bint present[11]
    cdef int k, f, seen = 0
    cdef int64_t code = -1, opaque = 0, rpc_flag = 0, number, queue_id = 0, flag = 0, born = 0, sys_flag = 0
    cdef Py_ssize_t ext_at = -1
    cdef dict props = {}
    if type_and_len >> 24 != 0 or header_len > n - 4 or header_len == n - 4:  # JSON, and a body
        return None
    if not valid_utf8(p + 4, header_len):
        return None
    for k in range(NFIELDS):
        present[k] = False
    c.p, c.n, c.i = p + 4, header_len, 0
    # the top level; extFields is read where it stands when code came first (clients sort
    # their keys), else skipped and read once code says which names it uses
    if not eat(&c, 123):  # {
        return None
    if not eat(&c, 125):  # not empty
        while True:
            if not text_at(&c, &key) or not eat(&c, 58):  # "key":
                return None
            if text_is(&key, b"code", 4):
                f = 1
            elif text_is(&key, b"opaque", 6):
                f = 2
            elif text_is(&key, b"flag", 4):
                f = 4
            elif text_is(&key, b"version", 7):
                f = 8
            elif text_is(&key, b"language", 8):
                f = 16
            elif text_is(&key, b"remark", 6):
                f = 32
            elif text_is(&key, b"serializeTypeCurrentRPC", 23):
                f = 64
            elif text_is(&key, b"extFields", 9):
                f = 128
            else:
                return None
            if seen & f:
                return None
            seen |= f
            if f == 128:
                ws(&c)
                if seen & 1:
                    if (code != 10 and code != 310) or not read_ext(&c, code == 310, fields, present):
                        return None
                else:
                    ext_at = c.i
                    if not skip_object(&c):
                        return None
            elif f <= 8:
                if not int32_at(&c, &number):
                    return None
                if f == 1:
                    code = number
                elif f == 2:
                    opaque = number
                elif f == 4:
                    rpc_flag = number
            elif f == 32:
                ws(&c)
                if c.i + 4 <= c.n and memcmp(c.p + c.i, b"null", 4) == 0:
                    c.i += 4
                elif not text_at(&c, &t):
                    return None
            elif not text_at(&c, &t):  # language, serializeTypeCurrentRPC
                return None
            if eat(&c, 125):
                break
            if not eat(&c, 44):
                return None
    ws(&c)
    if c.i != c.n or not seen & 128 or rpc_flag & 1:  # trailing bytes; no extFields; a response
        return None
    if code != 10 and code != 310:
        return None
    if ext_at >= 0:
        c.i = ext_at
        if not read_ext(&c, code == 310, fields, present):
            return None
    # the reference's checks (plain_send), in its order where it matters
    if not present[F_TOPIC] or fields[F_TOPIC].is_int or not present[F_GROUP]:
        return None
    topic = text_value(&fields[F_TOPIC].text)
    if topic is None or topic not in checked_topics:
        return None
    for f in range(NFIELDS):
        if f in (F_QUEUE, F_SYSFLAG, F_BORN, F_FLAG, F_QUEUENUMS, F_RECONSUME) and present[f]:
            if not plain_number(&fields[f], &number):
                return None
    if present[F_MAXRECONSUME] and (fields[F_MAXRECONSUME].is_int or fields[F_MAXRECONSUME].text.n > 0):
        if not plain_number(&fields[F_MAXRECONSUME], &number):
            return None
    if present[F_BATCH]:
        if fields[F_BATCH].is_int:
            if fields[F_BATCH].number == 1 and not fields[F_BATCH].big:
                return None
        else:
            text = text_value(&fields[F_BATCH].text)
            if text is None or text == "1" or text.lower() == "true":
                return None
    if not present[F_QUEUE]:
        return None
    plain_number(&fields[F_QUEUE], &queue_id)
    if present[F_SYSFLAG]:
        plain_number(&fields[F_SYSFLAG], &sys_flag)
        if sys_flag & 1:
            return None
    if present[F_FLAG]:
        plain_number(&fields[F_FLAG], &flag)
    if flag > INT32_MAX or queue_id > INT32_MAX:
        return None
    if present[F_BORN]:
        plain_number(&fields[F_BORN], &born)
    if present[F_PROPERTIES] and not properties_of(&fields[F_PROPERTIES], props):
        return None
    if "TRAN_MSG" in props or "DELAY" in props:
        return None
    wait = props.pop("WAIT", "true").lower() != "false"
    tags = props.pop("TAGS", None)
    keys = tuple(props.pop("KEYS", "").split())
    body = PyBytes_FromStringAndSize(<const char*>(p + 4 + header_len), n - 4 - header_len)
    header = PyBytes_FromStringAndSize(<const char*>(p + 4), header_len)
    return _tuple_new(_RemotingSend, (code, opaque, bool(rpc_flag & 2), topic, queue_id, flag,
                                      born if born > 0 else None, tags, keys, props, wait, body, header))


cdef bint skip_object(Cursor* c) noexcept nogil:
    """Past a flat object of strings and integers (extFields' shape), checking its syntax."""
    cdef Text t
    cdef Value v
    if not eat(c, 123):
        return False
    if eat(c, 125):
        return True
    while True:
        if not text_at(c, &t) or not eat(c, 58) or not value_at(c, &v):
            return False
        if eat(c, 125):
            return True
        if not eat(c, 44):
            return False


cdef inline bint plain_ascii(str s) noexcept:
    """Whether JSON writes `s` as it is between quotes (printable ASCII, no quote or backslash)."""
    cdef Py_UCS4 ch
    for ch in s:
        if ch < 32 or ch > 126 or ch == 34 or ch == 92:
            return False
    return True


def send_reply_frame(int code, int opaque, str msg_id, long long queue_id, long long queue_offset, str region,
                     int version):
    """wire/remoting/send_reply.py's templated answer, byte for byte, or None when `msg_id`
    or `region` would need a JSON escape (the reference writes those)."""
    cdef char buf[512]
    cdef int n
    if len(msg_id) > 200 or len(region) > 100 or not plain_ascii(msg_id) or not plain_ascii(region):
        return None
    m = msg_id.encode("ascii")
    r = region.encode("ascii")
    n = snprintf(buf + 8, 500, b'{"code":%d,"extFields":{"MSG_REGION":"%s","TRACE_ON":"true","msgId":"%s",'
                 b'"queueId":"%lld","queueOffset":"%lld"},"flag":1,"language":"JAVA","opaque":%d,'
                 b'"serializeTypeCurrentRPC":"JSON","version":%d}', code, <const char*>r, <const char*>m,
                 queue_id, queue_offset, opaque, version)
    if n < 0 or n >= 500:
        return None
    buf[0], buf[1], buf[2], buf[3] = <char>((n + 4) >> 24), <char>((n + 4) >> 16), <char>((n + 4) >> 8), <char>(n + 4)
    buf[4], buf[5], buf[6], buf[7] = <char>(n >> 24), <char>(n >> 16), <char>(n >> 8), <char>n
    return PyBytes_FromStringAndSize(buf, n + 8)
