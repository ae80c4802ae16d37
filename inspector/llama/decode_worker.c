/* inspector.llama.decode_worker: every llama_decode of a context on ONE native thread, handed over without
 * Python on that thread (issue 53).
 *
 * Why one thread: inspector/llama/decode_thread.py (llama.cpp's OpenMP thread teams belong to the calling OS
 * thread; two threads that decode throttle each other's teams). Why native: the Python DecodeThread hands each
 * decode over with Python's locks on both sides, and the decode thread must take the GIL to start the call and
 * again to report it done: ~115 us a decode measured here (2 cores, the bundled model), 1.3% of a one-row step,
 * which llama-server (one loop that decodes itself) does not spend. Here the caller releases the GIL, signals
 * a pthread condition and waits on another; the worker never enters Python: ~45 us a decode (11 to the worker,
 * 33 back to the caller; .last_times), 0.6% of a one-row step.
 *
 * DecodeWorker(decode_address, synchronize_address): the addresses of llama_decode and llama_synchronize (from
 *   ctypes); the thread starts at once.
 * .decode(ctx_address, batch_address) -> int: llama_decode(ctx, *batch) then llama_synchronize(ctx) on the
 *   worker thread (batch_address: a struct llama_batch, llama.h at 0c1e570), waited for; returns llama_decode's
 *   status. Calls from several threads run one at a time, in the order they take the worker's lock.
 *   Raises RuntimeError once closed.
 * .close(): ends the thread after the decode in flight (idempotent).
 * .last_times: (start, end) of the last decode on the worker thread, CLOCK_MONOTONIC ns (the handover's cost is
 *   the caller's time around .decode minus end - start).
 * .closed: True once close() ran. .decodes: decodes the worker thread ran. .native_id: its thread id (Linux: as
 *   threading.get_native_id gives for Python's threads; 0 elsewhere).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <stdint.h>
#include <time.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

typedef struct {
    int32_t n_tokens;
    void *token;
    void *embd;
    void *pos;
    void *n_seq_id;
    void *seq_id;
    void *logits;
} llama_batch_abi; /* struct llama_batch of llama.h (0c1e570), passed by value */

typedef int32_t (*decode_fn)(void *ctx, llama_batch_abi batch);
typedef void (*synchronize_fn)(void *ctx);

typedef struct {
    PyObject_HEAD
    pthread_t thread;
    pthread_mutex_t lock;      /* guards the fields below */
    pthread_cond_t work;       /* a job was posted, or closing */
    pthread_cond_t done;       /* the job ended */
    pthread_mutex_t callers;   /* one caller at a time */
    decode_fn decode;
    synchronize_fn synchronize;
    void *ctx;
    llama_batch_abi batch;
    int32_t rc;
    int posted;                /* a job waits for the worker */
    int finished;              /* the job ended */
    int closing;
    int started;
    long long decodes;         /* decodes the worker ran */
    long native_id;            /* the worker's thread id (Linux), 0 until it runs */
    long long picked_ns, done_ns; /* the last decode's start and end on the worker (CLOCK_MONOTONIC) */
} DecodeWorker;

static long long now_ns(void) { /* the clock Python's time.perf_counter_ns reads on Linux */
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void *worker_loop(void *arg) {
    DecodeWorker *w = (DecodeWorker *)arg;
    pthread_mutex_lock(&w->lock);
#if defined(__linux__)
    w->native_id = (long)syscall(SYS_gettid);
#endif
    for (;;) {
        while (!w->posted && !w->closing) pthread_cond_wait(&w->work, &w->lock);
        if (!w->posted) break; /* closing, nothing left */
        void *ctx = w->ctx;
        llama_batch_abi batch = w->batch;
        w->posted = 0;
        pthread_mutex_unlock(&w->lock);
        long long picked = now_ns();
        int32_t rc = w->decode(ctx, batch);
        w->synchronize(ctx);
        long long ended = now_ns();
        pthread_mutex_lock(&w->lock);
        w->picked_ns = picked;
        w->done_ns = ended;
        w->rc = rc;
        w->decodes++;
        w->finished = 1;
        pthread_cond_signal(&w->done);
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

static int worker_init(DecodeWorker *w, PyObject *args, PyObject *kwds) {
    unsigned long long decode_address, synchronize_address;
    static char *kwlist[] = {"decode_address", "synchronize_address", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "KK", kwlist, &decode_address, &synchronize_address)) return -1;
    if (w->started) {
        PyErr_SetString(PyExc_RuntimeError, "DecodeWorker: already started");
        return -1;
    }
    if (decode_address == 0 || synchronize_address == 0) {
        PyErr_SetString(PyExc_ValueError, "DecodeWorker: a null function address");
        return -1;
    }
    w->decode = (decode_fn)(uintptr_t)decode_address;
    w->synchronize = (synchronize_fn)(uintptr_t)synchronize_address;
    pthread_mutex_init(&w->lock, NULL);
    pthread_mutex_init(&w->callers, NULL);
    pthread_cond_init(&w->work, NULL);
    pthread_cond_init(&w->done, NULL);
    w->posted = w->finished = w->closing = 0;
    if (pthread_create(&w->thread, NULL, worker_loop, w) != 0) {
        PyErr_SetString(PyExc_RuntimeError, "DecodeWorker: could not start its thread");
        return -1;
    }
    w->started = 1;
    return 0;
}

static PyObject *worker_decode(DecodeWorker *w, PyObject *args) {
    unsigned long long ctx_address, batch_address;
    if (!PyArg_ParseTuple(args, "KK", &ctx_address, &batch_address)) return NULL;
    if (!w->started) {
        PyErr_SetString(PyExc_RuntimeError, "DecodeWorker: not started");
        return NULL;
    }
    int32_t rc = 0;
    int closed = 0;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&w->callers);
    pthread_mutex_lock(&w->lock);
    if (w->closing) {
        closed = 1;
    } else {
        w->ctx = (void *)(uintptr_t)ctx_address;
        w->batch = *(const llama_batch_abi *)(uintptr_t)batch_address;
        w->finished = 0;
        w->posted = 1;
        pthread_cond_signal(&w->work);
        while (!w->finished) pthread_cond_wait(&w->done, &w->lock);
        rc = w->rc;
    }
    pthread_mutex_unlock(&w->lock);
    pthread_mutex_unlock(&w->callers);
    Py_END_ALLOW_THREADS
    if (closed) {
        PyErr_SetString(PyExc_RuntimeError, "DecodeWorker: closed");
        return NULL;
    }
    return PyLong_FromLong(rc);
}

static void stop(DecodeWorker *w) {
    if (!w->started) return;
    pthread_mutex_lock(&w->lock);
    int was = w->closing;
    w->closing = 1;
    pthread_cond_signal(&w->work);
    pthread_mutex_unlock(&w->lock);
    if (!was) pthread_join(w->thread, NULL);
}

static PyObject *worker_close(DecodeWorker *w, PyObject *noargs) {
    (void)noargs;
    Py_BEGIN_ALLOW_THREADS
    stop(w);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static void worker_dealloc(DecodeWorker *w) {
    Py_BEGIN_ALLOW_THREADS
    stop(w);
    Py_END_ALLOW_THREADS
    if (w->started) {
        pthread_mutex_destroy(&w->lock);
        pthread_mutex_destroy(&w->callers);
        pthread_cond_destroy(&w->work);
        pthread_cond_destroy(&w->done);
    }
    Py_TYPE(w)->tp_free((PyObject *)w);
}

static PyObject *worker_closed(DecodeWorker *w, void *closure) {
    (void)closure;
    return PyBool_FromLong(w->closing);
}

static PyMethodDef worker_methods[] = {
    {"decode", (PyCFunction)worker_decode, METH_VARARGS,
     "decode(ctx_address, batch_address) -> llama_decode's status, run on the worker thread and waited for"},
    {"close", (PyCFunction)worker_close, METH_NOARGS, "end the worker thread (idempotent)"},
    {NULL, NULL, 0, NULL},
};

static PyObject *worker_decodes(DecodeWorker *w, void *closure) {
    (void)closure;
    if (!w->started) return PyLong_FromLong(0);
    pthread_mutex_lock(&w->lock);
    long long n = w->decodes;
    pthread_mutex_unlock(&w->lock);
    return PyLong_FromLongLong(n);
}

static PyObject *worker_native_id(DecodeWorker *w, void *closure) {
    (void)closure;
    if (!w->started) return PyLong_FromLong(0);
    pthread_mutex_lock(&w->lock);
    long id = w->native_id;
    pthread_mutex_unlock(&w->lock);
    return PyLong_FromLong(id);
}

static PyObject *worker_last_times(DecodeWorker *w, void *closure) {
    (void)closure;
    if (!w->started) return Py_BuildValue("(LL)", 0LL, 0LL);
    pthread_mutex_lock(&w->lock);
    long long a = w->picked_ns, b = w->done_ns;
    pthread_mutex_unlock(&w->lock);
    return Py_BuildValue("(LL)", a, b);
}

static PyGetSetDef worker_getset[] = {
    {"last_times", (getter)worker_last_times, NULL,
     "(start, end) of the last decode on the worker, CLOCK_MONOTONIC ns (time.perf_counter_ns's clock on Linux)",
     NULL},
    {"closed", (getter)worker_closed, NULL, "True once close() ran", NULL},
    {"decodes", (getter)worker_decodes, NULL, "decodes the worker thread ran", NULL},
    {"native_id", (getter)worker_native_id, NULL, "the worker thread's id (Linux; 0 elsewhere)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject DecodeWorkerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "inspector.llama.decode_worker.DecodeWorker",
    .tp_basicsize = sizeof(DecodeWorker),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Every llama_decode of a context on one native thread (module docstring).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)worker_init,
    .tp_dealloc = (destructor)worker_dealloc,
    .tp_methods = worker_methods,
    .tp_getset = worker_getset,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "decode_worker",
                                    "Every llama_decode of a context on one native thread.", -1, NULL};

PyMODINIT_FUNC PyInit_decode_worker(void) {
    if (PyType_Ready(&DecodeWorkerType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    Py_INCREF(&DecodeWorkerType);
    if (PyModule_AddObject(m, "DecodeWorker", (PyObject *)&DecodeWorkerType) < 0) {
        Py_DECREF(&DecodeWorkerType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
