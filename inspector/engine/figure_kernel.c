/* inspector.engine.figure_kernel: the sums and the most likely tokens behind a row's probability figures,
 * in two passes over the row's logits, in C (issue 53: the figures cost 4-6% of a plain step in numpy).
 *
 * rows(logits, n_vocab, k) -> list, one entry per row of ``logits`` (a C-contiguous float32 buffer of
 * rows * n_vocab values): (z, s, top_ids, top_logits) with m the row's largest logit,
 *   z = sum_j exp(x_j - m), s = sum_j exp(x_j - m) * (x_j - m)  (float32 lanes over blocks of 512, then double:
 *   within a few 1e-7 of float64's),
 *   top_ids / top_logits: the k largest logits, largest first, ties to the lower token id
 *   (as numpy.argsort(-x, kind="stable") and llama_sampler_init_greedy pick);
 * or None for a row holding a NaN or +inf, or with fewer than k comparable logits: the caller then takes the
 * numpy path (inspector.engine.probabilities.summarise_rows), which the figures are tested equal to.
 * A logit more than 87 below the row's maximum counts as 87 below (exp -87 = 1.6e-38; float32's smallest normal
 * is 1.2e-38): the row's -inf logits add 1.6e-38 each to z, nothing a 4-digit figure shows.
 * exp is Cephes' expf (range reduction by ln 2, a degree-6 polynomial; within 2 ulp), written as plain arithmetic
 * so that the compiler vectorises the sums; on x86-64 with GCC the row function is also built for x86-64-v3
 * (AVX2 + FMA) and picked at load time: ~30 us a row of 49,152 logits there, ~100 us on baseline x86-64.
 * Raises ValueError for a buffer that is not whole rows, k outside 1..MAX_K or above n_vocab.
 * figures(logits, n_vocab, k, predictions, proposed) -> the rows' softmax figures as summarise_rows' columns
 * (proposed_p, proposed_rank, predicted_p, top_tokens, top_p, entropy, margin, predicted_rank), each value the
 * double expression the Python path evaluates, rounded to 4 significant digits by CPython's own float <-> text
 * calls; None where rows() gives None for a row or a token id is outside the vocabulary (numpy then).
 * isa() -> str: the instruction set the row function runs with ("x86-64-v3" or "baseline").
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "figure_columns.h"
#include <math.h>
#include <stdint.h>
#include <string.h>

#define LANES 8
#define MAX_K 64
#define BLOCK 64
#define EXP_FLOOR (-87.0f)
#define SUM_BLOCK 512 /* logits summed in float32 lanes before the double sums take them */

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define ROW_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#define HAS_CLONES 1
#else
#define ROW_CLONES
#define HAS_CLONES 0
#endif

/* exp(x) for EXP_FLOOR <= x <= 0 (Cephes expf). */
static inline float exp_le0(float x) {
    const float magic = 12582912.0f; /* 1.5 * 2^23: adding it rounds x / ln 2 to an integer */
    float t = x * 1.44269504088896341f + magic;
    float n = t - magic;
    int32_t ni;
    memcpy(&ni, &t, 4);
    ni -= 0x4B400000;
    float r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float y = 1.9875691500e-4f;
    y = y * r + 1.3981999507e-3f;
    y = y * r + 8.3334519073e-3f;
    y = y * r + 4.1665795894e-2f;
    y = y * r + 1.6666665459e-1f;
    y = y * r + 5.0000001201e-1f;
    y = y * r * r + r + 1.0f;
    int32_t yi;
    memcpy(&yi, &y, 4);
    yi += ni * (1 << 23);
    memcpy(&y, &yi, 4);
    return y;
}

/* One row of v logits: z and s as above and the k largest; returns -1 when the row needs the numpy path. */
ROW_CLONES
static int row_stats(const float *x, Py_ssize_t v, int k, double *z_out, double *s_out, int32_t *top_i,
                     float *top_v) {
    int filled = 0;
    float thr = -INFINITY;
    for (Py_ssize_t i = 0; i < v; i += BLOCK) {
        Py_ssize_t end = i + BLOCK < v ? i + BLOCK : v;
        if (filled == k) { /* most blocks hold nothing above the k-th so far: one vectorised comparison pass */
            int any = 0;
            for (Py_ssize_t q = i; q < end; q++) any |= x[q] > thr;
            if (!any) continue;
        }
        for (Py_ssize_t c = i; c < end; c++) {
            float val = x[c];
            if (filled == k ? !(val > thr) : !(val >= -INFINITY)) continue; /* NaN never enters */
            int p = filled < k ? filled : k - 1;
            while (p > 0 && top_v[p - 1] < val) { /* strict: an equal logit keeps its lower id first */
                top_v[p] = top_v[p - 1];
                top_i[p] = top_i[p - 1];
                p--;
            }
            top_v[p] = val;
            top_i[p] = (int32_t)c;
            if (filled < k) filled++;
            thr = top_v[filled - 1];
        }
    }
    if (filled < k) return -1;
    const float m = top_v[0];
    if (!isfinite(m)) return -1;
    double z = 0.0, s = 0.0;
    Py_ssize_t i = 0;
    while (i + LANES <= v) { /* float32 lanes over a block of SUM_BLOCK logits, each block's sums added in double */
        Py_ssize_t stop = i + SUM_BLOCK <= v ? i + SUM_BLOCK : v - (v - i) % LANES;
        float zl[LANES] = {0}, sl[LANES] = {0};
        for (; i < stop; i += LANES) {
            for (int j = 0; j < LANES; j++) {
                float d = x[i + j] - m;
                d = d < EXP_FLOOR ? EXP_FLOOR : d; /* NaN stays NaN: the sums tell */
                float e = exp_le0(d);
                zl[j] += e;
                sl[j] += e * d;
            }
        }
        for (int j = 0; j < LANES; j++) {
            z += zl[j];
            s += sl[j];
        }
    }
    for (; i < v; i++) {
        float d = x[i] - m;
        d = d < EXP_FLOOR ? EXP_FLOOR : d;
        float e = exp_le0(d);
        z += e;
        s += (double)e * d;
    }
    if (!isfinite(z) || !isfinite(s)) return -1;
    *z_out = z;
    *s_out = s;
    return 0;
}

static PyObject *one_row(double z, double s, const int32_t *ti, const float *tv, int k) {
    PyObject *ids = PyTuple_New(k), *vals = PyTuple_New(k);
    if (ids == NULL || vals == NULL) {
        Py_XDECREF(ids);
        Py_XDECREF(vals);
        return NULL;
    }
    for (int j = 0; j < k; j++) {
        PyObject *a = PyLong_FromLong(ti[j]), *b = PyFloat_FromDouble(tv[j]);
        if (a == NULL || b == NULL) {
            Py_XDECREF(a);
            Py_XDECREF(b);
            Py_DECREF(ids);
            Py_DECREF(vals);
            return NULL;
        }
        PyTuple_SET_ITEM(ids, j, a);
        PyTuple_SET_ITEM(vals, j, b);
    }
    return Py_BuildValue("(ddNN)", z, s, ids, vals);
}

static PyObject *rows(PyObject *self, PyObject *args) {
    Py_buffer buf;
    Py_ssize_t n_vocab;
    int k;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*ni", &buf, &n_vocab, &k)) return NULL;
    if (n_vocab < 1 || k < 1 || k > MAX_K || k > n_vocab || buf.len % (n_vocab * (Py_ssize_t)sizeof(float)) != 0) {
        PyErr_Format(PyExc_ValueError, "figure_kernel.rows: %zd bytes are not whole rows of %zd float32 logits, or k = %d "
                     "is outside 1..%d and n_vocab", buf.len, n_vocab, k, MAX_K);
        PyBuffer_Release(&buf);
        return NULL;
    }
    const Py_ssize_t n = buf.len / (n_vocab * (Py_ssize_t)sizeof(float));
    const float *x = (const float *)buf.buf;
    PyObject *out = PyList_New(n);
    if (out == NULL) {
        PyBuffer_Release(&buf);
        return NULL;
    }
    for (Py_ssize_t r = 0; r < n; r++) {
        double z = 0.0, s = 0.0;
        int32_t ti[MAX_K];
        float tv[MAX_K];
        int rc = row_stats(x + r * n_vocab, n_vocab, k, &z, &s, ti, tv);
        PyObject *item;
        if (rc != 0) {
            Py_INCREF(Py_None);
            item = Py_None;
        } else if ((item = one_row(z, s, ti, tv, k)) == NULL) {
            Py_DECREF(out);
            PyBuffer_Release(&buf);
            return NULL;
        }
        PyList_SET_ITEM(out, r, item);
    }
    PyBuffer_Release(&buf);
    return out;
}

/* Rank (1 = largest) of token t in a row: its place among the row's k largest when there, else the logits above
 * its own plus the equal ones of lower ids, plus 1 (ties to the lower id, as the top tokens). */
static long rank_of(const float *x, Py_ssize_t v, const int32_t *ti, int k, int32_t t) {
    for (int j = 0; j < k; j++)
        if (ti[j] == t) return j + 1;
    const float val = x[t];
    long above = 0;
    for (Py_ssize_t c = 0; c < v; c++) above += x[c] > val || (x[c] == val && c < t);
    return above + 1;
}

/* The token ids of a sequence argument (predictions, proposed), each checked against n_vocab; -1 on error
 * (an exception set), 1 when an id is outside the vocabulary (the caller takes the numpy path), 0 when read. */
static int read_ids(PyObject *seq, Py_ssize_t v, int32_t **out, Py_ssize_t *n) {
    PyObject *fast = PySequence_Fast(seq, "token ids must be a sequence");
    if (fast == NULL) return -1;
    *n = PySequence_Fast_GET_SIZE(fast);
    *out = PyMem_Malloc((*n > 0 ? *n : 1) * sizeof(int32_t));
    if (*out == NULL) {
        Py_DECREF(fast);
        PyErr_NoMemory();
        return -1;
    }
    int rc = 0;
    for (Py_ssize_t i = 0; i < *n; i++) {
        long t = PyLong_AsLong(PySequence_Fast_GET_ITEM(fast, i));
        if (t == -1 && PyErr_Occurred()) {
            rc = -1;
            break;
        }
        if (t < 0 || t >= v) rc = 1;
        (*out)[i] = (int32_t)t;
    }
    Py_DECREF(fast);
    if (rc == -1) PyMem_Free(*out);
    return rc;
}

/* The softmax figures of every row, as inspector.engine.probabilities.summarise_rows writes them (its module
 * docstring): columns (proposed_p, proposed_rank, predicted_p, top_tokens, top_p, entropy, margin, predicted_rank),
 * or None when a row needs the numpy path. Each value is the same double expression the Python path evaluates
 * (exp(logit - max) / z, log z - s / z, ...), rounded by fc_rounded (figure_columns.h, shared with figure_sampler.c). */
static PyObject *figures(PyObject *self, PyObject *args) {
    Py_buffer buf;
    Py_ssize_t n_vocab;
    int k;
    PyObject *pred_arg, *prop_arg;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*niOO", &buf, &n_vocab, &k, &pred_arg, &prop_arg)) return NULL;
    PyObject *result = NULL, *cols[FC_COLUMNS] = {NULL};
    int32_t *pred = NULL, *prop = NULL, *ti = NULL;
    float *tv = NULL;
    double *z = NULL, *s = NULL;
    Py_ssize_t n_pred = 0, n_prop = 0;
    if (n_vocab < 1 || k < 1 || k > MAX_K || k > n_vocab || buf.len % (n_vocab * (Py_ssize_t)sizeof(float)) != 0) {
        PyErr_Format(PyExc_ValueError, "figure_kernel.figures: %zd bytes are not whole rows of %zd float32 logits, or "
                     "k = %d is outside 1..%d and n_vocab", buf.len, n_vocab, k, MAX_K);
        goto done;
    }
    const Py_ssize_t n = buf.len / (n_vocab * (Py_ssize_t)sizeof(float));
    const float *x = (const float *)buf.buf;
    int rp = read_ids(pred_arg, n_vocab, &pred, &n_pred);
    if (rp == -1) goto done;
    int rq = read_ids(prop_arg, n_vocab, &prop, &n_prop);
    if (rq == -1) goto done;
    if (n_pred != n || n_prop > n) {
        PyErr_Format(PyExc_ValueError, "figure_kernel.figures: %zd rows need %zd predictions and at most as many "
                     "proposal tokens, observed %zd and %zd", n, n, n_pred, n_prop);
        goto done;
    }
    if (rp == 1 || rq == 1) { /* an id outside the vocabulary: the numpy path says what it says */
        Py_INCREF(Py_None);
        result = Py_None;
        goto done;
    }
    ti = PyMem_Malloc((n > 0 ? n : 1) * k * sizeof(int32_t));
    tv = PyMem_Malloc((n > 0 ? n : 1) * k * sizeof(float));
    z = PyMem_Malloc((n > 0 ? n : 1) * sizeof(double));
    s = PyMem_Malloc((n > 0 ? n : 1) * sizeof(double));
    if (ti == NULL || tv == NULL || z == NULL || s == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t r = 0; r < n; r++) {
        if (row_stats(x + r * n_vocab, n_vocab, k, z + r, s + r, ti + r * k, tv + r * k) != 0) {
            Py_INCREF(Py_None);
            result = Py_None;
            goto done;
        }
    }
    if (fc_new_columns(cols, n) != 0) goto done;
    for (Py_ssize_t r = 0; r < n; r++) {
        const float *row = x + r * n_vocab;
        const int32_t *rti = ti + r * k;
        fc_row f = {rti, tv + r * k, k, tv[r * k], z[r], s[r], 0, 0.0,
                    rank_of(row, n_vocab, rti, k, pred[r]), row[pred[r]]};
        if (r < n_prop) {
            f.prop_rank = rank_of(row, n_vocab, rti, k, prop[r]);
            f.prop_logit = row[prop[r]];
        }
        if (fc_put_row(cols, r, &f) != 0) goto done;
    }
    result = fc_take_columns(cols);
done:
    for (int c = 0; c < FC_COLUMNS; c++) Py_XDECREF(cols[c]);
    PyMem_Free(pred);
    PyMem_Free(prop);
    PyMem_Free(ti);
    PyMem_Free(tv);
    PyMem_Free(z);
    PyMem_Free(s);
    PyBuffer_Release(&buf);
    return result;
}

static PyObject *isa(PyObject *self, PyObject *args) {
    (void)self;
    (void)args;
#if HAS_CLONES
    __builtin_cpu_init();
    if (__builtin_cpu_supports("x86-64-v3")) return PyUnicode_FromString("x86-64-v3");
#endif
    return PyUnicode_FromString("baseline");
}

static PyMethodDef methods[] = {
    {"rows", rows, METH_VARARGS, "rows(logits, n_vocab, k) -> [(z, s, top_ids, top_logits) or None per row]"},
    {"figures", figures, METH_VARARGS,
     "figures(logits, n_vocab, k, predictions, proposed) -> the softmax figures' columns, or None: the numpy path"},
    {"isa", isa, METH_NOARGS, "isa() -> the instruction set rows() runs with"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "figure_kernel",
                                    "The sums and top tokens behind a row's probability figures, in C.", -1, methods};

PyMODINIT_FUNC PyInit_figure_kernel(void) { return PyModule_Create(&module); }
