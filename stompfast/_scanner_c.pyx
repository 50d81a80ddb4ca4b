# cython: language_level=3
"""Cython STOMP frame scanner and encoder: the same behaviour as ``_scanner_py``, faster.

Read ``_scanner_py`` first: it is the specification this module follows line for
line where faults are concerned (what is refused, and which fault wins when
several are present). What differs is how bytes are handled:

* **Zero copy when it can.** When no incomplete frame is pending, ``feed()``
  scans the caller's buffer in place and copies only the incomplete tail. When
  one is pending, it appends just enough of the new input to finish that frame
  (growing the step while the frame is still incomplete) and goes back to
  scanning in place.
* **Direct bodies.** A large ``content-length`` body that has not fully arrived
  is copied straight into the ``bytes`` object the frame will hold, so a large
  body is copied once.
* **Skipping** (``skip_oversized``): as in ``_scanner_py``, an oversized MESSAGE
  with ``content-length`` becomes a SkippedFrame once its head is parsed, and its
  body is counted off as it arrives (``_skip_left``), in ``_parse`` for what is in
  the same input as the head and at the top of ``_feed`` for later input.
* **Delimiters with memchr**, names of well-known headers as cached ``str``
  objects, the header dict built in the same pass that splits the lines, and the
  :class:`~stompfast.frames.Frame` tuple allocated directly.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from cpython.object cimport PyObject
from cpython.ref cimport Py_INCREF
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.string cimport memchr, memcpy, memmove

from .errors import ConfigurationError, LimitExceededError, LocalProtocolError, RemoteProtocolError
from .frames import COMMANDS, Frame, SkippedFrame
from ._scanner_py import (
    DEFAULT_MAX_FRAME_BYTES,
    DEFAULT_MAX_HEADER_BYTES,
    DEFAULT_MAX_HEADERS,
    MAX_LIMIT,
)

cdef extern from "Python.h":
    ctypedef struct PyTypeObject:
        pass
    object PyType_GenericAlloc(PyTypeObject* t, Py_ssize_t nitems)
    void Py_XDECREF(PyObject* o)
    Py_ssize_t PyDict_GET_SIZE(object d)
    int _PyBytes_Resize(PyObject** bytes, Py_ssize_t newsize)
    void Py_XINCREF(PyObject* o)
    void PyTuple_SET_ITEM(object p, Py_ssize_t pos, object o)
    PyObject* PyDict_SetDefault(object d, object key, object default) except NULL
    int PyDict_Next(object d, Py_ssize_t* pos, PyObject** key, PyObject** value)
    const char* PyUnicode_AsUTF8AndSize(object s, Py_ssize_t* size) except NULL
    int PY_VERSION_HEX

cdef extern from *:
    """
    static PyObject* sf_dict_presized(Py_ssize_t n) {
    #if PY_VERSION_HEX < 0x030D0000
        return _PyDict_NewPresized(n);
    #else
        (void)n;
        return PyDict_New();
    #endif
    }
    """
    dict sf_dict_presized(Py_ssize_t n)

cdef extern from *:
    """
    #if defined(__SSE2__)
    #include <emmintrin.h>
    #endif

    /* Flags shared with the Cython code (H_* per head, L_* per line). */
    #define SF_H_CR 2
    #define SF_H_BACKSLASH 4
    #define SF_H_NUL 8
    #define SF_L_BS_NAME 32
    #define SF_L_BS_VALUE 64

    /* What the tokeniser knows of the head being scanned; positions are relative
       to the frame's first byte. */
    typedef struct {
        Py_ssize_t *lf;          /* every LF */
        Py_ssize_t *colon;       /* first colon of the line each LF ends, or -1 */
        unsigned char *flag;     /* SF_* flags of the line each LF ends */
        Py_ssize_t nlf, cap;     /* lines recorded (and counted past cap), room */
        Py_ssize_t limit;        /* stop growing past this many lines: a fault anyway */
        Py_ssize_t cur_colon;    /* first colon of the unfinished line, or -1 */
        int cur_flags;           /* flags of the unfinished line */
        int hflags;              /* union of the flags of every finished line */
    } sf_tok;

    static int sf_tok_record(sf_tok *t, Py_ssize_t lf) {
        if (t->nlf >= t->cap) {
            if (t->cap > t->limit) { t->nlf++; return 0; }
            Py_ssize_t cap = t->cap ? 2 * t->cap : 32;
            Py_ssize_t *a = (Py_ssize_t *)PyMem_Realloc(t->lf, cap * sizeof(Py_ssize_t));
            if (!a) { PyErr_NoMemory(); return -1; }
            t->lf = a;
            a = (Py_ssize_t *)PyMem_Realloc(t->colon, cap * sizeof(Py_ssize_t));
            if (!a) { PyErr_NoMemory(); return -1; }
            t->colon = a;
            unsigned char *f = (unsigned char *)PyMem_Realloc(t->flag, cap);
            if (!f) { PyErr_NoMemory(); return -1; }
            t->flag = f;
            t->cap = cap;
        }
        t->lf[t->nlf] = lf;
        t->colon[t->nlf] = t->cur_colon;
        t->flag[t->nlf] = (unsigned char)t->cur_flags;
        t->nlf++;
        t->hflags |= t->cur_flags;
        t->cur_colon = -1;
        t->cur_flags = 0;
        return 0;
    }

    /* Note the CR, backslash and NUL bytes (bits of `m`, block at p + i) of the current line. */
    static void sf_tok_other(sf_tok *t, const unsigned char *p, Py_ssize_t i, Py_ssize_t start, unsigned m) {
        while (m) {
            Py_ssize_t at = i + __builtin_ctz(m);
            unsigned char c = p[at];
            if (c == 92)
                t->cur_flags |= (t->cur_colon < 0 || at - start < t->cur_colon) ? SF_L_BS_NAME : SF_L_BS_VALUE;
            else
                t->cur_flags |= (c == 13) ? SF_H_CR : SF_H_NUL;
            m &= m - 1;
        }
    }

    /* Tokenise p[start + *scan : n) up to the blank line that ends the head.
       Returns the LF that ends the last head line (and sets *body_start), -1 when
       the head is not complete yet (state saved in t and *scan), -2 on error.
       SSE2 turns 16 bytes into three bit masks (LF, colon, CR/backslash/NUL);
       lines are then walked with ctz, not byte by byte. */
    static Py_ssize_t sf_tokenise(sf_tok *t, const unsigned char *p, Py_ssize_t start, Py_ssize_t n,
                                  Py_ssize_t *scan, int lenient, Py_ssize_t *body_start) {
        Py_ssize_t i = start + *scan;
        while (i < n) {
            unsigned lfm = 0, com = 0, otm = 0, all;
            int w;
    #if defined(__SSE2__)
            if (i + 16 <= n) {
                __m128i v = _mm_loadu_si128((const __m128i *)(p + i));
                lfm = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8(10)));
                com = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8(58)));
                otm = (unsigned)_mm_movemask_epi8(_mm_or_si128(
                    _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8(13)), _mm_cmpeq_epi8(v, _mm_set1_epi8(92))),
                    _mm_cmpeq_epi8(v, _mm_setzero_si128())));
                w = 16;
            } else
    #endif
            {
                w = (n - i) < 16 ? (int)(n - i) : 16;
                for (int b = 0; b < w; b++) {
                    unsigned char c = p[i + b];
                    if (c == 10) lfm |= 1u << b;
                    else if (c == 58) com |= 1u << b;
                    else if (c == 13 || c == 92 || c == 0) otm |= 1u << b;
                }
            }
            all = (w == 32) ? ~0u : ((1u << w) - 1);
            unsigned from = 0;  /* bits of this block before `from` belong to finished lines */
            for (;;) {
                unsigned upto = lfm ? ((lfm & (0u - lfm)) - 1) : all;  /* bits before the next LF */
                unsigned range = upto & ~((1u << from) - 1);
                if (t->cur_colon < 0 && (com & range))
                    t->cur_colon = i + __builtin_ctz(com & range) - start;
                if (otm & range)
                    sf_tok_other(t, p, i, start, otm & range);
                if (!lfm)
                    break;
                int b = __builtin_ctz(lfm);
                Py_ssize_t j = i + b, k = j + 1;
                Py_ssize_t saved_colon = t->cur_colon;
                int saved_flags = t->cur_flags, saved_h = t->hflags;
                if (sf_tok_record(t, j - start) < 0)
                    return -2;
                if (lenient)
                    while (k < n && (p[k] == 32 || p[k] == 13)) k++;
                else if (k < n && p[k] == 13)
                    k++;
                if (k >= n) {  /* cannot tell yet whether this LF ends the head: resume at it */
                    t->nlf--;
                    t->cur_colon = saved_colon;
                    t->cur_flags = saved_flags;
                    t->hflags = saved_h;
                    *scan = j - start;
                    return -1;
                }
                if (p[k] == 10) {
                    *body_start = k + 1;
                    return j;
                }
                lfm &= lfm - 1;
                from = (unsigned)b + 1;
            }
            i += w;
        }
        *scan = n - start;
        return -1;
    }
    """
    ctypedef struct sf_tok:
        Py_ssize_t* lf
        Py_ssize_t* colon
        unsigned char* flag
        Py_ssize_t nlf
        Py_ssize_t cap
        Py_ssize_t limit
        Py_ssize_t cur_colon
        int cur_flags
        int hflags
    Py_ssize_t sf_tokenise(sf_tok* t, const unsigned char* p, Py_ssize_t start, Py_ssize_t n,
                           Py_ssize_t* scan, int lenient, Py_ssize_t* body_start)

__all__ = ["FrameScanner", "encode_frame"]

# Bodies at least this large that have not fully arrived go straight into their
# bytes object instead of through the scanner's buffer.
DEF DIRECT_BODY = 8192
# A direct body starts with room for twice what has arrived, and at least this much.
DEF DIRECT_INITIAL = 65536
# First slice of new input appended to a pending frame; doubled while it stays incomplete.
DEF STITCH_STEP = 4096

cdef dict _VERSIONS = {"1.0": 10, "1.1": 11, "1.2": 12}
cdef frozenset _COMMANDS = COMMANDS
cdef frozenset _UNESCAPED_COMMANDS = frozenset({"CONNECT", "STOMP", "CONNECTED"})
cdef str S_CONTENT_LENGTH = "content-length"
cdef PyTypeObject* _FRAME_TYPE = <PyTypeObject*>Frame
# Python 3.14 caches tuple hashes in the tuple itself; GenericAlloc would leave
# that cache zeroed, so there the frame is built through tuple.__new__.
cdef bint _DIRECT_TUPLE = PY_VERSION_HEX < 0x030E0000


cdef inline object _make_frame(object command, object headers, object body, object repeats):
    cdef object frame
    if not _DIRECT_TUPLE:
        return tuple.__new__(Frame, (command, headers, body, repeats))
    frame = PyType_GenericAlloc(_FRAME_TYPE, 4)
    Py_INCREF(command)
    PyTuple_SET_ITEM(frame, 0, command)
    Py_INCREF(headers)
    PyTuple_SET_ITEM(frame, 1, headers)
    Py_INCREF(body)
    PyTuple_SET_ITEM(frame, 2, body)
    Py_INCREF(repeats)
    PyTuple_SET_ITEM(frame, 3, repeats)
    return frame


# -- cached names -------------------------------------------------------------------
#
# Well-known header names and the 15 commands are matched against C tables and
# returned as shared str objects, with no decoding and no allocation. Values of
# the names flagged "cacheable" (the ones that repeat from message to message on
# one subscription) go through a one-entry cache per scanner and name.

cdef struct _Name:
    const char* s
    Py_ssize_t n
    PyObject* obj       # the shared str (kept alive by _NAME_OBJECTS)
    bint cacheable

DEF MAX_NAMES = 48
DEF MAX_NAME_LEN = 24
DEF VALUE_CACHE_LEN = 48    # longer values are not cached

cdef _Name _NAMES[MAX_NAMES]
cdef list _NAME_OBJECTS = []             # (bytes, str) pairs the table points into

# (name, cacheable)
_KNOWN_NAMES = [
    ("destination", True), ("message-id", False), ("subscription", True), ("ack", False),
    ("id", True), ("content-length", True), ("content-type", True), ("receipt", False),
    ("receipt-id", False), ("transaction", True), ("version", True), ("session", True),
    ("server", True), ("heart-beat", True), ("message", True), ("persistent", True),
    ("priority", True), ("expires", True), ("timestamp", False), ("redelivered", True),
    ("host", True), ("login", True), ("passcode", True), ("accept-version", True),
    ("selector", True), ("reply-to", True), ("correlation-id", False), ("type", True),
    ("prefetch-count", True), ("redelivery-count", True), ("original-destination", True),
    ("x-message-ttl", True), ("JMSXUserID", True), ("content-encoding", True),
    ("message-type", True), ("user-id", True), ("app-id", True),
]


cdef void _build_name_table():
    cdef int count = 0
    for name, cacheable in _KNOWN_NAMES:
        raw = name.encode()
        assert 0 < len(raw) <= MAX_NAME_LEN and count < MAX_NAMES
        name = sys_intern(name)
        _NAME_OBJECTS.append((raw, name))
        _NAMES[count].s = PyBytes_AS_STRING(raw)
        _NAMES[count].n = len(raw)
        _NAMES[count].obj = <PyObject*>name
        _NAMES[count].cacheable = cacheable
        count += 1


# An open-addressed hash of the names: one probe, one compare for a known name.
DEF NAME_HASH_SIZE = 256
cdef signed char _NAME_HASH[NAME_HASH_SIZE]


cdef inline unsigned int _name_hash(const char* s, Py_ssize_t n):
    return (<unsigned int>n * 31u + <unsigned char>s[0] * 7u + <unsigned char>s[n - 1] * 13u
            + <unsigned char>s[n >> 1]) & (NAME_HASH_SIZE - 1)


cdef void _build_name_hash():
    cdef int i
    cdef unsigned int h
    for i in range(NAME_HASH_SIZE):
        _NAME_HASH[i] = -1
    for i in range(len(_NAME_OBJECTS)):
        h = _name_hash(_NAMES[i].s, _NAMES[i].n)
        while _NAME_HASH[h] >= 0:
            h = (h + 1) & (NAME_HASH_SIZE - 1)
        _NAME_HASH[h] = i


from sys import intern as sys_intern
_build_name_table()
_build_name_hash()


cdef extern from *:
    """
    #include <stdint.h>
    #include <string.h>
    /* a[0:n] == b[0:n] for short runs: word compares, reading nothing outside [0, n). */
    static inline int sf_same(const char *a, const char *b, Py_ssize_t n) {
        if (n >= 8) {
            uint64_t x, y;
            for (Py_ssize_t i = 0; i + 8 < n; i += 8) {
                memcpy(&x, a + i, 8); memcpy(&y, b + i, 8);
                if (x != y) return 0;
            }
            memcpy(&x, a + n - 8, 8); memcpy(&y, b + n - 8, 8);
            return x == y;
        }
        if (n >= 4) {
            uint32_t x, y;
            memcpy(&x, a, 4); memcpy(&y, b, 4);
            if (x != y) return 0;
            memcpy(&x, a + n - 4, 4); memcpy(&y, b + n - 4, 4);
            return x == y;
        }
        for (Py_ssize_t i = 0; i < n; i++)
            if (a[i] != b[i]) return 0;
        return 1;
    }
    """
    bint _same "sf_same" (const char* a, const char* b, Py_ssize_t n)


cdef inline int _name_index(const char* s, Py_ssize_t n):
    """Index of a well-known header name in _NAMES, or -1."""
    cdef int i
    cdef unsigned int h
    if n > MAX_NAME_LEN or n <= 0:
        return -1
    h = _name_hash(s, n)
    while True:
        i = _NAME_HASH[h]
        if i < 0:
            return -1
        if _NAMES[i].n == n and _same(_NAMES[i].s, s, n):
            return i
        h = (h + 1) & (NAME_HASH_SIZE - 1)


# the 15 commands, as a C table of (bytes, str) like the names
DEF N_COMMANDS = 15
cdef _Name _COMMAND_TABLE[N_COMMANDS]
cdef list _COMMAND_OBJECTS = []


cdef void _build_command_table():
    cdef int i = 0
    for command in sorted(COMMANDS):
        raw = command.encode()
        _COMMAND_OBJECTS.append((raw, command))
        _COMMAND_TABLE[i].s = PyBytes_AS_STRING(raw)
        _COMMAND_TABLE[i].n = len(raw)
        _COMMAND_TABLE[i].obj = <PyObject*>command
        i += 1


assert len(COMMANDS) == N_COMMANDS
_build_command_table()


cdef inline object _command_named(const char* s, Py_ssize_t n):
    """The shared str of the command spelled ``s[0:n]``, or None."""
    cdef int i
    if n <= 0:
        return None
    for i in range(N_COMMANDS):
        if _COMMAND_TABLE[i].n == n and _COMMAND_TABLE[i].s[0] == s[0] and _same(_COMMAND_TABLE[i].s, s, n):
            return <object>_COMMAND_TABLE[i].obj
    return None


cdef inline object _decode(const char* s, Py_ssize_t n):
    return PyUnicode_DecodeUTF8(s, n, NULL)


# head flags, the same values as the SF_* macros of the tokeniser
DEF H_CR = 2
DEF H_NUL = 8
DEF L_BS_NAME = 32     # a backslash before the line's first ':'
DEF L_BS_VALUE = 64    # a backslash after it


cdef inline bint _is_pad(char c):
    return c == b' ' or c == b'\t'


# -- the scanner ------------------------------------------------------------------

cdef class FrameScanner:
    """Turns received bytes into :class:`~stompfast.Frame` values (Cython implementation).

    Same arguments, behaviour and errors as ``stompfast._scanner_py.FrameScanner``.
    """

    cdef char* _buf          # pending bytes of one incomplete frame, starting at its first byte
    cdef Py_ssize_t _len
    cdef Py_ssize_t _cap
    cdef char* _tmp          # scratch for unescaping
    cdef Py_ssize_t _tmp_cap
    cdef long long _base     # stream offset of the next unconsumed byte
    cdef int _ver
    cdef object _version
    cdef bint _lenient
    cdef bint _skip          # skip_oversized
    cdef object _skipping    # the SkippedFrame whose body is being counted off, or None
    cdef Py_ssize_t _skip_left  # body bytes of it still to come
    cdef Py_ssize_t _skipped    # SkippedFrames returned so far
    cdef Py_ssize_t _max_frame
    cdef Py_ssize_t _max_headers
    cdef Py_ssize_t _max_hb
    cdef object _failed
    # per-frame state, positions relative to the frame's first byte
    cdef bint _in_frame
    cdef bint _cmd_done
    cdef Py_ssize_t _scan
    cdef Py_ssize_t _checked
    cdef Py_ssize_t _lfs
    cdef bint _have_head
    cdef object _command
    cdef object _headers
    cdef object _repeats
    cdef Py_ssize_t _body_start
    cdef Py_ssize_t _clen
    # A direct body being filled, or NULL. It is allocated for what has arrived
    # (at least DIRECT_INITIAL) and grown by doubling up to content-length, so a
    # peer that announces a large body makes us hold only what it really sends.
    cdef PyObject* _dbody
    cdef Py_ssize_t _dcap
    cdef Py_ssize_t _filled
    # one-entry value cache per well-known name: the str and the raw bytes it came from
    cdef PyObject* _vcache[MAX_NAMES]
    cdef Py_ssize_t _vcache_n[MAX_NAMES]
    cdef char _vcache_raw[MAX_NAMES][VALUE_CACHE_LEN]
    # head tokens recorded by _find_head_end, positions relative to the frame start
    cdef sf_tok _tok

    def __cinit__(self):
        cdef int i
        for i in range(MAX_NAMES):
            self._vcache[i] = NULL
            self._vcache_n[i] = -1
        self._buf = NULL
        self._tmp = NULL
        self._tok.lf = self._tok.colon = NULL
        self._tok.flag = NULL
        self._tok.cap = 0
        self._dbody = NULL
        self._len = self._cap = self._tmp_cap = 0

    def __init__(self, version="1.2", max_frame_bytes=None, max_headers=None,
                 max_header_bytes=None, lenient=False, skip_oversized=False):
        self._ver = _version_code(version)
        self._version = version
        self._max_frame = _limit("max_frame_bytes", max_frame_bytes, DEFAULT_MAX_FRAME_BYTES)
        self._max_headers = _limit("max_headers", max_headers, DEFAULT_MAX_HEADERS)
        self._max_hb = _limit("max_header_bytes", max_header_bytes, DEFAULT_MAX_HEADER_BYTES)
        self._tok.limit = self._max_headers + 2
        self._lenient = bool(lenient)
        self._skip = bool(skip_oversized)
        self._skipping = None
        self._skip_left = 0
        self._skipped = 0
        self._base = 0
        self._failed = None
        self._reset_frame()

    def __dealloc__(self):
        cdef int i
        for i in range(MAX_NAMES):
            Py_XDECREF(self._vcache[i])
        PyMem_Free(self._buf)
        PyMem_Free(self._tmp)
        PyMem_Free(self._tok.lf)
        PyMem_Free(self._tok.colon)
        PyMem_Free(self._tok.flag)
        Py_XDECREF(self._dbody)

    cdef inline void _reset_frame(self):
        self._in_frame = False
        self._cmd_done = False
        self._have_head = False
        self._scan = self._checked = self._lfs = 0
        self._command = self._headers = self._repeats = None
        self._drop_body()
        self._tok.nlf = 0
        self._tok.cur_colon = -1
        self._tok.cur_flags = 0
        self._tok.hflags = 0

    @property
    def version(self):
        """The STOMP version whose header rules apply to the next frame."""
        return self._version

    @version.setter
    def version(self, version):
        self._ver = _version_code(version)
        self._version = version

    @property
    def lenient(self):
        """Whether the lenient legacy framing rules are on."""
        return self._lenient

    @property
    def skip_oversized(self):
        """Whether a MESSAGE over ``max_frame_bytes`` with ``content-length`` is skipped, not a fault."""
        return self._skip

    @property
    def skipped(self):
        """How many SkippedFrames ``feed()`` has returned (or put in an error's ``frames``)."""
        return self._skipped

    @property
    def max_frame_bytes(self):
        return self._max_frame

    @property
    def max_headers(self):
        return self._max_headers

    @property
    def max_header_bytes(self):
        return self._max_hb

    @property
    def buffered(self):
        """Bytes held for an incomplete frame (0 between frames).

        A CR between frames that waits for its LF is held too, but it starts no
        frame and does not count.
        """
        if self._dbody != NULL:
            return self._body_start + self._filled
        return self._len if self._in_frame else 0

    # -- feeding ------------------------------------------------------------------

    def feed(self, data=b""):
        """Scan ``data`` and return the frames it completed, in order.

        Raises:
            RemoteProtocolError: the input is not valid STOMP; ``frames`` on the
                exception holds the frames completed before the fault.
            LimitExceededError: a limit was exceeded (a RemoteProtocolError).
        """
        cdef Py_buffer view
        cdef list frames = []
        if self._failed is not None:
            message, offset = self._failed
            raise RemoteProtocolError(
                f"the scanner failed earlier and cannot resynchronise: {message}", offset=offset, frames=[])
        try:
            PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
        except BufferError:  # the same error as the pure scanner gives
            raise TypeError(f"data must be a contiguous bytes-like object, not {type(data).__name__}") from None
        try:
            self._feed(<const char*>view.buf, view.len, frames)
        except RemoteProtocolError as exc:
            exc.frames = frames
            # Keep the text, not the exception (its traceback would hold this scanner
            # in a reference cycle), and give the buffers back: a failed scanner
            # reads nothing more, and a peer that sent a frame up to max_frame_bytes
            # must not cost that much memory per failed session.
            self._failed = (str(exc), exc.offset)
            self._release()
            raise
        finally:
            PyBuffer_Release(&view)
        return frames

    cdef int _feed(self, const char* data, Py_ssize_t size, list frames) except -1:
        cdef Py_ssize_t off = 0, step, take, old, used, tail
        while off < size:
            if self._skipping is not None:  # counting off a skipped body
                take = size - off
                if take <= self._skip_left:
                    self._skip_left -= take
                    self._base += take
                    return 0
                off += self._skip_left
                self._base += self._skip_left
                self._skip_left = 0
                if data[off] != 0:
                    raise self._fault_at(0, f"MESSAGE frame: no NUL after the {self._skipping.size}"
                                            " body bytes of content-length")
                frames.append(self._skipping)
                self._skipped += 1
                self._skipping = None
                self._base += 1
                off += 1
            elif self._dbody != NULL:  # filling a direct body
                take = self._clen - self._filled
                if take > 0:
                    if take > size - off:
                        take = size - off
                    if self._filled + take > self._dcap:
                        self._grow_body(self._filled + take)
                    memcpy(PyBytes_AS_STRING(<object>self._dbody) + self._filled, data + off, take)
                    self._filled += take
                    off += take
                    continue
                if data[off] != 0:
                    raise self._fault_at(self._body_start + self._clen,
                        f"{self._command} frame: no NUL after the {self._clen} body bytes of content-length")
                frames.append(_make_frame(self._command, self._headers, <object>self._dbody, self._repeats))
                self._base += self._body_start + self._clen + 1
                off += 1
                self._reset_frame()
            elif self._len == 0:  # scan the caller's bytes in place
                used = self._parse(data + off, size - off, frames)
                self._base += used
                off += used
                if off < size and self._dbody == NULL:  # keep the incomplete tail
                    self._append(data + off, size - off)
                off = size  # all of it is now in frames, the buffer or a direct body
            else:  # finish the pending frame with as little of the new input as possible
                old = self._len
                step = STITCH_STEP if STITCH_STEP > old else old
                if self._have_head and self._clen >= 0:
                    step = self._body_start + self._clen + 1 - old
                    if step < 1:
                        step = 1
                while True:
                    take = size - off if step > size - off else step
                    self._append(data + off, take)
                    off += take
                    used = self._parse(self._buf, self._len, frames)
                    if used == 0 and self._dbody == NULL and off < size:
                        step *= 2  # still the same incomplete frame: append more
                        continue
                    break
                self._base += used
                if self._dbody != NULL:  # _parse moved the rest into a direct body
                    self._len = 0
                elif used >= old:
                    # The pending frame is done; what is left in the buffer came from
                    # this input: drop it and scan it in place.
                    tail = self._len - used
                    off -= tail
                    self._len = 0
                else:
                    tail = self._len - used
                    memmove(self._buf, self._buf + used, tail)
                    self._len = tail
        return 0

    cdef int _start_body(self, const char* data, Py_ssize_t n) except -1:
        """Begin a direct body with the ``n`` body bytes at ``data``."""
        cdef Py_ssize_t cap = 2 * n if 2 * n > DIRECT_INITIAL else DIRECT_INITIAL
        if cap > self._clen:
            cap = self._clen
        body = PyBytes_FromStringAndSize(NULL, cap)
        memcpy(PyBytes_AS_STRING(body), data, n)
        Py_INCREF(body)
        self._dbody = <PyObject*>body
        self._dcap = cap
        self._filled = n
        return 0

    cdef int _grow_body(self, Py_ssize_t need) except -1:
        cdef Py_ssize_t cap = 2 * self._dcap
        if cap < need:
            cap = need
        if cap > self._clen:
            cap = self._clen
        # We hold the only reference, so the bytes object may still be resized.
        if _PyBytes_Resize(&self._dbody, cap) < 0:
            self._dbody = NULL
            raise MemoryError()
        self._dcap = cap
        return 0

    cdef void _release(self):
        """Free every buffer (the scanner failed; it scans nothing more)."""
        PyMem_Free(self._buf)
        self._buf = NULL
        self._len = self._cap = 0
        PyMem_Free(self._tmp)
        self._tmp = NULL
        self._tmp_cap = 0
        self._drop_body()
        self._in_frame = False

    cdef inline void _drop_body(self):
        Py_XDECREF(self._dbody)
        self._dbody = NULL
        self._dcap = self._filled = 0

    cdef int _append(self, const char* data, Py_ssize_t n) except -1:
        cdef Py_ssize_t need = self._len + n
        cdef Py_ssize_t cap
        cdef char* grown
        if need > self._cap:
            cap = self._cap * 2 if self._cap else 1024
            if cap > self._max_frame + 2:  # doubling past the limit would only hold waste
                cap = self._max_frame + 2
            if cap < need:
                cap = need
            grown = <char*>PyMem_Realloc(self._buf, cap)
            if grown == NULL:
                raise MemoryError()
            self._buf = grown
            self._cap = cap
        memcpy(self._buf + self._len, data, n)
        self._len = need
        return 0

    # -- faults -------------------------------------------------------------------

    cdef object _fault_at(self, Py_ssize_t pos, str message):
        cdef long long offset = self._base + pos
        return RemoteProtocolError(f"{message} (at stream offset {offset})", offset=offset, frames=[])

    cdef object _limit_at(self, Py_ssize_t pos, str name, Py_ssize_t limit, str what):
        cdef long long offset = self._base + pos
        return LimitExceededError(f"{what} exceeds {name}={limit} (at stream offset {offset})",
                                  offset=offset, frames=[], limit_name=name, limit=limit)

    # -- scanning -----------------------------------------------------------------

    cdef Py_ssize_t _parse(self, const char* p, Py_ssize_t n, list frames) except -1:
        """Take every complete frame off ``p[0:n]``; return how many bytes were consumed.

        ``p[0]`` is where the pending frame (if any) starts; positions in the
        per-frame state are relative to it.
        """
        cdef Py_ssize_t pos = 0, hend, bstart, bs, end, j
        cdef const char* q
        cdef char c
        cdef object body
        while True:
            if not self._have_head:
                if not self._in_frame:
                    # empty lines (heart-beats): LF or CR LF; lenient: spaces and CRs, LF
                    while pos < n:
                        c = p[pos]
                        if c == b'\n':
                            pos += 1
                            continue
                        if c == b'\r' or (c == b' ' and self._lenient):
                            j = pos + 1
                            if self._lenient:
                                while j < n and (p[j] == b' ' or p[j] == b'\r'):
                                    j += 1
                                if j - pos > self._max_hb:
                                    raise self._limit_at(pos + self._max_hb, "max_header_bytes", self._max_hb,
                                                         "run of spaces and CRs between frames")
                            if j >= n:
                                return pos  # wait for the rest of the empty line
                            if p[j] == b'\n':
                                pos = j + 1
                                continue
                            if not self._lenient:
                                raise self._fault_at(pos, "CR not followed by LF between frames")
                        break  # the frame starts here (lenient: with its spaces)
                    if pos >= n:
                        return pos
                    self._in_frame = True
                hend = self._find_head_end(p, pos, n, &bstart)
                if hend < 0:
                    self._check_head(p, pos, n, False)
                    return pos
                self._parse_head(p, pos, hend, bstart)
                if self._skipping is not None:  # an oversized MESSAGE: count its body off
                    bs = pos + self._body_start
                    self._reset_frame()
                    if n - bs <= self._skip_left:
                        self._skip_left -= n - bs
                        return n
                    end = bs + self._skip_left
                    if p[end] != 0:
                        raise self._fault_at(end, f"MESSAGE frame: no NUL after the {self._skipping.size}"
                                                  " body bytes of content-length")
                    frames.append(self._skipping)
                    self._skipped += 1
                    self._skipping = None
                    pos = end + 1
                    continue
            bs = pos + self._body_start
            if self._clen >= 0:
                end = bs + self._clen
                if end >= n:
                    if self._clen >= DIRECT_BODY:
                        # Copy what is here into the frame's own bytes object now;
                        # the rest will be copied there straight from the input.
                        self._start_body(p + bs, n - bs)
                        return pos
                    return pos
                if p[end] != 0:
                    raise self._fault_at(end,
                        f"{self._command} frame: no NUL after the {self._clen} body bytes of content-length")
                body = PyBytes_FromStringAndSize(p + bs, self._clen)
            else:
                j = self._scan if self._scan > self._body_start else self._body_start
                q = <const char*>memchr(p + pos + j, 0, n - pos - j)
                end = q - p if q != NULL else -1
                if end < 0 or end - pos + 1 > self._max_frame:
                    if end >= 0 or n - pos >= self._max_frame:
                        # Without content-length only the NUL ends the body, so the
                        # frame cannot be skipped: say so, the fix is the sender's.
                        raise self._limit_at(pos + self._max_frame - 1, "max_frame_bytes", self._max_frame,
                                             f"{self._command} frame without content-length")
                    self._scan = n - pos
                    return pos
                body = PyBytes_FromStringAndSize(p + bs, end - bs)
            frames.append(_make_frame(self._command, self._headers, body, self._repeats))
            pos = end + 1
            self._reset_frame()

    cdef inline Py_ssize_t _find_head_end(self, const char* p, Py_ssize_t start, Py_ssize_t n,
                                          Py_ssize_t* body_start) except -2:
        """Tokenise the head up to its blank line: return the LF ending its last line, or -1.

        ``sf_tokenise`` (C, above) records, resuming where the last call stopped,
        every LF and the first ':' of every line (relative to ``start``) and notes
        CRs, backslashes and NULs per line, so ``_parse_head`` never searches again.
        """
        return sf_tokenise(&self._tok, <const unsigned char*>p, start, n, &self._scan,
                           self._lenient, body_start)

    cdef object _command_of(self, const char* s, Py_ssize_t n):
        """The command named by a command line (without its LF), or None if invalid."""
        cdef char buf[16]
        cdef Py_ssize_t i
        if n > 0 and s[n - 1] == b'\r':
            n -= 1
        if self._lenient:
            while n > 0 and (s[n - 1] == b' ' or s[n - 1] == b'\r'):
                n -= 1
            if n > 15:
                return None
            for i in range(n):
                buf[i] = s[i] - 32 if b'a' <= s[i] <= b'z' else s[i]
            s = buf
        if n > 15:
            return None
        return _command_named(s, n)

    cdef int _check_head(self, const char* p, Py_ssize_t start, Py_ssize_t end, bint complete) except -1:
        """Raise the earliest fault provable in the head bytes ``p[start:end]``.

        The same rule as ``_scanner_py.FrameScanner._check_head``: only bytes not
        checked before; in stream order, ties broken as NUL, command, header
        count, header bytes, frame bytes.
        """
        cdef Py_ssize_t c0 = start + self._checked, lfs, at, i, t
        cdef Py_ssize_t best_pos = -1
        cdef int best_rank = 99
        cdef object best = None
        cdef const char* q
        cdef const char* line
        q = <const char*>memchr(p + c0, 0, end - c0) if end > c0 else NULL
        if q != NULL:
            best_pos, best_rank = q - p, 0
            best = self._fault_at(best_pos, "NUL before the end of the headers: the frame was cut short")
        if not self._cmd_done:
            q = <const char*>memchr(p + c0, b'\n', end - c0) if end > c0 else NULL
            if q != NULL:
                if self._command_of(p + start, q - p - start) is None:
                    at = q - p
                    if best is None or (at, 1) < (best_pos, best_rank):
                        line = p + start
                        best_pos, best_rank = at, 1
                        best = self._fault_at(at, "unknown command %r" % (
                            PyBytes_FromStringAndSize(line, min(at - start, 40)),))
                else:
                    self._cmd_done = True
        lfs = self._lfs
        i = c0
        while i < end:
            q = <const char*>memchr(p + i, b'\n', end - i)
            if q == NULL:
                break
            lfs += 1
            i = q - p + 1
        if lfs - (2 if complete else 1) > self._max_headers:
            at = start - 1
            for t in range(self._max_headers + 2):
                at = <const char*>memchr(p + at + 1, b'\n', end - at - 1) - p
            if best is None or (at, 2) < (best_pos, best_rank):
                best_pos, best_rank = at, 2
                best = self._limit_at(at, "max_headers", self._max_headers, "number of header lines")
        if end - start > self._max_hb:
            at = start + self._max_hb
            if best is None or (at, 3) < (best_pos, best_rank):
                best_pos, best_rank = at, 3
                best = self._limit_at(at, "max_header_bytes", self._max_hb, "header block")
        if end - start >= self._max_frame:
            at = start + self._max_frame - 1
            if best is None or (at, 4) < (best_pos, best_rank):
                best_pos, best_rank = at, 4
                best = self._limit_at(at, "max_frame_bytes", self._max_frame, "frame")
        if best is not None:
            raise best
        self._checked = end - start
        self._lfs = lfs
        return 0

    cdef int _parse_head(self, const char* p, Py_ssize_t start, Py_ssize_t hend,
                         Py_ssize_t bstart) except -1:
        """Parse the complete head ``p[start:hend]``; set the per-frame head state.

        Uses the line ends and colons ``_find_head_end`` recorded. Faults found
        while splitting lines are raised only after ``_check_head`` found no
        earlier one, as in the pure implementation.
        """
        cdef Py_ssize_t ls, le, ns, ne, vs, ve, k, k0, size = bstart - start
        cdef Py_ssize_t nlines = self._tok.nlf - 1
        cdef int ver = self._ver, slot
        cdef bint cl_seen = False
        cdef int flags = self._tok.hflags
        cdef bint lenient = self._lenient, pad = ver == 10, unescape, cl_raw = False
        cdef Py_ssize_t cl_vs = 0, cl_ve = 0, length = -1
        cdef Py_ssize_t* lf = self._tok.lf
        cdef Py_ssize_t* colons = self._tok.colon
        cdef unsigned char* lflags = self._tok.flag
        cdef object command, name, value
        cdef dict headers
        cdef list repeats = None
        cdef str fault = None
        command = self._command_of(p + start, lf[0])
        if (command is None or nlines > self._max_headers or size > self._max_hb
                or size >= self._max_frame or flags & H_NUL):
            self._check_head(p, start, bstart, True)  # raises the earliest fault
            raise AssertionError("unreachable: _check_head found no fault")
        unescape = (ver > 10 and flags & (L_BS_NAME | L_BS_VALUE)
                    and command not in _UNESCAPED_COMMANDS)
        headers = sf_dict_presized(nlines)
        try:
            for k in range(1, nlines + 1):
                ls = start + lf[k - 1] + 1
                le = start + lf[k]
                if lflags[k] & H_CR or lenient:
                    if lenient:
                        while le > ls and (p[le - 1] == b' ' or p[le - 1] == b'\r'):
                            le -= 1
                    elif le > ls and p[le - 1] == b'\r':
                        le -= 1
                    if ver == 12 and memchr(p + ls, b'\r', le - ls) != NULL:
                        fault = self._describe("%s frame: CR inside a header line (STOMP 1.2 allows none): %r",
                                               command, p + ls, le - ls)
                        break
                if colons[k] < 0:
                    fault = self._describe("%s frame: header line without ':': %r", command, p + ls, le - ls)
                    break
                ns = ls
                ne = start + colons[k]
                vs = ne + 1
                ve = le
                if pad:
                    while ns < ne and _is_pad(p[ns]):
                        ns += 1
                    while ne > ns and _is_pad(p[ne - 1]):
                        ne -= 1
                    while vs < ve and _is_pad(p[vs]):
                        vs += 1
                    while ve > vs and _is_pad(p[ve - 1]):
                        ve -= 1
                elif lenient:
                    while vs < ve and p[vs] == b' ':
                        vs += 1
                if ne == ns:
                    fault = self._describe("%s frame: header with an empty name%s", command, NULL, 0)
                    break
                slot = -1
                if unescape and lflags[k] & L_BS_NAME:
                    name = self._unescaped(p + ns, ne - ns)
                else:
                    slot = _name_index(p + ns, ne - ns)
                    name = <object>_NAMES[slot].obj if slot >= 0 else _decode(p + ns, ne - ns)
                if unescape and lflags[k] & L_BS_VALUE:
                    value = self._unescaped(p + vs, ve - vs)
                    slot = -1  # not the raw bytes: a content-length is read from the str below
                else:
                    value = self._value(slot, p + vs, ve - vs)
                if name is None or value is None:
                    fault = self._describe("%s frame: undefined escape in header %r", command, p + ls, le - ls)
                    break
                if lenient:
                    name = name.lower()
                elif name is S_CONTENT_LENGTH and not cl_seen:  # the first one counts
                    cl_seen = True
                    if slot >= 0:
                        cl_raw = True
                        cl_vs = vs
                        cl_ve = ve
                if repeats is not None:
                    repeats.append((name, value))
                    PyDict_SetDefault(headers, name, value)
                else:
                    k0 = PyDict_GET_SIZE(headers)
                    PyDict_SetDefault(headers, name, value)
                    if PyDict_GET_SIZE(headers) == k0:  # a repeated name: keep every pair from now on
                        repeats = list(headers.items())
                        repeats.append((name, value))
        except UnicodeDecodeError:
            fault = self._describe("%s frame: command or header is not valid UTF-8%s", command, NULL, 0)
        if fault is not None:
            self._check_head(p, start, bstart, True)  # an earlier fault wins
            raise self._fault_at(start, fault)
        if cl_raw:  # the first content-length, straight from its bytes
            length = _parse_digits(p + cl_vs, cl_ve - cl_vs)
            value = headers[S_CONTENT_LENGTH]
        else:
            value = headers.get(S_CONTENT_LENGTH)
            if value is not None:
                length = _parse_length(value)
        if value is not None:
            if length == -1:
                raise self._fault_at(start, "%s frame: content-length is not a byte count: %r" % (
                    command, value[:40]))
            if length == -2 or size + length + 1 > self._max_frame:
                if self._skip and length >= 0 and command == "MESSAGE":
                    self._skipping = _make_skipped(command, headers, repeats)
                    self._skip_left = length
                    self._body_start = size
                    return 0
                raise self._limit_at(bstart - 1, "max_frame_bytes", self._max_frame,
                    f"{command} frame of {size + length + 1 if length >= 0 else 'over 2**48'} bytes")
        self._command = command
        self._headers = headers
        self._repeats = repeats
        self._body_start = size
        self._clen = length
        self._have_head = True
        return 0

    cdef inline object _value(self, int slot, const char* s, Py_ssize_t n):
        """Decode a header value, reusing the last value of this well-known name if equal."""
        cdef object value
        cdef PyObject* old
        if slot < 0 or not _NAMES[slot].cacheable or n > VALUE_CACHE_LEN:
            return _decode(s, n)
        if self._vcache_n[slot] == n and _same(self._vcache_raw[slot], s, n):
            return <object>self._vcache[slot]
        value = _decode(s, n)
        old = self._vcache[slot]
        Py_XINCREF(<PyObject*>value)
        self._vcache[slot] = <PyObject*>value
        Py_XDECREF(old)
        memcpy(self._vcache_raw[slot], s, n)
        self._vcache_n[slot] = n
        return value

    cdef str _describe(self, str fmt, object command, const char* s, Py_ssize_t n):
        if s == NULL:
            return fmt % (command, "")
        return fmt % (command, PyBytes_FromStringAndSize(s, n if n < 40 else 40))

    cdef object _unescaped(self, const char* s, Py_ssize_t n):
        """Unescape and decode a 1.1/1.2 name or value; None for an undefined escape."""
        cdef Py_ssize_t i = 0, o = 0
        cdef char c
        cdef char* t
        if n > self._tmp_cap:
            t = <char*>PyMem_Realloc(self._tmp, n)
            if t == NULL:
                raise MemoryError()
            self._tmp = t
            self._tmp_cap = n
        t = self._tmp
        while i < n:
            c = s[i]
            if c == b'\\':
                i += 1
                if i >= n:
                    return None
                c = s[i]
                if c == b'n':
                    c = b'\n'
                elif c == b'c':
                    c = b':'
                elif c == b'r' and self._ver == 12:
                    c = b'\r'
                elif c != b'\\':
                    return None
            t[o] = c
            o += 1
            i += 1
        return _decode(t, o)


cdef object _make_skipped(object command, object headers, object repeats):
    return tuple.__new__(SkippedFrame, (command, headers, b"", repeats))


cdef Py_ssize_t _parse_length(str value):
    """content-length as a number: -1 if not ASCII digits, -2 if over 2**48."""
    cdef Py_ssize_t n
    cdef const char* s
    if not value.isascii():
        return -1
    s = PyUnicode_AsUTF8AndSize(value, &n)
    return _parse_digits(s, n)


cdef Py_ssize_t _parse_digits(const char* s, Py_ssize_t n):
    """ASCII digits as a number: -1 if not all digits or empty, -2 if over 2**48."""
    cdef Py_ssize_t i = 0
    cdef long long v = 0
    if n == 0:
        return -1
    for i in range(n):
        if not (b'0' <= s[i] <= b'9'):
            return -1
    i = 0
    while i < n - 1 and s[i] == b'0':
        i += 1
    if n - i > 15:
        return -2
    while i < n:
        v = v * 10 + (s[i] - 48)
        i += 1
    if v > MAX_LIMIT:
        return -2
    return <Py_ssize_t>v


cdef int _version_code(object version) except -1:
    try:
        return _VERSIONS[version]
    except (KeyError, TypeError):
        raise ConfigurationError(
            f"unsupported STOMP version {version!r}: expected '1.0', '1.1' or '1.2'") from None


cdef Py_ssize_t _limit(str name, object value, Py_ssize_t default) except -1:
    if value is None:
        return default
    if type(value) is not int or not 1 <= value <= MAX_LIMIT:
        raise ConfigurationError(f"{name} must be an int from 1 to 2**48 or None, not {value!r}")
    return value


# -- the encoder --------------------------------------------------------------------

# escape class of each byte: 0 plain, 1 ':', 2 LF, 3 '\\', 4 CR, 5 NUL
cdef unsigned char _ESC[256]
for _i in range(256):
    _ESC[_i] = 0
_ESC[ord(":")] = 1
_ESC[ord("\n")] = 2
_ESC[ord("\\")] = 3
_ESC[ord("\r")] = 4
_ESC[0] = 5

cdef struct _Field:
    const char* s
    Py_ssize_t n
    Py_ssize_t extra     # bytes added by escaping
    int flags            # bit per escape class present

DEF STACK_FIELDS = 64

# Header names and values repeat from frame to frame (the same dict is often sent
# again and again), so what _scan_field learns about a short str is cached, keyed
# by the object's address. The cache holds a reference to every str it knows, so
# an address can never be reused by another object while its entry lives.
DEF ENC_CACHE = 512          # entries, a power of two
DEF ENC_CACHE_MAX_LEN = 128  # longer strings are scanned every time

cdef struct _EncEntry:
    PyObject* obj
    const char* s
    Py_ssize_t n
    Py_ssize_t extra
    int flags

cdef _EncEntry _ENC[ENC_CACHE]
for _i in range(ENC_CACHE):
    _ENC[_i].obj = NULL


cdef int _field_from(object text, _Field* f) except -1:
    """Fill ``f`` with the UTF-8 bytes of ``text`` and what escaping them costs."""
    cdef size_t slot = (<size_t><PyObject*>text >> 4) & (ENC_CACHE - 1)
    cdef _EncEntry* e = &_ENC[slot]
    cdef PyObject* old
    if e.obj == <PyObject*>text:
        f.s = e.s
        f.n = e.n
        f.extra = e.extra
        f.flags = e.flags
        return 0
    f.s = PyUnicode_AsUTF8AndSize(text, &f.n)
    _scan_field(f)
    if f.n <= ENC_CACHE_MAX_LEN:
        old = e.obj
        Py_INCREF(text)
        e.obj = <PyObject*>text
        e.s = f.s
        e.n = f.n
        e.extra = f.extra
        e.flags = f.flags
        Py_XDECREF(old)
    return 0


cdef inline void _scan_field(_Field* f):
    cdef Py_ssize_t i, extra = 0
    cdef int flags = 0
    cdef unsigned char k
    cdef const unsigned char* s = <const unsigned char*>f.s
    for i in range(f.n):
        k = _ESC[s[i]]
        if k:
            flags |= 1 << k
            extra += 1
    f.extra = extra
    f.flags = flags


cdef inline char* _put(char* o, _Field* f, bint escape):
    cdef Py_ssize_t i
    cdef char c
    if not escape or f.extra == 0:
        memcpy(o, f.s, f.n)
        return o + f.n
    for i in range(f.n):
        c = f.s[i]
        if c == b':':
            o[0] = b'\\'; o[1] = b'c'; o += 2
        elif c == b'\n':
            o[0] = b'\\'; o[1] = b'n'; o += 2
        elif c == b'\\':
            o[0] = b'\\'; o[1] = b'\\'; o += 2
        elif c == b'\r':
            o[0] = b'\\'; o[1] = b'r'; o += 2
        else:
            o[0] = c; o += 1
    return o


def encode_frame(command, headers=None, body=b"", version="1.2"):
    """Encode one frame for the wire (Cython implementation).

    Same arguments, result and errors as ``stompfast._scanner_py.encode_frame``.
    """
    cdef int ver = _version_code(version)
    cdef Py_buffer view
    cdef bint have_view = False
    cdef const char* body_p
    cdef Py_ssize_t body_n, count = 0, total, i, cap = STACK_FIELDS, cmd_n
    cdef _Field stack_fields[2 * STACK_FIELDS]
    cdef _Field* fields = stack_fields
    cdef _Field* grown
    cdef _Field* f
    cdef bint raw, has_length = False
    cdef list keep = None
    cdef object name, value, items
    cdef PyObject* k
    cdef PyObject* v
    cdef Py_ssize_t dpos = 0
    cdef const char* cmd_p
    cdef char* o
    cdef char lenbuf[24]
    cdef Py_ssize_t len_n = 0
    cdef bytes out
    if not isinstance(command, str) or command not in _COMMANDS:
        raise LocalProtocolError(f"unknown STOMP command {command!r}")
    if type(body) is bytes:
        body_p = PyBytes_AS_STRING(body)
        body_n = len(<bytes>body)
    elif isinstance(body, (bytearray, memoryview)):
        PyObject_GetBuffer(body, &view, PyBUF_SIMPLE)
        have_view = True
        body_p = <const char*>view.buf
        body_n = view.len
    else:
        raise TypeError(f"body must be bytes, bytearray or memoryview, not {type(body).__name__}")
    try:
        raw = ver == 10 or command in _UNESCAPED_COMMANDS
        cmd_p = PyUnicode_AsUTF8AndSize(command, &cmd_n)
        if type(headers) is dict:
            items = None
            while PyDict_Next(headers, &dpos, &k, &v):
                if count == cap:
                    fields = _grow_fields(fields, stack_fields, &cap)
                if keep is None:
                    keep = []
                _field_pair(<object>k, <object>v, fields + 2 * count, command, ver, raw, body_n,
                            &has_length, keep, False)
                count += 1
        elif headers is not None:
            items = headers.items() if hasattr(headers, "items") else headers
            keep = []
            for pair in items:
                name, value = pair
                if count == cap:
                    fields = _grow_fields(fields, stack_fields, &cap)
                _field_pair(name, value, fields + 2 * count, command, ver, raw, body_n, &has_length,
                            keep, True)
                count += 1
        if body_n and not has_length:
            len_n = _format_length(lenbuf, body_n)
        total = cmd_n + 1
        for i in range(2 * count):
            f = fields + i
            total += f.n + (0 if raw else f.extra) + 1
        if len_n:
            total += 15 + len_n + 1
        total += 1 + body_n + 1
        out = PyBytes_FromStringAndSize(NULL, total)
        o = PyBytes_AS_STRING(out)
        memcpy(o, cmd_p, cmd_n)
        o += cmd_n
        o[0] = b'\n'; o += 1
        for i in range(count):
            o = _put(o, fields + 2 * i, not raw)
            o[0] = b':'; o += 1
            o = _put(o, fields + 2 * i + 1, not raw)
            o[0] = b'\n'; o += 1
        if len_n:
            memcpy(o, b"content-length:", 15)
            o += 15
            memcpy(o, lenbuf, len_n)
            o += len_n
            o[0] = b'\n'; o += 1
        o[0] = b'\n'; o += 1
        if body_n:
            memcpy(o, body_p, body_n)
            o += body_n
        o[0] = 0
        return out
    finally:
        if fields != stack_fields:
            PyMem_Free(fields)
        if have_view:
            PyBuffer_Release(&view)


cdef _Field* _grow_fields(_Field* fields, _Field* stack_fields, Py_ssize_t* cap) except NULL:
    cdef _Field* grown
    cdef Py_ssize_t new_cap = cap[0] * 2
    if fields == stack_fields:
        grown = <_Field*>PyMem_Malloc(2 * new_cap * sizeof(_Field))
        if grown != NULL:
            memcpy(grown, fields, 2 * cap[0] * sizeof(_Field))
    else:
        grown = <_Field*>PyMem_Realloc(fields, 2 * new_cap * sizeof(_Field))
    if grown == NULL:
        raise MemoryError()
    cap[0] = new_cap
    return grown


cdef Py_ssize_t _format_length(char* buf, Py_ssize_t n):
    cdef char tmp[24]
    cdef Py_ssize_t i = 0, j
    while True:
        tmp[i] = <char>(48 + n % 10)
        i += 1
        n //= 10
        if n == 0:
            break
    for j in range(i):
        buf[j] = tmp[i - 1 - j]
    return i


cdef int _field_pair(object name, object value, _Field* f, object command, int ver, bint raw,
                     Py_ssize_t body_n, bint* has_length, list keep, bint hold) except -1:
    """Validate one header and record its UTF-8 name and value in ``f[0]``, ``f[1]``.

    The recorded pointers stay valid while the str objects live: the caller's dict
    holds them, or ``keep`` does (``hold``, and any int converted here).
    """
    cdef int bad
    cdef Py_ssize_t length
    if not isinstance(name, str):
        raise TypeError(f"header names must be str, not {type(name).__name__}")
    if hold:
        keep.append(name)
        keep.append(value)
    if not isinstance(value, str):
        if isinstance(value, int) and not isinstance(value, bool):
            value = int.__repr__(value)
            keep.append(value)
        else:
            raise TypeError(f"header {name!r}: value must be str or int, not {type(value).__name__}")
    if len(<str>name) == 0:
        raise LocalProtocolError(f"{command} frame: header with an empty name")
    if len(<str>name) == 14 and name == S_CONTENT_LENGTH:
        length = _parse_length(value)
        if length != body_n:
            raise LocalProtocolError(
                f"{command} frame: content-length {value!r} does not match the {body_n}-byte body")
        has_length[0] = True
    try:
        _field_from(name, &f[0])
        _field_from(value, &f[1])
    except UnicodeEncodeError as exc:
        raise LocalProtocolError(f"{command} frame: header is not encodable as UTF-8: {exc.reason}") from None
    if (f[0].flags | f[1].flags) & (1 << 5):
        raise LocalProtocolError(f"{command} frame: header {name!r} holds a NUL, which STOMP cannot carry")
    if raw:
        bad = (f[0].flags & ((1 << 1) | (1 << 2) | (1 << 4))) | (f[1].flags & ((1 << 2) | (1 << 4)))
        if bad:
            where = "STOMP 1.0" if ver == 10 else command
            raise LocalProtocolError(
                f"{command} frame: header {name!r} holds a CR, LF or (in the name) ':',"
                f" which {where} frames cannot escape")
    elif ver == 11 and (f[0].flags | f[1].flags) & (1 << 4):
        raise LocalProtocolError(f"{command} frame: header {name!r} holds a CR, which STOMP 1.1 cannot escape")
    return 0
