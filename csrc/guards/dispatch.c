/* Three-level dispatch (Algorithm 2.1) in C: CompiledFunction.
 *
 * Level 1: a call whose positional arguments are the very objects of the
 * last call (tensors with unchanged version and metadata), with no keyword
 * arguments, the same grad mode and default dtype, whose free variables
 * (globals, closure cells, attribute chains) still hold the same objects,
 * and whose version has no data gates, calls the last artifact directly.
 *
 * Levels 2 and 3, on a level-1 miss: the free variables are read from the
 * plan's sources, the call's fingerprint (identity and version of every
 * tensor, scalars by value) is compared with the last call's (level 2),
 * else the call's key (signatures of the arguments and free variables,
 * aliasing of the tensor inputs, grad mode, default dtype) is written as
 * bytes and looked up in the version cache (level 3); a version matches
 * when its shape guards hold and, with data gates, its replay gives the
 * traced outcomes (the replay runs in Python). The key bytes map to the
 * Python driver's group of versions for that key: the driver registers
 * them (_register) after its first miss on that key. Only a true miss,
 * a value the bytes cannot encode exactly, a call while tracing, or a
 * function without a C plan (a method compiled on a class: one plan per
 * module) enters the Python driver. */
#include "guards/guards.h"

#include <structmember.h>
#include <xxhash.h>

#define MAX_FAST_ARGS 64

/* 1 when every weakly held object of the last call (the driver holds its
 * tensors weakly) is still alive: a freed one's identity may be reused, so
 * its fingerprint can no longer name it */
static int
last_alive(PyObject *objs)
{
    if (objs == NULL || !PyTuple_Check(objs)) {
        return 1;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(objs); i++) {
        PyObject *o = PyTuple_GET_ITEM(objs, i);
        if (PyWeakref_CheckRef(o) && PyWeakref_GetObject(o) == Py_None) {
            return 0;
        }
    }
    return 1;
}

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
    PyObject *sources;    /* tuple of (kind, root, attrs, _) */
    PyObject *free;       /* tuple: the values read from the sources */
    int grad;
    int dtype;
    Py_ssize_t nsnap;
    snap_t *snaps;        /* free tensors, then tensor args */
    unsigned char *lifted; /* per source: its value is a tensor */
    Py_ssize_t snapcap;   /* allocated snaps / lifted (reused on re-arm) */
    Py_ssize_t liftcap;
} L1State;

/* The lifting plan as C reads it per call (one per compiled function,
 * immutable, swapped as a whole). */
typedef struct {
    PyObject_HEAD
    PyObject *sources;    /* tuple of (kind, root, attrs, _) */
    unsigned char *effect; /* per source: effect-only (keyed by identity) */
    int dynamic;
} PlanState;

/* One specialization version as dispatch sees it (_DispatchEntry). */
typedef struct {
    Py_ssize_t flat;
    int dim;
    int64_t size;
} sread_t;

typedef struct {
    PyObject_HEAD
    Py_ssize_t index;     /* in the driver's versions */
    PyObject *artifact;   /* NULL: the driver runs this version */
    PyObject *effects;    /* tuple of (free index, method, args, kwargs) */
    int gates;            /* has data gates: replay them */
    Py_ssize_t nreads;
    sread_t *reads;       /* shape guards (dynamic mode) */
    Py_ssize_t nprog;
    int64_t *prog;        /* symbolic shape guards: (op, a, b) triples of
                             the stack program _symbolic.compile_guards
                             writes (relations between input sizes) */
} EntryObject;

/* key bytes -> the driver's list of _DispatchEntry for that key */
typedef struct {
    uint64_t h;
    PyObject *key;        /* bytes */
    PyObject *group;      /* list, shared with the driver */
} kgroup_t;

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *driver;     /* the Python driver (attributes forward to it) */
    PyObject *slow;       /* driver._dispatch: the whole call in Python */
    PyObject *miss;       /* driver._miss: level 3 missed in C */
    PyObject *gates_hold; /* driver._gates_hold_index */
    PyObject *run_py;     /* driver._run_index */
    L1State *l1;          /* NULL when level 1 is disarmed */
    PlanState *plan;      /* NULL: levels 2/3 go to the driver */
    kgroup_t *groups;
    Py_ssize_t ngroups;
    Py_ssize_t capgroups;
    int has_last;         /* level 2: the last resolved call */
    unsigned char last_fp[16];
    PyObject *last_entry;
    PyObject *last_objs;  /* keeps the fingerprinted identities alive */
    unsigned long long calls;
    unsigned long long hits1;
    unsigned long long hits2;
    unsigned long long hits3;
    unsigned long long entries; /* calls into the Python driver */
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
    PyMem_Free(s->lifted);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static PyTypeObject L1State_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tensorplay._C._Level1State",
    .tp_basicsize = sizeof(L1State),
    .tp_dealloc = (destructor)l1_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
};

static void
plan_dealloc(PlanState *s)
{
    Py_XDECREF(s->sources);
    PyMem_Free(s->effect);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static PyTypeObject PlanState_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tensorplay._C._DispatchPlan",
    .tp_basicsize = sizeof(PlanState),
    .tp_dealloc = (destructor)plan_dealloc,
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

/* tensorplay.nn.Module.__getattr__ (modules.py), once seen */
static PyObject *module_getattr_fn = NULL;

static int
is_module_getattr(PyObject *f)
{
    if (f == NULL || !PyFunction_Check(f)) {
        return 0;
    }
    if (f == module_getattr_fn) {
        return 1;
    }
    PyObject *qn = ((PyFunctionObject *)f)->func_qualname;
    PyObject *mn = ((PyFunctionObject *)f)->func_module;
    if (qn == NULL || mn == NULL || !PyUnicode_Check(qn) || !PyUnicode_Check(mn)
        || PyUnicode_CompareWithASCIIString(qn, "Module.__getattr__") != 0
        || PyUnicode_CompareWithASCIIString(mn, "tensorplay.nn.modules") != 0) {
        return 0;
    }
    Py_XSETREF(module_getattr_fn, Py_NewRef(f));
    return 1;
}

/* getattr(module, name) where the answer is a child module, parameter or
 * buffer: a guard reads about six per parameter (self.transformer.h[0]
 * .attn.c_attn.weight) and each went through a failed generic lookup, an
 * AttributeError and the Python-level Module.__getattr__ (0.6 us; 420 reads
 * were a third of a GPT decoding step). The same answer from the dicts:
 * only for a type whose attribute lookup is object's plus
 * Module.__getattr__, a name the type does not define and the instance
 * dict does not hold; then modules.py's order (_parameters, _buffers,
 * _modules). NULL without an exception where it does not apply. */
static PyObject *
module_child(PyObject *obj, PyObject *name)
{
    static PyObject *s_getattribute = NULL, *s_getattr = NULL, *keys[3] = {NULL, NULL, NULL};
    if (s_getattribute == NULL) {
        s_getattribute = PyUnicode_InternFromString("__getattribute__");
        s_getattr = PyUnicode_InternFromString("__getattr__");
        keys[0] = PyUnicode_InternFromString("_parameters");
        keys[1] = PyUnicode_InternFromString("_buffers");
        keys[2] = PyUnicode_InternFromString("_modules");
        if (!s_getattribute || !s_getattr || !keys[0] || !keys[1] || !keys[2]) {
            PyErr_Clear();
            return NULL;
        }
    }
    PyTypeObject *tp = Py_TYPE(obj);
    if (!PyUnicode_CheckExact(name) || !(tp->tp_flags & Py_TPFLAGS_HEAPTYPE)
        || !is_module_getattr(_PyType_Lookup(tp, s_getattr))
        || _PyType_Lookup(tp, s_getattribute)
               != _PyType_Lookup(&PyBaseObject_Type, s_getattribute)
        || _PyType_Lookup(tp, name) != NULL) {
        return NULL;
    }
    PyObject *d = PyObject_GenericGetDict(obj, NULL);
    if (d == NULL || !PyDict_CheckExact(d)) {
        Py_XDECREF(d);
        PyErr_Clear();
        return NULL;
    }
    PyObject *r = NULL;
    /* OrderedDict (modules.py's dicts) looks up as dict does */
    if (PyDict_GetItemWithError(d, name) == NULL && !PyErr_Occurred()) {
        for (int i = 0; i < 3 && r == NULL; i++) {
            PyObject *sub = PyDict_GetItemWithError(d, keys[i]);
            if (sub == NULL || sub == Py_None) {
                continue;
            }
            if (!PyDict_CheckExact(sub) && !PyODict_CheckExact(sub)) {
                break;     /* modules.py's `in` on another mapping: its way */
            }
            r = PyDict_GetItemWithError(sub, name);
            Py_XINCREF(r);
        }
    }
    PyErr_Clear();
    Py_DECREF(d);
    return r;
}

/* The objects a walk of one source reached (objs[i]: after step i), kept
 * for the next source of the same loop: a GPT's sources are paths like
 * self.transformer.h[0].attn.c_attn.weight then ...c_attn.bias, and
 * walking every one from its root repeated the shared prefix's dict
 * lookups (about 6 per parameter, a third of the guard time of a decode
 * step).  Only steps that run no Python code are kept (the global or cell
 * at the root, module_child's dict reads); a step through getattr may run
 * any code, so it empties the cache. */
#define PREFIX_MAX 16
typedef struct {
    long kind;
    PyObject *root;          /* borrowed: the sources tuple holds it */
    PyObject *attrs;         /* borrowed, likewise */
    Py_ssize_t n;            /* valid objs */
    PyObject *objs[PREFIX_MAX];
} prefix_t;

static void
prefix_clear(prefix_t *pc)
{
    if (pc == NULL) {
        return;
    }
    for (Py_ssize_t i = 0; i < pc->n; i++) {
        Py_DECREF(pc->objs[i]);
    }
    pc->n = 0;
}

/* steps of attrs a walk may take from pc's objects: the common prefix */
static Py_ssize_t
prefix_shared(const prefix_t *pc, long kind, PyObject *root, PyObject *attrs)
{
    if (pc == NULL || pc->n == 0 || pc->kind != kind || pc->root != root) {
        return 0;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(attrs), m = PyTuple_GET_SIZE(pc->attrs), l = 0;
    while (l < n && l < m && l < pc->n) {
        PyObject *a = PyTuple_GET_ITEM(attrs, l), *b = PyTuple_GET_ITEM(pc->attrs, l);
        if (a != b && !(PyUnicode_CheckExact(a) && PyUnicode_CheckExact(b)
                        && PyUnicode_Compare(a, b) == 0)) {
            break;
        }
        l++;
    }
    return l;
}

/* Read the current value of one free-variable source; new reference, or
 * NULL (with an exception set only on hard errors: a missing name simply
 * returns NULL with AttributeError/KeyError set, which the caller clears).
 * pc: the previous walk of the same loop (NULL: none), updated. */
static PyObject *
source_read_pc(PyObject *src, prefix_t *pc)
{
    long kind = PyLong_AsLong(PyTuple_GET_ITEM(src, 0));
    PyObject *root = PyTuple_GET_ITEM(src, 1);
    PyObject *attrs = PyTuple_GET_ITEM(src, 2);
    Py_ssize_t i = 0, n = PyTuple_GET_SIZE(attrs);
    PyObject *cur = NULL;
    Py_ssize_t shared = prefix_shared(pc, kind, root, attrs);
    if (shared > 0) {
        /* objs[shared - 1] is the value after attrs[0 .. shared - 1] */
        cur = Py_NewRef(pc->objs[shared - 1]);
        i = shared;
        for (Py_ssize_t q = shared; q < pc->n; q++) {
            Py_DECREF(pc->objs[q]);
        }
        pc->n = shared;
    }
    else {
        prefix_clear(pc);
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
            if (pc != NULL) {
                pc->objs[pc->n++] = Py_NewRef(cur);
            }
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
        if (pc != NULL) {
            pc->kind = kind;
            pc->root = root;
        }
    }
    if (pc != NULL) {
        pc->attrs = attrs;
    }
    int keep = pc != NULL;
    for (; i < n; i++) {
        PyObject *step = PyTuple_GET_ITEM(attrs, i), *next;
        if (PyTuple_Check(step)) {
            /* (key,): an item step (L[0], cfg['k']) */
            next = PyTuple_GET_SIZE(step) == 1
                ? PyObject_GetItem(cur, PyTuple_GET_ITEM(step, 0)) : NULL;
            keep = 0;
            prefix_clear(pc);      /* Python code may have run */
            if (next == NULL && !PyErr_Occurred()) {
                PyErr_SetString(PyExc_KeyError, "malformed item step");
            }
            Py_DECREF(cur);
            if (next == NULL) {
                return NULL;
            }
            cur = next;
            continue;
        }
        next = module_child(cur, step);
        if (next == NULL) {
            next = PyObject_GetAttr(cur, step);
            keep = 0;
            prefix_clear(pc);      /* Python code may have run */
        }
        Py_DECREF(cur);
        if (next == NULL) {
            return NULL;
        }
        cur = next;
        if (keep && pc->n < PREFIX_MAX && pc->n == i) {
            pc->objs[pc->n++] = Py_NewRef(cur);
        }
    }
    return cur;
}

static PyObject *
source_read(PyObject *src)
{
    return source_read_pc(src, NULL);
}

static PyObject *
slow_call(CFObject *self, PyObject *const *args, size_t nargsf,
          PyObject *kwnames)
{
    self->entries++;
    return PyObject_Vectorcall(self->slow, args, nargsf, kwnames);
}

/* ---- the dispatch entry of a version ---- */

static int
entry_traverse(EntryObject *e, visitproc visit, void *arg)
{
    Py_VISIT(e->artifact);
    Py_VISIT(e->effects);
    return 0;
}

static int
entry_clear(EntryObject *e)
{
    Py_CLEAR(e->artifact);
    Py_CLEAR(e->effects);
    return 0;
}

static void
entry_dealloc(EntryObject *e)
{
    PyObject_GC_UnTrack(e);
    entry_clear(e);
    PyMem_Free(e->reads);
    PyMem_Free(e->prog);
    Py_TYPE(e)->tp_free((PyObject *)e);
}

/* The symbolic shape guards' stack program (compiler/_symbolic.py,
 * compile_guards): triples (op, a, b); op 0 pushes size b of flat tensor
 * a, 1 pushes the constant a, 2..16 pop two and push the result (+ - *
 * floordiv mod == != < <= > >= min max and or), 17 negates, 18 is `not`,
 * 19 pops and fails unless its truth is a. 1 when every guard holds. */
enum { SG_SIZE = 0, SG_CONST, SG_ADD, SG_SUB, SG_MUL, SG_FLOORDIV, SG_MOD, SG_EQ,
       SG_NE, SG_LT, SG_LE, SG_GT, SG_GE, SG_MIN, SG_MAX, SG_AND, SG_OR, SG_NEG,
       SG_NOT, SG_CHECK };

static int
shape_prog_holds(const EntryObject *e, PyObject **flat, Py_ssize_t n)
{
    int64_t st[64];
    int sp = 0;
    for (Py_ssize_t k = 0; k < e->nprog; k++) {
        int64_t op = e->prog[3 * k], a = e->prog[3 * k + 1], b = e->prog[3 * k + 2];
        if (op == SG_SIZE) {
            if (a < 0 || a >= n || sp >= 64) {
                return 0;
            }
            StaxTensor *t = (StaxTensor *)flat[a];
            if (b < 0 || b >= t->ndim) {
                return 0;
            }
            st[sp++] = t->sizes[b];
            continue;
        }
        if (op == SG_CONST) {
            if (sp >= 64) {
                return 0;
            }
            st[sp++] = a;
            continue;
        }
        if (op == SG_CHECK) {
            if (sp < 1 || (st[--sp] != 0) != (a != 0)) {
                return 0;
            }
            continue;
        }
        if (op == SG_NEG || op == SG_NOT) {
            if (sp < 1) {
                return 0;
            }
            st[sp - 1] = op == SG_NEG ? -st[sp - 1] : !st[sp - 1];
            continue;
        }
        if (sp < 2) {
            return 0;
        }
        int64_t y = st[--sp], x = st[sp - 1], r;
        switch (op) {
        case SG_ADD: r = x + y; break;
        case SG_SUB: r = x - y; break;
        case SG_MUL: r = x * y; break;
        case SG_FLOORDIV:
        case SG_MOD:
            if (y == 0) {
                return 0;       /* eager raises: the guard cannot hold */
            }
            r = x / y;
            if ((x % y != 0) && ((x < 0) != (y < 0))) {
                r--;
            }
            if (op == SG_MOD) {
                r = x - r * y;
            }
            break;
        case SG_EQ: r = x == y; break;
        case SG_NE: r = x != y; break;
        case SG_LT: r = x < y; break;
        case SG_LE: r = x <= y; break;
        case SG_GT: r = x > y; break;
        case SG_GE: r = x >= y; break;
        case SG_MIN: r = x < y ? x : y; break;
        case SG_MAX: r = x > y ? x : y; break;
        case SG_AND: r = x && y; break;
        case SG_OR: r = x || y; break;
        default: return 0;
        }
        st[sp - 1] = r;
    }
    return 1;
}

/* _DispatchEntry(index, artifact or None, shape_reads, has_gates, effects,
 * shape_prog=()): shape_reads a tuple of (flat index, dim, size); effects a
 * tuple of (free index, method name, args tuple, kwargs dict); shape_prog
 * the symbolic shape guards' program (ints, 3 per instruction). */
static PyObject *
entry_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    Py_ssize_t index = 0;
    PyObject *art = NULL, *reads = NULL, *effects = NULL, *prog = NULL;
    int gates = 0;
    static char *kwlist[] = {"index", "artifact", "shape_reads", "gates",
                             "effects", "shape_prog", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "nOO!pO!|O!:_DispatchEntry",
                                     kwlist, &index, &art, &PyTuple_Type,
                                     &reads, &gates, &PyTuple_Type,
                                     &effects, &PyTuple_Type, &prog)) {
        return NULL;
    }
    if (prog != NULL && PyTuple_GET_SIZE(prog) % 3 != 0) {
        PyErr_SetString(PyExc_TypeError, "_DispatchEntry: shape_prog holds (op, a, b) triples");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(effects); i++) {
        PyObject *ef = PyTuple_GET_ITEM(effects, i);
        if (!PyTuple_Check(ef) || PyTuple_GET_SIZE(ef) != 4
            || !PyLong_Check(PyTuple_GET_ITEM(ef, 0))
            || !PyTuple_Check(PyTuple_GET_ITEM(ef, 2))
            || !PyDict_Check(PyTuple_GET_ITEM(ef, 3))) {
            PyErr_SetString(PyExc_TypeError,
                            "_DispatchEntry: effects are (index, name, "
                            "args tuple, kwargs dict)");
            return NULL;
        }
    }
    EntryObject *e = (EntryObject *)type->tp_alloc(type, 0);
    if (e == NULL) {
        return NULL;
    }
    e->index = index;
    e->artifact = art == Py_None ? NULL : Py_NewRef(art);
    e->effects = Py_NewRef(effects);
    e->gates = gates;
    e->nreads = PyTuple_GET_SIZE(reads);
    e->reads = PyMem_Calloc(e->nreads ? e->nreads : 1, sizeof(sread_t));
    if (e->reads == NULL) {
        Py_DECREF(e);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < e->nreads; i++) {
        PyObject *r = PyTuple_GET_ITEM(reads, i);
        long long fi, d, sz;
        if (!PyTuple_Check(r)
            || !PyArg_ParseTuple(r, "LLL;shape_reads are (flat, dim, size)",
                                 &fi, &d, &sz)) {
            if (!PyErr_Occurred()) {
                PyErr_SetString(PyExc_TypeError,
                                "shape_reads are (flat, dim, size)");
            }
            Py_DECREF(e);
            return NULL;
        }
        e->reads[i].flat = (Py_ssize_t)fi;
        e->reads[i].dim = (int)d;
        e->reads[i].size = sz;
    }
    if (prog != NULL && PyTuple_GET_SIZE(prog) > 0) {
        Py_ssize_t np = PyTuple_GET_SIZE(prog);
        e->prog = PyMem_Calloc((size_t)np, sizeof(int64_t));
        if (e->prog == NULL) {
            Py_DECREF(e);
            return PyErr_NoMemory();
        }
        for (Py_ssize_t i = 0; i < np; i++) {
            e->prog[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(prog, i));
            if (e->prog[i] == -1 && PyErr_Occurred()) {
                Py_DECREF(e);
                return NULL;
            }
        }
        e->nprog = np / 3;
    }
    return (PyObject *)e;
}

static PyObject *
entry_index(EntryObject *e, void *unused)
{
    (void)unused;
    return PyLong_FromSsize_t(e->index);
}

static PyGetSetDef entry_getset[] = {
    {"index", (getter)entry_index, NULL, "the version's index", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject Entry_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tensorplay._C._DispatchEntry",
    .tp_doc = "A specialization version as C dispatch runs it.",
    .tp_basicsize = sizeof(EntryObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = entry_new,
    .tp_dealloc = (destructor)entry_dealloc,
    .tp_traverse = (traverseproc)entry_traverse,
    .tp_clear = (inquiry)entry_clear,
    .tp_getset = entry_getset,
};

/* ---- level 1 arming ---- */

/* *slot = a tuple of objs[0..n) then tail[0..ntail), tensors held weakly
 * (a compiled function must not keep its caller's inputs alive after
 * `del x`). A fresh-tensor call re-arms every time: the old tuple is
 * rewritten in place when nothing else holds it (no allocation). */
static int
hold_objects(PyObject **slot, PyObject *const *objs, Py_ssize_t n,
             PyObject *const *tail, Py_ssize_t ntail)
{
    PyObject *t = *slot;
    Py_ssize_t total = n + ntail;
    int reuse = t != NULL && PyTuple_CheckExact(t) && Py_REFCNT(t) == 1
                && PyTuple_GET_SIZE(t) == total;
    if (!reuse) {
        t = PyTuple_New(total);
        if (t == NULL) {
            return -1;
        }
    }
    else {
        Py_INCREF(t);
    }
    for (Py_ssize_t i = 0; i < total; i++) {
        PyObject *v = i < n ? objs[i] : tail[i - n], *w = NULL;
        if (is_tensor(v)) {
            w = PyWeakref_NewRef(v, NULL);
            if (w == NULL) {
                PyErr_Clear();
            }
        }
        PyObject *old = PyTuple_GET_ITEM(t, i);
        PyTuple_SET_ITEM(t, i, w ? w : Py_NewRef(v));
        Py_XDECREF(old);
    }
    Py_XSETREF(*slot, t);
    return 0;
}

/* Arm level 1 after a call that ran `art` on the tensors of `args`
 * (positional tuple) and `free` (values read from `sources`); snapshots
 * are taken now, after the call. A source's value is lifted when it is a
 * tensor (as the plan's lifting decides). */
static int
arm_level1(CFObject *self, PyObject *art, PyObject *const *args,
           Py_ssize_t nargs, PyObject *sources, PyObject *free)
{
    Py_ssize_t nt = 0, nfree = PyTuple_GET_SIZE(free);
    if (nfree > MAX_FAST_ARGS || nargs > MAX_FAST_ARGS) {
        Py_CLEAR(self->l1);
        return 0;
    }
    for (Py_ssize_t j = 0; j < nfree; j++) {
        nt += is_tensor(PyTuple_GET_ITEM(free, j));
    }
    for (Py_ssize_t i = 0; i < nargs; i++) {
        nt += is_tensor(args[i]);
    }
    if (nt > MAX_FAST_ARGS) {
        Py_CLEAR(self->l1);
        return 0;
    }
    /* a fresh-tensor call re-arms every time: reuse the state when no
     * running call holds it */
    L1State *s = self->l1;
    self->l1 = NULL;
    if (s != NULL && (Py_REFCNT(s) != 1 || s->snapcap < nt
                      || s->liftcap < nfree)) {
        Py_CLEAR(s);
    }
    if (s == NULL) {
        s = PyObject_New(L1State, &L1State_Type);
        if (s == NULL) {
            return -1;
        }
        s->artifact = s->args = s->sources = s->free = NULL;
        s->snapcap = nt ? nt : 1;
        s->liftcap = nfree ? nfree : 1;
        s->snaps = PyMem_Malloc(s->snapcap * sizeof(snap_t));
        s->lifted = PyMem_Malloc(s->liftcap);
        if (s->snaps == NULL || s->lifted == NULL) {
            Py_DECREF(s);
            PyErr_NoMemory();
            return -1;
        }
    }
    Py_XSETREF(s->artifact, Py_NewRef(art));
    /* tensor arguments are held weakly: level 1 must not keep the caller's
     * inputs alive after `del x` (a freed one never matches again, so a
     * reused address cannot fake a hit) */
    if (hold_objects(&s->args, args, nargs, NULL, 0) < 0) {
        Py_DECREF(s);
        return -1;
    }
    Py_XSETREF(s->sources, Py_NewRef(sources));
    Py_XSETREF(s->free, Py_NewRef(free));
    s->grad = stax_grad_enabled();
    s->dtype = (int)stax_default_dtype();
    s->nsnap = nt;
    memset(s->lifted, 0, nfree);
    Py_ssize_t k = 0;
    for (Py_ssize_t j = 0; j < nfree; j++) {
        PyObject *v = PyTuple_GET_ITEM(free, j);
        if (is_tensor(v)) {
            s->lifted[j] = 1;
            snap_take(&s->snaps[k++], (StaxTensor *)v);
        }
    }
    for (Py_ssize_t i = 0; i < nargs; i++) {
        PyObject *v = args[i];
        if (is_tensor(v)) {
            snap_take(&s->snaps[k++], (StaxTensor *)v);
        }
    }
    self->l1 = s;
    return 0;
}

/* ---- levels 2 and 3 ---- */

static PyObject *
read_free(PlanState *plan)
{
    Py_ssize_t n = PyTuple_GET_SIZE(plan->sources);
    PyObject *res = PyTuple_New(n);
    prefix_t pc = {0};
    for (Py_ssize_t j = 0; res != NULL && j < n; j++) {
        PyObject *v = source_read_pc(PyTuple_GET_ITEM(plan->sources, j), &pc);
        if (v == NULL) {
            Py_CLEAR(res);
            break;
        }
        PyTuple_SET_ITEM(res, j, v);
    }
    prefix_clear(&pc);
    return res;
}

/* The call's tensors in the driver's order (_flatten): free tensors, then
 * the tensors inside the arguments, then inside the keyword arguments
 * (sorted by name). 0, 1 when the driver must flatten (container
 * subclasses, too many tensors). */
static int
flat_add(PyObject *o, PyObject **flat, Py_ssize_t *n)
{
    if (is_tensor(o)) {
        if (*n >= MAX_FAST_ARGS) {
            return 1;
        }
        flat[(*n)++] = o;
        return 0;
    }
    if (PyTuple_CheckExact(o) || PyList_CheckExact(o)) {
        /* a list may change while the loop below runs no Python code */
        Py_ssize_t m = PySequence_Fast_GET_SIZE(o);
        PyObject **items = PySequence_Fast_ITEMS(o);
        for (Py_ssize_t i = 0; i < m; i++) {
            if (flat_add(items[i], flat, n)) {
                return 1;
            }
        }
        return 0;
    }
    if (PyDict_CheckExact(o)) {
        Py_ssize_t pos = 0;
        PyObject *k, *v;
        while (PyDict_Next(o, &pos, &k, &v)) {
            if (flat_add(v, flat, n)) {
                return 1;
            }
        }
        return 0;
    }
    if (PyTuple_Check(o) || PyList_Check(o) || PyDict_Check(o)) {
        return 1;
    }
    return 0;
}

/* aliasing of the call's tensors (_guard_aliasing), into the key */
static int
key_aliasing(stax_keybuf *kb, PyObject **flat, Py_ssize_t n)
{
    int any = 0;
    for (Py_ssize_t i = 1; i < n && !any; i++) {
        for (Py_ssize_t j = 0; j < i; j++) {
            if (((StaxTensor *)flat[i])->storage
                == ((StaxTensor *)flat[j])->storage) {
                any = 1;
                break;
            }
        }
    }
    unsigned char tag = any ? 'a' : 'n';
    if (stax_kb_put(kb, &tag, 1) < 0) {
        return -1;
    }
    for (Py_ssize_t i = 0; any && i < n; i++) {
        int64_t first = i;
        for (Py_ssize_t j = 0; j < i; j++) {
            if (((StaxTensor *)flat[i])->storage
                == ((StaxTensor *)flat[j])->storage) {
                first = j;
                break;
            }
        }
        if (stax_kb_put(kb, &first, sizeof first) < 0) {
            return -1;
        }
    }
    return 0;
}

static PyObject *
flat_list(PyObject **flat, Py_ssize_t n)
{
    PyObject *l = PyList_New(n);
    for (Py_ssize_t i = 0; l != NULL && i < n; i++) {
        PyList_SET_ITEM(l, i, Py_NewRef(flat[i]));
    }
    return l;
}

/* 1 when the version's shape guards hold and its data gates (replayed by
 * the driver) give the traced outcomes; 0; -1 on error */
static int
entry_matches(CFObject *self, EntryObject *e, PyObject **flat, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < e->nreads; i++) {
        const sread_t *r = &e->reads[i];
        if (r->flat >= n) {
            return 0;
        }
        StaxTensor *t = (StaxTensor *)flat[r->flat];
        if (r->dim >= t->ndim || t->sizes[r->dim] != r->size) {
            return 0;
        }
    }
    if (e->nprog > 0 && !shape_prog_holds(e, flat, n)) {
        return 0;
    }
    if (!e->gates) {
        return 1;
    }
    PyObject *l = flat_list(flat, n);
    if (l == NULL) {
        return -1;
    }
    self->entries++;
    PyObject *r = PyObject_CallFunction(self->gates_hold, "nO", e->index, l);
    Py_DECREF(l);
    if (r == NULL) {
        return -1;
    }
    int ok = PyObject_IsTrue(r);
    Py_DECREF(r);
    return ok;
}

/* The per-call state of levels 2/3. */
typedef struct {
    PyObject *const *args;
    Py_ssize_t nargs;
    PyObject *kwnames;
    Py_ssize_t nkw;
    Py_ssize_t order[MAX_FAST_ARGS]; /* keyword arguments by name */
    PyObject *argt;      /* tuple of the positional arguments, lazily */
    PyObject *kwd;       /* dict of the keyword arguments, sorted, lazily */
    PyObject *free;
    PyObject *flat[MAX_FAST_ARGS];
    Py_ssize_t nflat;
} call_t;

static PyObject *
call_args(call_t *c)
{
    if (c->argt == NULL) {
        c->argt = PyTuple_New(c->nargs);
        for (Py_ssize_t i = 0; c->argt != NULL && i < c->nargs; i++) {
            PyTuple_SET_ITEM(c->argt, i, Py_NewRef(c->args[i]));
        }
    }
    return c->argt;
}

static PyObject *
call_kwargs(call_t *c)
{
    if (c->kwd == NULL) {
        c->kwd = PyDict_New();
        for (Py_ssize_t i = 0; c->kwd != NULL && i < c->nkw; i++) {
            Py_ssize_t k = c->order[i];
            if (PyDict_SetItem(c->kwd, PyTuple_GET_ITEM(c->kwnames, k),
                               c->args[c->nargs + k]) < 0) {
                Py_CLEAR(c->kwd);
            }
        }
    }
    return c->kwd;
}

static int
set_last(CFObject *self, const unsigned char fp[16], PyObject *entry,
         call_t *c)
{
    /* as the driver's _hold: the fingerprint names these objects by
     * identity, so they are kept until the next call; tensors weakly (a
     * compiled function must not keep its caller's inputs alive after
     * `del x`), a dead one disarms level 2 (last_alive) */
    PyObject *pos[2 * MAX_FAST_ARGS];
    Py_ssize_t n = 0;
    for (Py_ssize_t i = 0; i < c->nargs; i++) {
        pos[n++] = c->args[i];
    }
    for (Py_ssize_t i = 0; i < c->nkw; i++) {
        pos[n++] = c->args[c->nargs + c->order[i]];
    }
    if (hold_objects(&self->last_objs, pos, n,
                     &PyTuple_GET_ITEM(c->free, 0),
                     PyTuple_GET_SIZE(c->free)) < 0) {
        return -1;
    }
    memcpy(self->last_fp, fp, 16);
    self->has_last = 1;
    Py_XSETREF(self->last_entry, Py_NewRef(entry));
    return 0;
}

/* the program's runtime check failed (an integer division by zero, an
 * index out of range): it undid its writes and marked the error; the call
 * runs eagerly, which raises eager's error after eager's writes. 1 when
 * the pending error is so marked (then cleared), 0 otherwise (kept) */
static int
rerun_marked(void)
{
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    PyErr_NormalizeException(&et, &ev, &tb);
    int marked = 0;
    if (ev != NULL && PyObject_HasAttrString(ev, "_stax_rerun")) {
        marked = 1;
    }
    if (marked) {
        Py_XDECREF(et);
        Py_XDECREF(ev);
        Py_XDECREF(tb);
        return 1;
    }
    PyErr_Restore(et, ev, tb);
    return 0;
}

/* run version e on the call; arm or disarm level 1 as the driver's _run */
static PyObject *
run_entry(CFObject *self, PlanState *plan, EntryObject *e, call_t *c)
{
    PyObject *res = NULL;
    if (e->artifact == NULL) {
        PyObject *l = flat_list(c->flat, c->nflat);
        PyObject *a = call_args(c), *k = call_kwargs(c);
        if (l != NULL && a != NULL && k != NULL) {
            self->entries++;
            res = PyObject_CallFunction(self->run_py, "nOOOO", e->index, l,
                                        a, k, c->free);
        }
        Py_XDECREF(l);
        return res;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(e->effects); i++) {
        PyObject *ef = PyTuple_GET_ITEM(e->effects, i);
        Py_ssize_t j = PyLong_AsSsize_t(PyTuple_GET_ITEM(ef, 0));
        if (j < 0 || j >= PyTuple_GET_SIZE(c->free)) {
            if (!PyErr_Occurred()) {
                PyErr_SetString(PyExc_IndexError, "effect source index");
            }
            return NULL;
        }
        PyObject *m = PyObject_GetAttr(PyTuple_GET_ITEM(c->free, j),
                                       PyTuple_GET_ITEM(ef, 1));
        if (m == NULL) {
            return NULL;
        }
        PyObject *r = PyObject_Call(m, PyTuple_GET_ITEM(ef, 2),
                                    PyTuple_GET_ITEM(ef, 3));
        Py_DECREF(m);
        if (r == NULL) {
            return NULL;
        }
        Py_DECREF(r);
    }
    PyObject *art = Py_NewRef(e->artifact);
    res = PyObject_Vectorcall(art, c->flat, c->nflat, NULL);
    if (res == NULL) {
        Py_DECREF(art);
        /* with effects already made, the program's own error stands */
        if (PyTuple_GET_SIZE(e->effects) == 0 && rerun_marked()) {
            PyObject *a = call_args(c), *k = call_kwargs(c);
            Py_CLEAR(self->l1);
            return a && k ? PyObject_CallMethod(self->driver, "_eager", "OO", a, k) : NULL;
        }
        return NULL;
    }
    int arm = !e->gates && PyTuple_GET_SIZE(e->effects) == 0 && c->nkw == 0;
    for (Py_ssize_t i = 0; arm && i < c->nargs; i++) {
        PyObject *a = c->args[i];
        arm = is_tensor(a) || a == Py_None || PyBool_Check(a)
              || PyLong_CheckExact(a) || PyFloat_CheckExact(a)
              || PyUnicode_CheckExact(a);
    }
    for (Py_ssize_t j = 0; arm && j < PyTuple_GET_SIZE(c->free); j++) {
        PyObject *v = PyTuple_GET_ITEM(c->free, j);
        arm = !(PyList_Check(v) || PyDict_Check(v) || PyTuple_Check(v));
    }
    if (!arm) {
        Py_CLEAR(self->l1);
    }
    else if (arm_level1(self, art, c->args, c->nargs, plan->sources,
                        c->free) < 0) {
        Py_CLEAR(res);
    }
    Py_DECREF(art);
    return res;
}

static int
kw_sort(call_t *c)
{
    for (Py_ssize_t i = 0; i < c->nkw; i++) {
        Py_ssize_t k = i, j = i - 1;
        PyObject *name = PyTuple_GET_ITEM(c->kwnames, k);
        while (j >= 0) {
            int lt = PyUnicode_Compare(name,
                                       PyTuple_GET_ITEM(c->kwnames,
                                                        c->order[j]));
            if (lt == -1 && PyErr_Occurred()) {
                return -1;
            }
            if (lt >= 0) {
                break;
            }
            c->order[j + 1] = c->order[j];
            j--;
        }
        c->order[j + 1] = k;
    }
    return 0;
}

/* the fingerprint of (args, kwargs, free, grad mode, default dtype), as
 * _guard_fingerprint writes that tuple */
static int
call_fingerprint(call_t *c, int rho, int dt, unsigned char out[16])
{
    stax_keybuf kb;
    int r = -1;
    stax_kb_init(&kb);
    if (stax_guard_fp_header(&kb, &PyTuple_Type, 6, 5) < 0
        || stax_guard_fp_header(&kb, &PyTuple_Type, 6, c->nargs) < 0) {
        goto done;
    }
    for (Py_ssize_t i = 0; i < c->nargs; i++) {
        if (stax_guard_fp_feed(&kb, c->args[i]) < 0) {
            goto done;
        }
    }
    if (stax_guard_fp_header(&kb, &PyDict_Type, 7, c->nkw) < 0) {
        goto done;
    }
    for (Py_ssize_t i = 0; i < c->nkw; i++) {
        Py_ssize_t k = c->order[i];
        if (stax_guard_fp_feed(&kb, PyTuple_GET_ITEM(c->kwnames, k)) < 0
            || stax_guard_fp_feed(&kb, c->args[c->nargs + k]) < 0) {
            goto done;
        }
    }
    if (stax_guard_fp_feed(&kb, c->free) < 0
        || stax_guard_fp_feed(&kb, rho ? Py_True : Py_False) < 0
        || stax_guard_fp_cstr(&kb, stax_dtype_name((stax_dtype_t)dt)) < 0) {
        goto done;
    }
    stax_guard_hash(&kb, out);
    r = 0;
done:
    stax_kb_free(&kb);
    return r;
}

/* the key of the call as bytes; 0, 1 (not encodable), -1 */
static int
call_key(call_t *c, PlanState *plan, int rho, int dt, stax_keybuf *kb)
{
    int64_t hdr[2] = {c->nargs, c->nkw};
    int r;
    if (stax_kb_put(kb, hdr, sizeof hdr) < 0) {
        return -1;
    }
    for (Py_ssize_t i = 0; i < c->nargs; i++) {
        if ((r = stax_guard_sig_feed(kb, c->args[i], plan->dynamic)) != 0) {
            return r;
        }
    }
    for (Py_ssize_t i = 0; i < c->nkw; i++) {
        Py_ssize_t k = c->order[i];
        if ((r = stax_guard_sig_feed(kb, PyTuple_GET_ITEM(c->kwnames, k),
                                     0)) != 0
            || (r = stax_guard_sig_feed(kb, c->args[c->nargs + k],
                                        plan->dynamic)) != 0) {
            return r;
        }
    }
    for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(c->free); j++) {
        PyObject *v = PyTuple_GET_ITEM(c->free, j);
        r = plan->effect[j] ? stax_guard_sig_identity(kb, v)
                            : stax_guard_sig_feed(kb, v, plan->dynamic);
        if (r != 0) {
            return r;
        }
    }
    unsigned char tail[2] = {(unsigned char)(rho != 0), (unsigned char)dt};
    if (stax_kb_put(kb, tail, 2) < 0) {
        return -1;
    }
    return key_aliasing(kb, c->flat, c->nflat);
}

static PyObject *
find_group(CFObject *self, const stax_keybuf *kb, uint64_t h)
{
    for (Py_ssize_t i = 0; i < self->ngroups; i++) {
        kgroup_t *g = &self->groups[i];
        if (g->h == h && (size_t)PyBytes_GET_SIZE(g->key) == kb->n
            && memcmp(PyBytes_AS_STRING(g->key), kb->p, kb->n) == 0) {
            return g->group;
        }
    }
    return NULL;
}

/* key bytes -> group, replacing the group of an equal key */
static int
register_group(CFObject *self, PyObject *key, PyObject *group)
{
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(key);
    size_t n = (size_t)PyBytes_GET_SIZE(key);
    uint64_t h = XXH3_64bits(p, n);
    for (Py_ssize_t i = 0; i < self->ngroups; i++) {
        kgroup_t *g = &self->groups[i];
        if (g->h == h && (size_t)PyBytes_GET_SIZE(g->key) == n
            && memcmp(PyBytes_AS_STRING(g->key), p, n) == 0) {
            Py_SETREF(g->group, Py_NewRef(group));
            return 0;
        }
    }
    if (self->ngroups == self->capgroups) {
        Py_ssize_t cap = self->capgroups ? 2 * self->capgroups : 8;
        kgroup_t *ng = PyMem_Realloc(self->groups, cap * sizeof(kgroup_t));
        if (ng == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        self->groups = ng;
        self->capgroups = cap;
    }
    kgroup_t *g = &self->groups[self->ngroups++];
    g->h = h;
    g->key = Py_NewRef(key);
    g->group = Py_NewRef(group);
    return 0;
}

/* The call's tensors into c->flat, the free variables' first: nonzero where
 * one cannot be taken there (the driver's slow path then) */
static int
flatten_call(call_t *c)
{
    int r = 0;
    for (Py_ssize_t j = 0; !r && j < PyTuple_GET_SIZE(c->free); j++) {
        PyObject *v = PyTuple_GET_ITEM(c->free, j);
        if (is_tensor(v)) {
            r = flat_add(v, c->flat, &c->nflat);
        }
    }
    for (Py_ssize_t i = 0; !r && i < c->nargs; i++) {
        r = flat_add(c->args[i], c->flat, &c->nflat);
    }
    for (Py_ssize_t i = 0; !r && i < c->nkw; i++) {
        r = flat_add(c->args[c->nargs + c->order[i]], c->flat, &c->nflat);
    }
    return r;
}

/* Level 2: the objects (and versions) of the last resolved call. 1 when it
 * ran the call (*res its result, or NULL with an exception), 0 when the
 * call is not the last one's */
static int
level2(CFObject *self, PlanState *plan, call_t *c, const unsigned char fp[16],
       PyObject **res)
{
    if (!self->has_last || self->last_entry == NULL
        || memcmp(fp, self->last_fp, 16) != 0 || !last_alive(self->last_objs)) {
        return 0;
    }
    PyObject *entry = Py_NewRef(self->last_entry);
    EntryObject *e = (EntryObject *)entry;
    int ok = 1;
    if (e->gates) {
        ok = entry_matches(self, e, c->flat, c->nflat);
        if (ok < 0) {
            /* a replay that cannot run differs (the driver's rule) */
            PyErr_Clear();
            ok = 0;
        }
    }
    if (ok) {
        self->hits2++;
        *res = run_entry(self, plan, e, c);
    }
    Py_DECREF(entry);
    return ok;
}

/* Level 3: the versions registered under the call's key kb. 1 when one
 * matched and ran (*res as level2's), 0 when none did */
static int
level3(CFObject *self, PlanState *plan, call_t *c, const unsigned char fp[16],
       const stax_keybuf *kb, PyObject **res)
{
    uint64_t h = XXH3_64bits(kb->p, kb->n);
    PyObject *group = find_group(self, kb, h);
    int found = 0;
    Py_XINCREF(group);
    Py_ssize_t n0 = group ? PyList_GET_SIZE(group) : 0;
    for (Py_ssize_t i = 0; !found && i < n0 && i < PyList_GET_SIZE(group); i++) {
        PyObject *entry = Py_NewRef(PyList_GET_ITEM(group, i));
        int ok = entry_matches(self, (EntryObject *)entry, c->flat, c->nflat);
        if (ok < 0) {
            PyErr_Clear();
            ok = 0;
        }
        if (ok) {
            self->hits3++;
            found = 1;
            if (set_last(self, fp, entry, c) == 0) {
                *res = run_entry(self, plan, (EntryObject *)entry, c);
            }
        }
        Py_DECREF(entry);
    }
    Py_XDECREF(group);
    return found;
}

/* The call's key as the driver's tuples, (sig_args, sig_kwargs, sig_free,
 * aliasing, dynamic): its level 3 and the new version's key read them */
static PyObject *
call_sig(PlanState *plan, PyObject *args, PyObject *kwargs, PyObject *free,
         PyObject *const *flat, Py_ssize_t nflat)
{
    PyObject *tup = stax_guard_call_key(args, kwargs, free, plan->effect,
                                        plan->dynamic, flat, nflat);
    PyObject *sig = tup ? PyTuple_Pack(5, PyTuple_GET_ITEM(tup, 0), PyTuple_GET_ITEM(tup, 1),
                                       PyTuple_GET_ITEM(tup, 2), PyTuple_GET_ITEM(tup, 3),
                                       plan->dynamic ? Py_True : Py_False)
                        : NULL;
    Py_XDECREF(tup);
    return sig;
}

/* A true miss (kb NULL: a key the bytes cannot hold): the driver keys the
 * call, finds or compiles its version and hands it back to run here.
 * New reference to the call's result, NULL with an exception. */
static PyObject *
level_miss(CFObject *self, PlanState *plan, call_t *c, const unsigned char fp[16],
           int rho, int dt, const stax_keybuf *kb)
{
    PyObject *res = NULL, *entry = NULL, *got = NULL, *sig = NULL;
    PyObject *a = call_args(c), *k = call_kwargs(c);
    PyObject *key = kb != NULL ? PyBytes_FromStringAndSize((const char *)kb->p,
                                                           (Py_ssize_t)kb->n)
                               : Py_NewRef(Py_None);
    PyObject *fpb = PyBytes_FromStringAndSize((const char *)fp, 16);
    PyObject *dts = PyUnicode_FromString(stax_dtype_name((stax_dtype_t)dt));
    /* the call's key as the driver's tuples (its level 3, the new
     * version's key and guards), keyed here once instead of by a call
     * back into C */
    if (a != NULL && k != NULL) {
        sig = call_sig(plan, a, k, c->free, c->flat, c->nflat);
    }
    if (sig != NULL && key != NULL && fpb != NULL && dts != NULL) {
        self->entries++;
        got = PyObject_CallFunctionObjArgs(self->miss, a, k, c->free, fpb,
                                           key, rho ? Py_True : Py_False,
                                           dts, sig, NULL);
    }
    if (got != NULL && (!PyTuple_Check(got) || PyTuple_GET_SIZE(got) != 2
                        || (PyTuple_GET_ITEM(got, 0) != Py_None
                            && (!PyObject_TypeCheck(
                                    PyTuple_GET_ITEM(got, 0), &Entry_Type)
                                || !PyList_Check(
                                    PyTuple_GET_ITEM(got, 1)))))) {
        PyErr_SetString(PyExc_TypeError,
                        "driver._miss must return (entry, group) or "
                        "(None, result)");
        Py_CLEAR(got);
    }
    if (got != NULL && PyTuple_GET_ITEM(got, 0) == Py_None) {
        res = Py_NewRef(PyTuple_GET_ITEM(got, 1));    /* ran eagerly */
    }
    else if (got != NULL) {
        entry = Py_NewRef(PyTuple_GET_ITEM(got, 0));
        if (set_last(self, fp, entry, c) == 0
            && (key == Py_None
                || register_group(self, key, PyTuple_GET_ITEM(got, 1)) == 0)) {
            res = run_entry(self, plan, (EntryObject *)entry, c);
        }
    }
    Py_XDECREF(got);
    Py_XDECREF(key);
    Py_XDECREF(fpb);
    Py_XDECREF(dts);
    Py_XDECREF(entry);
    Py_XDECREF(sig);
    return res;
}

static PyObject *
levels23(CFObject *self, PyObject *const *args, size_t nargsf,
         PyObject *kwnames)
{
    call_t c;
    PlanState *plan = self->plan;
    PyObject *res = NULL;
    stax_keybuf kb;
    unsigned char fp[16];
    int rho, dt, r;

    c.args = args;
    c.nargs = PyVectorcall_NARGS(nargsf);
    c.kwnames = kwnames;
    c.nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    c.argt = c.kwd = c.free = NULL;
    c.nflat = 0;
    if (plan == NULL || stax_trace_active() || c.nkw > MAX_FAST_ARGS
        || c.nargs > MAX_FAST_ARGS || stax_ops_autocast_active()) {
        return slow_call(self, args, nargsf, kwnames);
    }
    stax_kb_init(&kb);
    Py_INCREF(plan);      /* reading sources and replays run Python code */
    c.free = read_free(plan);
    if (c.free == NULL) {
        /* a name gone: the driver runs the function eagerly */
        PyErr_Clear();
        res = slow_call(self, args, nargsf, kwnames);
        goto done;
    }
    rho = stax_grad_enabled();
    dt = (int)stax_default_dtype();
    for (Py_ssize_t i = 0; i < c.nkw; i++) {
        c.order[i] = i;
    }
    if (kw_sort(&c) < 0 || call_fingerprint(&c, rho, dt, fp) < 0) {
        goto done;
    }
    if (flatten_call(&c)) {
        res = slow_call(self, args, nargsf, kwnames);
        goto done;
    }
    for (Py_ssize_t i = 0; rho && i < c.nflat; i++) {
        if (((StaxTensor *)c.flat[i])->requires_grad) {
            /* autograd: the driver gives the outputs their grad_fn
             * (Driver._run_autograd) */
            res = slow_call(self, args, nargsf, kwnames);
            goto done;
        }
    }
    if (level2(self, plan, &c, fp, &res)) {
        goto done;
    }
    /* level 3: the key, then the versions registered under it */
    r = call_key(&c, plan, rho, dt, &kb);
    if (r < 0 || (r == 0 && level3(self, plan, &c, fp, &kb, &res))) {
        goto done;
    }
    res = level_miss(self, plan, &c, fp, rho, dt, r == 0 ? &kb : NULL);
done:
    stax_kb_free(&kb);
    Py_XDECREF(c.argt);
    Py_XDECREF(c.kwd);
    Py_XDECREF(c.free);
    Py_DECREF(plan);
    return res;
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
        return levels23(self, args, nargsf, kwnames);
    }
    for (Py_ssize_t i = 0; i < nargs; i++) {
        PyObject *held = PyTuple_GET_ITEM(s->args, i);
        if (PyWeakref_CheckRef(held)) {
            held = PyWeakref_GetObject(held);    /* Py_None once freed */
        }
        if (args[i] != held) {
            return levels23(self, args, nargsf, kwnames);
        }
    }
    Py_INCREF(s);   /* reading sources can run Python code */
    nfree = PyTuple_GET_SIZE(s->sources);
    for (Py_ssize_t j = 0; j < nfree; j++) {
        freevals[j] = NULL;
    }
    prefix_t pc = {0};
    for (Py_ssize_t j = 0; ok && j < nfree; j++) {
        PyObject *src = PyTuple_GET_ITEM(s->sources, j);
        PyObject *v = source_read_pc(src, &pc);
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
        if (s->lifted[j]) {
            if (!is_tensor(v) || !snap_same(&s->snaps[k++], (StaxTensor *)v)) {
                ok = 0;
                break;
            }
            stack[ncall++] = v;
        }
    }
    prefix_clear(&pc);
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
        if (res == NULL && rerun_marked()) {
            /* level 1 is armed for calls without keywords */
            PyObject *a = PyTuple_New(nargs), *k = PyDict_New();
            for (Py_ssize_t i = 0; a != NULL && i < nargs; i++) {
                PyTuple_SET_ITEM(a, i, Py_NewRef(args[i]));
            }
            res = a && k ? PyObject_CallMethod(self->driver, "_eager", "OO", a, k) : NULL;
            Py_XDECREF(a);
            Py_XDECREF(k);
        }
    }
    else {
        res = levels23(self, args, nargsf, kwnames);
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

/* drop levels 1-3's state: level 1, the plan, the version cache, the last
 * call (tp.compiler.reset, a new driver) */
static void
cf_forget(CFObject *self)
{
    kgroup_t *g = self->groups;
    Py_ssize_t n = self->ngroups;
    self->groups = NULL;
    self->ngroups = self->capgroups = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_DECREF(g[i].key);
        Py_DECREF(g[i].group);
    }
    PyMem_Free(g);
    self->has_last = 0;
    Py_CLEAR(self->l1);
    Py_CLEAR(self->plan);
    Py_CLEAR(self->last_entry);
    Py_CLEAR(self->last_objs);
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
    PyObject *miss = PyObject_GetAttrString(driver, "_miss");
    PyObject *gates = PyObject_GetAttrString(driver, "_gates_hold_index");
    PyObject *run = PyObject_GetAttrString(driver, "_run_index");
    if (slow == NULL || miss == NULL || gates == NULL || run == NULL) {
        Py_XDECREF(slow);
        Py_XDECREF(miss);
        Py_XDECREF(gates);
        Py_XDECREF(run);
        return -1;
    }
    Py_XSETREF(self->slow, slow);
    Py_XSETREF(self->miss, miss);
    Py_XSETREF(self->gates_hold, gates);
    Py_XSETREF(self->run_py, run);
    Py_XSETREF(self->driver, Py_NewRef(driver));
    cf_forget(self);
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
    Py_VISIT(self->miss);
    Py_VISIT(self->gates_hold);
    Py_VISIT(self->run_py);
    Py_VISIT(self->dict);
    Py_VISIT(self->last_entry);
    Py_VISIT(self->last_objs);
    /* the plan and level-1 state are owned by this object alone (swapped
     * whole): what they hold (a method's self, its module) is visited here */
    if (self->plan != NULL) {
        Py_VISIT(self->plan->sources);
    }
    if (self->l1 != NULL) {
        Py_VISIT(self->l1->artifact);
        Py_VISIT(self->l1->args);
        Py_VISIT(self->l1->sources);
        Py_VISIT(self->l1->free);
    }
    for (Py_ssize_t i = 0; i < self->ngroups; i++) {
        Py_VISIT(self->groups[i].group);
    }
    return 0;
}

static int
cf_clear(CFObject *self)
{
    Py_CLEAR(self->driver);
    Py_CLEAR(self->slow);
    Py_CLEAR(self->miss);
    Py_CLEAR(self->gates_hold);
    Py_CLEAR(self->run_py);
    cf_forget(self);
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
    for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(a[2]); j++) {
        PyObject *src = PyTuple_GET_ITEM(a[2], j);
        if (!PyTuple_Check(src) || PyTuple_GET_SIZE(src) != 4
            || !PyTuple_Check(PyTuple_GET_ITEM(src, 2))) {
            PyErr_SetString(PyExc_TypeError, "bad free-variable source");
            return NULL;
        }
    }
    if (arm_level1(self, a[0], &PyTuple_GET_ITEM(a[1], 0),
                   PyTuple_GET_SIZE(a[1]), a[2], a[3]) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

/* _set_plan(sources, effect_only, dynamic): the lifting plan C reads per
 * call (levels 2/3 stay in the driver until it is set). effect_only: the
 * indices of the effect-only sources (keyed by identity). */
static PyObject *
cf_set_plan(CFObject *self, PyObject *const *a, Py_ssize_t n)
{
    if (n != 3 || !PyTuple_Check(a[0]) || !PyTuple_Check(a[1])) {
        PyErr_SetString(PyExc_TypeError,
                        "_set_plan(sources, effect_only, dynamic)");
        return NULL;
    }
    Py_ssize_t nsrc = PyTuple_GET_SIZE(a[0]);
    int dyn = PyObject_IsTrue(a[2]);
    if (dyn < 0) {
        return NULL;
    }
    for (Py_ssize_t j = 0; j < nsrc; j++) {
        PyObject *src = PyTuple_GET_ITEM(a[0], j);
        if (!PyTuple_Check(src) || PyTuple_GET_SIZE(src) != 4
            || !PyLong_Check(PyTuple_GET_ITEM(src, 0))
            || !PyTuple_Check(PyTuple_GET_ITEM(src, 2))) {
            PyErr_SetString(PyExc_TypeError, "bad free-variable source");
            return NULL;
        }
    }
    PlanState *p = PyObject_New(PlanState, &PlanState_Type);
    if (p == NULL) {
        return NULL;
    }
    p->sources = Py_NewRef(a[0]);
    p->dynamic = dyn;
    p->effect = PyMem_Calloc(nsrc ? nsrc : 1, 1);
    if (p->effect == NULL) {
        Py_DECREF(p);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(a[1]); i++) {
        Py_ssize_t j = PyLong_AsSsize_t(PyTuple_GET_ITEM(a[1], i));
        if (j < 0 || j >= nsrc) {
            if (!PyErr_Occurred()) {
                PyErr_SetString(PyExc_IndexError, "effect-only index");
            }
            Py_DECREF(p);
            return NULL;
        }
        p->effect[j] = 1;
    }
    Py_XSETREF(self->plan, p);
    Py_RETURN_NONE;
}

/* _register(key, group): the key bytes C computed for a call stand for
 * the driver's group of versions `group` (a list of _DispatchEntry the
 * driver appends to). */
static PyObject *
cf_register(CFObject *self, PyObject *const *a, Py_ssize_t n)
{
    if (n != 2 || !PyBytes_Check(a[0]) || !PyList_Check(a[1])) {
        PyErr_SetString(PyExc_TypeError, "_register(key bytes, group list)");
        return NULL;
    }
    if (register_group(self, a[0], a[1]) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

/* _key(args, kwargs, free) -> (the key bytes C dispatch computes for this
 * call, or None when its values cannot be encoded exactly (the driver's
 * first call registers its key with it); the call's key as the driver's
 * tuples (call_sig), or None when C cannot flatten the call), or None
 * without a plan. kwargs sorted by name. */
static PyObject *
cf_key(CFObject *self, PyObject *const *a, Py_ssize_t n)
{
    PlanState *plan = self->plan;
    PyObject *stack[2 * MAX_FAST_ARGS];
    PyObject *names = NULL, *res = NULL;
    call_t c;
    stax_keybuf kb;
    if (n != 3 || !PyTuple_Check(a[0]) || !PyDict_Check(a[1])
        || !PyTuple_Check(a[2])) {
        PyErr_SetString(PyExc_TypeError, "_key(args, kwargs, free)");
        return NULL;
    }
    c.nargs = PyTuple_GET_SIZE(a[0]);
    c.nkw = PyDict_GET_SIZE(a[1]);
    if (plan == NULL || c.nargs > MAX_FAST_ARGS || c.nkw > MAX_FAST_ARGS
        || PyTuple_GET_SIZE(a[2]) != PyTuple_GET_SIZE(plan->sources)) {
        Py_RETURN_NONE;
    }
    names = PyTuple_New(c.nkw);
    if (names == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < c.nargs; i++) {
        stack[i] = PyTuple_GET_ITEM(a[0], i);
    }
    Py_ssize_t pos = 0, i = 0;
    PyObject *k, *v;
    while (PyDict_Next(a[1], &pos, &k, &v)) {
        PyTuple_SET_ITEM(names, i, Py_NewRef(k));
        stack[c.nargs + i] = v;
        c.order[i] = i;
        i++;
    }
    c.args = stack;
    c.kwnames = names;
    c.argt = c.kwd = NULL;
    c.free = a[2];
    c.nflat = 0;
    Py_INCREF(plan);
    stax_kb_init(&kb);
    int r = 0;
    for (Py_ssize_t j = 0; !r && j < PyTuple_GET_SIZE(c.free); j++) {
        PyObject *fv = PyTuple_GET_ITEM(c.free, j);
        if (is_tensor(fv)) {
            r = flat_add(fv, c.flat, &c.nflat);
        }
    }
    for (Py_ssize_t j = 0; !r && j < c.nargs + c.nkw; j++) {
        r = flat_add(stack[j], c.flat, &c.nflat);
    }
    int flat_ok = !r;
    if (!r) {
        r = call_key(&c, plan, stax_grad_enabled(),
                     (int)stax_default_dtype(), &kb);
    }
    if (r >= 0) {
        PyObject *kb_obj = r == 0 ? PyBytes_FromStringAndSize((const char *)kb.p,
                                                              (Py_ssize_t)kb.n)
                                  : Py_NewRef(Py_None);
        PyObject *sig = kb_obj == NULL ? NULL
                        : flat_ok ? call_sig(plan, a[0], a[1], a[2], c.flat, c.nflat)
                                  : Py_NewRef(Py_None);
        res = sig ? PyTuple_Pack(2, kb_obj, sig) : NULL;
        Py_XDECREF(kb_obj);
        Py_XDECREF(sig);
    }
    stax_kb_free(&kb);
    Py_DECREF(plan);
    Py_DECREF(names);
    return res;
}

/* _set_last(fingerprint, entry, objects): level 2 remembers this call */
static PyObject *
cf_set_last(CFObject *self, PyObject *const *a, Py_ssize_t n)
{
    if (n != 3 || !PyBytes_Check(a[0]) || PyBytes_GET_SIZE(a[0]) != 16
        || !PyObject_TypeCheck(a[1], &Entry_Type)) {
        PyErr_SetString(PyExc_TypeError,
                        "_set_last(16-byte fingerprint, entry, objects)");
        return NULL;
    }
    memcpy(self->last_fp, PyBytes_AS_STRING(a[0]), 16);
    self->has_last = 1;
    Py_XSETREF(self->last_entry, Py_NewRef(a[1]));
    Py_XSETREF(self->last_objs, Py_NewRef(a[2]));
    Py_RETURN_NONE;
}

/* _get_last() -> (fingerprint, entry) or None */
static PyObject *
cf_get_last(CFObject *self, PyObject *unused)
{
    (void)unused;
    if (!self->has_last || self->last_entry == NULL || !last_alive(self->last_objs)) {
        Py_RETURN_NONE;
    }
    return Py_BuildValue("(y#O)", (const char *)self->last_fp,
                         (Py_ssize_t)16, self->last_entry);
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
    cf_forget(self);
    self->calls = self->hits1 = self->hits2 = self->hits3 = 0;
    self->entries = 0;
    Py_RETURN_NONE;
}

static PyObject *
cf_c_stats(CFObject *self, PyObject *unused)
{
    (void)unused;
    return Py_BuildValue("{sKsKsKsKsK}", "calls", self->calls,
                         "hits_level1", self->hits1, "hits_level2",
                         self->hits2, "hits_level3", self->hits3,
                         "driver_entries", self->entries);
}

static PyObject *
cf_stats(CFObject *self, PyObject *unused)
{
    (void)unused;
    return PyObject_CallMethod(self->driver, "stats", "KKKK", self->calls,
                               self->hits1, self->hits2, self->hits3);
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
    {"_set_plan", (PyCFunction)(void (*)(void))cf_set_plan, METH_FASTCALL,
     "install the lifting plan C dispatch reads (driver use)"},
    {"_register", (PyCFunction)(void (*)(void))cf_register, METH_FASTCALL,
     "map C key bytes to the driver's group of versions (driver use)"},
    {"_key", (PyCFunction)(void (*)(void))cf_key, METH_FASTCALL,
     "(C key bytes or None, key tuples or None) of a call (args, sorted "
     "kwargs, free), or None without a plan"},
    {"_set_last", (PyCFunction)(void (*)(void))cf_set_last, METH_FASTCALL,
     "remember the last resolved call for level 2 (driver use)"},
    {"_get_last", (PyCFunction)cf_get_last, METH_NOARGS,
     "(fingerprint, entry) of the last resolved call, or None"},
    {"_c_stats", (PyCFunction)cf_c_stats, METH_NOARGS,
     "dict: calls, hits_level1/2/3 counted in C, driver_entries (calls "
     "into the Python driver)"},
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
    if (PyType_Ready(&L1State_Type) < 0 || PyType_Ready(&PlanState_Type) < 0
        || PyType_Ready(&Entry_Type) < 0
        || PyType_Ready(&StaxCompiledFunction_Type) < 0) {
        return -1;
    }
    if (PyModule_AddObjectRef(m, "_DispatchEntry",
                              (PyObject *)&Entry_Type) < 0) {
        return -1;
    }
    if (PyModule_AddObjectRef(m, "CompiledFunction",
                              (PyObject *)&StaxCompiledFunction_Type) < 0) {
        return -1;
    }
    return PyModule_AddFunctions(m, dispatch_functions);
}
