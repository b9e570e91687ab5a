/* One compile call: tensorplay._C.stax_compile sequences a compile miss in
 * C, trace -> the caller's prepare step -> front-end passes -> lowering
 * with the Stax back end, so the Python driver crosses into C once per miss
 * for the whole pipeline instead of once per stage. What stays Python is
 * called back once (prepare): the bookkeeping of Python state a trace
 * touched (stores into modules, effect logs, reseeds), the data-gate replay
 * check and the aliased-write decision, all of which read Python objects
 * only the driver holds. A user back end (or "eager") is called by the
 * driver itself: lower=None. */
#include "guards/guards.h"
#include "cache/cache.h"
#include "lower/lower.h"
#include "trace/trace.h"

/* The exception set now, as a value (traceback attached), when it is an
 * Exception; -1 with it still set otherwise (KeyboardInterrupt, ...). */
static int
take_exception(PyObject **out)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (value == NULL || !PyObject_TypeCheck(value, (PyTypeObject *)PyExc_Exception)) {
        PyErr_Restore(type, value, tb);
        return -1;
    }
    if (tb != NULL) {
        PyException_SetTraceback(value, tb);
    }
    Py_XDECREF(type);
    Py_XDECREF(tb);
    *out = value;
    return 0;
}

/* Lower gm for examples with the Stax back end: *art the program, or *err
 * the exception lowering raised; counts the persistent cache's counter
 * deltas. -1 only for an exception that must propagate. */
static int
lower_stax(PyObject *gm, PyObject *examples, PyObject *options,
           PyObject **art, PyObject **err, unsigned long long counts[3])
{
    unsigned long long before[3], after[3];
    stax_cache_counters(before);
    *art = stax_lower_stax_backend(gm, examples, options);
    stax_cache_counters(after);
    for (int i = 0; i < 3; i++) {
        counts[i] = after[i] - before[i];
    }
    if (*art == NULL && take_exception(err) < 0) {
        return -1;
    }
    return 0;
}

static PyObject *
py_stax_compile(PyObject *mod, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"fn", "inputs", "kwargs", "names", "examples",
                             "prepare", "log", "lower", "lazy", "symenv", NULL};
    PyObject *fn, *inputs, *kw = Py_None, *names = Py_None;
    PyObject *examples = Py_None, *prepare = Py_None, *log = Py_None;
    PyObject *lower = Py_None, *symenv = Py_None;
    PyObject *tr = NULL, *gm = NULL, *gm2 = NULL, *ok = NULL, *art = NULL;
    PyObject *err = NULL, *res = NULL;
    unsigned long long counts[3] = {0, 0, 0};
    int do_lower, lazy = 0;
    (void)mod;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO|OOOOOOpO:stax_compile",
                                     kwlist, &fn, &inputs, &kw, &names,
                                     &examples, &prepare, &log, &lower, &lazy,
                                     &symenv)) {
        return NULL;
    }
    do_lower = lower != Py_None;
    tr = stax_trace_run(fn, inputs, kw, names, lazy, symenv);
    if (tr == NULL) {
        goto done;
    }
    if (prepare != Py_None) {
        int yes;
        ok = PyObject_CallOneArg(prepare, tr);
        if (ok == NULL || (yes = PyObject_IsTrue(ok)) < 0) {
            goto done;
        }
        do_lower = do_lower && yes;
    }
    /* prepare may have replaced the graph's output (extra outputs) */
    gm = PyObject_GetAttrString(tr, "graph_module");
    if (gm == NULL) {
        goto done;
    }
    gm2 = stax_graph_run_frontend_passes(gm, log, 16, 0);
    if (gm2 == NULL) {
        goto done;
    }
    if (gm2 != Py_None) {
        Py_SETREF(gm, gm2);
        gm2 = NULL;
    }
    if (do_lower && lower_stax(gm, examples, lower, &art, &err, counts) < 0) {
        goto done;
    }
    res = Py_BuildValue("(OOOO(KKK))", tr, gm, art ? art : Py_None,
                        err ? err : Py_None, counts[0], counts[1], counts[2]);
done:
    Py_XDECREF(tr);
    Py_XDECREF(gm);
    Py_XDECREF(gm2);
    Py_XDECREF(ok);
    Py_XDECREF(art);
    Py_XDECREF(err);
    return res;
}

static PyMethodDef driver_methods[] = {
    {"stax_compile", (PyCFunction)(void (*)(void))py_stax_compile,
     METH_VARARGS | METH_KEYWORDS,
     "stax_compile(fn, inputs, kwargs=None, names=None, examples=None, "
     "prepare=None, log=None, lower=None, lazy=False, symenv=None) -> "
     "(trace_result, gm, "
     "artifact, error, (cache_hits, cache_misses, backend_compiles))\n\n"
     "One compile miss: trace fn on inputs/kwargs (names: placeholder "
     "names; lazy, symenv: as trace()'s), call prepare(trace_result) (its false result skips lowering), "
     "run the front-end passes on the trace's GraphModule (log: callable(str) "
     "per change) and, when lower is a dict of stax_backend options, lower "
     "gm for examples with the Stax back end. An Exception lowering raised "
     "is returned as error, not raised (the caller decides the fallback); "
     "the counts are the persistent cache's counters during lowering."},
    {NULL, NULL, 0, NULL},
};

int
stax_guard_driver_init(PyObject *m)
{
    return PyModule_AddFunctions(m, driver_methods);
}
