/* The key and guards of a new version, assembled inside the one compile
 * call (_C.stax_compile, driver.c) from the call's sigma and what the
 * trace found: kappa = (sigma, gamma_s, gamma_g, rho) (seed section 2),
 * gamma_s the sizes the trace read (dynamic mode), gamma_g the data gates'
 * outcomes, checked once by running the guard replay slice on the very
 * inputs it was traced on. The guards are the key's projection
 * (Definition 2.3): one (path, condition, expected) row per component, the
 * texts compiler/_guards.py's Guard objects print; failed_guards' diff of
 * two keys stays Python (it only writes texts for the recompile log). */
#include "guards/guards.h"
#include "tensor/stax_numpy.h"

/* the call's part of the key, as the driver's _Call holds it (borrowed) */
typedef struct {
    PyObject *sa;          /* sigma of the positional arguments (tuple) */
    PyObject *sk;          /* ((name, sigma), ...) of the keyword ones */
    PyObject *sf;          /* sigma of the free variables (tuple) */
    PyObject *alias;       /* None, or per tensor its first alias */
    PyObject *rho;         /* grad mode (bool) */
    PyObject *dtype;       /* default dtype (str) */
    PyObject *paths;       /* per flat tensor its path (sequence of str) */
    PyObject *free_paths;  /* per free variable its path */
    int dynamic;
} vcall_t;

static int
parse_call(PyObject *call, vcall_t *c)
{
    if (!PyTuple_Check(call) || PyTuple_GET_SIZE(call) != 9
        || !PyTuple_Check(PyTuple_GET_ITEM(call, 0))
        || !PyTuple_Check(PyTuple_GET_ITEM(call, 1))
        || !PyTuple_Check(PyTuple_GET_ITEM(call, 2))
        || !PySequence_Check(PyTuple_GET_ITEM(call, 6))
        || !PySequence_Check(PyTuple_GET_ITEM(call, 7))) {
        PyErr_SetString(PyExc_TypeError,
                        "stax_compile: key is (sig_args, sig_kwargs, sig_free, "
                        "aliasing, grad_mode, default_dtype, paths, "
                        "free_paths, dynamic)");
        return -1;
    }
    c->sa = PyTuple_GET_ITEM(call, 0);
    c->sk = PyTuple_GET_ITEM(call, 1);
    c->sf = PyTuple_GET_ITEM(call, 2);
    c->alias = PyTuple_GET_ITEM(call, 3);
    c->rho = PyTuple_GET_ITEM(call, 4);
    c->dtype = PyTuple_GET_ITEM(call, 5);
    c->paths = PyTuple_GET_ITEM(call, 6);
    c->free_paths = PyTuple_GET_ITEM(call, 7);
    c->dynamic = PyObject_IsTrue(PyTuple_GET_ITEM(call, 8));
    return c->dynamic < 0 ? -1 : 0;
}

/* lists -> tuples, recursively (a gate's tolist() outcome, hashable) */
static PyObject *
tuplify(PyObject *v)
{
    if (!PyList_Check(v)) {
        return Py_NewRef(v);
    }
    Py_ssize_t n = PyList_GET_SIZE(v);
    PyObject *t = PyTuple_New(n);
    for (Py_ssize_t i = 0; t != NULL && i < n && i < PyList_GET_SIZE(v); i++) {
        PyObject *x = tuplify(PyList_GET_ITEM(v, i));
        if (x == NULL) {
            Py_CLEAR(t);
            break;
        }
        PyTuple_SET_ITEM(t, i, x);
    }
    return t;
}

/* A gate's outcome as the driver compares it: the Python value the gate
 * read from a tensor (bool(), int(), float(), tolist(), item()), any other
 * value as it is (lists as tuples). */
static PyObject *
gate_value(PyObject *kind, PyObject *v)
{
    if (!StaxTensor_Check(v)) {
        return tuplify(v);
    }
    if (PyUnicode_Check(kind)) {
        if (PyUnicode_CompareWithASCIIString(kind, "bool") == 0) {
            int b = PyObject_IsTrue(v);
            return b < 0 ? NULL : PyBool_FromLong(b);
        }
        if (PyUnicode_CompareWithASCIIString(kind, "int") == 0
            || PyUnicode_CompareWithASCIIString(kind, "index") == 0) {
            return PyNumber_Long(v);
        }
        if (PyUnicode_CompareWithASCIIString(kind, "float") == 0) {
            return PyNumber_Float(v);
        }
        if (PyUnicode_CompareWithASCIIString(kind, "tolist") == 0) {
            PyObject *l = PyObject_CallMethod(v, "tolist", NULL);
            PyObject *t = l ? tuplify(l) : NULL;
            Py_XDECREF(l);
            return t;
        }
    }
    return PyObject_CallMethod(v, "item", NULL);
}

PyObject *
stax_guard_gate_values(PyObject *kinds, PyObject *outs)
{
    PyObject *fk = PySequence_Fast(kinds, "gate kinds");
    PyObject *fo = fk ? PySequence_Fast(outs, "gate values") : NULL;
    PyObject *res = NULL;
    if (fo != NULL) {
        Py_ssize_t n = PySequence_Fast_GET_SIZE(fk);
        if (PySequence_Fast_GET_SIZE(fo) < n) {
            n = PySequence_Fast_GET_SIZE(fo);    /* zip() */
        }
        res = PyTuple_New(n);
        for (Py_ssize_t i = 0; res != NULL && i < n; i++) {
            PyObject *g = gate_value(PySequence_Fast_GET_ITEM(fk, i),
                                     PySequence_Fast_GET_ITEM(fo, i));
            if (g == NULL) {
                Py_CLEAR(res);
                break;
            }
            PyTuple_SET_ITEM(res, i, g);
        }
    }
    Py_XDECREF(fk);
    Py_XDECREF(fo);
    return res;
}

/* "replay failed: <type>: <message>" for an Exception now set; -1 with it
 * still set for what must propagate (KeyboardInterrupt, ...) */
static int
replay_failure(PyObject **got)
{
    PyObject *value = NULL;
    if (stax_guard_take_exception(&value) < 0) {
        return -1;
    }
    PyObject *name = PyObject_GetAttrString((PyObject *)Py_TYPE(value), "__name__");
    *got = name ? PyUnicode_FromFormat("replay failed: %S: %S", name, value) : NULL;
    Py_XDECREF(name);
    Py_DECREF(value);
    return *got == NULL ? -1 : 0;
}

/* The replay slice must reproduce the traced gate outcomes on the very
 * inputs it was traced on; if it does not, the version's gate guard can
 * never hold (the driver says so once). *got: its outcomes, or the text of
 * its failure; *drew: it moved the default generator (a gate on a random
 * draw: dispatch replays it on a fork). The generator is left as found. */
static int
replay_check(PyObject *replay, PyObject *kinds, PyObject *ins, PyObject **got,
             int *drew)
{
    StaxGenerator *gen = stax_default_generator();
    uint64_t seed0 = gen ? gen->seed : 0, off0 = gen ? gen->offset : 0;
    PyObject *argt = PySequence_Tuple(ins), *out = NULL;
    int r = 0;
    *got = NULL;
    *drew = 1;
    if (argt == NULL) {
        return -1;
    }
    out = PyObject_Call(replay, argt, NULL);
    if (out != NULL && !PyTuple_Check(out) && !PyList_Check(out)) {
        Py_SETREF(out, PyTuple_Pack(1, out));
    }
    if (out != NULL) {
        *drew = gen != NULL && (gen->seed != seed0 || gen->offset != off0);
        *got = stax_guard_gate_values(kinds, out);
    }
    if (*got == NULL) {
        r = replay_failure(got);
    }
    if (gen != NULL) {
        gen->seed = seed0;
        gen->offset = off0;
    }
    Py_DECREF(argt);
    Py_XDECREF(out);
    return r;
}

/* gamma_s: the sizes the trace read, as (flat index, dim, size, path) once
 * each (a read of every dim: d None or < 0) */
static PyObject *
shape_reads(PyObject *tr, const vcall_t *c, PyObject *flat)
{
    PyObject *res = PyList_New(0);
    PyObject *reads = res ? PyObject_GetAttrString(tr, "shape_reads") : NULL;
    PyObject *fast = NULL;
    if (reads == NULL) {
        Py_XDECREF(res);
        return NULL;
    }
    if (!c->dynamic || reads == Py_None) {
        Py_DECREF(reads);
        return res;
    }
    fast = PySequence_Fast(reads, "shape_reads");
    for (Py_ssize_t i = 0; fast != NULL && i < PySequence_Fast_GET_SIZE(fast); i++) {
        PyObject *rd = PySequence_Fast_GET_ITEM(fast, i);
        Py_ssize_t ph, d = -1;
        if (!PyTuple_Check(rd) || PyTuple_GET_SIZE(rd) < 2) {
            PyErr_SetString(PyExc_TypeError, "shape_reads are (placeholder, dim)");
            goto fail;
        }
        ph = PyLong_AsSsize_t(PyTuple_GET_ITEM(rd, 0));
        if (ph == -1 && PyErr_Occurred()) {
            goto fail;
        }
        if (PyTuple_GET_ITEM(rd, 1) != Py_None) {
            d = PyLong_AsSsize_t(PyTuple_GET_ITEM(rd, 1));
            if (d == -1 && PyErr_Occurred()) {
                goto fail;
            }
        }
        PyObject *t = ph >= 0 && ph < PyList_GET_SIZE(flat) ? PyList_GET_ITEM(flat, ph) : NULL;
        if (t == NULL || !StaxTensor_Check(t) || d >= ((StaxTensor *)t)->ndim) {
            PyErr_SetString(PyExc_IndexError, "shape read out of range");
            goto fail;
        }
        StaxTensor *x = (StaxTensor *)t;
        for (int dd = d < 0 ? 0 : (int)d; dd < (d < 0 ? x->ndim : (int)d + 1); dd++) {
            PyObject *p = PySequence_GetItem(c->paths, ph);
            PyObject *ent = p ? Py_BuildValue("(niLO)", ph, dd, (long long)x->sizes[dd], p) : NULL;
            int seen = ent ? PySequence_Contains(res, ent) : -1;
            Py_XDECREF(p);
            if (seen < 0 || (seen == 0 && PyList_Append(res, ent) < 0)) {
                Py_XDECREF(ent);
                goto fail;
            }
            Py_DECREF(ent);
        }
    }
    if (fast != NULL) {
        Py_DECREF(fast);
        Py_DECREF(reads);
        return res;
    }
fail:
    Py_XDECREF(fast);
    Py_DECREF(reads);
    Py_DECREF(res);
    return NULL;
}

static int
set_item(PyObject *d, const char *k, PyObject *v)
{
    if (v == NULL) {
        return -1;
    }
    int r = PyDict_SetItemString(d, k, v);
    Py_DECREF(v);
    return r;
}

PyObject *
stax_guard_version_key(PyObject *tr, PyObject *call, PyObject *flat)
{
    vcall_t c;
    PyObject *ver = NULL, *gates = NULL, *kinds = NULL, *gates0 = NULL;
    PyObject *replay = NULL, *reads = NULL, *got = NULL, *ins = NULL;
    PyObject *sigma = NULL, *gamma_s = NULL, *key = NULL, *vals = NULL;
    PyObject *cp = NULL;
    Py_ssize_t ng = 0;
    int copies = 0, drew = 0;
    if (parse_call(call, &c) < 0) {
        return NULL;
    }
    if (!PyList_Check(flat)) {
        PyErr_SetString(PyExc_TypeError, "stax_compile: examples must be a list");
        return NULL;
    }
    gates = PyObject_GetAttrString(tr, "gates");
    if (gates == NULL) {
        goto done;
    }
    if (gates == Py_None) {
        Py_SETREF(gates, PyList_New(0));
    }
    Py_SETREF(gates, gates ? PySequence_List(gates) : NULL);
    if (gates == NULL) {
        goto done;
    }
    ng = PyList_GET_SIZE(gates);
    kinds = PyTuple_New(ng);
    vals = PyTuple_New(ng);
    for (Py_ssize_t i = 0; kinds != NULL && vals != NULL && i < ng; i++) {
        PyObject *g = PyList_GET_ITEM(gates, i);
        if (!PyTuple_Check(g) || PyTuple_GET_SIZE(g) < 3) {
            PyErr_SetString(PyExc_TypeError, "gates are (node, kind, value)");
            Py_CLEAR(vals);
            break;
        }
        PyTuple_SET_ITEM(kinds, i, Py_NewRef(PyTuple_GET_ITEM(g, 1)));
        PyTuple_SET_ITEM(vals, i, Py_NewRef(PyTuple_GET_ITEM(g, 2)));
    }
    gates0 = vals && kinds ? stax_guard_gate_values(kinds, vals) : NULL;
    cp = gates0 ? PyObject_GetAttrString(tr, "replay_copies_inputs") : NULL;
    if (cp == NULL || (copies = PyObject_IsTrue(cp)) < 0) {
        goto done;
    }
    if (ng > 0 && (replay = PyObject_GetAttrString(tr, "replay")) == NULL) {
        goto done;
    }
    if (replay != NULL && replay != Py_None) {
        int same;
        ins = copies ? stax_trace_stand_ins(flat) : Py_NewRef(flat);
        if (ins == NULL || replay_check(replay, kinds, ins, &got, &drew) < 0
            || (same = PyObject_RichCompareBool(got, gates0, Py_EQ)) < 0) {
            goto done;
        }
        if (same) {
            Py_CLEAR(got);
        }
    }
    reads = shape_reads(tr, &c, flat);
    if (reads == NULL) {
        goto done;
    }
    gamma_s = PyTuple_New(PyList_GET_SIZE(reads));
    for (Py_ssize_t i = 0; gamma_s != NULL && i < PyList_GET_SIZE(reads); i++) {
        PyTuple_SET_ITEM(gamma_s, i, Py_NewRef(PyTuple_GET_ITEM(PyList_GET_ITEM(reads, i), 2)));
    }
    sigma = c.alias == Py_None ? PyTuple_Pack(3, c.sa, c.sk, c.sf)
                               : PyTuple_Pack(4, c.sa, c.sk, c.sf, c.alias);
    key = sigma && gamma_s ? PyTuple_Pack(4, sigma, gamma_s, gates0, c.rho) : NULL;
    ver = key ? PyDict_New() : NULL;
    if (ver == NULL
        || set_item(ver, "key", Py_NewRef(key)) < 0
        || set_item(ver, "gate_kinds", Py_NewRef(kinds)) < 0
        || set_item(ver, "gates", Py_NewRef(gates0)) < 0
        || set_item(ver, "replay", Py_NewRef(ng > 0 && replay ? replay : Py_None)) < 0
        || set_item(ver, "replay_copies", PyBool_FromLong(copies > 0)) < 0
        || set_item(ver, "replay_random", PyBool_FromLong(drew)) < 0
        || set_item(ver, "replay_got", Py_NewRef(got ? got : Py_None)) < 0
        || set_item(ver, "shape_reads", Py_NewRef(reads)) < 0) {
        Py_CLEAR(ver);
    }
done:
    Py_XDECREF(vals);
    Py_XDECREF(cp);
    Py_XDECREF(gates);
    Py_XDECREF(kinds);
    Py_XDECREF(gates0);
    Py_XDECREF(replay);
    Py_XDECREF(reads);
    Py_XDECREF(got);
    Py_XDECREF(ins);
    Py_XDECREF(sigma);
    Py_XDECREF(gamma_s);
    Py_XDECREF(key);
    return ver;
}

/* ---- the guards: the key's projection ---- */

/* one row (path, condition, expected); path and cond are stolen */
static int
row(PyObject *out, PyObject *path, PyObject *cond, PyObject *expected)
{
    PyObject *r = path && cond ? PyTuple_Pack(3, path, cond, expected) : NULL;
    int rc = r ? PyList_Append(out, r) : -1;
    Py_XDECREF(r);
    Py_XDECREF(path);
    Py_XDECREF(cond);
    return rc;
}

/* a row whose expected value is a new int (stolen) */
static int
row_n(PyObject *out, PyObject *path, PyObject *cond, Py_ssize_t n)
{
    PyObject *v = PyLong_FromSsize_t(n);
    int rc = v ? row(out, path, cond, v) : -1;
    if (v == NULL) {
        Py_XDECREF(path);
        Py_XDECREF(cond);
    }
    Py_XDECREF(v);
    return rc;
}

static int
is_tsig(PyObject *s)
{
    return PyTuple_Check(s) && PyTuple_GET_SIZE(s) == 7
           && PyUnicode_Check(PyTuple_GET_ITEM(s, 0))
           && PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(s, 0), "tensor") == 0;
}

/* scalars guarded by value: Python's and NumPy's */
static int
is_value_type(PyObject *t)
{
    if (t == (PyObject *)Py_TYPE(Py_None) || t == (PyObject *)&PyBool_Type
        || t == (PyObject *)&PyLong_Type || t == (PyObject *)&PyFloat_Type
        || t == (PyObject *)&PyUnicode_Type) {
        return 1;
    }
    return PyType_Check(t)
           && (PyType_IsSubtype((PyTypeObject *)t, &PyNumberArrType_Type)
               || PyType_IsSubtype((PyTypeObject *)t, &PyBoolArrType_Type));
}

static PyObject *
type_name(PyObject *t)
{
    PyObject *n = PyObject_GetAttrString(t, "__name__");
    if (n == NULL && PyErr_ExceptionMatches(PyExc_AttributeError)) {
        PyErr_Clear();
        n = PyObject_Str(t);
    }
    return n;
}

/* the keys of a signature's ((key, child), ...) as a list */
static PyObject *
sig_keys(PyObject *items)
{
    PyObject *l = PyList_New(PyTuple_GET_SIZE(items));
    for (Py_ssize_t i = 0; l != NULL && i < PyTuple_GET_SIZE(items); i++) {
        PyObject *kv = PyTuple_GET_ITEM(items, i);
        if (!PyTuple_Check(kv) || PyTuple_GET_SIZE(kv) != 2) {
            PyErr_SetString(PyExc_TypeError, "a dict signature holds (key, sigma) pairs");
            Py_CLEAR(l);
            break;
        }
        PyList_SET_ITEM(l, i, Py_NewRef(PyTuple_GET_ITEM(kv, 0)));
    }
    return l;
}

static int leaves(PyObject *e, PyObject *p, PyObject *out);

static int
tensor_leaves(PyObject *e, PyObject *p, PyObject *out)
{
    PyObject *shape = PyTuple_GET_ITEM(e, 2);
    if (PyLong_Check(shape)) {             /* dynamic: the rank only */
        if (row(out, PyUnicode_FromFormat("%U[2]", p),
                PyUnicode_FromFormat("%U[2] == %S", p, shape), shape) < 0) {
            return -1;
        }
    }
    else {
        if (!PyTuple_Check(shape)) {
            PyErr_SetString(PyExc_TypeError, "a tensor signature's shape is a tuple");
            return -1;
        }
        if (row_n(out, PyUnicode_FromFormat("%U[2]", p),
                  PyUnicode_FromFormat("len(%U[2]) == %zd", p, PyTuple_GET_SIZE(shape)),
                  PyTuple_GET_SIZE(shape)) < 0) {
            return -1;
        }
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(shape); i++) {
            PyObject *x = PyTuple_GET_ITEM(shape, i);
            if (row(out, PyUnicode_FromFormat("%U[2][%zd]", p, i),
                    PyUnicode_FromFormat("%U[2][%zd] == %S", p, i, x), x) < 0) {
                return -1;
            }
        }
    }
    for (int k = 3; k <= 6; k++) {     /* dtype, device, requires_grad, strides */
        PyObject *x = PyTuple_GET_ITEM(e, k);
        if (row(out, PyUnicode_FromFormat("%U[%d]", p, k),
                PyUnicode_FromFormat("%U[%d] == %R", p, k, x), x) < 0) {
            return -1;
        }
    }
    return 0;
}

static int
container_leaves(PyObject *te, PyObject *v, PyObject *p, PyObject *out)
{
    Py_ssize_t n = PyTuple_GET_SIZE(v);
    if (PyType_IsSubtype((PyTypeObject *)te, &PyTuple_Type)
        || PyType_IsSubtype((PyTypeObject *)te, &PyList_Type)) {
        if (row_n(out, PyUnicode_FromFormat("%U[1]", p),
                  PyUnicode_FromFormat("len(%U[1]) == %zd", p, n), n) < 0) {
            return -1;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *pi = PyUnicode_FromFormat("%U[1][%zd]", p, i);
            int rc = pi ? leaves(PyTuple_GET_ITEM(v, i), pi, out) : -1;
            Py_XDECREF(pi);
            if (rc < 0) {
                return -1;
            }
        }
        return 0;
    }
    PyObject *ke = sig_keys(v);
    if (ke == NULL || row(out, PyUnicode_FromFormat("%U[1]", p),
                          PyUnicode_FromFormat("keys(%U[1]) == %R", p, ke), ke) < 0) {
        Py_XDECREF(ke);
        return -1;
    }
    Py_DECREF(ke);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *kv = PyTuple_GET_ITEM(v, i);
        PyObject *pi = PyUnicode_FromFormat("%U[1][%R]", p, PyTuple_GET_ITEM(kv, 0));
        int rc = pi ? leaves(PyTuple_GET_ITEM(kv, 1), pi, out) : -1;
        Py_XDECREF(pi);
        if (rc < 0) {
            return -1;
        }
    }
    return 0;
}

/* one row per component of the signature e at path p (compiler/_guards.py
 * leaves_sig writes the same rows as Guard objects) */
static int
leaves(PyObject *e, PyObject *p, PyObject *out)
{
    if (!PyTuple_Check(e) || PyTuple_GET_SIZE(e) < 2) {
        PyErr_SetString(PyExc_TypeError, "a signature is a tuple (type, ...)");
        return -1;
    }
    int ts = is_tsig(e);
    PyObject *te = PyTuple_GET_ITEM(e, ts ? 1 : 0);
    PyObject *v = PyTuple_GET_ITEM(e, 1);
    PyObject *tn = type_name(te);
    if (tn == NULL || row(out, Py_NewRef(p), PyUnicode_FromFormat("type(%U) is %S", p, tn),
                          tn) < 0) {
        Py_XDECREF(tn);
        return -1;
    }
    Py_DECREF(tn);
    if (ts) {
        return tensor_leaves(e, p, out);
    }
    if (is_value_type(te)) {
        return row(out, PyUnicode_FromFormat("%U[1]", p),
                   PyUnicode_FromFormat("%U[1] == %R", p, v), v);
    }
    if (PyTuple_Check(v) && PyType_Check(te)
        && (PyType_IsSubtype((PyTypeObject *)te, &PyTuple_Type)
            || PyType_IsSubtype((PyTypeObject *)te, &PyList_Type)
            || PyType_IsSubtype((PyTypeObject *)te, &PyDict_Type))) {
        return container_leaves(te, v, p, out);
    }
    /* an object by identity */
    PyObject *cond;
    if (PyLong_Check(v)) {
        PyObject *spec = PyUnicode_FromString("#x");
        PyObject *hex = spec ? PyObject_Format(v, spec) : NULL;
        Py_XDECREF(spec);
        cond = hex ? PyUnicode_FromFormat("%U[1] == id %S", p, hex) : NULL;
        Py_XDECREF(hex);
    }
    else {
        cond = PyUnicode_FromFormat("%U[1] == %R", p, v);
    }
    return row(out, PyUnicode_FromFormat("%U[1]", p), cond, v);
}

static int
leaves_at(PyObject *e, PyObject *p, PyObject *out)
{
    int rc = p ? leaves(e, p, out) : -1;
    Py_XDECREF(p);
    return rc;
}

/* "aliasing: <path> shares <path>'s storage, ..." */
static PyObject *
alias_text(const vcall_t *c)
{
    PyObject *parts = PyList_New(0), *sep = NULL, *joined = NULL, *res = NULL;
    PyObject *al = PySequence_Fast(c->alias, "aliasing");
    for (Py_ssize_t i = 0; parts && al && i < PySequence_Fast_GET_SIZE(al); i++) {
        Py_ssize_t j = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(al, i));
        if (j == -1 && PyErr_Occurred()) {
            goto done;
        }
        if (j == i) {
            continue;
        }
        PyObject *pi = PySequence_GetItem(c->paths, i);
        PyObject *pj = pi ? PySequence_GetItem(c->paths, j) : NULL;
        PyObject *s = pj ? PyUnicode_FromFormat("%S shares %S's storage", pi, pj) : NULL;
        Py_XDECREF(pi);
        Py_XDECREF(pj);
        if (s == NULL || PyList_Append(parts, s) < 0) {
            Py_XDECREF(s);
            goto done;
        }
        Py_DECREF(s);
    }
    sep = parts && al ? PyUnicode_FromString(", ") : NULL;
    joined = sep ? PyUnicode_Join(sep, parts) : NULL;
    res = joined ? PyUnicode_FromFormat("aliasing: %U", joined) : NULL;
done:
    Py_XDECREF(parts);
    Py_XDECREF(al);
    Py_XDECREF(sep);
    Py_XDECREF(joined);
    return res;
}

/* the rows after sigma's: aliasing, grad mode, default dtype, gamma_s, the
 * symbolic shape relations, gamma_g */
static int
tail_rows(const vcall_t *c, PyObject *ver, PyObject *symenv, PyObject *out)
{
    if (c->alias != Py_None
        && row(out, PyUnicode_FromString("aliasing"), alias_text(c), c->alias) < 0) {
        return -1;
    }
    if (row(out, PyUnicode_FromString("grad_mode"),
            PyUnicode_FromFormat("grad_mode == %S", c->rho), c->rho) < 0
        || row(out, PyUnicode_FromString("default_dtype"),
               PyUnicode_FromFormat("default_dtype == %S", c->dtype), c->dtype) < 0) {
        return -1;
    }
    PyObject *reads = PyDict_GetItemString(ver, "shape_reads");
    for (Py_ssize_t i = 0; reads && i < PyList_GET_SIZE(reads); i++) {
        PyObject *r = PyList_GET_ITEM(reads, i);
        PyObject *d = PyTuple_GET_ITEM(r, 1), *s = PyTuple_GET_ITEM(r, 2);
        PyObject *p = PyTuple_GET_ITEM(r, 3);
        if (row(out, PyUnicode_FromFormat("size(%S, %S)", p, d),
                PyUnicode_FromFormat("size(%S, %S) == %S", p, d, s), s) < 0) {
            return -1;
        }
    }
    if (symenv != NULL && symenv != Py_None) {
        PyObject *texts = PyObject_CallMethod(symenv, "guard_texts", NULL);
        PyObject *ft = texts ? PySequence_Fast(texts, "guard_texts()") : NULL;
        Py_XDECREF(texts);
        if (ft == NULL) {
            return -1;
        }
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(ft); i++) {
            if (row(out, PyUnicode_FromString("shape"),
                    Py_NewRef(PySequence_Fast_GET_ITEM(ft, i)), Py_True) < 0) {
                Py_DECREF(ft);
                return -1;
            }
        }
        Py_DECREF(ft);
    }
    PyObject *kinds = PyDict_GetItemString(ver, "gate_kinds");
    if (kinds != NULL && PyTuple_GET_SIZE(kinds) > 0
        && row(out, PyUnicode_FromString("gates"), PyUnicode_FromString(STAX_GATE_TEXT),
               PyDict_GetItemString(ver, "gates")) < 0) {
        return -1;
    }
    return 0;
}

int
stax_guard_version_guards(PyObject *ver, PyObject *call, PyObject *symenv)
{
    vcall_t c;
    PyObject *out = NULL, *ks = NULL;
    int rc = -1;
    if (parse_call(call, &c) < 0 || (out = PyList_New(0)) == NULL) {
        return -1;
    }
    Py_ssize_t na = PyTuple_GET_SIZE(c.sa);
    if (row_n(out, PyUnicode_FromString("inputs[0]"),
              PyUnicode_FromFormat("len(inputs[0]) == %zd", na), na) < 0) {
        goto done;
    }
    for (Py_ssize_t i = 0; i < na; i++) {
        if (leaves_at(PyTuple_GET_ITEM(c.sa, i), PyUnicode_FromFormat("inputs[0][%zd]", i),
                      out) < 0) {
            goto done;
        }
    }
    ks = sig_keys(c.sk);
    if (ks == NULL || row(out, PyUnicode_FromString("inputs[1]"),
                          PyUnicode_FromFormat("keys(inputs[1]) == %R", ks), ks) < 0) {
        goto done;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(c.sk); i++) {
        PyObject *kv = PyTuple_GET_ITEM(c.sk, i);
        if (leaves_at(PyTuple_GET_ITEM(kv, 1),
                      PyUnicode_FromFormat("inputs[1][%R]", PyTuple_GET_ITEM(kv, 0)), out) < 0) {
            goto done;
        }
    }
    for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(c.sf); j++) {
        PyObject *p = PySequence_GetItem(c.free_paths, j);
        if (p == NULL) {
            PyErr_Clear();      /* zip(): the shorter one ends the rows */
            break;
        }
        if (!PyUnicode_Check(p)) {
            Py_SETREF(p, PyObject_Str(p));
        }
        if (leaves_at(PyTuple_GET_ITEM(c.sf, j), p, out) < 0) {
            goto done;
        }
    }
    if (tail_rows(&c, ver, symenv, out) < 0) {
        goto done;
    }
    rc = PyDict_SetItemString(ver, "guards", out);
done:
    Py_XDECREF(out);
    Py_XDECREF(ks);
    return rc;
}

PyObject *
stax_guard_rng_state_list(void)
{
    StaxGenerator *g = stax_default_generator();
    uint64_t s = g ? g->seed : 0, o = g ? g->offset : 0;
    PyObject *l = PyList_New(16);
    for (int i = 0; l != NULL && i < 16; i++) {
        uint64_t w = i < 8 ? s : o;
        PyObject *b = PyLong_FromLong((long)((w >> (8 * (i % 8))) & 0xff));
        if (b == NULL) {
            Py_CLEAR(l);
            break;
        }
        PyList_SET_ITEM(l, i, b);
    }
    return l;
}

/* ---- the requires-grad masks of a graph with a detach ---- */

static PyObject *
mask_walk(PyObject *o, PyObject *masks)
{
    if (PyTuple_Check(o) || PyList_Check(o)) {
        Py_ssize_t n = PySequence_Fast_GET_SIZE(o);
        PyObject *l = PyList_New(n);
        for (Py_ssize_t i = 0; l != NULL && i < n; i++) {
            PyObject *x = mask_walk(PySequence_Fast_GET_ITEM(o, i), masks);
            if (x == NULL) {
                Py_CLEAR(l);
                break;
            }
            PyList_SET_ITEM(l, i, x);
        }
        if (l == NULL || PyList_CheckExact(o)) {
            return l;
        }
        PyObject *r = PyTuple_CheckExact(o) ? PyList_AsTuple(l)
                                            : PyObject_CallOneArg((PyObject *)Py_TYPE(o), l);
        Py_DECREF(l);
        return r;
    }
    if (PyDict_Check(o)) {
        PyObject *d = PyDict_New(), *k, *v;
        Py_ssize_t pos = 0;
        while (d != NULL && PyDict_Next(o, &pos, &k, &v)) {
            PyObject *x = mask_walk(v, masks);
            if (x == NULL || PyDict_SetItem(d, k, x) < 0) {
                Py_XDECREF(x);
                Py_CLEAR(d);
                break;
            }
            Py_DECREF(x);
        }
        return d;
    }
    if (StaxNode_Type != NULL && Py_TYPE(o) == StaxNode_Type) {
        PyObject *m = PyDict_GetItemWithError(masks, o);
        return m != NULL ? Py_NewRef(m) : (PyErr_Occurred() ? NULL : Py_NewRef(Py_None));
    }
    return Py_NewRef(Py_None);
}

/* the mask of one call node: its inputs' masks, 0 after a detach (*cut
 * set) or for a non-floating value; an in-place write or a setitem adds it
 * to its target (and takes the target's) */
static PyObject *
node_mask(StaxNode *n, PyObject *masks, int *cut)
{
    PyObject *ins = PyDict_New(), *m = PyLong_FromLong(0), *k, *v;
    Py_ssize_t pos = 0;
    if (ins == NULL || m == NULL || stax_graph_collect_nodes(n->args, ins) < 0
        || stax_graph_collect_nodes(n->kwargs, ins) < 0) {
        goto fail;
    }
    while (PyDict_Next(ins, &pos, &k, &v)) {
        PyObject *mi = PyDict_GetItemWithError(masks, k);
        if (mi == NULL && PyErr_Occurred()) {
            goto fail;
        }
        if (mi != NULL) {
            Py_SETREF(m, PyNumber_Or(m, mi));
            if (m == NULL) {
                goto fail;
            }
        }
    }
    const stax_op_info *op = stax_op_for_target(stax_node_op_name(n->op), n->target);
    PyObject *val = n->meta != NULL && PyDict_Check(n->meta)
                    ? PyDict_GetItemString(n->meta, "val") : NULL;
    if ((op != NULL && op->id == STAX_OP_DETACH)
        || (val != NULL && StaxTensor_Check(val)
            && !stax_dtype_is_floating(((StaxTensor *)val)->dtype))) {
        *cut |= op != NULL && op->id == STAX_OP_DETACH;
        Py_SETREF(m, PyLong_FromLong(0));
        if (m == NULL) {
            goto fail;
        }
    }
    stax_node_writes_t w = stax_graph_node_writes((PyObject *)n);
    PyObject *a0 = PyTuple_GET_SIZE(n->args) > 0 ? PyTuple_GET_ITEM(n->args, 0) : NULL;
    PyObject *ma = (w == STAX_WRITES_INPLACE || w == STAX_WRITES_SETITEM) && a0 != NULL
                   ? PyDict_GetItemWithError(masks, a0) : NULL;
    if (ma == NULL && PyErr_Occurred()) {
        goto fail;
    }
    if (ma != NULL) {
        Py_SETREF(m, PyNumber_Or(m, ma));
        if (m == NULL || PyDict_SetItem(masks, a0, m) < 0) {
            goto fail;
        }
    }
    Py_DECREF(ins);
    return m;
fail:
    Py_XDECREF(ins);
    Py_XDECREF(m);
    return NULL;
}

PyObject *
stax_guard_detach_masks(PyObject *gm)
{
    PyObject *graph = PyObject_GetAttrString(gm, "graph");
    PyObject *nodes = graph ? stax_graph_node_list(graph) : NULL;
    PyObject *masks = nodes ? PyDict_New() : NULL, *out = NULL, *res = NULL;
    long k = 0;
    int cut = 0;
    Py_XDECREF(graph);
    for (Py_ssize_t i = 0; masks != NULL && i < PyList_GET_SIZE(nodes); i++) {
        StaxNode *n = (StaxNode *)PyList_GET_ITEM(nodes, i);
        PyObject *m = NULL;
        if (n->op == STAX_NODE_OUTPUT) {
            out = PyTuple_GET_SIZE(n->args) == 1 ? PyTuple_GET_ITEM(n->args, 0) : n->args;
            Py_INCREF(out);
            break;
        }
        if (n->op == STAX_NODE_PLACEHOLDER) {
            PyObject *one = PyLong_FromLong(1), *sh = PyLong_FromLong(k++);
            m = one && sh ? PyNumber_Lshift(one, sh) : NULL;
            Py_XDECREF(one);
            Py_XDECREF(sh);
        }
        else {
            m = node_mask(n, masks, &cut);
        }
        if (m == NULL || PyDict_SetItem(masks, (PyObject *)n, m) < 0) {
            Py_XDECREF(m);
            goto done;
        }
        Py_DECREF(m);
    }
    if (masks != NULL) {
        res = cut && out != NULL ? mask_walk(out, masks) : Py_NewRef(Py_None);
    }
done:
    Py_XDECREF(nodes);
    Py_XDECREF(masks);
    Py_XDECREF(out);
    return res;
}
