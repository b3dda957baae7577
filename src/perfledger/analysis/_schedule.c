/* The replay's longest-path walk in C.
 *
 * walk(pred, delay, launch_src, launch_delay, release, dur, observed, more, start, end, via,
 *      how, wake_src, wake_gap, event_ptr, event_src, event_gap, wait_ptr, wait_src, lo, hi,
 *      free) walks nodes lo..hi-1 in topological order as
 * perfledger.analysis.replay.schedule_span's loop does. A node starts at the latest of its
 * release, its chain predecessor's end plus the delay, its launch call's start plus the launch
 * delay, and for the nodes marked 1 in `more` also the start of the call that woke it plus the
 * gap, the ends of the tasks whose events it awaited plus their gaps and the ends of the tasks
 * it waited for (the first of the latest wins: via and how record it, for every node whose
 * start a predecessor set); its observed start when nothing sets it (the start is still
 * `free`); it ends its duration later. The awaited and waited-for tasks of node v are
 * event_src[event_ptr[v]:event_ptr[v+1]] and wait_src[wait_ptr[v]:wait_ptr[v+1]] (compressed
 * rows).
 *
 * It stops at the first node the Python loop must take (marked 2 in `more`: a collective's
 * transfer; one whose sums leave int64; one whose predecessors lie outside the graph) and
 * returns that node's index, or hi. All arrays are int64 except `more` and `how` (one byte a
 * node); start, end, via and how are written.
 *
 * path(...) is the walk back along a step's critical path (below).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

enum {
    PRED,
    DELAY,
    LAUNCH_SRC,
    LAUNCH_DELAY,
    RELEASE,
    DUR,
    OBSERVED,
    MORE,
    START,
    END,
    VIA,
    HOW,
    WAKE_SRC,
    WAKE_GAP,
    EVENT_PTR,
    EVENT_SRC,
    EVENT_GAP,
    WAIT_PTR,
    WAIT_SRC,
    N_ARRAYS
};

/* how a node's start was set (replay.py's constants) */
enum { RELEASE_HOW = 0, CHAIN = 1, LAUNCHED = 2, WAITED = 3, WOKEN = 4, AWAITED = 5 };

static int is_bytes(int i) { return i == MORE || i == HOW; }
static int is_written(int i) { return i == START || i == END || i == VIA || i == HOW; }

/* The node's start, or 0 when the Python loop must take it. */
static int full_start(Py_ssize_t v, Py_ssize_t n, int64_t s, int64_t *by, int *kind,
                      const int64_t *start, const int64_t *end, const int64_t *wake_src,
                      const int64_t *wake_gap, const int64_t *event_ptr, const int64_t *event_src,
                      const int64_t *event_gap, Py_ssize_t n_events, const int64_t *wait_ptr,
                      const int64_t *wait_src, Py_ssize_t n_waits, int64_t *out) {
    int64_t t, w = wake_src[v];
    if (w >= 0) {
        if (w >= n || __builtin_add_overflow(start[w], wake_gap[v], &t)) return 0;
        if (t > s) {
            s = t;
            *by = w;
            *kind = WOKEN;
        }
    }
    int64_t first = event_ptr[v], last = event_ptr[v + 1];
    if (first < 0 || last < first || last > n_events) return 0;
    for (int64_t k = first; k < last; k++) {
        w = event_src[k];
        if (w < 0 || w >= n || __builtin_add_overflow(end[w], event_gap[k], &t)) return 0;
        if (t > s) {
            s = t;
            *by = w;
            *kind = AWAITED;
        }
    }
    first = wait_ptr[v];
    last = wait_ptr[v + 1];
    if (first < 0 || last < first || last > n_waits) return 0;
    for (int64_t k = first; k < last; k++) {
        w = wait_src[k];
        if (w < 0 || w >= n) return 0;
        if (end[w] > s) {
            s = end[w];
            *by = w;
            *kind = WAITED;
        }
    }
    *out = s;
    return 1;
}

static PyObject *walk(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *objects[N_ARRAYS];
    Py_ssize_t lo, hi;
    long long free_time;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOOOOOOOOOOnnL", &objects[0], &objects[1], &objects[2],
                          &objects[3], &objects[4], &objects[5], &objects[6], &objects[7],
                          &objects[8], &objects[9], &objects[10], &objects[11], &objects[12],
                          &objects[13], &objects[14], &objects[15], &objects[16], &objects[17],
                          &objects[18], &lo, &hi, &free_time))
        return NULL;
    Py_buffer views[N_ARRAYS];
    int held = 0;
    PyObject *result = NULL;
    for (; held < N_ARRAYS; held++) {
        int flags = PyBUF_C_CONTIGUOUS | (is_written(held) ? PyBUF_WRITABLE : 0);
        if (PyObject_GetBuffer(objects[held], &views[held], flags) < 0) goto out;
    }
    Py_ssize_t n = views[MORE].len;
    for (int i = 0; i < N_ARRAYS; i++) {
        Py_ssize_t size = is_bytes(i) ? 1 : (Py_ssize_t)sizeof(int64_t);
        Py_ssize_t rows = (i == EVENT_PTR || i == WAIT_PTR) ? n + 1 : n;
        int sized = (i == EVENT_SRC || i == EVENT_GAP || i == WAIT_SRC)
                        ? views[i].len % size == 0
                        : views[i].len == rows * size;
        if (!sized || views[i].itemsize != size) {
            PyErr_SetString(PyExc_ValueError, "the node arrays must be int64 of one length");
            goto out;
        }
    }
    if (views[EVENT_SRC].len != views[EVENT_GAP].len) {
        PyErr_SetString(PyExc_ValueError, "the node arrays must be int64 of one length");
        goto out;
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
        int64_t *start = views[START].buf, *end = views[END].buf, *via = views[VIA].buf;
        uint8_t *how = views[HOW].buf;
        const int64_t *wake_src = views[WAKE_SRC].buf, *wake_gap = views[WAKE_GAP].buf;
        const int64_t *event_ptr = views[EVENT_PTR].buf, *event_src = views[EVENT_SRC].buf;
        const int64_t *event_gap = views[EVENT_GAP].buf;
        const int64_t *wait_ptr = views[WAIT_PTR].buf, *wait_src = views[WAIT_SRC].buf;
        Py_ssize_t n_events = views[EVENT_SRC].len / (Py_ssize_t)sizeof(int64_t);
        Py_ssize_t n_waits = views[WAIT_SRC].len / (Py_ssize_t)sizeof(int64_t);
        Py_ssize_t v = lo;
        Py_BEGIN_ALLOW_THREADS;
        for (; v < hi; v++) {
            if (more[v] > 1) break;
            int64_t s = release[v], t, by = -1;
            int kind = RELEASE_HOW;
            int64_t p = pred[v], q = launch_src[v];
            if (p >= 0) {
                if (p >= n || __builtin_add_overflow(end[p], delay[v], &t)) break;
                if (t > s) {
                    s = t;
                    by = p;
                    kind = CHAIN;
                }
            }
            if (q >= 0) {
                if (q >= n || __builtin_add_overflow(start[q], launch_delay[v], &t)) break;
                if (t > s) {
                    s = t;
                    by = q;
                    kind = LAUNCHED;
                }
            }
            if (more[v] &&
                !full_start(v, n, s, &by, &kind, start, end, wake_src, wake_gap, event_ptr,
                            event_src, event_gap, n_events, wait_ptr, wait_src, n_waits, &s))
                break;
            if (s == (int64_t)free_time) s = observed[v];
            if (__builtin_add_overflow(s, dur[v], &t)) break;
            start[v] = s;
            end[v] = t;
            if (by >= 0) {
                via[v] = by;
                how[v] = (uint8_t)kind;
            }
        }
        Py_END_ALLOW_THREADS;
        result = PyLong_FromSsize_t(v);
    }
out:
    for (int i = 0; i < held; i++) PyBuffer_Release(&views[i]);
    return result;
}

/* path(start, end, via, how, v, lo) -> (nodes, stopped) or None: the walk back along a step's
 * critical path of perfledger.analysis.critical_path._Lanes.path, from node v (which ends the
 * step) to the step's start lo. `nodes`: the nodes visited, as native int64 bytes; `stopped`:
 * the walk ended at the last node's own time rather than on the edge before it. None where a
 * node it would read lies outside the arrays (the Python walk then decides). start, end and
 * via are int64 arrays, how one byte a node. */
static PyObject *path(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *objects[4];
    Py_ssize_t v;
    long long lo;
    if (!PyArg_ParseTuple(args, "OOOOnL", &objects[0], &objects[1], &objects[2], &objects[3], &v,
                          &lo))
        return NULL;
    Py_buffer views[4];
    int held = 0;
    PyObject *result = NULL;
    int64_t *nodes = NULL;
    for (; held < 4; held++) {
        if (PyObject_GetBuffer(objects[held], &views[held], PyBUF_C_CONTIGUOUS) < 0) goto out;
    }
    Py_ssize_t n = views[0].len / 8;
    if (views[1].len != n * 8 || views[2].len != n * 8 || views[3].len != n) {
        PyErr_SetString(PyExc_ValueError, "path: the node arrays differ in length");
        goto out;
    }
    const int64_t *start = views[0].buf, *end = views[1].buf, *via = views[2].buf;
    const unsigned char *how = views[3].buf;
    Py_ssize_t count = 0, capacity = 64;
    int stopped = 0, outside = 0;
    nodes = PyMem_Malloc(capacity * sizeof(int64_t));
    if (nodes == NULL) {
        PyErr_NoMemory();
        goto out;
    }
    Py_BEGIN_ALLOW_THREADS;
    if (v < 0 || v >= n) {
        outside = 1;
    } else {
        int64_t cursor = end[v] > lo ? end[v] : lo;
        int launched = 0;
        while (cursor > lo) {
            if (count == n) { /* every node visited: the next would be one visited twice */
                outside = 1;
                break;
            }
            if (count == capacity) {
                int64_t *grown = NULL;
                capacity *= 2;
                Py_BLOCK_THREADS;
                grown = PyMem_Realloc(nodes, capacity * sizeof(int64_t));
                Py_UNBLOCK_THREADS;
                if (grown == NULL) {
                    outside = 2;
                    break;
                }
                nodes = grown;
            }
            nodes[count++] = v;
            if (!launched && start[v] < cursor) cursor = start[v] > lo ? start[v] : lo;
            unsigned char how_v = how[v];
            if (cursor <= lo || how_v == RELEASE_HOW) {
                stopped = 1;
                break;
            }
            int64_t w = via[v];
            if (w < 0 || w >= n) {
                outside = 1;
                break;
            }
            v = (Py_ssize_t)w;
            launched = how_v == LAUNCHED || how_v == WOKEN;
            int64_t point = launched ? start[v] : end[v];
            if (point < cursor) cursor = point > lo ? point : lo;
        }
    }
    Py_END_ALLOW_THREADS;
    if (outside == 2) {
        PyErr_NoMemory();
    } else if (outside) {
        result = Py_NewRef(Py_None);
    } else {
        PyObject *bytes = PyBytes_FromStringAndSize((const char *)nodes, count * sizeof(int64_t));
        if (bytes != NULL) {
            result = Py_BuildValue("(NO)", bytes, stopped ? Py_True : Py_False);
        }
    }
out:
    PyMem_Free(nodes);
    for (int i = 0; i < held; i++) PyBuffer_Release(&views[i]);
    return result;
}

static PyMethodDef methods[] = {
    {"walk", walk, METH_VARARGS,
     "walk(pred, delay, launch_src, launch_delay, release, dur, observed, more, start, end, via, "
     "how, wake_src, wake_gap, event_ptr, event_src, event_gap, wait_ptr, wait_src, lo, hi, "
     "free) -> the first node from lo that the Python loop must take, or hi."},
    {"path", path, METH_VARARGS,
     "path(start, end, via, how, v, lo) -> (nodes as int64 bytes, stopped), or None where a "
     "node lies outside the arrays."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_schedule",
                                    "The replay's longest-path walk in C.", -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__schedule(void) { return PyModule_Create(&module); }
