/* core/record/_hashing.c: Java's String.hashCode for core.record._accel (java_hash,
 * index_key_hashes; references in core.record.hashing). */
#include "_parts.h"

#include <string.h>

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

PyObject *py_java_hash(PyObject *self, PyObject *s)
{
    uint32_t h;
    if (!PyUnicode_Check(s))
        return PyErr_Format(PyExc_TypeError, "java_hash takes a str");
    if (java_hash_of(s, &h, NULL) < 0)
        return NULL;
    return PyLong_FromLong((long)(int32_t)h);
}

PyObject *py_index_key_hashes(PyObject *self, PyObject *args)
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
