/* core/record/_walk.c: walk_frames for core.record._accel, the loop of
 * core.record.frames.walk_frames_reference (its docstring is the definition). */
#include "_parts.h"

#define BLANK_SIZE 8
#define MIN_RECORD_SIZE 91

PyObject *py_walk_frames(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4)
        return PyErr_Format(PyExc_TypeError, "walk_frames(buf, at, stop, size)");
    Py_ssize_t at = PyLong_AsSsize_t(args[1]);
    Py_ssize_t stop = PyLong_AsSsize_t(args[2]);
    Py_ssize_t size = PyLong_AsSsize_t(args[3]);
    if (PyErr_Occurred())
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    if (at < 0 || stop > view.len) {
        PyBuffer_Release(&view);
        return PyErr_Format(PyExc_ValueError, "walk_frames: [%zd, %zd) is not inside the buffer", at, stop);
    }
    const uint8_t *p = view.buf;
    Py_ssize_t last = -1;
    int why = 0;
    while (at + BLANK_SIZE <= stop) {
        int32_t total = be32(p + at), magic = be32(p + at + 4);
        if (magic == MAGIC_BLANK) {
            why = 1;
            break;
        }
        if ((magic != MAGIC_V1 && magic != MAGIC_V2) || total < MIN_RECORD_SIZE || at + total > size) {
            why = 2;
            break;
        }
        if (at + total > stop)
            break;
        last = at;
        at += total;
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("nni", at, last, why);
}
