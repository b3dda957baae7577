/* The replay's longest-path walk over the nodes that take its short path, in C.
 *
 * plain(pred, delay, launch_src, launch_delay, release, dur, observed, more, start, end,
 *       lo, hi, free) walks nodes lo..hi-1 in topological order as
 * perfledger.analysis.replay.schedule_span's short path does: a node starts at the latest of
 * its release, its chain predecessor's end plus the delay, and its launch call's start plus
 * the launch delay (its observed start when nothing sets it: the start is still `free`), and
 * ends its duration later. It stops at the first node the Python loop must take (one marked in
 * `more`: wake-ups, event edges, waits, transfers; or one whose sums leave int64, or whose
 * predecessor lies outside the graph) and returns that node's index, or hi. All arrays are
 * int64 except `more` (one byte a node); start and end are written.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

enum { PRED, DELAY, LAUNCH_SRC, LAUNCH_DELAY, RELEASE, DUR, OBSERVED, MORE, START, END, N_ARRAYS };

static PyObject *plain(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *objects[N_ARRAYS];
    Py_ssize_t lo, hi;
    long long free_time;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOnnL", &objects[0], &objects[1], &objects[2],
                          &objects[3], &objects[4], &objects[5], &objects[6], &objects[7],
                          &objects[8], &objects[9], &lo, &hi, &free_time))
        return NULL;
    Py_buffer views[N_ARRAYS];
    int held = 0;
    PyObject *result = NULL;
    for (; held < N_ARRAYS; held++) {
        int flags = PyBUF_C_CONTIGUOUS | ((held == START || held == END) ? PyBUF_WRITABLE : 0);
        if (PyObject_GetBuffer(objects[held], &views[held], flags) < 0) goto out;
    }
    Py_ssize_t n = views[MORE].len;
    for (int i = 0; i < N_ARRAYS; i++) {
        Py_ssize_t want = (i == MORE) ? n : n * (Py_ssize_t)sizeof(int64_t);
        if (views[i].len != want || (i != MORE && views[i].itemsize != (Py_ssize_t)sizeof(int64_t))) {
            PyErr_SetString(PyExc_ValueError, "the node arrays must be int64 of one length");
            goto out;
        }
    }
    if (lo < 0 || hi > n || lo > hi) {
        PyErr_SetString(PyExc_ValueError, "lo and hi must lie within the nodes");
        goto out;
    }
    {
        const int64_t *pred = views[PRED].buf, *delay = views[DELAY].buf;
        const int64_t *launch_src = views[LAUNCH_SRC].buf, *launch_delay = views[LAUNCH_DELAY].buf;
        const int64_t *release = views[RELEASE].buf, *dur = views[DUR].buf;
        const int64_t *observed = views[OBSERVED].buf;
        const uint8_t *more = views[MORE].buf;
        int64_t *start = views[START].buf, *end = views[END].buf;
        Py_ssize_t v = lo;
        Py_BEGIN_ALLOW_THREADS;
        for (; v < hi; v++) {
            if (more[v]) break;
            int64_t s = release[v], t;
            int64_t p = pred[v], q = launch_src[v];
            if (p >= 0) {
                if (p >= n || __builtin_add_overflow(end[p], delay[v], &t)) break;
                if (t > s) s = t;
            }
            if (q >= 0) {
                if (q >= n || __builtin_add_overflow(start[q], launch_delay[v], &t)) break;
                if (t > s) s = t;
            }
            if (s == (int64_t)free_time) s = observed[v];
            if (__builtin_add_overflow(s, dur[v], &t)) break;
            start[v] = s;
            end[v] = t;
        }
        Py_END_ALLOW_THREADS;
        result = PyLong_FromSsize_t(v);
    }
out:
    for (int i = 0; i < held; i++) PyBuffer_Release(&views[i]);
    return result;
}

static PyMethodDef methods[] = {
    {"plain", plain, METH_VARARGS,
     "plain(pred, delay, launch_src, launch_delay, release, dur, observed, more, start, end, lo, "
     "hi, free) -> the first node from lo that the Python loop must take, or hi."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_schedule",
                                    "The replay's short-path walk in C.", -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__schedule(void) { return PyModule_Create(&module); }
