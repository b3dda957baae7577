/* numpy's array memory, counted by the line of perfledger that asked for it (bench/alloc_lines.py).
 *
 * install(min_bytes) makes this module's allocator numpy's for the calling thread's context
 * (threads started later keep numpy's own): every array buffer of min_bytes or more is
 * recorded with the innermost frame of perfledger's code running then (and, where that frame
 * is one of analysis/columns.py's helpers, the perfledger frame that called it). records()
 * returns them as (file, function, line, bytes, caller file, caller function, caller line).
 * The memory itself comes from malloc and goes back to free: the counts, not the pages, are
 * what this measures.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_2_0_API_VERSION
#include <numpy/arrayobject.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    PyCodeObject *code, *caller;
    int line, caller_line;
    size_t size;
} Record;

static Record *records_ = NULL;
static Py_ssize_t count = 0, capacity = 0;
static size_t min_bytes = 8 << 20;

static int ours(PyCodeObject *code, const char *skip) {
    const char *file = PyUnicode_AsUTF8(code->co_filename);
    return file != NULL && strstr(file, "/perfledger/") != NULL &&
           (skip == NULL || strstr(file, skip) == NULL);
}

/* the nearest frame from `frame` outwards whose code is perfledger's (but `skip`'s): a new
   reference to its code and its line, or NULL */
static PyCodeObject *nearest(PyFrameObject *frame, const char *skip, int *line) {
    Py_XINCREF(frame);
    while (frame != NULL) {
        PyCodeObject *code = PyFrame_GetCode(frame);
        if (ours(code, skip)) {
            *line = PyFrame_GetLineNumber(frame);
            Py_DECREF(frame);
            return code;
        }
        Py_DECREF(code);
        PyFrameObject *back = PyFrame_GetBack(frame);
        Py_DECREF(frame);
        frame = back;
    }
    return NULL;
}

static void note(size_t size) {
    if (size < min_bytes || !PyGILState_Check()) return;
    PyFrameObject *frame = PyEval_GetFrame(); /* borrowed */
    Record record = {NULL, NULL, 0, 0, size};
    record.code = nearest(frame, NULL, &record.line);
    if (record.code == NULL) return;
    const char *file = PyUnicode_AsUTF8(record.code->co_filename);
    if (file != NULL && strstr(file, "analysis/columns.py") != NULL)
        record.caller = nearest(frame, "analysis/columns.py", &record.caller_line);
    if (count == capacity) {
        Py_ssize_t grown = capacity ? 2 * capacity : 4096;
        Record *more = realloc(records_, (size_t)grown * sizeof(Record));
        if (more == NULL) {
            Py_DECREF(record.code);
            Py_XDECREF(record.caller);
            return;
        }
        records_ = more;
        capacity = grown;
    }
    records_[count++] = record;
}

static void *hook_malloc(void *ctx, size_t size) {
    (void)ctx;
    note(size);
    return malloc(size);
}
static void *hook_calloc(void *ctx, size_t n, size_t size) {
    (void)ctx;
    note(n * size);
    return calloc(n, size);
}
static void *hook_realloc(void *ctx, void *ptr, size_t size) {
    (void)ctx;
    note(size);
    return realloc(ptr, size);
}
static void hook_free(void *ctx, void *ptr, size_t size) {
    (void)ctx;
    (void)size;
    free(ptr);
}

static PyDataMem_Handler handler = {
    "perfledger-bench-alloc-hook", 1,
    {NULL, hook_malloc, hook_calloc, hook_realloc, hook_free},
};

static PyObject *install(PyObject *self, PyObject *args) {
    (void)self;
    unsigned long long least = min_bytes;
    if (!PyArg_ParseTuple(args, "|K", &least)) return NULL;
    min_bytes = (size_t)least;
    PyObject *capsule = PyCapsule_New(&handler, "mem_handler", NULL);
    if (capsule == NULL) return NULL;
    PyObject *old = PyDataMem_SetHandler(capsule);
    Py_DECREF(capsule);
    return old;
}

static PyObject *records(PyObject *self, PyObject *args) {
    (void)self;
    (void)args;
    PyObject *out = PyList_New(0);
    if (out == NULL) return NULL;
    for (Py_ssize_t i = 0; i < count; i++) {
        Record *r = &records_[i];
        PyObject *item = Py_BuildValue(
            "(OOinOOi)", r->code->co_filename, r->code->co_name, r->line, (Py_ssize_t)r->size,
            r->caller ? r->caller->co_filename : Py_None, r->caller ? r->caller->co_name : Py_None,
            r->caller_line);
        if (item == NULL || PyList_Append(out, item) < 0) {
            Py_XDECREF(item);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(item);
    }
    return out;
}

static PyMethodDef methods[] = {
    {"install", install, METH_VARARGS, "install(min_bytes) -> numpy's previous handler"},
    {"records", records, METH_NOARGS, "records() -> the recorded allocations"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "alloc_hook", "numpy's array memory by perfledger's line.", -1, methods,
};

PyMODINIT_FUNC PyInit_alloc_hook(void) {
    import_array();
    return PyModule_Create(&module);
}
