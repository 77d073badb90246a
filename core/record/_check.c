/* core/record/_check.c: the record checks of core.record._accel: the whole-record CRC property
 * (core.record.crc_property: seal_uniform, seal_sizes, record_crcs_ok, crc_verdict) and the
 * read check (core.read.check.record_problem: first_bad). Their references are named in
 * _accel.c's opening comment. */
#include "_parts.h"

#include <string.h>

#include "_crc32.h"

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

PyObject *py_seal_uniform(PyObject *self, PyObject *args)
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

PyObject *py_seal_sizes(PyObject *self, PyObject *args)
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
PyObject *py_record_crcs_ok(PyObject *self, PyObject *args)
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
PyObject *py_crc_verdict(PyObject *self, PyObject *args)
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

#define FORCED 2

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

PyObject *py_first_bad(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
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
