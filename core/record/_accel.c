/* core.record._accel: the compiled loops of the record codec (DESIGN.md section 1).
 *
 * Imported only by core/record/accel.py. Each function here has a pure-Python reference that
 * stays the definition (named beside each function); tests/unit/test_accel.py holds the two
 * byte-equal and result-equal with Hypothesis. Nothing here decides policy: the Python module
 * of each path calls these where they pay.
 *
 *   crc32(data, value=0)          zlib.crc32 (core.record.crc)
 *   crc32_many(buffers)           the crc32 of each buffer of a sequence, as uint32 bytes
 *   crc32_rows(matrix)            the crc32 of each row of a 2-D uint8 buffer (strided rows)
 *   crc32_spans(buf, starts, stops)  the crc32 of each buf[starts[i]:stops[i]]
 *   first_bad(buf, start, sizes, phys, topic, queue_id, queue_offsets, mode)
 *                                 the index of the first record that core.read.check's
 *                                 record_problem refuses, -1 when none (the reason is then
 *                                 asked of the reference); buf may be a list of
 *                                 buffers, one record each (start then unused)
 *   record_crcs_ok(buf, starts, total)  crc_property.run_crcs_ok, as bytes of 0/1 or None
 *   crc_verdict(buf, pos, total, mode)  crc_property.verify but for the body CRC
 *   seal_uniform(buf, pos, size, n)   crc_property.seal_grid on the bytes of buf
 *   seal_sizes(buf, pos, sizes)       crc_property.seal_run
 *   java_hash(s)                  core.record.hashing.java_hash
 *   index_key_hashes(keys, prefix)    hashing.index_key_hashes of a list of str, int64 bytes
 *   walk_frames(buf, at, stop, size)  core.record.frames.walk_frames_reference (in _walk.c)
 *
 * The CRC is zlib's, in _crc32.c (carry-less multiply where the CPU has it).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_crc32.h"
#include "_parts.h"

static PyObject *py_crc32(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer view;
    unsigned long value = 0;
    if (nargs < 1 || nargs > 2)
        return PyErr_Format(PyExc_TypeError, "crc32(data, value=0)");
    if (nargs == 2) {
        value = PyLong_AsUnsignedLongMask(args[1]);
        if (value == (unsigned long)-1 && PyErr_Occurred())
            return NULL;
    }
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    uint32_t crc;
    if (view.len >= 65536) {
        Py_BEGIN_ALLOW_THREADS
        crc = crc32_of((uint32_t)value, view.buf, (size_t)view.len);
        Py_END_ALLOW_THREADS
    } else {
        crc = crc32_of((uint32_t)value, view.buf, (size_t)view.len);
    }
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(crc);
}

static PyObject *py_crc32_many(PyObject *self, PyObject *seq)
{
    PyObject *fast = PySequence_Fast(seq, "crc32_many takes a sequence of buffers");
    if (fast == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    PyObject *out = PyBytes_FromStringAndSize(NULL, n * 4);
    if (out == NULL) {
        Py_DECREF(fast);
        return NULL;
    }
    uint32_t *crcs = (uint32_t *)PyBytes_AS_STRING(out);
    PyObject **items = PySequence_Fast_ITEMS(fast);
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_buffer view;
        if (PyObject_GetBuffer(items[i], &view, PyBUF_SIMPLE) < 0) {
            Py_DECREF(fast);
            Py_DECREF(out);
            return NULL;
        }
        uint32_t c = crc32_of(0, view.buf, (size_t)view.len);
        memcpy(crcs + i, &c, 4);
        PyBuffer_Release(&view);
    }
    Py_DECREF(fast);
    return out;
}

static PyObject *py_crc32_rows(PyObject *self, PyObject *matrix)
{
    Py_buffer view;
    if (PyObject_GetBuffer(matrix, &view, PyBUF_STRIDED_RO) < 0)
        return NULL;
    if (view.ndim != 2 || view.itemsize != 1 || view.strides[1] != 1) {
        PyBuffer_Release(&view);
        return PyErr_Format(PyExc_ValueError, "crc32_rows takes a matrix of bytes, rows contiguous");
    }
    Py_ssize_t n = view.shape[0], width = view.shape[1], stride = view.strides[0];
    PyObject *out = PyBytes_FromStringAndSize(NULL, n * 4);
    if (out != NULL) {
        uint32_t *crcs = (uint32_t *)PyBytes_AS_STRING(out);
        const uint8_t *row = view.buf;
        for (Py_ssize_t i = 0; i < n; i++, row += stride) {
            uint32_t c = crc32_of(0, row, (size_t)width);
            memcpy(crcs + i, &c, 4);
        }
    }
    PyBuffer_Release(&view);
    return out;
}

/* Fill a C array of n int64 from a sequence of ints; -1 with an exception set on error. */
static int int64s(PyObject *seq, Py_ssize_t n, int64_t *out, const char *what)
{
    PyObject *fast = PySequence_Fast(seq, what);
    if (fast == NULL)
        return -1;
    if (PySequence_Fast_GET_SIZE(fast) < n) {
        Py_DECREF(fast);
        PyErr_Format(PyExc_ValueError, "%s: too few values", what);
        return -1;
    }
    PyObject **items = PySequence_Fast_ITEMS(fast);
    for (Py_ssize_t i = 0; i < n; i++) {
        long long v = PyLong_AsLongLong(items[i]);
        if (v == -1 && PyErr_Occurred()) {
            Py_DECREF(fast);
            return -1;
        }
        out[i] = v;
    }
    Py_DECREF(fast);
    return 0;
}

static PyObject *py_crc32_spans(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3)
        return PyErr_Format(PyExc_TypeError, "crc32_spans(buf, starts, stops)");
    Py_ssize_t n = PyObject_Length(args[1]);
    if (n < 0)
        return NULL;
    int64_t *at = PyMem_Malloc(sizeof(int64_t) * 2 * (size_t)(n ? n : 1));
    if (at == NULL)
        return PyErr_NoMemory();
    PyObject *out = NULL;
    Py_buffer view;
    if (int64s(args[1], n, at, "starts") < 0 || int64s(args[2], n, at + n, "stops") < 0)
        goto done;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        goto done;
    for (Py_ssize_t i = 0; i < n; i++)
        if (at[i] < 0 || at[n + i] > view.len || at[n + i] < at[i]) {
            PyBuffer_Release(&view);
            PyErr_Format(PyExc_ValueError, "span %zd outside the buffer", i);
            goto done;
        }
    out = PyBytes_FromStringAndSize(NULL, n * 4);
    if (out != NULL) {
        uint32_t *crcs = (uint32_t *)PyBytes_AS_STRING(out);
        for (Py_ssize_t i = 0; i < n; i++) {
            uint32_t c = crc32_of(0, (const uint8_t *)view.buf + at[i], (size_t)(at[n + i] - at[i]));
            memcpy(crcs + i, &c, 4);
        }
    }
    PyBuffer_Release(&view);
done:
    PyMem_Free(at);
    return out;
}

/* ---- the whole-record CRC property (core.record.crc_property) ------------------------------ */

#define RESERVED 20
static const uint8_t RESERVE[RESERVED] = "__CRC32#\x01" "0000000000" "\x02";

static void put_digits(uint8_t *d, uint32_t crc)           /* least significant first */
{
    for (int j = 0; j < 10; j++) {
        d[j] = (uint8_t)('0' + crc % 10);
        crc /= 10;
    }
}

enum { ABSENT = -1, DAMAGED = -2 };

/* crc_property.claim of the 20 bytes at t */
static int64_t claim(const uint8_t *t)
{
    int label = memcmp(t, RESERVE, 9) == 0;
    if (label && t[19] == 2) {
        int64_t v = 0, scale = 1, ok = 1;
        for (int j = 9; j < 19; j++) {
            if (t[j] < '0' || t[j] > '9') {
                ok = 0;
                break;
            }
            v += (t[j] - '0') * scale;
            scale *= 10;
        }
        if (ok)
            return v;
    }
    if (label)
        return DAMAGED;
    int off = 0;
    for (int j = 0; j < RESERVED; j++)
        off += (j >= 9 && j < 19) ? (t[j] < '0' || t[j] > '9') : (t[j] != RESERVE[j]);
    return off <= 2 ? DAMAGED : ABSENT;
}

static PyObject *py_seal_uniform(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t pos, size, n;
    PyObject *obj;
    if (!PyArg_ParseTuple(args, "Onnn", &obj, &pos, &size, &n))
        return NULL;
    if (PyObject_GetBuffer(obj, &view, PyBUF_WRITABLE) < 0)
        return NULL;
    if (pos < 0 || size < RESERVED || n < 0 || (n && pos + n * size > view.len)) {
        PyBuffer_Release(&view);
        return PyErr_Format(PyExc_ValueError, "records outside the buffer");
    }
    uint8_t *p = (uint8_t *)view.buf + pos;
    for (Py_ssize_t i = 0; i < n; i++, p += size)
        put_digits(p + size - 11, crc32_of(0, p, (size_t)(size - RESERVED)) & 0x7FFFFFFFu);
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
}

static PyObject *py_seal_sizes(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t pos;
    PyObject *obj, *sizes;
    if (!PyArg_ParseTuple(args, "OnO", &obj, &pos, &sizes))
        return NULL;
    PyObject *fast = PySequence_Fast(sizes, "sizes");
    if (fast == NULL)
        return NULL;
    if (PyObject_GetBuffer(obj, &view, PyBUF_WRITABLE) < 0) {
        Py_DECREF(fast);
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    PyObject **items = PySequence_Fast_ITEMS(fast);
    PyObject *result = Py_None;
    for (Py_ssize_t i = 0; i < n; i++) {
        long long size = PyLong_AsLongLong(items[i]);
        if (size == -1 && PyErr_Occurred()) {
            result = NULL;
            break;
        }
        if (pos < 0 || size < RESERVED || pos + size > view.len) {
            PyErr_Format(PyExc_ValueError, "record %zd outside the buffer", i);
            result = NULL;
            break;
        }
        uint8_t *p = (uint8_t *)view.buf + pos;
        if (memcmp(p + size - RESERVED, RESERVE, 9) == 0)
            put_digits(p + size - 11, crc32_of(0, p, (size_t)(size - RESERVED)) & 0x7FFFFFFFu);
        pos += size;
    }
    PyBuffer_Release(&view);
    Py_DECREF(fast);
    Py_XINCREF(result);
    return result;
}

/* crc_property.run_crcs_ok: None when a record of the run does not end in a well-formed
 * property, else one byte per record, 1 where its record CRC matches. */
static PyObject *py_record_crcs_ok(PyObject *self, PyObject *args)
{
    PyObject *obj, *starts;
    Py_ssize_t total;
    if (!PyArg_ParseTuple(args, "OOn", &obj, &starts, &total))
        return NULL;
    Py_ssize_t n = PyObject_Length(starts);
    if (n < 0)
        return NULL;
    int64_t *at = PyMem_Malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
    if (at == NULL)
        return PyErr_NoMemory();
    PyObject *out = NULL;
    Py_buffer view;
    if (int64s(starts, n, at, "starts") < 0)
        goto done;
    if (PyObject_GetBuffer(obj, &view, PyBUF_SIMPLE) < 0)
        goto done;
    if (total < RESERVED) {
        PyErr_Format(PyExc_ValueError, "records shorter than the property");
        goto release;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (at[i] < 0 || at[i] + total > view.len) {
            PyErr_Format(PyExc_ValueError, "record %zd outside the buffer", i);
            goto release;
        }
        const uint8_t *t = (const uint8_t *)view.buf + at[i] + total - RESERVED;
        int ok = memcmp(t, RESERVE, 9) == 0 && t[19] == 2;
        for (int j = 9; ok && j < 19; j++)
            ok = t[j] >= '0' && t[j] <= '9';
        if (!ok) {
            out = Py_None;
            Py_INCREF(out);
            goto release;
        }
    }
    out = PyBytes_FromStringAndSize(NULL, n);
    if (out != NULL) {
        uint8_t *res = (uint8_t *)PyBytes_AS_STRING(out);
        for (Py_ssize_t i = 0; i < n; i++) {
            const uint8_t *r = (const uint8_t *)view.buf + at[i];
            res[i] = (uint8_t)(claim(r + total - RESERVED)
                               == (int64_t)(crc32_of(0, r, (size_t)(total - RESERVED)) & 0x7FFFFFFFu));
        }
    }
release:
    PyBuffer_Release(&view);
done:
    PyMem_Free(at);
    return out;
}

/* crc_property.verify's decision where the record decides it: 1 (passes its record CRC),
 * 0 (fails it, its property is damaged, or FORCED without one), -1 (no property: the body CRC
 * decides), -2 (the record is not inside buf: the reference decides). */
static PyObject *py_crc_verdict(PyObject *self, PyObject *args)
{
    PyObject *obj;
    Py_ssize_t pos, total;
    int mode;
    if (!PyArg_ParseTuple(args, "Onni", &obj, &pos, &total, &mode))
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(obj, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    long verdict;
    if (pos < 0 || total < RESERVED || pos + total > view.len) {
        verdict = -2;
    } else {
        const uint8_t *r = (const uint8_t *)view.buf + pos;
        int64_t stored = claim(r + total - RESERVED);
        if (stored >= 0)
            verdict = (int64_t)(crc32_of(0, r, (size_t)(total - RESERVED)) & 0x7FFFFFFFu) == stored;
        else
            verdict = (stored == DAMAGED || mode == 2) ? 0 : -1;
    }
    PyBuffer_Release(&view);
    return PyLong_FromLong(verdict);
}

/* ---- the read check (core.read.check.record_problem) -------------------------------------- */

#define MAGIC_V1 ((int32_t)0xDAA320A7u)
#define MAGIC_V2 ((int32_t)0xDAA320ABu)
#define FORCED 2

static inline int32_t be32(const uint8_t *p)
{
    return (int32_t)((uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]);
}

static inline int64_t be64(const uint8_t *p)
{
    return (int64_t)((uint64_t)(uint32_t)be32(p) << 32 | (uint32_t)be32(p + 4));
}

typedef struct {
    const uint8_t *topic;      /* NULL: not compared */
    Py_ssize_t topic_len;
    int has_qid;
    int32_t qid;
    int mode;                  /* 0 no CRC, 1 record CRC or body CRC, 2 FORCED */
} expect_t;

/* Whether the size bytes at pos of b[0:len] pass record_problem (phys, qoff: NULL not given).
 * Never more lenient than the reference: first_bad's caller re-asks the reference from the
 * first refusal on. */
static int record_ok(const uint8_t *b, Py_ssize_t len, int64_t pos, int64_t size,
                     const int64_t *phys, const int64_t *qoff, const expect_t *e)
{
    int64_t end = pos + size;
    if (pos < 0 || size < 40 || end > len)
        return 0;
    const uint8_t *r = b + pos;
    int32_t total = be32(r), magic = be32(r + 4), body_crc = be32(r + 8), qid = be32(r + 12);
    int32_t sys_flag = be32(r + 36);
    if ((magic != MAGIC_V1 && magic != MAGIC_V2) || total != size)
        return 0;
    if ((phys && be64(r + 28) != *phys) || (e->has_qid && qid != e->qid) || (qoff && be64(r + 20) != *qoff))
        return 0;
    int64_t body_at = pos + 68 + ((sys_flag & 0x10) ? 20 : 8) + ((sys_flag & 0x20) ? 20 : 8);
    if (body_at + 4 > end)
        return 0;
    int64_t body_len = be32(b + body_at);
    body_at += 4;
    int64_t p = body_at + body_len;
    if (body_len < 0 || p + 3 > end)
        return 0;
    int64_t n;
    if (magic == MAGIC_V1) {
        n = b[p];
        p += 1;
    } else {
        n = (int64_t)b[p] << 8 | b[p + 1];
        p += 2;
    }
    if (p + n + 2 > end)
        return 0;
    if (e->topic && (n != e->topic_len || memcmp(b + p, e->topic, (size_t)n) != 0))
        return 0;
    p += n;
    if (p + 2 + ((int64_t)b[p] << 8 | b[p + 1]) != end)
        return 0;
    if (!e->mode)
        return 1;
    int64_t stored = size < RESERVED ? ABSENT : claim(b + end - RESERVED);
    if (stored >= 0)
        return (int64_t)(crc32_of(0, r, (size_t)(size - RESERVED)) & 0x7FFFFFFFu) == stored;
    if (stored == DAMAGED || e->mode == FORCED)
        return 0;
    return (int64_t)(crc32_of(0, b + body_at, (size_t)body_len) & 0x7FFFFFFFu) == (int64_t)body_crc;
}

static PyObject *py_first_bad(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    /* buf, start, sizes, phys|None, topic|None, queue_id|None, queue_offsets|None, mode */
    if (nargs != 8)
        return PyErr_Format(PyExc_TypeError,
                            "first_bad(buf, start, sizes, phys, topic, queue_id, queue_offsets, mode)");
    long long start = PyLong_AsLongLong(args[1]);
    if (start == -1 && PyErr_Occurred())
        return NULL;
    Py_ssize_t n = PyObject_Length(args[2]);
    if (n < 0)
        return NULL;
    expect_t e = {NULL, 0, 0, 0, 0};
    e.mode = PyLong_AsLong(args[7]);
    if (e.mode == -1 && PyErr_Occurred())
        return NULL;
    if (args[5] != Py_None) {
        long q = PyLong_AsLong(args[5]);
        if (q == -1 && PyErr_Occurred())
            return NULL;
        if (q < INT32_MIN || q > INT32_MAX)        /* no record has it */
            return PyLong_FromLong(n ? 0 : -1);
        e.has_qid = 1;
        e.qid = (int32_t)q;
    }
    if (args[4] != Py_None) {
        if (!PyBytes_Check(args[4]))
            return PyErr_Format(PyExc_TypeError, "topic must be bytes or None");
        e.topic = (const uint8_t *)PyBytes_AS_STRING(args[4]);
        e.topic_len = PyBytes_GET_SIZE(args[4]);
    }
    int64_t stack[3 * 64];
    int64_t *vals = n <= 64 ? stack : PyMem_Malloc(sizeof(int64_t) * 3 * (size_t)n);
    if (vals == NULL)
        return PyErr_NoMemory();
    int64_t *sizes = vals, *phys = NULL, *qoffs = NULL;
    PyObject *out = NULL;
    if (int64s(args[2], n, sizes, "sizes") < 0)
        goto done;
    if (args[3] != Py_None) {
        phys = vals + n;
        if (int64s(args[3], n, phys, "phys") < 0)
            goto done;
    }
    if (args[6] != Py_None) {
        qoffs = vals + 2 * n;
        if (int64s(args[6], n, qoffs, "queue_offsets") < 0)
            goto done;
    }
    Py_buffer view;
    Py_ssize_t bad = -1;
    if (PyList_Check(args[0]) || PyTuple_Check(args[0])) {
        /* one record a buffer, each exactly sizes[i] long (else refused here: the caller's
         * reference then judges them joined) */
        PyObject *fast = PySequence_Fast(args[0], "buffers");
        if (fast == NULL)
            goto done;
        PyObject **items = PySequence_Fast_ITEMS(fast);
        for (Py_ssize_t i = 0; i < n; i++) {
            if (i >= PySequence_Fast_GET_SIZE(fast)) {
                bad = i;
                break;
            }
            if (PyObject_GetBuffer(items[i], &view, PyBUF_SIMPLE) < 0) {
                Py_DECREF(fast);
                goto done;
            }
            int ok = view.len == sizes[i] && record_ok(view.buf, view.len, 0, sizes[i],
                                                       phys ? phys + i : NULL, qoffs ? qoffs + i : NULL, &e);
            PyBuffer_Release(&view);
            if (!ok) {
                bad = i;
                break;
            }
        }
        Py_DECREF(fast);
    } else {
        if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
            goto done;
        int64_t pos = start;
        for (Py_ssize_t i = 0; i < n; i++) {
            if (!record_ok(view.buf, view.len, pos, sizes[i], phys ? phys + i : NULL,
                           qoffs ? qoffs + i : NULL, &e)) {
                bad = i;
                break;
            }
            pos += sizes[i];
        }
        PyBuffer_Release(&view);
    }
    out = PyLong_FromSsize_t(bad);
done:
    if (vals != stack)
        PyMem_Free(vals);
    return out;
}

/* ---- Java String.hashCode (core.record.hashing) ------------------------------------------ */

/* The hash of s's UTF-16 units into *out, and 31^units into *scale (when not NULL). */
static int java_hash_of(PyObject *s, uint32_t *out, uint32_t *scale)
{
    if (PyUnicode_READY(s) < 0)
        return -1;
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    int kind = PyUnicode_KIND(s);
    const void *data = PyUnicode_DATA(s);
    uint32_t h = 0, k = 1;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        if (c >= 0x10000) {                          /* a surrogate pair in UTF-16 */
            c -= 0x10000;
            h = 31 * h + (0xD800 + (c >> 10));
            h = 31 * h + (0xDC00 + (c & 0x3FF));
            k *= 31 * 31;
        } else {
            h = 31 * h + c;
            k *= 31;
        }
    }
    *out = h;
    if (scale)
        *scale = k;
    return 0;
}

static PyObject *py_java_hash(PyObject *self, PyObject *s)
{
    uint32_t h;
    if (!PyUnicode_Check(s))
        return PyErr_Format(PyExc_TypeError, "java_hash takes a str");
    if (java_hash_of(s, &h, NULL) < 0)
        return NULL;
    return PyLong_FromLong((long)(int32_t)h);
}

static PyObject *py_index_key_hashes(PyObject *self, PyObject *args)
{
    PyObject *keys, *prefix;
    if (!PyArg_ParseTuple(args, "OU", &keys, &prefix))
        return NULL;
    uint32_t hp;
    if (java_hash_of(prefix, &hp, NULL) < 0)
        return NULL;
    PyObject *fast = PySequence_Fast(keys, "keys");
    if (fast == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    PyObject **items = PySequence_Fast_ITEMS(fast);
    PyObject *out = PyBytes_FromStringAndSize(NULL, n * 8);
    if (out == NULL)
        goto done;
    int64_t *hashes = (int64_t *)PyBytes_AS_STRING(out);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!PyUnicode_Check(items[i]) || PyUnicode_READY(items[i]) < 0) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_TypeError, "keys must be str");
            Py_CLEAR(out);
            goto done;
        }
        /* h(prefix + key) = h(prefix) * 31^units(key) + h(key), mod 2^32 */
        uint32_t hk, scale;
        java_hash_of(items[i], &hk, &scale);
        int32_t h = (int32_t)(hp * scale + hk);
        int64_t v = h == INT32_MIN ? 0 : (h < 0 ? -(int64_t)h : h);
        memcpy(hashes + i, &v, 8);
    }
done:
    Py_DECREF(fast);
    return out;
}

/* ---- module ------------------------------------------------------------------------------ */

static PyMethodDef methods[] = {
    {"crc32", (PyCFunction)(void (*)(void))py_crc32, METH_FASTCALL, "zlib.crc32(data, value=0)"},
    {"crc32_many", py_crc32_many, METH_O, "crc32 of each buffer, as native uint32 bytes"},
    {"crc32_rows", py_crc32_rows, METH_O, "crc32 of each row of a 2-D uint8 buffer, as uint32 bytes"},
    {"crc32_spans", (PyCFunction)(void (*)(void))py_crc32_spans, METH_FASTCALL,
     "crc32 of each buf[starts[i]:stops[i]], as uint32 bytes"},
    {"first_bad", (PyCFunction)(void (*)(void))py_first_bad, METH_FASTCALL,
     "index of the first record the read check refuses, -1 when none"},
    {"record_crcs_ok", py_record_crcs_ok, METH_VARARGS,
     "None, or per record 1 where its record CRC property matches"},
    {"crc_verdict", py_crc_verdict, METH_VARARGS,
     "1 or 0 where the record CRC decides, -1 for the body CRC, -2 for the reference"},
    {"seal_uniform", py_seal_uniform, METH_VARARGS, "seal n records of one size from pos"},
    {"seal_sizes", py_seal_sizes, METH_VARARGS, "seal the records of sizes back to back from pos"},
    {"java_hash", py_java_hash, METH_O, "Java String.hashCode, int32"},
    {"index_key_hashes", py_index_key_hashes, METH_VARARGS,
     "index key hash of prefix + key for each key, as native int64 bytes"},
    {"walk_frames", (PyCFunction)(void (*)(void))py_walk_frames, METH_FASTCALL,
     "(stop, last whole record or -1, 0 more / 1 blank / 2 bad) of a segment's frames"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "core.record._accel",
    "Compiled loops of the record codec; see core/record/accel.py.", -1, methods,
};

PyMODINIT_FUNC PyInit__accel(void)
{
    crc32_init();
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddIntConstant(m, "clmul", crc32_clmul) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
