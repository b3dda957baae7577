/* Rows of integer columns numbered by hashing, in one pass.
 *
 * first_seen(columns, codes) reads a tuple of m C-contiguous int64 arrays of one length n
 * (1 <= m <= MAX_COLUMNS) as n rows of m values, writes into codes (an int64 array of n) each
 * row's number among the distinct rows in the order they first appear, and returns the
 * distinct rows in that order as bytes (k rows of m int64 values). An open-addressing table of
 * the distinct rows (linear probing, grown at half full) is the only memory besides them; a row
 * equal to the one before takes its number without being hashed (rows come in runs: a trace's
 * rows in time order, a track's after a track's). The loop runs without the GIL. perfledger.analysis.columns.unique_rows sorts the few distinct
 * rows afterwards.
 *
 * laminar(start, end) tells whether a track's intervals (int64 arrays of one length) are
 * laminar: those of positive length taken in order, each starts after the one before, or
 * with it and no later (by start, longer first: the order a thread's slices and a track's
 * records come in), and none crosses another (partly overlaps without one holding the
 * other). False when they are out of that order (perfledger.analysis.intervals.is_laminar
 * answers as the numpy passes of crossing_intervals would, then): one pass with a stack of
 * the open intervals' ends, the innermost on top, without the GIL.
 *
 * nest(group, start, end, parent, query_group, query_ns, found) reads intervals [start, end)
 * of host threads (group: a thread's number, 0 <= group) whose starts come in order, as
 * perfledger.analysis.nesting does: in each group by start, longer first, then by index, each
 * interval's innermost enclosing one of its group is written into parent (-1: none), and for
 * each query instant (query_ns in order) the innermost interval of its group running then
 * (start <= t < end) into found. One pass with a stack per group (linked through parent),
 * without the GIL. False, the outputs unspecified, where it cannot answer as the numpy passes
 * would: starts or queries out of order, an end before its start, a group number past the
 * rows' count plus 1024 (the size of the stacks' table), or an interval that crosses the one
 * holding it (partly overlaps it).
 *
 * union_runs(start, end, run_start, run_end, first, cumulative) reads intervals [start, end)
 * (int64 arrays of one length) whose starts, of those of positive length, come in order, as
 * perfledger.analysis.intervals.union does: the disjoint runs their union makes (touching
 * intervals joined), each run's first interval (the lowest index opening it) and the prefix
 * sums of the runs' lengths. With None for the four outputs it counts the runs; given arrays
 * of that count (cumulative one longer) it writes them. -1 where the starts are out of order
 * (union then sorts them). One pass, without the GIL.
 *
 * chain_positions(pred, root, depth) reads each node of a graph's predecessor on its chain
 * (pred: negative for the first node of a chain) and writes, for every node, the first node
 * of its chain into root and its place along the chain (the edges from that first node) into
 * depth, all int64 arrays of one length: what the pointer jumping of
 * perfledger.analysis.graph._chain_positions finds, in one walk per chain (each node visited
 * once) rather than log2 of the longest chain's length passes, each making new arrays of the
 * nodes. False, the outputs unspecified, where the predecessors do not make chains (one past
 * the last node, a cycle). Without the GIL.
 *
 * relax_keys(key, launch_src, wake_src, wait_src, wait_dst, event_src, event_dst, chain_order,
 * same, scratch, rounds) raises the step graph's sort keys (key: int64, one a node, written)
 * as perfledger.analysis.graph._topological's numpy passes do, round after round until a round
 * changes nothing or `rounds` have run: each node's key above its launch call's and its waker's
 * (launch_src, wake_src: -1 none), above the waited-for tasks' (wait_src -> wait_dst) and the
 * awaited events' (event_src -> event_dst), each of the four from the keys the one before left
 * (a copy in scratch, an int64 array as long as key), then strictly increasing along each chain
 * (chain_order: the nodes chain by chain in order along it; same: 1 where a node's chain is the
 * one before's, as bytes). Returns the rounds run. Without the GIL.
 *
 * remap_pointers(pointers, rank, order, out) writes out[k] = rank[pointers[order[k]]] (-1
 * where that pointer is negative or does not point to an earlier place than k: a dependency
 * the trace's times contradict) and returns how many pointers it dropped so: the node
 * pointers of the graph sorted by `order` (rank: each node's place in it). Without the GIL.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_COLUMNS 8
#define EMPTY (-1)

static inline uint64_t mix(uint64_t h) {
    /* splitmix64's finaliser */
    h ^= h >> 30;
    h *= 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 27;
    h *= 0x94d049bb133111ebULL;
    h ^= h >> 31;
    return h;
}

typedef struct {
    const int64_t *col[MAX_COLUMNS];
    int m;
    Py_ssize_t n;
    int64_t *codes;
    int64_t *keys; /* k rows of m values */
    Py_ssize_t k, keys_cap;
    int64_t *slots; /* index of a distinct row, or EMPTY */
    Py_ssize_t mask;
} Numbering;

static uint64_t key_hash(const Numbering *t, const int64_t *key) {
    uint64_t h = 0x9e3779b97f4a7c15ULL;
    for (int j = 0; j < t->m; j++) h = mix(h ^ (uint64_t)key[j]) + (uint64_t)j;
    return h;
}

/* 0 on success, -1 when memory runs out. */
static int grow(Numbering *t) {
    Py_ssize_t size = (t->mask + 1) * 2;
    int64_t *slots = PyMem_RawMalloc((size_t)size * sizeof(int64_t));
    if (slots == NULL) return -1;
    for (Py_ssize_t s = 0; s < size; s++) slots[s] = EMPTY;
    for (Py_ssize_t r = 0; r < t->k; r++) {
        Py_ssize_t s = (Py_ssize_t)(key_hash(t, t->keys + r * t->m) & (uint64_t)(size - 1));
        while (slots[s] != EMPTY) s = (s + 1) & (size - 1);
        slots[s] = r;
    }
    PyMem_RawFree(t->slots);
    t->slots = slots;
    t->mask = size - 1;
    return 0;
}

/* 0 on success, -1 when memory runs out. */
static int number_rows(Numbering *t) {
    int64_t row[MAX_COLUMNS];
    for (Py_ssize_t i = 0; i < t->n; i++) {
        int same = i > 0; /* the row before's number, for a row equal to it: no hashing */
        for (int j = 0; j < t->m; j++) {
            row[j] = t->col[j][i];
            same = same && row[j] == t->col[j][i - 1];
        }
        if (same) {
            t->codes[i] = t->codes[i - 1];
            continue;
        }
        Py_ssize_t s = (Py_ssize_t)(key_hash(t, row) & (uint64_t)t->mask);
        while (t->slots[s] != EMPTY &&
               memcmp(t->keys + t->slots[s] * t->m, row, (size_t)t->m * sizeof(int64_t)) != 0)
            s = (s + 1) & t->mask;
        if (t->slots[s] != EMPTY) {
            t->codes[i] = t->slots[s];
            continue;
        }
        /* a row first seen: the next number */
        if (t->k == t->keys_cap) {
            Py_ssize_t cap = t->keys_cap * 2;
            int64_t *keys = PyMem_RawRealloc(t->keys, (size_t)(cap * t->m) * sizeof(int64_t));
            if (keys == NULL) return -1;
            t->keys = keys;
            t->keys_cap = cap;
        }
        memcpy(t->keys + t->k * t->m, row, (size_t)t->m * sizeof(int64_t));
        t->slots[s] = t->k;
        t->codes[i] = t->k;
        t->k++;
        if (t->k * 2 > t->mask + 1 && grow(t) < 0) return -1;
    }
    return 0;
}

static PyObject *first_seen(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *columns, *codes_obj;
    if (!PyArg_ParseTuple(args, "O!O", &PyTuple_Type, &columns, &codes_obj)) return NULL;
    Py_ssize_t m = PyTuple_GET_SIZE(columns);
    if (m < 1 || m > MAX_COLUMNS) {
        PyErr_SetString(PyExc_ValueError, "first_seen numbers rows of 1 to 8 columns");
        return NULL;
    }
    Py_buffer views[MAX_COLUMNS + 1];
    int held = 0;
    PyObject *result = NULL;
    Numbering t;
    memset(&t, 0, sizeof(t));
    t.m = (int)m;
    for (; held < m; held++)
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(columns, held), &views[held],
                               PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
            goto out;
    if (PyObject_GetBuffer(codes_obj, &views[held], PyBUF_C_CONTIGUOUS | PyBUF_FORMAT |
                                                          PyBUF_WRITABLE) < 0)
        goto out;
    held++;
    for (int j = 0; j < held; j++) {
        const char *f = views[j].format;
        if (views[j].itemsize != 8 || views[j].len != views[0].len || f == NULL ||
            (strcmp(f, "l") != 0 && strcmp(f, "q") != 0)) {
            PyErr_SetString(PyExc_ValueError,
                            "first_seen takes int64 columns and codes of one length");
            goto out;
        }
    }
    t.n = views[0].len / (Py_ssize_t)sizeof(int64_t);
    for (int j = 0; j < t.m; j++) t.col[j] = (const int64_t *)views[j].buf;
    t.codes = (int64_t *)views[t.m].buf;
    t.keys_cap = 16;
    t.keys = PyMem_RawMalloc((size_t)(t.keys_cap * t.m) * sizeof(int64_t));
    t.mask = 63;
    t.slots = PyMem_RawMalloc((size_t)(t.mask + 1) * sizeof(int64_t));
    if (t.keys == NULL || t.slots == NULL) {
        PyErr_NoMemory();
        goto out;
    }
    for (Py_ssize_t s = 0; s <= t.mask; s++) t.slots[s] = EMPTY;
    int failed;
    Py_BEGIN_ALLOW_THREADS;
    failed = number_rows(&t);
    Py_END_ALLOW_THREADS;
    if (failed) {
        PyErr_NoMemory();
        goto out;
    }
    result = PyBytes_FromStringAndSize((const char *)t.keys,
                                       (Py_ssize_t)(t.k * t.m) * (Py_ssize_t)sizeof(int64_t));
out:
    for (int j = 0; j < held; j++) PyBuffer_Release(&views[j]);
    PyMem_RawFree(t.keys);
    PyMem_RawFree(t.slots);
    return result;
}

/* 1 when the positive intervals are in order and none crosses another, 0 when not, -1 when
   the stack cannot be allocated. */
static int laminar_run(const int64_t *start, const int64_t *end, Py_ssize_t n) {
    int64_t *open = PyMem_RawMalloc((size_t)(n > 0 ? n : 1) * sizeof(int64_t));
    if (open == NULL) return -1;
    Py_ssize_t top = 0;
    int have = 0, result = 1;
    int64_t last_start = 0, last_end = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t s = start[i], e = end[i];
        if (e <= s) continue; /* zero length: nests anywhere */
        if (have && !(s > last_start || (s == last_start && e <= last_end))) {
            result = 0; /* out of order */
            break;
        }
        have = 1;
        last_start = s;
        last_end = e;
        while (top > 0 && open[top - 1] <= s) top--; /* ended by now */
        if (top > 0 && e > open[top - 1]) {
            result = 0; /* crosses the innermost open interval */
            break;
        }
        open[top++] = e;
    }
    PyMem_RawFree(open);
    return result;
}

static PyObject *laminar(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *start_obj, *end_obj;
    if (!PyArg_ParseTuple(args, "OO", &start_obj, &end_obj)) return NULL;
    Py_buffer starts, ends;
    if (PyObject_GetBuffer(start_obj, &starts, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return NULL;
    if (PyObject_GetBuffer(end_obj, &ends, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        PyBuffer_Release(&starts);
        return NULL;
    }
    PyObject *result = NULL;
    if (starts.itemsize != 8 || ends.itemsize != 8 || starts.len != ends.len ||
        starts.format == NULL || ends.format == NULL || strcmp(starts.format, ends.format) != 0 ||
        (strcmp(starts.format, "l") != 0 && strcmp(starts.format, "q") != 0)) {
        PyErr_SetString(PyExc_ValueError, "start and end must be int64 arrays of one length");
        goto out;
    }
    int found;
    Py_BEGIN_ALLOW_THREADS;
    found = laminar_run((const int64_t *)starts.buf, (const int64_t *)ends.buf,
                        starts.len / (Py_ssize_t)sizeof(int64_t));
    Py_END_ALLOW_THREADS;
    if (found < 0) {
        PyErr_NoMemory();
        goto out;
    }
    result = PyBool_FromLong(found);
out:
    PyBuffer_Release(&starts);
    PyBuffer_Release(&ends);
    return result;
}

/* widest_gap(start, dur): for intervals [start, start + dur) (int64 arrays of one length n >=
   2) whose starts come in order, the widest gap between what the rows up to one have covered
   and the next row's start, as analysis.repair reads it: (cut, gap, left_span, right_span),
   cut the first row after which the gap is widest, gap that width (negative: an overlap),
   left_span the rows up to cut's reach less the first start, right_span the rows after cut's
   reach less their first start; None where the starts are out of order. Two passes, no
   array made. */
static PyObject *widest_gap(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *start_obj, *dur_obj;
    if (!PyArg_ParseTuple(args, "OO", &start_obj, &dur_obj)) return NULL;
    Py_buffer starts, durs;
    if (PyObject_GetBuffer(start_obj, &starts, PyBUF_C_CONTIGUOUS) < 0) return NULL;
    if (PyObject_GetBuffer(dur_obj, &durs, PyBUF_C_CONTIGUOUS) < 0) {
        PyBuffer_Release(&starts);
        return NULL;
    }
    PyObject *result = NULL;
    Py_ssize_t n = starts.len / (Py_ssize_t)sizeof(int64_t);
    if (starts.len != durs.len || starts.len % (Py_ssize_t)sizeof(int64_t) != 0 || n < 2) {
        PyErr_SetString(PyExc_ValueError, "start and dur must be int64 arrays of one length, 2 or more");
        goto out;
    }
    const int64_t *s = (const int64_t *)starts.buf;
    const int64_t *d = (const int64_t *)durs.buf;
    int ordered = 1;
    Py_ssize_t cut = 0;
    int64_t gap = 0, reach_at_cut = 0, right_reach = 0;
    Py_BEGIN_ALLOW_THREADS;
    int64_t reach = (int64_t)((uint64_t)s[0] + (uint64_t)d[0]);
    for (Py_ssize_t i = 1; i < n; i++) {
        if (s[i] < s[i - 1]) {
            ordered = 0;
            break;
        }
        int64_t here = (int64_t)((uint64_t)s[i] - (uint64_t)reach);
        if (i == 1 || here > gap) {
            gap = here;
            cut = i - 1;
            reach_at_cut = reach;
        }
        int64_t end = (int64_t)((uint64_t)s[i] + (uint64_t)d[i]);
        if (end > reach) reach = end;
    }
    if (ordered) {
        right_reach = (int64_t)((uint64_t)s[cut + 1] + (uint64_t)d[cut + 1]);
        for (Py_ssize_t i = cut + 2; i < n; i++) {
            int64_t end = (int64_t)((uint64_t)s[i] + (uint64_t)d[i]);
            if (end > right_reach) right_reach = end;
        }
    }
    Py_END_ALLOW_THREADS;
    if (!ordered) {
        result = Py_None;
        Py_INCREF(result);
        goto out;
    }
    result = Py_BuildValue("(nLLL)", cut, (long long)gap,
                           (long long)(int64_t)((uint64_t)reach_at_cut - (uint64_t)s[0]),
                           (long long)(int64_t)((uint64_t)right_reach - (uint64_t)s[cut + 1]));
out:
    PyBuffer_Release(&starts);
    PyBuffer_Release(&durs);
    return result;
}


/* A row of a run of tied starts, in the order the run takes: longer first, then by index. */
typedef struct {
    int64_t end, row;
} Tied;

static int longer_first(const void *a, const void *b) {
    const Tied *x = a, *y = b;
    if (x->end != y->end) return x->end > y->end ? -1 : 1;
    return x->row < y->row ? -1 : (x->row > y->row);
}

typedef struct {
    const int64_t *group, *start, *end, *qgroup, *qns;
    int64_t *parent, *found;
    Py_ssize_t n, m;
} Nesting;

/* Whether the interval open on top ended before an interval starting at s: an end at s
   closes before a start at s, but a zero-length interval closes after the starts at its
   instant (operator_nesting's boundary order). */
static inline int ended_before(int64_t top_start, int64_t top_end, int64_t s) {
    return top_end < s || (top_end == s && top_end > top_start);
}

/* 1 when answered, 0 when the pass cannot answer, -1 when memory runs out. */
static int nest_run(Nesting *w) {
    Py_ssize_t n = w->n, m = w->m;
    int64_t groups = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t g = w->group[i];
        if (g < 0 || g > n + 1024) return 0;
        if (g >= groups) groups = g + 1;
        if (w->end[i] < w->start[i] || (i > 0 && w->start[i] < w->start[i - 1])) return 0;
    }
    for (Py_ssize_t j = 1; j < m; j++)
        if (w->qns[j] < w->qns[j - 1]) return 0;
    int64_t *top = PyMem_RawMalloc((size_t)(groups > 0 ? groups : 1) * sizeof(int64_t));
    if (top == NULL) return -1;
    Tied *run = NULL;
    Py_ssize_t run_cap = 0;
    for (int64_t g = 0; g < groups; g++) top[g] = -1;
    int result = 1;
    Py_ssize_t i = 0, j = 0;
    while (i < n || j < m) {
        if (j < m && (i >= n || w->qns[j] < w->start[i])) {
            /* every interval started by then is on its stack: walk down to one still running */
            int64_t g = w->qgroup[j], t = w->qns[j];
            int64_t c = (g >= 0 && g < groups) ? top[g] : -1;
            while (c >= 0 && w->end[c] <= t) c = w->parent[c];
            w->found[j++] = c;
            continue;
        }
        Py_ssize_t stop = i + 1;
        while (stop < n && w->start[stop] == w->start[i]) stop++;
        Py_ssize_t count = stop - i;
        if (count > 1 && count > run_cap) {
            Tied *grown = PyMem_RawRealloc(run, (size_t)count * 2 * sizeof(Tied));
            if (grown == NULL) {
                result = -1;
                goto done;
            }
            run = grown;
            run_cap = count * 2;
        }
        if (count > 1) {
            for (Py_ssize_t k = 0; k < count; k++) run[k] = (Tied){w->end[i + k], i + k};
            qsort(run, (size_t)count, sizeof(Tied), longer_first);
        }
        int64_t s = w->start[i];
        for (Py_ssize_t k = 0; k < count; k++) {
            int64_t r = count > 1 ? run[k].row : i, g = w->group[r], e = w->end[r];
            int64_t t = top[g];
            while (t >= 0 && ended_before(w->start[t], w->end[t], s)) t = w->parent[t];
            if (t >= 0 && e > w->end[t]) {
                result = 0; /* crosses the interval holding it */
                goto done;
            }
            w->parent[r] = t;
            top[g] = r;
        }
        i = stop;
    }
done:
    PyMem_RawFree(top);
    PyMem_RawFree(run);
    return result;
}

static int int64_buffer(PyObject *obj, Py_buffer *view, int writable) {
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) < 0) return -1;
    if (view->itemsize != 8 || view->format == NULL ||
        (strcmp(view->format, "l") != 0 && strcmp(view->format, "q") != 0)) {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_ValueError, "expected int64 arrays");
        return -1;
    }
    return 0;
}

static PyObject *nest(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *objs[7];
    if (!PyArg_ParseTuple(args, "OOOOOOO", &objs[0], &objs[1], &objs[2], &objs[3], &objs[4],
                          &objs[5], &objs[6]))
        return NULL;
    Py_buffer views[7];
    int got = 0;
    PyObject *result = NULL;
    for (; got < 7; got++)
        if (int64_buffer(objs[got], &views[got], got == 3 || got == 6) < 0) goto out;
    Py_ssize_t n = views[0].len / 8, m = views[4].len / 8;
    if (views[1].len / 8 != n || views[2].len / 8 != n || views[3].len / 8 != n ||
        views[5].len / 8 != m || views[6].len / 8 != m) {
        PyErr_SetString(PyExc_ValueError, "nest: the intervals' arrays and the queries' must "
                                          "each be of one length");
        goto out;
    }
    Nesting w = {views[0].buf, views[1].buf, views[2].buf, views[4].buf, views[5].buf,
                 views[3].buf, views[6].buf, n, m};
    int answered;
    Py_BEGIN_ALLOW_THREADS;
    answered = nest_run(&w);
    Py_END_ALLOW_THREADS;
    if (answered < 0) {
        PyErr_NoMemory();
        goto out;
    }
    result = PyBool_FromLong(answered);
out:
    for (int k = 0; k < got; k++) PyBuffer_Release(&views[k]);
    return result;
}

/* The runs of intervals whose starts (of those of positive length) come in order: counted
   (out NULL) or written; -1 where a start comes before the one before it. */
static Py_ssize_t union_pass(const int64_t *s, const int64_t *e, Py_ssize_t n, int64_t *out_start,
                             int64_t *out_end, int64_t *out_first, int64_t *out_cumulative,
                             Py_ssize_t capacity) {
    Py_ssize_t runs = 0;
    int64_t last = 0, reach = 0, run_start = 0, total = 0;
    int any = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (e[i] <= s[i]) continue;
        if (any && s[i] < last) return -1;
        last = s[i];
        if (!any || s[i] > reach) {
            if (any && out_start != NULL) {
                out_end[runs - 1] = reach;
                total = (int64_t)((uint64_t)total + (uint64_t)reach - (uint64_t)run_start);
                out_cumulative[runs] = total;
            }
            if (out_start != NULL) {
                if (runs >= capacity) return -2;
                out_start[runs] = s[i];
                out_first[runs] = (int64_t)i;
            }
            run_start = s[i];
            reach = e[i];
            runs++;
            any = 1;
        } else if (e[i] > reach) {
            reach = e[i];
        }
    }
    if (out_start != NULL) {
        out_cumulative[0] = 0;
        if (runs > 0) {
            out_end[runs - 1] = reach;
            total = (int64_t)((uint64_t)total + (uint64_t)reach - (uint64_t)run_start);
            out_cumulative[runs] = total;
        }
    }
    return runs;
}

static PyObject *union_runs(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *objs[6];
    if (!PyArg_ParseTuple(args, "OOOOOO", &objs[0], &objs[1], &objs[2], &objs[3], &objs[4],
                          &objs[5]))
        return NULL;
    int writing = objs[2] != Py_None;
    int count = writing ? 6 : 2;
    Py_buffer views[6];
    int got = 0;
    PyObject *result = NULL;
    for (; got < count; got++)
        if (int64_buffer(objs[got], &views[got], got >= 2) < 0) goto out;
    Py_ssize_t n = views[0].len / 8;
    if (views[1].len / 8 != n) {
        PyErr_SetString(PyExc_ValueError, "union_runs: start and end must be of one length");
        goto out;
    }
    Py_ssize_t runs, capacity = writing ? views[2].len / 8 : 0;
    if (writing && (views[3].len / 8 != capacity || views[4].len / 8 != capacity ||
                    views[5].len / 8 != capacity + 1)) {
        PyErr_SetString(PyExc_ValueError, "union_runs: the outputs must be of one length "
                                          "(cumulative one longer)");
        goto out;
    }
    Py_BEGIN_ALLOW_THREADS;
    runs = writing ? union_pass(views[0].buf, views[1].buf, n, views[2].buf, views[3].buf,
                                views[4].buf, views[5].buf, capacity)
                   : union_pass(views[0].buf, views[1].buf, n, NULL, NULL, NULL, NULL, 0);
    Py_END_ALLOW_THREADS;
    if (writing && runs != -1 && runs != capacity) {
        /* the outputs must hold exactly the runs the count gave */
        PyErr_SetString(PyExc_ValueError, "union_runs: the outputs do not hold the runs");
        goto out;
    }
    result = PyLong_FromSsize_t(runs);
out:
    for (int k = 0; k < got; k++) PyBuffer_Release(&views[k]);
    return result;
}

/* root's marks before a node's chain is known */
#define UNKNOWN (-2)
#define WALKING (-3)

/* 1: done; 0: not chains (a predecessor out of range, a cycle); -1: out of memory */
static int chains(const int64_t *pred, int64_t *root, int64_t *depth, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) root[i] = UNKNOWN;
    int64_t *stack = NULL; /* the walk's nodes whose chain is not known yet */
    Py_ssize_t capacity = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (root[i] != UNKNOWN) continue;
        Py_ssize_t held = 0;
        int64_t j = i;
        while (root[j] == UNKNOWN) {
            int64_t p = pred[j];
            if (p < 0) { /* the first node of its chain */
                root[j] = j;
                depth[j] = 0;
                break;
            }
            if (p >= n) goto not_chains;
            if (held == capacity) {
                Py_ssize_t grown = capacity ? 2 * capacity : 1024;
                int64_t *more = realloc(stack, (size_t)grown * sizeof(int64_t));
                if (more == NULL) {
                    free(stack);
                    return -1;
                }
                stack = more;
                capacity = grown;
            }
            stack[held++] = j;
            root[j] = WALKING;
            j = p;
        }
        if (root[j] == WALKING) goto not_chains; /* the walk came back to itself */
        int64_t first = root[j], place = depth[j];
        while (held > 0) {
            int64_t k = stack[--held];
            root[k] = first;
            depth[k] = ++place;
        }
    }
    free(stack);
    return 1;
not_chains:
    free(stack);
    return 0;
}

static PyObject *chain_positions(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *objs[3];
    if (!PyArg_ParseTuple(args, "OOO", &objs[0], &objs[1], &objs[2])) return NULL;
    Py_buffer views[3];
    int got = 0;
    PyObject *result = NULL;
    for (; got < 3; got++)
        if (int64_buffer(objs[got], &views[got], got >= 1) < 0) goto out;
    Py_ssize_t n = views[0].len / 8;
    if (views[1].len / 8 != n || views[2].len / 8 != n) {
        PyErr_SetString(PyExc_ValueError, "chain_positions: the arrays must be of one length");
        goto out;
    }
    int done;
    Py_BEGIN_ALLOW_THREADS;
    done = chains(views[0].buf, views[1].buf, views[2].buf, n);
    Py_END_ALLOW_THREADS;
    if (done < 0) {
        PyErr_NoMemory();
        goto out;
    }
    result = PyBool_FromLong(done);
out:
    for (int k = 0; k < got; k++) PyBuffer_Release(&views[k]);
    return result;
}

static void raise_from(int64_t *key, const int64_t *from, const int64_t *src, Py_ssize_t n) {
    /* key[i] = max(key[i], from[src[i]] + 1) where src[i] >= 0 */
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t s = src[i];
        if (s >= 0 && from[s] + 1 > key[i]) key[i] = from[s] + 1;
    }
}

static void raise_edges(int64_t *key, const int64_t *from, const int64_t *src,
                        const int64_t *dst, Py_ssize_t m) {
    for (Py_ssize_t j = 0; j < m; j++) {
        int64_t v = from[src[j]] + 1;
        if (v > key[dst[j]]) key[dst[j]] = v;
    }
}

static Py_ssize_t relax(int64_t *key, const int64_t *launch, const int64_t *wake,
                        const int64_t *wsrc, const int64_t *wdst, Py_ssize_t nw,
                        const int64_t *esrc, const int64_t *edst, Py_ssize_t ne,
                        const int64_t *chain_order, const unsigned char *same, int64_t *scratch,
                        Py_ssize_t n, Py_ssize_t rounds) {
    Py_ssize_t round = 0;
    int64_t *start = malloc((size_t)n * sizeof(int64_t)); /* the keys as the round began */
    if (start == NULL) return -1;
    size_t bytes = (size_t)n * sizeof(int64_t);
    while (round < rounds) {
        round++;
        /* each pass reads the keys the pass before it left (a copy), as numpy's do */
        memcpy(start, key, bytes);
        raise_from(key, start, launch, n);
        memcpy(scratch, key, bytes);
        raise_from(key, scratch, wake, n);
        memcpy(scratch, key, bytes);
        raise_edges(key, scratch, wsrc, wdst, nw);
        memcpy(scratch, key, bytes);
        raise_edges(key, scratch, esrc, edst, ne);
        /* strictly increasing along each chain: the running maximum of key - place */
        int64_t best = 0;
        for (Py_ssize_t k = 0; k < n; k++) {
            int64_t node = chain_order[k];
            int64_t v = key[node] - (int64_t)k;
            if (k == 0 || !same[k] || v > best) best = v;
            key[node] = best + (int64_t)k;
        }
        if (memcmp(start, key, bytes) == 0) break;
    }
    free(start);
    return round;
}

static PyObject *relax_keys(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *objs[10];
    Py_ssize_t rounds;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOn", &objs[0], &objs[1], &objs[2], &objs[3],
                          &objs[4], &objs[5], &objs[6], &objs[7], &objs[8], &objs[9], &rounds))
        return NULL;
    Py_buffer views[10];
    int got = 0;
    PyObject *result = NULL;
    for (; got < 10; got++) {
        if (got == 8) { /* same: one byte a node */
            if (PyObject_GetBuffer(objs[got], &views[got], PyBUF_C_CONTIGUOUS) < 0) goto out;
            if (views[got].itemsize != 1) {
                got++;
                PyErr_SetString(PyExc_ValueError, "relax_keys: same must be one byte a node");
                goto out;
            }
        } else if (int64_buffer(objs[got], &views[got], got == 0 || got == 9) < 0) {
            goto out;
        }
    }
    Py_ssize_t n = views[0].len / 8, nw = views[3].len / 8, ne = views[5].len / 8;
    if (views[1].len / 8 != n || views[2].len / 8 != n || views[7].len / 8 != n ||
        views[8].len != n || views[9].len / 8 != n || views[4].len / 8 != nw ||
        views[6].len / 8 != ne) {
        PyErr_SetString(PyExc_ValueError, "relax_keys: the arrays' lengths do not match");
        goto out;
    }
    /* every pointer must name a node */
    const int64_t *ptrs[6] = {views[1].buf, views[2].buf, views[3].buf, views[4].buf,
                              views[5].buf, views[6].buf};
    const Py_ssize_t counts[6] = {n, n, nw, nw, ne, ne};
    for (int a = 0; a < 6; a++)
        for (Py_ssize_t i = 0; i < counts[a]; i++)
            if (ptrs[a][i] >= n || (a >= 2 && ptrs[a][i] < 0)) {
                PyErr_SetString(PyExc_ValueError, "relax_keys: a pointer past the nodes");
                goto out;
            }
    const int64_t *order = views[7].buf;
    for (Py_ssize_t k = 0; k < n; k++)
        if (order[k] < 0 || order[k] >= n) {
            PyErr_SetString(PyExc_ValueError, "relax_keys: chain_order names no node");
            goto out;
        }
    Py_ssize_t ran;
    Py_BEGIN_ALLOW_THREADS;
    ran = relax(views[0].buf, views[1].buf, views[2].buf, views[3].buf, views[4].buf, nw,
                views[5].buf, views[6].buf, ne, views[7].buf, views[8].buf, views[9].buf, n,
                rounds);
    Py_END_ALLOW_THREADS;
    if (ran < 0) {
        PyErr_NoMemory();
        goto out;
    }
    result = PyLong_FromSsize_t(ran);
out:
    for (int k = 0; k < got; k++) PyBuffer_Release(&views[k]);
    return result;
}

static PyObject *remap_pointers(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *objs[4];
    if (!PyArg_ParseTuple(args, "OOOO", &objs[0], &objs[1], &objs[2], &objs[3])) return NULL;
    Py_buffer views[4];
    int got = 0;
    PyObject *result = NULL;
    for (; got < 4; got++)
        if (int64_buffer(objs[got], &views[got], got == 3) < 0) goto out;
    Py_ssize_t n = views[0].len / 8;
    if (views[1].len / 8 != n || views[2].len / 8 != n || views[3].len / 8 != n) {
        PyErr_SetString(PyExc_ValueError, "remap_pointers: the arrays must be of one length");
        goto out;
    }
    const int64_t *pointers = views[0].buf, *rank = views[1].buf, *order = views[2].buf;
    int64_t *target = views[3].buf;
    for (Py_ssize_t k = 0; k < n; k++)
        if (order[k] < 0 || order[k] >= n || pointers[k] >= n) {
            PyErr_SetString(PyExc_ValueError, "remap_pointers: an index past the nodes");
            goto out;
        }
    Py_ssize_t dropped = 0;
    Py_BEGIN_ALLOW_THREADS;
    for (Py_ssize_t k = 0; k < n; k++) {
        int64_t p = pointers[order[k]];
        int64_t r = p >= 0 ? rank[p] : -1;
        if (r >= (int64_t)k) {
            dropped++;
            r = -1;
        }
        target[k] = r;
    }
    Py_END_ALLOW_THREADS;
    result = PyLong_FromSsize_t(dropped);
out:
    for (int k = 0; k < got; k++) PyBuffer_Release(&views[k]);
    return result;
}

static PyMethodDef methods[] = {
    {"first_seen", first_seen, METH_VARARGS,
     "first_seen(columns, codes) -> the distinct rows in order of first appearance, as bytes; "
     "each row's number among them written into codes."},
    {"laminar", laminar, METH_VARARGS,
     "laminar(start, end) -> whether a track's intervals (int64 arrays of one length), those of "
     "positive length taken in order, come by start, longer first, and none crosses another "
     "(partly overlaps without one holding the other): one pass with a stack of the open "
     "intervals' ends; False when they are out of that order."},
    {"widest_gap", widest_gap, METH_VARARGS,
     "widest_gap(start, dur) -> (cut, gap, left_span, right_span) of intervals whose starts "
     "come in order (int64 arrays of one length, 2 or more): the first row after which the "
     "rows so far leave the widest gap before the next start, that gap, the spans on either "
     "side; None where the starts are out of order."},
    {"nest", nest, METH_VARARGS,
     "nest(group, start, end, parent, query_group, query_ns, found) -> whether the pass "
     "answered: each interval's innermost enclosing one of its group written into parent, "
     "each query's innermost interval running then into found (int64 arrays); False where "
     "the starts or queries are out of order, an end comes before its start, a group lies "
     "past the rows' count plus 1024, or an interval crosses the one holding it."},
    {"union_runs", union_runs, METH_VARARGS,
     "union_runs(start, end, run_start, run_end, first, cumulative) -> the number of runs of "
     "the union of intervals whose starts come in order (int64 arrays), written into the four "
     "outputs when they are given (None: counted only); -1 where the starts are out of order."},
    {"chain_positions", chain_positions, METH_VARARGS,
     "chain_positions(pred, root, depth) -> whether the predecessors make chains: each node's "
     "chain's first node written into root and its place along the chain into depth (int64 "
     "arrays); False where a predecessor lies past the last node or the chains cycle."},
    {"relax_keys", relax_keys, METH_VARARGS,
     "relax_keys(key, launch_src, wake_src, wait_src, wait_dst, event_src, event_dst, "
     "chain_order, same, scratch, rounds) -> the rounds run: the step graph's sort keys raised "
     "above their dependencies' and along each chain until a round changes nothing."},
    {"remap_pointers", remap_pointers, METH_VARARGS,
     "remap_pointers(pointers, rank, order, out) -> the pointers dropped: out[k] = "
     "rank[pointers[order[k]]], -1 where that is negative or not before k."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_columns",
                                    "Rows of integer columns numbered by hashing.", -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__columns(void) { return PyModule_Create(&module); }
