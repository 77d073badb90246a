/* core/record/_parts.h: the functions of core.record._accel written in files of their own,
 * for the method table of _accel.c. */
#ifndef MQSTORE_PARTS_H
#define MQSTORE_PARTS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define MAGIC_V1 ((int32_t)0xDAA320A7u)
#define MAGIC_V2 ((int32_t)0xDAA320ABu)
#define MAGIC_BLANK ((int32_t)0xCBD43194u)

static inline int32_t be32(const uint8_t *p)
{
    return (int32_t)((uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]);
}

static inline int64_t be64(const uint8_t *p)
{
    return (int64_t)((uint64_t)(uint32_t)be32(p) << 32 | (uint32_t)be32(p + 4));
}

/* _accel.c: fill a C array of n int64 from a sequence of ints; -1 with an exception set */
int int64s(PyObject *seq, Py_ssize_t n, int64_t *out, const char *what);

/* _check.c */
PyObject *py_seal_uniform(PyObject *self, PyObject *args);
PyObject *py_seal_sizes(PyObject *self, PyObject *args);
PyObject *py_record_crcs_ok(PyObject *self, PyObject *args);
PyObject *py_crc_verdict(PyObject *self, PyObject *args);
PyObject *py_first_bad(PyObject *self, PyObject *const *args, Py_ssize_t nargs);

/* _hashing.c */
PyObject *py_java_hash(PyObject *self, PyObject *s);
PyObject *py_index_key_hashes(PyObject *self, PyObject *args);

/* _walk.c */
PyObject *py_walk_frames(PyObject *self, PyObject *const *args, Py_ssize_t nargs);

#endif
