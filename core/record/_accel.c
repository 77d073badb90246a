/* core.record._accel: the compiled loops of the record codec (DESIGN.md section 1).
 *
 * Imported only by core/record/accel.py. Each function here has a pure-Python reference that
 * stays the definition (named beside each function); tests/unit/test_accel.py holds the two
 * byte-equal and result-equal with Hypothesis. Nothing here decides policy: the Python module
 * of each path calls these where they pay.
 *
 * Here: the CRC loops and the module's table. _check.c holds the record checks, _hashing.c
 * Java's hash, _walk.c the frame walk; _parts.h declares what they give the table.
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
 *   walk_frames(buf, at, stop, size)  core.record.frames.walk_frames_reference
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
int int64s(PyObject *seq, Py_ssize_t n, int64_t *out, const char *what)
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
