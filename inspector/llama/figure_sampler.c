/* inspector.llama.figure_sampler: the probability figures' sums of every output row computed inside llama.cpp's
 * graph, on the device that computed the logits (issue 56: llama.cpp's backend sampling, llama.h at 0c1e570).
 *
 * A llama.cpp sampler (struct llama_sampler_i, llama.h "backend sampling interface") that implements only the
 * backend part. Its backend_apply, called by llama.cpp's build_sampling (src/llama-graph.cpp, 0c1e570) once per
 * output row of its sequence with that row's logits x (n_vocab float32), adds to the graph:
 *   sampled    = argmax(x)                                   (the greedy prediction; ggml_argmax: lowest index of
 *                                                             the largest, as llama_sampler_init_greedy)
 *   candidates = the k largest logits' ids (ggml_top_k: in no particular order; the reader sorts them)
 *   logits     = [x[candidates] (k values), m, z, s, x_p, greater]  with m = x[sampled],
 *                d = clamp(x - m, -87, 0), z = sum exp(d), s = sum exp(d) * d (the figure kernel's sums,
 *                inspector/engine/figure_kernel.c, with its floor at -87), x_p the logit of the row's proposed
 *                token and greater the count of logits above it (ggml_step(x - x_p) summed).
 * The proposed token of each row is a graph input set by backend_set_input from the array set_proposed() gave
 * for the next decode (rows in output order; llama.cpp calls backend_set_input once per ubatch, so a cursor walks
 * the array across ubatches). A row without one reads token 0 (its x_p and greater are then not used).
 * llama.cpp copies the three outputs of each row to the host (llama_get_sampled_token_ith / _candidates_ith /
 * _logits_ith) instead of the row's raw logits (needs_raw_logits, src/llama-context.cpp): 2k + 6 numbers a row
 * cross from the device instead of n_vocab.
 *
 * bind(ggml_base_path, llama_path): resolves the ggml and llama functions used (dlopen of the libraries the
 *   llama_cpp package loaded; RuntimeError naming a missing symbol). Call once before new().
 * new(k) -> int: a new sampler keeping k candidates (1..64; ValueError outside), as an address for
 *   llama_sampler_chain_add; the chain owns it (llama_sampler_free of the chain frees it).
 * set_proposed(sampler, ids): the proposed token of each output row of the sampler's sequence in the next decode
 *   (a sequence of int; ids outside 0..n_vocab-1 read as 0); resets the cursor.
 * figures(ctx, base, rows, proposed, predictions, top) -> the figures' columns of the last decode's output rows
 *   ``rows`` (llama.cpp's index base + row) from what the sampler left (below; as figure_kernel.figures gives
 *   them); RuntimeError for a row without them.
 * STATS: the number of values after the k candidates' logits in a row's logits (5: m, z, s, x_p, greater).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include "../engine/figure_columns.h"
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_K 64
#define STATS 5
#define EXP_FLOOR (-87.0f)
#define TYPE_I32 26 /* enum ggml_type GGML_TYPE_I32 (ggml.h) */

struct ggml_tensor;
struct ggml_context;
struct ggml_cgraph;
typedef struct ggml_tensor T;
typedef struct ggml_context C;

/* llama.h 0c1e570: struct llama_sampler_data, struct llama_sampler_i, struct llama_sampler */
struct llama_sampler_data {
    T *logits;
    T *probs;
    T *sampled;
    T *candidates;
};
struct llama_sampler;
struct llama_sampler_i {
    const char *(*name)(const struct llama_sampler *);
    void (*accept)(struct llama_sampler *, int32_t);
    void (*apply)(struct llama_sampler *, void *);
    void (*reset)(struct llama_sampler *);
    struct llama_sampler *(*clone)(const struct llama_sampler *);
    void (*free)(struct llama_sampler *);
    int (*backend_init)(struct llama_sampler *, void *, uint32_t); /* C bool: returned in al */
    void (*backend_accept)(struct llama_sampler *, C *, struct ggml_cgraph *, T *);
    void (*backend_apply)(struct llama_sampler *, C *, struct ggml_cgraph *, struct llama_sampler_data *);
    void (*backend_set_input)(struct llama_sampler *);
    void (*backend_reset)(struct llama_sampler *);
    void (*copy_state)(const struct llama_sampler *, struct llama_sampler *);
};
struct llama_sampler {
    struct llama_sampler_i *iface;
    void *ctx;
};

static T *(*g_top_k)(C *, T *, int);
static T *(*g_argmax)(C *, T *);
static T *(*g_get_rows)(C *, T *, T *);
static T *(*g_reshape_1d)(C *, T *, int64_t);
static T *(*g_reshape_2d)(C *, T *, int64_t, int64_t);
static T *(*g_sub)(C *, T *, T *);
static T *(*g_mul)(C *, T *, T *);
static T *(*g_exp)(C *, T *);
static T *(*g_sum)(C *, T *);
static T *(*g_step)(C *, T *);
static T *(*g_clamp)(C *, T *, float, float);
static T *(*g_concat)(C *, T *, T *, int);
static T *(*g_new_tensor_1d)(C *, int, int64_t);
static void (*g_set_input)(T *);
static T *(*g_set_name)(T *, const char *);
static int64_t (*g_nelements)(const T *);
static void (*g_tensor_set)(T *, const void *, size_t, size_t);
static struct llama_sampler *(*l_sampler_init)(struct llama_sampler_i *, void *);
static int32_t *(*l_candidates)(void *, int32_t);
static uint32_t (*l_candidates_count)(void *, int32_t);
static float *(*l_logits)(void *, int32_t);
static uint32_t (*l_logits_count)(void *, int32_t);

typedef struct {
    int k;
    int64_t n_vocab;
    T **inputs; /* one per row built into the current graph, in output order */
    int n_inputs, cap;
    int32_t *proposed;
    Py_ssize_t n_proposed, cursor;
} state;

static const char *fs_name(const struct llama_sampler *s) {
    (void)s;
    return "inspector-figures";
}

/* Host sampling is not this sampler's: the row's prediction is the backend's argmax. */
static void fs_apply(struct llama_sampler *s, void *cur_p) {
    (void)s;
    (void)cur_p;
}

static void fs_free(struct llama_sampler *s) {
    state *st = (state *)s->ctx;
    if (st != NULL) {
        free(st->inputs);
        free(st->proposed);
        free(st);
    }
}

static int fs_backend_init(struct llama_sampler *s, void *buft, uint32_t n_outputs_max_per_seq) {
    (void)s;
    (void)buft;
    (void)n_outputs_max_per_seq;
    return 1;
}

static void fs_backend_apply(struct llama_sampler *s, C *ctx, struct ggml_cgraph *gf, struct llama_sampler_data *data) {
    (void)gf;
    state *st = (state *)s->ctx;
    T *x = data->logits;
    const int64_t v = g_nelements(x);
    st->n_vocab = v;
    const int k = st->k < v ? st->k : (int)v;
    T *column = g_reshape_2d(ctx, x, 1, v); /* one logit per "row": get_rows picks logits by token id */
    T *top = g_top_k(ctx, x, k);
    g_set_name(top, "figures_top");
    T *top_logits = g_reshape_1d(ctx, g_get_rows(ctx, column, top), k);
    T *best = g_argmax(ctx, g_reshape_2d(ctx, x, v, 1));
    g_set_name(best, "figures_argmax");
    T *m = g_reshape_1d(ctx, g_get_rows(ctx, column, best), 1);
    T *d = g_clamp(ctx, g_sub(ctx, x, m), EXP_FLOOR, 0.0f);
    T *e = g_exp(ctx, d);
    T *z = g_sum(ctx, e);
    T *sums = g_sum(ctx, g_mul(ctx, e, d));
    T *in = g_new_tensor_1d(ctx, TYPE_I32, 1);
    g_set_name(in, "figures_proposed");
    g_set_input(in);
    if (st->n_inputs == st->cap) {
        int cap = st->cap ? 2 * st->cap : 16;
        T **grown = realloc(st->inputs, cap * sizeof(T *));
        if (grown == NULL) abort(); /* no way to report from inside graph building */
        st->inputs = grown;
        st->cap = cap;
    }
    st->inputs[st->n_inputs++] = in;
    T *xp = g_reshape_1d(ctx, g_get_rows(ctx, column, in), 1);
    T *greater = g_sum(ctx, g_step(ctx, g_sub(ctx, x, xp)));
    T *stats = g_concat(ctx, top_logits, m, 0);
    stats = g_concat(ctx, stats, g_reshape_1d(ctx, z, 1), 0);
    stats = g_concat(ctx, stats, g_reshape_1d(ctx, sums, 1), 0);
    stats = g_concat(ctx, stats, xp, 0);
    stats = g_concat(ctx, stats, g_reshape_1d(ctx, greater, 1), 0);
    g_set_name(stats, "figures_stats");
    data->logits = stats;
    data->candidates = top;
    data->sampled = best;
    data->probs = NULL;
}

static void fs_backend_set_input(struct llama_sampler *s) {
    state *st = (state *)s->ctx;
    for (int i = 0; i < st->n_inputs; i++) {
        Py_ssize_t at = st->cursor + i;
        int32_t t = at < st->n_proposed ? st->proposed[at] : 0;
        if (t < 0 || t >= st->n_vocab) t = 0;
        g_tensor_set(st->inputs[i], &t, 0, sizeof t);
    }
    st->cursor += st->n_inputs;
}

static void fs_backend_reset(struct llama_sampler *s) {
    ((state *)s->ctx)->n_inputs = 0;
}

static struct llama_sampler_i fs_iface = {
    fs_name, NULL, fs_apply, NULL, NULL, fs_free, fs_backend_init, NULL, fs_backend_apply, fs_backend_set_input,
    fs_backend_reset, NULL,
};

static int resolve(void *lib, const char *name, void **out) {
    *out = dlsym(lib, name);
    if (*out == NULL) {
        PyErr_Format(PyExc_RuntimeError, "figure_sampler: %s not found in llama.cpp's libraries", name);
        return -1;
    }
    return 0;
}

static PyObject *bind(PyObject *self, PyObject *args) {
    (void)self;
    const char *ggml_path, *llama_path;
    if (!PyArg_ParseTuple(args, "ss", &ggml_path, &llama_path)) return NULL;
    void *g = dlopen(ggml_path, RTLD_NOW | RTLD_LOCAL);
    void *l = dlopen(llama_path, RTLD_NOW | RTLD_LOCAL);
    if (g == NULL || l == NULL) {
        PyErr_Format(PyExc_RuntimeError, "figure_sampler: cannot open llama.cpp's libraries: %s", dlerror());
        return NULL;
    }
    struct { void *lib; const char *name; void **slot; } table[] = {
        {g, "ggml_top_k", (void **)&g_top_k},         {g, "ggml_argmax", (void **)&g_argmax},
        {g, "ggml_get_rows", (void **)&g_get_rows},   {g, "ggml_reshape_1d", (void **)&g_reshape_1d},
        {g, "ggml_reshape_2d", (void **)&g_reshape_2d}, {g, "ggml_sub", (void **)&g_sub},
        {g, "ggml_mul", (void **)&g_mul},             {g, "ggml_exp", (void **)&g_exp},
        {g, "ggml_sum", (void **)&g_sum},             {g, "ggml_step", (void **)&g_step},
        {g, "ggml_clamp", (void **)&g_clamp},         {g, "ggml_concat", (void **)&g_concat},
        {g, "ggml_new_tensor_1d", (void **)&g_new_tensor_1d}, {g, "ggml_set_input", (void **)&g_set_input},
        {g, "ggml_set_name", (void **)&g_set_name},   {g, "ggml_nelements", (void **)&g_nelements},
        {g, "ggml_backend_tensor_set", (void **)&g_tensor_set},
        {l, "llama_sampler_init", (void **)&l_sampler_init},
        {l, "llama_get_sampled_candidates_ith", (void **)&l_candidates},
        {l, "llama_get_sampled_candidates_count_ith", (void **)&l_candidates_count},
        {l, "llama_get_sampled_logits_ith", (void **)&l_logits},
        {l, "llama_get_sampled_logits_count_ith", (void **)&l_logits_count},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (resolve(table[i].lib, table[i].name, table[i].slot) != 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *new_sampler(PyObject *self, PyObject *args) {
    (void)self;
    int k;
    if (!PyArg_ParseTuple(args, "i", &k)) return NULL;
    if (l_sampler_init == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "figure_sampler: bind() first");
        return NULL;
    }
    if (k < 1 || k > MAX_K) {
        PyErr_Format(PyExc_ValueError, "figure_sampler: k = %d is outside 1..%d", k, MAX_K);
        return NULL;
    }
    state *st = calloc(1, sizeof *st);
    if (st == NULL) return PyErr_NoMemory();
    st->k = k;
    struct llama_sampler *s = l_sampler_init(&fs_iface, st);
    if (s == NULL) {
        free(st);
        return PyErr_NoMemory();
    }
    return PyLong_FromVoidPtr(s);
}

static PyObject *set_proposed(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *addr, *ids;
    if (!PyArg_ParseTuple(args, "OO", &addr, &ids)) return NULL;
    struct llama_sampler *s = PyLong_AsVoidPtr(addr);
    if (s == NULL) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "figure_sampler: no sampler");
        return NULL;
    }
    state *st = (state *)s->ctx;
    PyObject *fast = PySequence_Fast(ids, "figure_sampler: proposed ids must be a sequence");
    if (fast == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    int32_t *buf = realloc(st->proposed, (n > 0 ? n : 1) * sizeof(int32_t));
    if (buf == NULL) {
        Py_DECREF(fast);
        return PyErr_NoMemory();
    }
    st->proposed = buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        long t = PyLong_AsLong(PySequence_Fast_GET_ITEM(fast, i));
        if (t == -1 && PyErr_Occurred()) {
            Py_DECREF(fast);
            st->n_proposed = 0;
            return NULL;
        }
        buf[i] = (int32_t)t;
    }
    Py_DECREF(fast);
    st->n_proposed = n;
    st->cursor = 0;
    Py_RETURN_NONE;
}

static int read_ints(PyObject *seq, int32_t **out, Py_ssize_t *n) {
    PyObject *fast = PySequence_Fast(seq, "figure_sampler: token ids and rows must be sequences");
    if (fast == NULL) return -1;
    *n = PySequence_Fast_GET_SIZE(fast);
    *out = PyMem_Malloc((*n > 0 ? *n : 1) * sizeof(int32_t));
    if (*out == NULL) {
        Py_DECREF(fast);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < *n; i++) {
        long v = PyLong_AsLong(PySequence_Fast_GET_ITEM(fast, i));
        if (v == -1 && PyErr_Occurred()) {
            Py_DECREF(fast);
            return -1;
        }
        (*out)[i] = (int32_t)v;
    }
    Py_DECREF(fast);
    return 0;
}

/* figures(ctx, base, rows, proposed, predictions, top): the softmax figures' columns of the last decode's output
 * rows ``rows`` (llama.cpp's index of row r is base + r: a batch position, or negative from the last output row)
 * from what the sampler left, as figure_kernel.figures
 * gives them (proposed_p, proposed_rank, predicted_p, top_tokens, top_p, entropy, margin, predicted_rank; the same
 * expressions, rounded alike): the candidates sorted largest first, ties to the lower id; a proposed token among
 * them takes its place, else the graph's count of logits above it + 1. RuntimeError for a row the graph left
 * nothing for, fewer candidates than max(2, top) or a prediction outside them. */
static PyObject *figures(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *ctx_arg, *rows_arg, *prop_arg, *pred_arg, *result = NULL, *cols[FC_COLUMNS] = {NULL};
    int base, top;
    if (!PyArg_ParseTuple(args, "OiOOOi", &ctx_arg, &base, &rows_arg, &prop_arg, &pred_arg, &top)) return NULL;
    if (l_candidates == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "figure_sampler: bind() first");
        return NULL;
    }
    void *ctx = PyLong_AsVoidPtr(ctx_arg);
    if (ctx == NULL && PyErr_Occurred()) return NULL;
    int32_t *rows = NULL, *prop = NULL, *pred = NULL;
    Py_ssize_t n = 0, n_prop = 0, n_pred = 0;
    const int k = top > 2 ? top : 2;
    if (read_ints(rows_arg, &rows, &n) || read_ints(prop_arg, &prop, &n_prop) || read_ints(pred_arg, &pred, &n_pred))
        goto done;
    if (n_pred != n || n_prop > n) {
        PyErr_Format(PyExc_RuntimeError, "figure_sampler.figures: %zd rows need %zd predictions and at most as many "
                     "proposal tokens, observed %zd and %zd", n, n, n_pred, n_prop);
        goto done;
    }
    if (fc_new_columns(cols, n) != 0) goto done;
    for (Py_ssize_t r = 0; r < n; r++) {
        const int32_t at = base + rows[r];
        const int32_t *cand = l_candidates(ctx, at);
        const float *vals = l_logits(ctx, at);
        const uint32_t nc = l_candidates_count(ctx, at), nv = l_logits_count(ctx, at);
        if (cand == NULL || vals == NULL || nc > MAX_K || nv != nc + STATS || (int)nc < k) {
            PyErr_Format(PyExc_RuntimeError, "llama.cpp left no figures for row %d of the last decode (backend "
                         "sampling: %u candidates, %u values, %d asked for)", rows[r], nc, nv, k);
            goto done;
        }
        int order[MAX_K];
        for (uint32_t j = 0; j < nc; j++) { /* insertion sort: largest logit first, ties to the lower id */
            int at_j = (int)j;
            while (at_j > 0 && (vals[j] > vals[order[at_j - 1]] ||
                                (vals[j] == vals[order[at_j - 1]] && cand[j] < cand[order[at_j - 1]]))) {
                order[at_j] = order[at_j - 1];
                at_j--;
            }
            order[at_j] = (int)j;
        }
        int32_t ids[MAX_K];
        float logits[MAX_K];
        for (uint32_t j = 0; j < nc; j++) {
            ids[j] = cand[order[j]];
            logits[j] = vals[order[j]];
        }
        /* after the candidates' logits: m, z, s, the proposed token's logit, the logits above it (STATS) */
        fc_row f = {ids, logits, k, vals[nc], vals[nc + 1], vals[nc + 2], 0, vals[nc + 3], 0, 0.0};
        for (uint32_t j = 0; j < nc; j++) {
            if (ids[j] == pred[r] && f.pred_rank == 0) {
                f.pred_rank = (long)j + 1;
                f.pred_logit = logits[j];
            }
            if (r < n_prop && ids[j] == prop[r] && f.prop_rank == 0) {
                f.prop_rank = (long)j + 1;
                f.prop_logit = logits[j];
            }
        }
        if (f.pred_rank == 0) {
            PyErr_Format(PyExc_RuntimeError, "row %d's prediction %d is not among the graph's candidates", rows[r],
                         pred[r]);
            goto done;
        }
        if (r < n_prop && f.prop_rank == 0) f.prop_rank = (long)vals[nc + 4] + 1; /* outside: the count above + 1 */
        if (fc_put_row(cols, r, &f) != 0) goto done;
    }
    result = fc_take_columns(cols);
done:
    for (int c = 0; c < FC_COLUMNS; c++) Py_XDECREF(cols[c]);
    PyMem_Free(rows);
    PyMem_Free(prop);
    PyMem_Free(pred);
    return result;
}

static PyMethodDef methods[] = {
    {"bind", bind, METH_VARARGS, "bind(ggml_base_path, llama_path): resolve llama.cpp's functions"},
    {"new", new_sampler, METH_VARARGS, "new(k) -> the address of a new figures sampler keeping k candidates"},
    {"set_proposed", set_proposed, METH_VARARGS, "set_proposed(sampler, ids): each output row's proposed token"},
    {"figures", figures, METH_VARARGS,
     "figures(ctx, base, rows, proposed, predictions, top) -> the softmax figures' columns of those output rows"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "figure_sampler",
                                    "The probability figures' sums computed in llama.cpp's graph.", -1, methods};

PyMODINIT_FUNC PyInit_figure_sampler(void) {
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddIntConstant(m, "STATS", STATS) != 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
