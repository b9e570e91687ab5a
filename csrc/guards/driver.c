/* One compile call: tensorplay._C.stax_compile sequences a compile miss in
 * C, trace -> the caller's prepare step -> front-end passes -> lowering
 * with the Stax back end, so the Python driver crosses into C once per miss
 * for the whole pipeline instead of once per stage. What stays Python is
 * called back once (prepare): the bookkeeping of Python state a trace
 * touched (stores into modules, effect logs, reseeds) and the aliased-write
 * decision, which read Python objects only the driver holds. Given the
 * call's key components, it also keys the new version (version.c: sigma,
 * gamma_s, gamma_g with its replay check, rho) and writes its guards. A
 * user back end (or "eager") is called by the driver itself: lower=None. */
#include "guards/guards.h"
#include "cache/cache.h"
#include "lower/lower.h"
#include "trace/trace.h"

/* The exception set now, as a value (traceback attached), when it is an
 * Exception; -1 with it still set otherwise (KeyboardInterrupt, ...). */
int
stax_guard_take_exception(PyObject **out)
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
    if (*art == NULL && stax_guard_take_exception(err) < 0) {
        return -1;
    }
    return 0;
}

/* seeds.state0 = the generator's state as the trace begins (a
 * tp.manual_seed inside the trace compares with it: tensorplay.random) */
static int
note_rng_state(PyObject *seeds)
{
    if (seeds == Py_None) {
        return 0;
    }
    PyObject *st = stax_guard_rng_state_list();
    int r = st ? PyObject_SetAttrString(seeds, "state0", st) : -1;
    Py_XDECREF(st);
    return r;
}

/* key with its sigma (items 0-3) taken again from the call: rekey is
 * (args, kwargs, free, effect_only), the form (static or by rank) key's
 * dynamic flag says; new reference */
static PyObject *
rekeyed(PyObject *key, PyObject *rekey, PyObject *examples)
{
    int dyn;
    if (!PyTuple_Check(key) || PyTuple_GET_SIZE(key) != 9 || !PyTuple_Check(rekey)
        || PyTuple_GET_SIZE(rekey) != 4) {
        PyErr_SetString(PyExc_TypeError, "stax_compile: rekey is (args, kwargs, free, "
                        "effect_only), with a key");
        return NULL;
    }
    if ((dyn = PyObject_IsTrue(PyTuple_GET_ITEM(key, 8))) < 0) {
        return NULL;
    }
    PyObject *sig = stax_guard_call_key_of(PyTuple_GET_ITEM(rekey, 0), PyTuple_GET_ITEM(rekey, 1),
                                           PyTuple_GET_ITEM(rekey, 2), PyTuple_GET_ITEM(rekey, 3),
                                           dyn, examples);
    PyObject *head = sig ? PyTuple_GetSlice(key, 4, 9) : NULL;
    PyObject *r = head ? PySequence_Concat(sig, head) : NULL;
    Py_XDECREF(sig);
    Py_XDECREF(head);
    return r;
}

static PyObject *
py_stax_compile(PyObject *mod, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"fn", "inputs", "kwargs", "names", "examples",
                             "prepare", "log", "lower", "lazy", "symenv",
                             "key", "seeds", "rekey", NULL};
    PyObject *fn, *inputs, *kw = Py_None, *names = Py_None;
    PyObject *examples = Py_None, *prepare = Py_None, *log = Py_None;
    PyObject *lower = Py_None, *symenv = Py_None, *key = Py_None;
    PyObject *seeds = Py_None, *rekey = Py_None;
    PyObject *tr = NULL, *gm = NULL, *gm2 = NULL, *ok = NULL, *art = NULL;
    PyObject *err = NULL, *ver = NULL, *res = NULL, *key2 = NULL;
    unsigned long long counts[3] = {0, 0, 0};
    int do_lower, lazy = 0;
    (void)mod;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO|OOOOOOpOOOO:stax_compile",
                                     kwlist, &fn, &inputs, &kw, &names,
                                     &examples, &prepare, &log, &lower, &lazy,
                                     &symenv, &key, &seeds, &rekey)) {
        return NULL;
    }
    do_lower = lower != Py_None;
    /* a call keyed before the function went dynamic: its sigma again, by
     * rank, before the trace runs on its arguments */
    if (rekey != Py_None && key != Py_None) {
        if ((key2 = rekeyed(key, rekey, examples)) == NULL) {
            return NULL;
        }
        key = key2;
    }
    if (note_rng_state(seeds) < 0) {
        goto done;
    }
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
    /* the new version's key: sigma from the call, gamma_s and gamma_g from
     * the trace (its replay slice checked on the traced inputs) */
    if (key != Py_None && (ver = stax_guard_version_key(tr, key, examples)) == NULL) {
        goto done;
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
    /* the guards last: lowering may still have added shape relations */
    if (ver != NULL && stax_guard_version_guards(ver, key, symenv) < 0) {
        goto done;
    }
    /* outputs eager's autograd does not reach through a detach */
    if (ver != NULL) {
        PyObject *masks = stax_guard_detach_masks(gm);
        if (masks == NULL || PyDict_SetItemString(ver, "detach_masks", masks) < 0) {
            Py_XDECREF(masks);
            goto done;
        }
        Py_DECREF(masks);
    }
    if (ver != NULL) {
        res = Py_BuildValue("(OOOO(KKK)O)", tr, gm, art ? art : Py_None,
                            err ? err : Py_None, counts[0], counts[1], counts[2], ver);
    }
    else {
        res = Py_BuildValue("(OOOO(KKK))", tr, gm, art ? art : Py_None,
                            err ? err : Py_None, counts[0], counts[1], counts[2]);
    }
done:
    Py_XDECREF(tr);
    Py_XDECREF(gm);
    Py_XDECREF(gm2);
    Py_XDECREF(ok);
    Py_XDECREF(art);
    Py_XDECREF(err);
    Py_XDECREF(ver);
    Py_XDECREF(key2);
    return res;
}

static PyObject *
py_gate_values(PyObject *mod, PyObject *const *a, Py_ssize_t n)
{
    (void)mod;
    if (n != 2) {
        PyErr_SetString(PyExc_TypeError, "_guard_gate_values(kinds, values)");
        return NULL;
    }
    return stax_guard_gate_values(a[0], a[1]);
}

static PyMethodDef driver_methods[] = {
    {"stax_compile", (PyCFunction)(void (*)(void))py_stax_compile,
     METH_VARARGS | METH_KEYWORDS,
     "stax_compile(fn, inputs, kwargs=None, names=None, examples=None, "
     "prepare=None, log=None, lower=None, lazy=False, symenv=None, "
     "key=None, seeds=None, rekey=None) -> (trace_result, gm, "
     "artifact, error, (cache_hits, cache_misses, backend_compiles)[, version])\n\n"
     "One compile miss: trace fn on inputs/kwargs (names: placeholder "
     "names; lazy, symenv: as trace()'s), call prepare(trace_result) (its false result skips lowering), "
     "run the front-end passes on the trace's GraphModule (log: callable(str) "
     "per change) and, when lower is a dict of stax_backend options, lower "
     "gm for examples with the Stax back end. An Exception lowering raised "
     "is returned as error, not raised (the caller decides the fallback); "
     "the counts are the persistent cache's counters during lowering.\n"
     "key: the call's key components (sig_args, sig_kwargs, sig_free, "
     "aliasing, grad_mode, default_dtype, paths, free_paths, dynamic), "
     "examples the call's tensors (a list): then the new version is keyed "
     "here and a sixth item returned, a dict: key (sigma, gamma_s, gamma_g, "
     "rho), guards [(path, condition, expected)], gate_kinds, gates, replay, "
     "replay_copies, replay_random (the replay slice draws random numbers), "
     "replay_got (None, or what the replay slice gave on the traced inputs "
     "instead of the traced gate outcomes), shape_reads, detach_masks (None, "
     "or per output leaf the mask of the inputs whose requires_grad reaches "
     "it past a detach). seeds: an object "
     "whose state0 is set to the generator's state before the trace. "
     "rekey: (args, kwargs, free, effect_only) of a call keyed before the "
     "function went dynamic: key's sigma and aliasing are computed again "
     "from them (the returned key holds the new sigma)."},
    {"_guard_gate_values", (PyCFunction)(void (*)(void))py_gate_values,
     METH_FASTCALL,
     "_guard_gate_values(kinds, values) -> tuple: the data gates' outcomes "
     "(bool(), int(), float(), tolist(), item() of each value by its kind)"},
    {NULL, NULL, 0, NULL},
};

int
stax_guard_driver_init(PyObject *m)
{
    if (PyModule_AddStringConstant(m, "_guard_gate_text", STAX_GATE_TEXT) < 0) {
        return -1;
    }
    return PyModule_AddFunctions(m, driver_methods);
}
