/* Dispatch level 1 (Algorithm 2.1, line 1) in C: CompiledFunction.
 *
 * A call whose positional arguments are the very objects of the last call
 * (tensors with unchanged version and metadata), with no keyword
 * arguments, the same grad mode and default dtype, whose free variables
 * (globals, closure cells, attribute chains) still hold the same objects,
 * and whose specialization version has no data gates, calls the last
 * compiled artifact directly. Everything else goes to the Python driver
 * (levels 2 and 3 and compilation), which then re-arms level 1 through
 * _set_level1(). */
#include "guards/guards.h"

#include <structmember.h>

#define MAX_FAST_ARGS 64

/* metadata snapshot of one tensor, taken when level 1 is armed */
typedef struct {
    uint64_t version;
    int64_t offset;
    int ndim;
    int dtype;
    int requires_grad;
    int64_t sizes[STAX_MAX_DIMS];
    int64_t strides[STAX_MAX_DIMS];
} snap_t;

/* The level-1 state, one immutable object swapped as a whole so that a
 * call holding it is not disturbed by another thread re-arming. */
typedef struct {
    PyObject_HEAD
    PyObject *artifact;   /* callable on the flat tensor list */
    PyObject *args;       /* tuple: the last positional args (strong) */
    PyObject *sources;    /* tuple of (kind, root, attrs, lifted) */
    PyObject *free;       /* tuple: the values read from the sources */
    int grad;
    int dtype;
    Py_ssize_t nsnap;
    snap_t *snaps;        /* free tensors, then tensor args */
} L1State;

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *driver;     /* the Python driver (attributes forward to it) */
    PyObject *slow;       /* driver._dispatch */
    L1State *l1;          /* NULL when level 1 is disarmed */
    unsigned long long calls;
    unsigned long long hits1;
    PyObject *dict;
    PyObject *weakreflist;
} CFObject;

static void
l1_dealloc(L1State *s)
{
    Py_XDECREF(s->artifact);
    Py_XDECREF(s->args);
    Py_XDECREF(s->sources);
    Py_XDECREF(s->free);
    PyMem_Free(s->snaps);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static PyTypeObject L1State_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tensorplay._C._Level1State",
    .tp_basicsize = sizeof(L1State),
    .tp_dealloc = (destructor)l1_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
};

static int
is_tensor(PyObject *o)
{
    return StaxTensor_Type != NULL && StaxTensor_Check(o);
}

static void
snap_take(snap_t *s, StaxTensor *t)
{
    s->version = t->storage ? t->storage->version : 0;
    s->offset = t->offset;
    s->ndim = t->ndim;
    s->dtype = (int)t->dtype;
    s->requires_grad = t->requires_grad;
    memcpy(s->sizes, t->sizes, sizeof(int64_t) * t->ndim);
    memcpy(s->strides, t->strides, sizeof(int64_t) * t->ndim);
}

static int
snap_same(const snap_t *s, StaxTensor *t)
{
    return s->version == (t->storage ? t->storage->version : 0)
           && s->ndim == t->ndim && s->offset == t->offset
           && s->dtype == (int)t->dtype
           && s->requires_grad == t->requires_grad
           && memcmp(s->sizes, t->sizes, sizeof(int64_t) * t->ndim) == 0
           && memcmp(s->strides, t->strides,
                     sizeof(int64_t) * t->ndim) == 0;
}

/* Read the current value of one free-variable source; new reference, or
 * NULL (with an exception set only on hard errors: a missing name simply
 * returns NULL with AttributeError/KeyError set, which the caller clears). */
static PyObject *
source_read(PyObject *src)
{
    long kind = PyLong_AsLong(PyTuple_GET_ITEM(src, 0));
    PyObject *root = PyTuple_GET_ITEM(src, 1);
    PyObject *attrs = PyTuple_GET_ITEM(src, 2);
    Py_ssize_t i = 0, n = PyTuple_GET_SIZE(attrs);
    PyObject *cur = NULL;
    if (kind == 0) {          /* global: root dict, attrs[0] the name */
        cur = PyDict_GetItemWithError(root, PyTuple_GET_ITEM(attrs, 0));
        if (cur == NULL) {
            if (!PyErr_Occurred()) {
                PyErr_SetObject(PyExc_KeyError, PyTuple_GET_ITEM(attrs, 0));
            }
            return NULL;
        }
        Py_INCREF(cur);
        i = 1;
    }
    else if (kind == 1) {     /* closure cell */
        cur = PyCell_GET(root);
        if (cur == NULL) {
            PyErr_SetString(PyExc_NameError, "empty closure cell");
            return NULL;
        }
        Py_INCREF(cur);
    }
    else {                    /* a fixed object (self of a method) */
        cur = Py_NewRef(root);
    }
    for (; i < n; i++) {
        PyObject *next = PyObject_GetAttr(cur, PyTuple_GET_ITEM(attrs, i));
        Py_DECREF(cur);
        if (next == NULL) {
            return NULL;
        }
        cur = next;
    }
    return cur;
}

static PyObject *
slow_call(CFObject *self, PyObject *const *args, size_t nargsf,
          PyObject *kwnames)
{
    return PyObject_Vectorcall(self->slow, args, nargsf, kwnames);
}

static PyObject *
cf_vectorcall(PyObject *op, PyObject *const *args, size_t nargsf,
              PyObject *kwnames)
{
    CFObject *self = (CFObject *)op;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    L1State *s = self->l1;
    PyObject *stack[MAX_FAST_ARGS];
    PyObject *freevals[MAX_FAST_ARGS];
    Py_ssize_t nfree = 0, ncall = 0, k = 0;
    PyObject *res = NULL;
    int ok = 1;

    self->calls++;
    if (s == NULL || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) != 0)
        || nargs != PyTuple_GET_SIZE(s->args)
        || s->grad != stax_grad_enabled()
        || s->dtype != (int)stax_default_dtype()) {
        return slow_call(self, args, nargsf, kwnames);
    }
    for (Py_ssize_t i = 0; i < nargs; i++) {
        if (args[i] != PyTuple_GET_ITEM(s->args, i)) {
            return slow_call(self, args, nargsf, kwnames);
        }
    }
    Py_INCREF(s);   /* reading sources can run Python code */
    nfree = PyTuple_GET_SIZE(s->sources);
    for (Py_ssize_t j = 0; j < nfree; j++) {
        freevals[j] = NULL;
    }
    for (Py_ssize_t j = 0; ok && j < nfree; j++) {
        PyObject *src = PyTuple_GET_ITEM(s->sources, j);
        PyObject *v = source_read(src);
        if (v == NULL) {
            PyErr_Clear();
            ok = 0;
            break;
        }
        freevals[j] = v;
        if (v != PyTuple_GET_ITEM(s->free, j)) {
            ok = 0;
            break;
        }
        if (PyObject_IsTrue(PyTuple_GET_ITEM(src, 3)) == 1) {
            if (!is_tensor(v) || !snap_same(&s->snaps[k++], (StaxTensor *)v)) {
                ok = 0;
                break;
            }
            stack[ncall++] = v;
        }
    }
    for (Py_ssize_t i = 0; ok && i < nargs; i++) {
        if (is_tensor(args[i])) {
            if (!snap_same(&s->snaps[k++], (StaxTensor *)args[i])) {
                ok = 0;
                break;
            }
            stack[ncall++] = args[i];
        }
    }
    if (ok) {
        self->hits1++;
        res = PyObject_Vectorcall(s->artifact, stack, ncall, NULL);
    }
    else {
        res = slow_call(self, args, nargsf, kwnames);
    }
    for (Py_ssize_t j = 0; j < nfree; j++) {
        Py_XDECREF(freevals[j]);
    }
    Py_DECREF(s);
    return res;
}

static PyObject *
cf_call(PyObject *op, PyObject *args, PyObject *kwargs)
{
    return PyVectorcall_Call(op, args, kwargs);
}

static int
cf_init(CFObject *self, PyObject *args, PyObject *kwds)
{
    PyObject *driver = NULL;
    static char *kwlist[] = {"driver", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O:CompiledFunction",
                                     kwlist, &driver)) {
        return -1;
    }
    PyObject *slow = PyObject_GetAttrString(driver, "_dispatch");
    if (slow == NULL) {
        return -1;
    }
    Py_XSETREF(self->slow, slow);
    Py_XSETREF(self->driver, Py_NewRef(driver));
    Py_CLEAR(self->l1);
    self->vectorcall = cf_vectorcall;
    return 0;
}

static PyObject *
cf_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    (void)args;
    (void)kwds;
    CFObject *self = (CFObject *)type->tp_alloc(type, 0);
    if (self != NULL) {
        self->vectorcall = cf_vectorcall;
    }
    return (PyObject *)self;
}

static int
cf_traverse(CFObject *self, visitproc visit, void *arg)
{
    Py_VISIT(self->driver);
    Py_VISIT(self->slow);
    Py_VISIT(self->dict);
    return 0;
}

static int
cf_clear(CFObject *self)
{
    Py_CLEAR(self->driver);
    Py_CLEAR(self->slow);
    Py_CLEAR(self->l1);
    Py_CLEAR(self->dict);
    return 0;
}

static void
cf_dealloc(CFObject *self)
{
    PyObject_GC_UnTrack(self);
    if (self->weakreflist != NULL) {
        PyObject_ClearWeakRefs((PyObject *)self);
    }
    cf_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* _set_level1(artifact, args, sources, free): arm level 1 after a call
 * that ran `artifact` on `args` (positional tuple) with free-variable values
 * `free` read from `sources`. Snapshots are taken now (after the call). */
static PyObject *
cf_set_level1(CFObject *self, PyObject *const *a, Py_ssize_t n)
{
    if (n != 4 || !PyTuple_Check(a[1]) || !PyTuple_Check(a[2])
        || !PyTuple_Check(a[3])
        || PyTuple_GET_SIZE(a[2]) != PyTuple_GET_SIZE(a[3])) {
        PyErr_SetString(PyExc_TypeError,
                        "_set_level1(artifact, args, sources, free)");
        return NULL;
    }
    Py_ssize_t nt = 0, nfree = PyTuple_GET_SIZE(a[3]);
    Py_ssize_t nargs = PyTuple_GET_SIZE(a[1]);
    Py_CLEAR(self->l1);
    if (nfree > MAX_FAST_ARGS || nargs > MAX_FAST_ARGS) {
        Py_RETURN_NONE;
    }
    for (Py_ssize_t j = 0; j < nfree; j++) {
        PyObject *src = PyTuple_GET_ITEM(a[2], j);
        if (!PyTuple_Check(src) || PyTuple_GET_SIZE(src) != 4
            || !PyTuple_Check(PyTuple_GET_ITEM(src, 2))) {
            PyErr_SetString(PyExc_TypeError, "bad free-variable source");
            return NULL;
        }
        nt += PyObject_IsTrue(PyTuple_GET_ITEM(src, 3)) == 1;
    }
    for (Py_ssize_t i = 0; i < nargs; i++) {
        nt += is_tensor(PyTuple_GET_ITEM(a[1], i));
    }
    if (nt > MAX_FAST_ARGS) {
        Py_RETURN_NONE;
    }
    L1State *s = PyObject_New(L1State, &L1State_Type);
    if (s == NULL) {
        return NULL;
    }
    s->artifact = Py_NewRef(a[0]);
    s->args = Py_NewRef(a[1]);
    s->sources = Py_NewRef(a[2]);
    s->free = Py_NewRef(a[3]);
    s->grad = stax_grad_enabled();
    s->dtype = (int)stax_default_dtype();
    s->nsnap = nt;
    s->snaps = PyMem_Calloc(nt ? nt : 1, sizeof(snap_t));
    if (s->snaps == NULL) {
        Py_DECREF(s);
        return PyErr_NoMemory();
    }
    Py_ssize_t k = 0;
    for (Py_ssize_t j = 0; j < nfree; j++) {
        PyObject *src = PyTuple_GET_ITEM(a[2], j);
        PyObject *v = PyTuple_GET_ITEM(a[3], j);
        if (PyObject_IsTrue(PyTuple_GET_ITEM(src, 3)) == 1) {
            if (!is_tensor(v)) {
                Py_DECREF(s);
                Py_RETURN_NONE;   /* not armed */
            }
            snap_take(&s->snaps[k++], (StaxTensor *)v);
        }
    }
    for (Py_ssize_t i = 0; i < nargs; i++) {
        PyObject *v = PyTuple_GET_ITEM(a[1], i);
        if (is_tensor(v)) {
            snap_take(&s->snaps[k++], (StaxTensor *)v);
        }
    }
    self->l1 = s;
    Py_RETURN_NONE;
}

static PyObject *
cf_clear_level1(CFObject *self, PyObject *unused)
{
    (void)unused;
    Py_CLEAR(self->l1);
    Py_RETURN_NONE;
}

/* tp.compiler.reset(): disarm level 1 and zero the C counters */
static PyObject *
cf_reset(CFObject *self, PyObject *unused)
{
    (void)unused;
    Py_CLEAR(self->l1);
    self->calls = 0;
    self->hits1 = 0;
    Py_RETURN_NONE;
}

static PyObject *
cf_c_stats(CFObject *self, PyObject *unused)
{
    (void)unused;
    return Py_BuildValue("(KK)", self->calls, self->hits1);
}

static PyObject *
cf_stats(CFObject *self, PyObject *unused)
{
    (void)unused;
    return PyObject_CallMethod(self->driver, "stats", "KK", self->calls,
                               self->hits1);
}

static PyObject *
cf_read_sources(PyObject *mod, PyObject *sources)
{
    (void)mod;
    if (!PyTuple_Check(sources)) {
        PyErr_SetString(PyExc_TypeError, "sources must be a tuple");
        return NULL;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(sources);
    PyObject *res = PyTuple_New(n);
    for (Py_ssize_t j = 0; res != NULL && j < n; j++) {
        PyObject *v = source_read(PyTuple_GET_ITEM(sources, j));
        if (v == NULL) {
            Py_CLEAR(res);
            break;
        }
        PyTuple_SET_ITEM(res, j, v);
    }
    return res;
}

/* Attributes not on the C object come from the driver (versions, ...). */
static PyObject *
cf_getattro(PyObject *op, PyObject *name)
{
    PyObject *r = PyObject_GenericGetAttr(op, name);
    if (r != NULL || !PyErr_ExceptionMatches(PyExc_AttributeError)) {
        return r;
    }
    CFObject *self = (CFObject *)op;
    if (self->driver == NULL) {
        return NULL;
    }
    PyErr_Clear();
    return PyObject_GetAttr(self->driver, name);
}

static PyObject *
cf_repr(CFObject *self)
{
    PyObject *name = self->driver
        ? PyObject_GetAttrString(self->driver, "name") : NULL;
    if (name == NULL) {
        PyErr_Clear();
        return PyUnicode_FromString("<CompiledFunction>");
    }
    PyObject *r = PyUnicode_FromFormat("<CompiledFunction '%U'>", name);
    Py_DECREF(name);
    return r;
}

static PyObject *
cf_descr_get(PyObject *self, PyObject *obj, PyObject *type)
{
    (void)type;
    if (obj == NULL || obj == Py_None) {
        return Py_NewRef(self);
    }
    return PyMethod_New(self, obj);
}

static PyMethodDef cf_methods[] = {
    {"_set_level1", (PyCFunction)(void (*)(void))cf_set_level1,
     METH_FASTCALL, "arm dispatch level 1 (driver use)"},
    {"_clear_level1", (PyCFunction)cf_clear_level1, METH_NOARGS,
     "disarm dispatch level 1"},
    {"_reset", (PyCFunction)cf_reset, METH_NOARGS,
     "disarm level 1 and zero calls/hits_level1 (tp.compiler.reset)"},
    {"_c_stats", (PyCFunction)cf_c_stats, METH_NOARGS,
     "(calls, hits_level1) counted in C"},
    {"stats", (PyCFunction)cf_stats, METH_NOARGS,
     "dict: calls, compiles, versions, hits_level1/2/3, fallbacks"},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef cf_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(CFObject, vectorcall),
     READONLY, NULL},
    {"_driver", T_OBJECT, offsetof(CFObject, driver), READONLY,
     "the Python compile driver"},
    {NULL, 0, 0, 0, NULL},
};

PyTypeObject StaxCompiledFunction_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tensorplay._C.CompiledFunction",
    .tp_doc = "A function compiled by tensorplay.compile: three-level "
              "dispatch over its specialization versions.",
    .tp_basicsize = sizeof(CFObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC
                | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_new = cf_new,
    .tp_init = (initproc)cf_init,
    .tp_dealloc = (destructor)cf_dealloc,
    .tp_traverse = (traverseproc)cf_traverse,
    .tp_clear = (inquiry)cf_clear,
    .tp_call = cf_call,
    .tp_vectorcall_offset = offsetof(CFObject, vectorcall),
    .tp_getattro = cf_getattro,
    .tp_repr = (reprfunc)cf_repr,
    .tp_descr_get = cf_descr_get,
    .tp_methods = cf_methods,
    .tp_members = cf_members,
    .tp_dictoffset = offsetof(CFObject, dict),
    .tp_weaklistoffset = offsetof(CFObject, weakreflist),
};

static PyMethodDef dispatch_functions[] = {
    {"_guard_read_sources", cf_read_sources, METH_O,
     "_guard_read_sources(sources): current values of free-variable "
     "sources"},
    {NULL, NULL, 0, NULL},
};

int
stax_guard_dispatch_init(PyObject *m)
{
    if (PyType_Ready(&L1State_Type) < 0
        || PyType_Ready(&StaxCompiledFunction_Type) < 0) {
        return -1;
    }
    if (PyModule_AddObjectRef(m, "CompiledFunction",
                              (PyObject *)&StaxCompiledFunction_Type) < 0) {
        return -1;
    }
    return PyModule_AddFunctions(m, dispatch_functions);
}
