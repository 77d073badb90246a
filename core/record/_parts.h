/* core/record/_parts.h: the functions of core.record._accel written in files of their own,
 * for the method table of _accel.c. */
#ifndef MQSTORE_PARTS_H
#define MQSTORE_PARTS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

PyObject *py_walk_frames(PyObject *self, PyObject *const *args, Py_ssize_t nargs);   /* _walk.c */

#endif
