/* The timeline's records as text, a row at a time: the compiled form of text.PieceBuilder.

   format(n, ops) writes the text of n records, each the concatenation of its pieces left to
   right; ops is a tuple of pieces, each a tuple:

     (0, literal, shown)                     the same bytes in every row
     (1, data, offsets, codes, shown)        row i: text codes[i] of a string table (Arrow's
                                             layout: int32 offsets into data); codes None:
                                             text i
     (2, values, shown, before, after)       an int64 in decimal, between before and after
     (3, ns, shown, after)                   ns as µs with three decimals, a fourth "1" where
                                             Perfetto's trunc(x * 1000) would lose 1 ns (see
                                             text.us_split), then after

   shown: a bool array (one byte a row) of the rows that have the piece, or None for all.
   Returns (data, offsets): the rows' bytes and the int64 offsets of each row's text (n + 1).

   interleave(size, parts) puts the rows of several formatted parts in record order: parts is
   a tuple of (data, offsets, positions), row k of a part going to record positions[k]; every
   position of 0 .. size - 1 is given once. Returns the bytes of the records in order.

   The loops run without the GIL: the writer threads of the step timelines format side by
   side. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include "../../_decimal.h"

enum { LITERAL = 0, TABLE = 1, INTEGER = 2, MICROS = 3 };
#define MAX_OPS 64
#define MAX_VIEWS 4

typedef struct {
    int kind;
    Py_buffer views[MAX_VIEWS]; /* by kind: the buffers below, as held */
    int held;
    const char *text; /* literal, or data of the table */
    Py_ssize_t text_len;
    const int32_t *offsets;
    Py_ssize_t texts; /* entries of the table */
    const int64_t *codes; /* or the values, the ns */
    const uint8_t *shown;
    const char *before, *after;
    Py_ssize_t before_len, after_len;
} Op;

static void release_op(Op *op) {
    for (int i = 0; i < op->held; i++) PyBuffer_Release(&op->views[i]);
    op->held = 0;
}

/* Hold obj's buffer as the op's next view; its bytes, or NULL (an exception set). */
static const void *hold(Op *op, PyObject *obj, Py_ssize_t *len) {
    Py_buffer *view = &op->views[op->held];
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS) < 0) return NULL;
    op->held++;
    *len = view->len;
    return view->buf;
}

/* A per-row array of the op (n elements of size bytes), or NULL with ValueError. */
static const void *row_array(Op *op, PyObject *obj, Py_ssize_t n, Py_ssize_t size,
                             const char *what) {
    Py_ssize_t len;
    const void *buf = hold(op, obj, &len);
    if (buf == NULL) return NULL;
    if (len != n * size) {
        PyErr_Format(PyExc_ValueError, "%s must have one %zd-byte element per row", what, size);
        return NULL;
    }
    return buf;
}

/* Fill op from its tuple; -1 with an exception set on failure (its views released). */
static int parse_op(PyObject *item, Op *op, Py_ssize_t n) {
    memset(op, 0, sizeof(*op));
    if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) < 3) {
        PyErr_SetString(PyExc_TypeError, "each op must be a tuple (kind, ...)");
        return -1;
    }
    op->kind = (int)PyLong_AsLong(PyTuple_GET_ITEM(item, 0));
    if (op->kind == -1 && PyErr_Occurred()) return -1;
    static const Py_ssize_t sizes[] = {3, 5, 5, 4};
    if (op->kind < LITERAL || op->kind > MICROS || PyTuple_GET_SIZE(item) != sizes[op->kind]) {
        PyErr_SetString(PyExc_ValueError, "an op of unknown kind or size");
        return -1;
    }
    Py_ssize_t len;
    PyObject *shown = PyTuple_GET_ITEM(item, op->kind == TABLE ? 4 : 2);
    if (op->kind == LITERAL) {
        op->text = hold(op, PyTuple_GET_ITEM(item, 1), &op->text_len);
        if (op->text == NULL) goto fail;
    } else if (op->kind == TABLE) {
        op->text = hold(op, PyTuple_GET_ITEM(item, 1), &op->text_len);
        if (op->text == NULL) goto fail;
        op->offsets = hold(op, PyTuple_GET_ITEM(item, 2), &len);
        if (op->offsets == NULL) goto fail;
        op->texts = len / (Py_ssize_t)sizeof(int32_t) - 1;
        if (len % (Py_ssize_t)sizeof(int32_t) != 0 || op->texts < 0) {
            PyErr_SetString(PyExc_ValueError, "offsets must be an int32 array");
            goto fail;
        }
        /* a text's offsets are checked where a row reads it (most_bytes): a table of every
           distinct name is read many times, a few of its texts each time */
        PyObject *codes = PyTuple_GET_ITEM(item, 3);
        if (codes != Py_None) {
            op->codes = row_array(op, codes, n, sizeof(int64_t), "codes");
            if (op->codes == NULL) goto fail;
        } else if (op->texts < n) {
            PyErr_SetString(PyExc_ValueError, "a table of one text a row is too short");
            goto fail;
        }
    } else {
        op->codes = row_array(op, PyTuple_GET_ITEM(item, 1), n, sizeof(int64_t), "values");
        if (op->codes == NULL) goto fail;
        PyObject *before = op->kind == INTEGER ? PyTuple_GET_ITEM(item, 3) : NULL;
        PyObject *after = PyTuple_GET_ITEM(item, op->kind == INTEGER ? 4 : 3);
        if ((before != NULL && PyBytes_AsStringAndSize(before, (char **)&op->before,
                                                       &op->before_len) < 0) ||
            PyBytes_AsStringAndSize(after, (char **)&op->after, &op->after_len) < 0)
            goto fail;
    }
    if (shown != Py_None) {
        op->shown = row_array(op, shown, n, 1, "shown");
        if (op->shown == NULL) goto fail;
    }
    return 0;
fail:
    release_op(op);
    return -1;
}

/* ns as µs: the whole µs (floored), then "." and three decimals, and "1" where
   trunc(double(text) * 1000) would fall 1 ns short: double(ns) / 1000 * 1000 < double(ns). */
static char *put_micros(char *dst, int64_t ns) {
    int64_t whole = ns / 1000;
    int64_t fraction = ns % 1000; /* no product that could overflow at int64's ends */
    if (fraction < 0) {
        whole -= 1;
        fraction += 1000;
    }
    dst = put_decimal(dst, whole);
    *dst++ = '.';
    *dst++ = (char)('0' + fraction / 100);
    *dst++ = (char)('0' + fraction / 10 % 10);
    *dst++ = (char)('0' + fraction % 10);
    double value = (double)ns;
    if (value / 1000.0 * 1000.0 < value) *dst++ = '1';
    return dst;
}

/* The most bytes op writes in row i (exact for literals and tables); -1: a code beyond the
   table, -2: the text's offsets outside the table's data (neither checked while writing). */
static Py_ssize_t most_bytes(const Op *op, Py_ssize_t i) {
    if (op->shown != NULL && !op->shown[i]) return 0;
    switch (op->kind) {
    case LITERAL:
        return op->text_len;
    case TABLE: {
        int64_t code = op->codes != NULL ? op->codes[i] : i;
        if (code < 0 || code >= op->texts) return -1;
        int32_t a = op->offsets[code], b = op->offsets[code + 1];
        if (a < 0 || b < a || b > op->text_len) return -2;
        return b - a;
    }
    case INTEGER:
        return op->before_len + 20 + op->after_len;
    default:
        return 21 + 5 + op->after_len;
    }
}

static char *put_piece(char *dst, const Op *op, Py_ssize_t i) {
    if (op->shown != NULL && !op->shown[i]) return dst;
    switch (op->kind) {
    case LITERAL:
        memcpy(dst, op->text, (size_t)op->text_len);
        return dst + op->text_len;
    case TABLE: {
        int64_t code = op->codes != NULL ? op->codes[i] : i;
        int32_t a = op->offsets[code], b = op->offsets[code + 1];
        memcpy(dst, op->text + a, (size_t)(b - a));
        return dst + (b - a);
    }
    case INTEGER:
        memcpy(dst, op->before, (size_t)op->before_len);
        dst = put_decimal(dst + op->before_len, op->codes[i]);
        memcpy(dst, op->after, (size_t)op->after_len);
        return dst + op->after_len;
    default:
        dst = put_micros(dst, op->codes[i]);
        memcpy(dst, op->after, (size_t)op->after_len);
        return dst + op->after_len;
    }
}

/* Rows whose text may take more than this (by one_pass_bound) are measured first. */
#define ONE_PASS_MOST ((Py_ssize_t)1 << 26)

/* The most bytes n rows of ops can take, found without reading the rows, where every table
 * of the ops holds at most n texts (its offsets then checked whole, for less than a read of
 * the rows would cost), all of them within the table's data, and the bound is at most
 * ONE_PASS_MOST: the rows are then written into a buffer that large, each code checked as
 * it is read. -1 where the rows must be measured one by one (most_bytes, which checks the
 * texts the rows read, and only those). */
static Py_ssize_t one_pass_bound(const Op *ops, Py_ssize_t count, Py_ssize_t n) {
    Py_ssize_t per_row = 0;
    for (Py_ssize_t k = 0; k < count; k++) {
        const Op *op = &ops[k];
        switch (op->kind) {
        case LITERAL:
            per_row += op->text_len;
            break;
        case TABLE: {
            if (op->texts > n) return -1;
            int32_t longest = 0;
            for (Py_ssize_t t = 0; t < op->texts; t++) {
                int32_t a = op->offsets[t], b = op->offsets[t + 1];
                if (a < 0 || b < a || b > op->text_len) return -1;
                if (b - a > longest) longest = b - a;
            }
            per_row += longest;
            break;
        }
        case INTEGER:
            per_row += op->before_len + 20 + op->after_len;
            break;
        default:
            per_row += 21 + 5 + op->after_len;
        }
        if (per_row > ONE_PASS_MOST) return -1;
    }
    if (n > 0 && per_row > ONE_PASS_MOST / n) return -1;
    return n * per_row;
}

static PyObject *format_rows(PyObject *self, PyObject *args) {
    (void)self;
    Py_ssize_t n;
    PyObject *items;
    if (!PyArg_ParseTuple(args, "nO!", &n, &PyTuple_Type, &items)) return NULL;
    Py_ssize_t count = PyTuple_GET_SIZE(items);
    if (n < 0 || count > MAX_OPS) {
        PyErr_SetString(PyExc_ValueError, "a negative row count, or too many ops");
        return NULL;
    }
    Op ops[MAX_OPS];
    Py_ssize_t parsed = 0;
    PyObject *data = NULL, *offsets = NULL, *result = NULL;
    for (; parsed < count; parsed++)
        if (parse_op(PyTuple_GET_ITEM(items, parsed), &ops[parsed], n) < 0) goto out;
    Py_ssize_t total = 0, bad = 0;
    Py_BEGIN_ALLOW_THREADS;
    total = one_pass_bound(ops, count, n);
    if (total < 0) { /* each row measured */
        total = 0;
        for (Py_ssize_t i = 0; i < n && !bad; i++) {
            for (Py_ssize_t k = 0; k < count; k++) {
                Py_ssize_t most = most_bytes(&ops[k], i);
                if (most < 0) {
                    bad = most;
                    break;
                }
                total += most;
            }
        }
    }
    Py_END_ALLOW_THREADS;
    if (bad) {
        PyErr_SetString(PyExc_ValueError, bad == -1 ? "a code lies beyond its table"
                                                     : "the offsets do not lie within the data");
        goto out;
    }
    data = PyBytes_FromStringAndSize(NULL, total);
    offsets = PyBytes_FromStringAndSize(NULL, (n + 1) * (Py_ssize_t)sizeof(int64_t));
    if (data == NULL || offsets == NULL) goto out;
    char *begin = PyBytes_AS_STRING(data), *dst = begin;
    int64_t *o = (int64_t *)PyBytes_AS_STRING(offsets);
    Py_BEGIN_ALLOW_THREADS;
    for (Py_ssize_t i = 0; i < n && !bad; i++) {
        o[i] = (int64_t)(dst - begin);
        for (Py_ssize_t k = 0; k < count; k++) {
            const Op *op = &ops[k];
            if (op->kind == TABLE && op->codes != NULL &&
                (op->codes[i] < 0 || op->codes[i] >= op->texts) &&
                (op->shown == NULL || op->shown[i])) {
                bad = -1; /* read unmeasured (one_pass_bound): checked here */
                break;
            }
            dst = put_piece(dst, op, i);
        }
    }
    o[n] = (int64_t)(dst - begin);
    Py_END_ALLOW_THREADS;
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "a code lies beyond its table");
        goto out;
    }
    if (_PyBytes_Resize(&data, dst - begin) < 0) goto out; /* data is NULL then */
    result = PyTuple_Pack(2, data, offsets);
out:
    for (Py_ssize_t k = 0; k < parsed; k++) release_op(&ops[k]);
    Py_XDECREF(data);
    Py_XDECREF(offsets);
    return result;
}

typedef struct {
    Py_buffer views[3];
    int held;
} Part;

static PyObject *interleave(PyObject *self, PyObject *args) {
    (void)self;
    Py_ssize_t size;
    PyObject *items;
    if (!PyArg_ParseTuple(args, "nO!", &size, &PyTuple_Type, &items)) return NULL;
    Py_ssize_t count = PyTuple_GET_SIZE(items);
    if (size < 0 || count > MAX_OPS) {
        PyErr_SetString(PyExc_ValueError, "a negative size, or too many parts");
        return NULL;
    }
    Part parts[MAX_OPS];
    Py_ssize_t parsed = 0;
    PyObject *result = NULL;
    /* per record, its text's part and row: a record given twice or never is an error */
    int64_t *row_of = PyMem_Malloc((size_t)(size > 0 ? size : 1) * sizeof(int64_t));
    int32_t *part_of = PyMem_Malloc((size_t)(size > 0 ? size : 1) * sizeof(int32_t));
    if (row_of == NULL || part_of == NULL) {
        PyErr_NoMemory();
        goto out;
    }
    for (Py_ssize_t r = 0; r < size; r++) part_of[r] = -1;
    Py_ssize_t total = 0;
    for (; parsed < count; parsed++) {
        PyObject *item = PyTuple_GET_ITEM(items, parsed);
        Part *part = &parts[parsed];
        part->held = 0;
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 3) {
            PyErr_SetString(PyExc_TypeError, "each part must be (data, offsets, positions)");
            goto out;
        }
        for (; part->held < 3; part->held++) {
            if (PyObject_GetBuffer(PyTuple_GET_ITEM(item, part->held), &part->views[part->held],
                                   PyBUF_C_CONTIGUOUS) < 0)
                goto out_part;
        }
        const int64_t *o = part->views[1].buf;
        const int64_t *at = part->views[2].buf;
        Py_ssize_t rows = part->views[2].len / (Py_ssize_t)sizeof(int64_t);
        if (part->views[2].len % (Py_ssize_t)sizeof(int64_t) != 0 ||
            part->views[1].len != (rows + 1) * (Py_ssize_t)sizeof(int64_t) || o[0] != 0 ||
            o[rows] > part->views[0].len) {
            PyErr_SetString(PyExc_ValueError, "a part's offsets and positions do not agree");
            goto out_part;
        }
        for (Py_ssize_t k = 0; k < rows; k++) {
            if (o[k + 1] < o[k] || at[k] < 0 || at[k] >= size || part_of[at[k]] >= 0) {
                PyErr_SetString(PyExc_ValueError, "a part's row or position is out of place");
                goto out_part;
            }
            part_of[at[k]] = (int32_t)parsed;
            row_of[at[k]] = k;
            total += (Py_ssize_t)(o[k + 1] - o[k]);
        }
        continue;
    out_part:
        parsed++; /* its held views are released below */
        goto out;
    }
    for (Py_ssize_t r = 0; r < size; r++) {
        if (part_of[r] < 0) {
            PyErr_SetString(PyExc_ValueError, "a record position has no row");
            goto out;
        }
    }
    result = PyBytes_FromStringAndSize(NULL, total);
    if (result == NULL) goto out;
    {
        char *dst = PyBytes_AS_STRING(result);
        Py_BEGIN_ALLOW_THREADS;
        for (Py_ssize_t r = 0; r < size; r++) {
            const Part *part = &parts[part_of[r]];
            const int64_t *o = part->views[1].buf;
            int64_t k = row_of[r];
            size_t len = (size_t)(o[k + 1] - o[k]);
            memcpy(dst, (const char *)part->views[0].buf + o[k], len);
            dst += len;
        }
        Py_END_ALLOW_THREADS;
    }
out:
    for (Py_ssize_t k = 0; k < parsed; k++)
        for (int v = 0; v < parts[k].held; v++) PyBuffer_Release(&parts[k].views[v]);
    PyMem_Free(row_of);
    PyMem_Free(part_of);
    return result;
}

static PyMethodDef methods[] = {
    {"format", format_rows, METH_VARARGS, "The text of n records from their pieces."},
    {"interleave", interleave, METH_VARARGS, "Formatted parts' rows in record order."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_records",
                                    "The timeline's records as text, compiled.", -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__records(void) { return PyModule_Create(&module); }
