/* The softmax figures' columns as Python objects, from a row's sums: one rule for both C paths (issue 56).
 *
 * inspector/engine/figure_kernel.c (the host path: sums from the row's logits) and inspector/llama/figure_sampler.c
 * (backend sampling: sums llama.cpp's graph computed) both hand a row's numbers to fc_put_row, which writes the
 * values inspector.engine.probabilities.summarise_rows writes, each the same double expression, rounded to 4
 * significant digits by CPython's own float <-> text calls: the columns (proposed_p, proposed_rank, predicted_p,
 * top_tokens, top_p, entropy, margin, predicted_rank). Included by both; static functions only.
 */
#ifndef INSPECTOR_FIGURE_COLUMNS_H
#define INSPECTOR_FIGURE_COLUMNS_H

#include <Python.h>
#include <math.h>
#include <stdint.h>

#define FC_COLUMNS 8

/* x rounded to 4 significant digits as Python's float(f"{x:.4g}") rounds it (the same two CPython calls). */
static PyObject *fc_rounded(double x) {
    char *text = PyOS_double_to_string(x, 'g', 4, 0, NULL);
    if (text == NULL) return NULL;
    double back = PyOS_string_to_double(text, NULL, NULL);
    PyMem_Free(text);
    if (back == -1.0 && PyErr_Occurred()) return NULL;
    return PyFloat_FromDouble(back);
}

/* One row's figures. ids/logits: the row's k most likely tokens and their logits, largest first; m: the row's
 * largest logit; z = sum exp(x - m); s = sum exp(x - m)(x - m); prop_rank 0: the row judged no proposal token
 * (its proposed columns None), else the proposed token's 1-based rank and prop_logit its logit; pred_logit and
 * pred_rank: the prediction's. */
typedef struct {
    const int32_t *ids;
    const float *logits;
    int k;
    double m, z, s;
    long prop_rank;
    double prop_logit;
    long pred_rank;
    double pred_logit;
} fc_row;

/* New tuples of n entries, one per column; -1 (an exception set) when Python could not make one. */
static int fc_new_columns(PyObject *cols[FC_COLUMNS], Py_ssize_t n) {
    for (int c = 0; c < FC_COLUMNS; c++)
        if ((cols[c] = PyTuple_New(n)) == NULL) return -1;
    return 0;
}

/* Row r of every column from ``row``; -1 (an exception set) when Python could not make a value. */
static int fc_put_row(PyObject *cols[FC_COLUMNS], Py_ssize_t r, const fc_row *row) {
    PyObject *ids = PyTuple_New(row->k), *ps = PyTuple_New(row->k);
    if (ids == NULL || ps == NULL) {
        Py_XDECREF(ids);
        Py_XDECREF(ps);
        return -1;
    }
    PyTuple_SET_ITEM(cols[3], r, ids);
    PyTuple_SET_ITEM(cols[4], r, ps);
    for (int j = 0; j < row->k; j++) {
        PyObject *a = PyLong_FromLong(row->ids[j]), *b = fc_rounded(exp((double)row->logits[j] - row->m) / row->z);
        if (a == NULL || b == NULL) {
            Py_XDECREF(a);
            Py_XDECREF(b);
            return -1;
        }
        PyTuple_SET_ITEM(ids, j, a);
        PyTuple_SET_ITEM(ps, j, b);
    }
    const double ent = log(row->z) - row->s / row->z;
    const int judged = row->prop_rank > 0;
    PyObject *items[6];
    items[0] = judged ? fc_rounded(exp(row->prop_logit - row->m) / row->z) : (Py_INCREF(Py_None), Py_None);
    items[1] = judged ? PyLong_FromLong(row->prop_rank) : (Py_INCREF(Py_None), Py_None);
    items[2] = fc_rounded(exp(row->pred_logit - row->m) / row->z);
    items[3] = fc_rounded(ent > 0.0 ? ent : 0.0);
    items[4] = fc_rounded(row->k > 1 ? (double)row->logits[0] - (double)row->logits[1] : INFINITY);
    items[5] = PyLong_FromLong(row->pred_rank);
    static const int where[6] = {0, 1, 2, 5, 6, 7};
    int failed = 0;
    for (int c = 0; c < 6; c++) {
        if (items[c] == NULL) failed = 1;
        else PyTuple_SET_ITEM(cols[where[c]], r, items[c]);
    }
    return failed ? -1 : 0;
}

/* The columns as one tuple (they are moved into it; NULL with an exception set when Python could not make it). */
static PyObject *fc_take_columns(PyObject *cols[FC_COLUMNS]) {
    PyObject *result = PyTuple_New(FC_COLUMNS);
    if (result != NULL)
        for (int c = 0; c < FC_COLUMNS; c++) {
            PyTuple_SET_ITEM(result, c, cols[c]);
            cols[c] = NULL;
        }
    return result;
}

#endif
