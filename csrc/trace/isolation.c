/* Side-effect isolation and stand-ins (seed 2.2, 3.7): layout-preserving
 * (and alias-preserving) stand-ins, snapshots of tensors restored after the
 * trace, the RNG fork, the hooks recording tensorplay's creation functions
 * and the demotion of unmodified creations to get_attr constants. */
#include "trace/trace_internal.h"
#include <string.h>

static int
is_tensor(PyObject *o)
{
    return StaxTensor_Type != NULL && PyObject_TypeCheck(o, StaxTensor_Type);
}

/* ------------------------------------------------------------------ */
/* stand-ins and snapshots                                             */

/* storage extent [lo, lo + len) in elements covered by t */
static void
extent(StaxTensor *t, int64_t *lo, int64_t *len)
{
    int64_t a = t->offset, b = t->offset;
    for (int i = 0; i < t->ndim; i++) {
        if (t->sizes[i] == 0) {
            *lo = t->offset;
            *len = 0;
            return;
        }
        if (t->strides[i] >= 0) {
            b += (t->sizes[i] - 1) * t->strides[i];
        }
        else {
            a += (t->sizes[i] - 1) * t->strides[i];
        }
    }
    *lo = a;
    *len = b - a + 1;
}

/* Stand-ins (seed 2.2): for every storage the arguments view, the union of
 * the extents they cover is copied once, at the same position, into a fresh
 * storage; each argument is viewed again with its own sizes, strides and
 * offset. Arguments aliasing one storage (x and x.t(), x and x[0]) thus
 * alias in the trace as they do in the call. */
static PyObject *
storage_key(StaxTensor *t)
{
    return Py_BuildValue("(Ni)", PyLong_FromVoidPtr(t->storage),
                         (int)t->dtype);
}

/* extents: dict key -> (lo, hi) union over every tensor leaf of o */
int
stax_trace_collect_extents(PyObject *o, PyObject *extents)
{
    if (is_tensor(o)) {
        StaxTensor *t = (StaxTensor *)o;
        int64_t lo, len, hi;
        PyObject *key = storage_key(t), *old, *v;
        int rc;
        if (key == NULL) {
            return -1;
        }
        extent(t, &lo, &len);
        hi = lo + len;
        old = PyDict_GetItem(extents, key);
        if (old != NULL) {
            int64_t a = PyLong_AsLongLong(PyTuple_GET_ITEM(old, 0));
            int64_t b = PyLong_AsLongLong(PyTuple_GET_ITEM(old, 1));
            if (len == 0) {
                lo = a;
                hi = b;
            }
            else if (b > a) {
                lo = lo < a ? lo : a;
                hi = hi > b ? hi : b;
            }
        }
        v = Py_BuildValue("(LL)", (long long)lo, (long long)hi);
        rc = v ? PyDict_SetItem(extents, key, v) : -1;
        Py_XDECREF(v);
        Py_DECREF(key);
        return rc;
    }
    if (PyTuple_CheckExact(o) || PyList_CheckExact(o)) {
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(o); i++) {
            if (stax_trace_collect_extents(PySequence_Fast_GET_ITEM(o, i), extents) < 0) {
                return -1;
            }
        }
    }
    else if (PyDict_CheckExact(o)) {
        Py_ssize_t pos = 0;
        PyObject *k, *v;
        while (PyDict_Next(o, &pos, &k, &v)) {
            if (stax_trace_collect_extents(v, extents) < 0) {
                return -1;
            }
        }
    }
    return 0;
}

/* elements [lo, lo + n) of src's storage into the same positions of
 * dst's (either may live on the device): through 1-d views */
static int
copy_range(StaxTensor *dst, StaxTensor *src, int64_t lo, int64_t n)
{
    int64_t one = 1;
    StaxTensor *d = stax_tensor_view(dst, 1, &n, &one, lo);
    StaxTensor *s = d ? stax_tensor_view(src, 1, &n, &one, lo) : NULL;
    int rc = s ? stax_tensor_copy_from(d, (PyObject *)s) : -1;
    Py_XDECREF(d);
    Py_XDECREF(s);
    return rc;
}

/* New reference: the stand-in of t; bases caches one copy per storage. */
PyObject *
stax_trace_stand_in(StaxTensor *t, PyObject *extents, PyObject *bases,
                    StaxTracer *lazy)
{
    int isz = stax_dtype_itemsize(t->dtype);
    StaxTensor *base, *view;
    PyObject *key = storage_key(t), *ext;
    if (key == NULL) {
        return NULL;
    }
    base = (StaxTensor *)PyDict_GetItem(bases, key);
    if (base != NULL) {
        Py_INCREF(base);
    }
    else {
        int64_t lo, hi, len;
        ext = PyDict_GetItem(extents, key);
        if (ext != NULL) {
            lo = PyLong_AsLongLong(PyTuple_GET_ITEM(ext, 0));
            hi = PyLong_AsLongLong(PyTuple_GET_ITEM(ext, 1));
        }
        else {
            extent(t, &lo, &len);
            hi = lo + len;
        }
        /* the copy sits at the same position (the prefix is zeroed, never
         * read), so the storage offset is kept too */
        base = stax_tensor_is_cuda(t)
            ? stax_tensor_zeros_on(1, &hi, t->dtype, STAX_DEV_CUDA)
            : stax_tensor_empty(1, &hi, t->dtype);
        if (base == NULL || PyDict_SetItem(bases, key, (PyObject *)base) < 0) {
            Py_XDECREF(base);
            Py_DECREF(key);
            return NULL;
        }
        if (stax_tensor_is_cuda(t)) {
            /* a device copy on the stream (cheap: never deferred) */
            if (hi > lo && copy_range(base, t, lo, hi - lo) < 0) {
                Py_DECREF(key);
                return NULL;
            }
        }
        else if (lazy != NULL) {
            /* copied when a value is asked for (trace_lazy.c) */
            if (stax_trace_lazy_input(lazy, base, t, lo, hi) < 0) {
                Py_DECREF(key);
                return NULL;
            }
        }
        else if (lo > 0) {
            memset(STAX_TENSOR_DATA(base), 0, (size_t)(lo * isz));
        }
        if (lazy == NULL && hi > lo && !stax_tensor_is_cuda(t)) {
            memcpy(STAX_TENSOR_DATA(base) + lo * isz,
                   t->storage->data + lo * isz, (size_t)((hi - lo) * isz));
        }
    }
    Py_DECREF(key);
    view = stax_tensor_view(base, t->ndim, t->sizes, t->strides,
                            base->offset + t->offset);
    Py_DECREF(base);
    if (view == NULL) {
        return NULL;
    }
    view->requires_grad = t->requires_grad;
    return (PyObject *)view;
}

/* bytes the snapshots of this process copied (_trace_snapshot_bytes) */
static unsigned long long snapshot_bytes;

unsigned long long
stax_trace_snapshot_bytes(void)
{
    return snapshot_bytes;
}

/* snapshot: list of (tensor, bytes of its extent, version) */
int
stax_trace_snapshot_add(PyObject *snap, PyObject *o)
{
    StaxTensor *t = (StaxTensor *)o;
    int64_t lo, len;
    int isz = stax_dtype_itemsize(t->dtype);
    PyObject *b, *e;
    extent(t, &lo, &len);
    snapshot_bytes += (unsigned long long)len * (unsigned long long)isz;
    if (stax_tensor_is_cuda(t)) {
        /* a device copy of the extent, at the same positions */
        int64_t end = lo + len;
        StaxTensor *c = stax_tensor_empty_on(1, &end, t->dtype, STAX_DEV_CUDA);
        if (c == NULL || (len > 0 && copy_range(c, t, lo, len) < 0)) {
            Py_XDECREF(c);
            return -1;
        }
        b = (PyObject *)c;
    }
    else {
        b = PyBytes_FromStringAndSize(t->storage->data + lo * isz,
                                      (Py_ssize_t)(len * isz));
    }
    if (b == NULL) {
        return -1;
    }
    e = Py_BuildValue("(ONK)", o, b, (unsigned long long)t->storage->version);
    if (e == NULL) {
        return -1;
    }
    if (PyList_Append(snap, e) < 0) {
        Py_DECREF(e);
        return -1;
    }
    Py_DECREF(e);
    return 0;
}

void
stax_trace_snapshot_restore(PyObject *snap)
{
    for (Py_ssize_t i = 0; snap && i < PyList_GET_SIZE(snap); i++) {
        PyObject *e = PyList_GET_ITEM(snap, i);
        StaxTensor *t = (StaxTensor *)PyTuple_GET_ITEM(e, 0);
        PyObject *b = PyTuple_GET_ITEM(e, 1);
        unsigned long long v = PyLong_AsUnsignedLongLong(
            PyTuple_GET_ITEM(e, 2));
        int64_t lo, len;
        if (t->storage->version == v) {
            continue;
        }
        extent(t, &lo, &len);
        if (StaxTensor_Check(b)) {
            if (len > 0 && copy_range(t, (StaxTensor *)b, lo, len) < 0) {
                PyErr_WriteUnraisable(b);    /* restore has no error path */
            }
        }
        else {
            memcpy(t->storage->data + lo * stax_dtype_itemsize(t->dtype),
                   PyBytes_AS_STRING(b), PyBytes_GET_SIZE(b));
        }
        t->storage->version = v;
    }
}

/* ------------------------------------------------------------------ */
/* the write journal                                                   */

/* per thread: a trace journals the writes of its own thread's code, never
 * another thread's (which it would undo when it ends) */
_Thread_local int stax_trace_sampling = 0;
static _Thread_local StaxTracer *journal_tr = NULL;   /* the trace whose fn is running */

/* the hook is the tensor room's, which has no error path: a failure here
 * leaves the write unrestorable (reported), never a pending exception */
/* "a tensor of shape [..] (dtype) at <the user's line>", new reference */
static PyObject *
note_text(StaxTensor *t)
{
    PyObject *where = stax_trace_user_stack(), *sizes = NULL, *e = NULL;
    sizes = PyList_New(t->ndim);
    for (int d = 0; sizes != NULL && d < t->ndim; d++) {
        PyObject *v = PyLong_FromLongLong((long long)t->sizes[d]);
        if (v == NULL) {
            Py_CLEAR(sizes);
            break;
        }
        PyList_SET_ITEM(sizes, d, v);
    }
    if (where != NULL && sizes != NULL) {
        e = PyUnicode_FromFormat("a tensor of shape %S (%s) at %S", sizes,
                                 stax_dtype_name(t->dtype), where);
    }
    Py_XDECREF(where);
    Py_XDECREF(sizes);
    return e;
}

static void
journal_note(StaxTracer *tr, StaxTensor *t, PyObject *list)
{
    PyObject *e = note_text(t);
    if (e == NULL || PyList_Append(list, e) < 0) {
        PyErr_Clear();
        tr->unrestorable = 1;
    }
    Py_XDECREF(e);
}

static void
journal_unrecorded(StaxTracer *tr, StaxTensor *t)
{
    journal_note(tr, t, tr->unrecorded);
}

/* A recorded in-place op writes one of the caller's tensors the trace holds
 * as a constant: the program makes that write on every call, so a value an
 * untraced (eager) op computed from that tensor while tracing, before or
 * after the write, is a constant of the version that the next call's write
 * makes stale. Such a read is noted in tr->stale_reads (the version runs
 * eagerly, as eager reads the new value); a recorded write with no untraced
 * read of its tensor stays native. const_read maps each storage an
 * untraced op read to where it was first read. Errors are dropped: the
 * hooks have no error path. */
static void
note_const_read(StaxTracer *tr, StaxTensor *t)
{
    PyObject *et, *ev, *tb, *key, *e = NULL;
    int has;
    PyErr_Fetch(&et, &ev, &tb);
    key = PyLong_FromVoidPtr(t->storage);
    has = key != NULL ? PySet_Contains(tr->const_written, key) : -1;
    if (has > 0) {
        journal_note(tr, t, tr->stale_reads);
    }
    else if (has == 0 && PyDict_GetItemWithError(tr->const_read, key) == NULL
             && !PyErr_Occurred()) {
        e = note_text(t);
        if (e != NULL) {
            PyDict_SetItem(tr->const_read, key, e);
        }
    }
    Py_XDECREF(e);
    Py_XDECREF(key);
    PyErr_Clear();
    PyErr_Restore(et, ev, tb);
}

static void
note_const_write(StaxTracer *tr, StaxTensor *t)
{
    PyObject *et, *ev, *tb, *key, *read;
    PyErr_Fetch(&et, &ev, &tb);
    key = PyLong_FromVoidPtr(t->storage);
    read = key != NULL ? PyDict_GetItemWithError(tr->const_read, key) : NULL;
    if (read != NULL) {
        Py_INCREF(read);
        if (PyList_Append(tr->stale_reads, read) == 0) {
            PyDict_DelItem(tr->const_read, key);
        }
        Py_DECREF(read);
    }
    else if (key != NULL && !PyErr_Occurred()) {
        PySet_Add(tr->const_written, key);
    }
    Py_XDECREF(key);
    PyErr_Clear();
    PyErr_Restore(et, ev, tb);
}

static void
read_hook(StaxTensor *t)
{
    StaxTracer *tr = journal_tr;
    if (tr == NULL || stax_trace_sampling > 0
        || t->storage->serial >= tr->serial0) {
        return;     /* not tracing, a recorded op's own run, or the trace's */
    }
    note_const_read(tr, t);
}

static void
journal_hook(StaxTensor *t, int after)
{
    StaxTracer *tr = journal_tr;
    PyObject *key, *et, *ev, *tb;
    int has;
    if (tr != NULL && !after) {
        stax_trace_lazy_before_write(tr, t);
    }
    if (tr == NULL || t->storage->serial >= tr->serial0) {
        return;     /* not tracing, or a storage of the trace's own */
    }
    if (!after && stax_trace_sampling > 0) {
        note_const_write(tr, t);
    }
    PyErr_Fetch(&et, &ev, &tb);
    key = PyLong_FromVoidPtr(t->storage);
    has = key ? PySet_Contains(tr->journaled, key) : -1;
    if (has == 0 && !after) {
        /* the whole storage, once: every view of it is restored with it */
        int isz = stax_dtype_itemsize(t->dtype), rc = -1;
        int64_t n = t->storage->nbytes / isz, one = 1;
        StaxTensor *all = stax_tensor_view(t, 1, &n, &one, 0);
        if (all != NULL) {
            rc = stax_trace_snapshot_add(tr->journal, (PyObject *)all);
            Py_DECREF(all);
        }
        if (rc < 0 || PySet_Add(tr->journaled, key) < 0) {
            has = -1;
        }
        else if (stax_trace_sampling == 0) {
            journal_unrecorded(tr, t);
        }
    }
    else if (has == 0 && after) {
        /* written without the announcement (a writer the tensor room does
         * not know): the old bytes are gone */
        tr->unrestorable = 1;
        if (stax_trace_sampling == 0) {
            journal_unrecorded(tr, t);
        }
        if (key != NULL && PySet_Add(tr->journaled, key) < 0) {
            has = -1;
        }
    }
    if (has < 0) {
        PyErr_Clear();
        tr->unrestorable = 1;
    }
    Py_XDECREF(key);
    PyErr_Restore(et, ev, tb);
}

void
stax_trace_journal_begin(StaxTracer *tr, StaxTracer **saved)
{
    *saved = journal_tr;
    journal_tr = tr;
    stax_tensor_set_write_hook(journal_hook);
    stax_ops_set_read_hook(read_hook);
    stax_tensor_set_read_hook(read_hook);
}

void
stax_trace_journal_end(StaxTracer *tr, StaxTracer *saved)
{
    PyObject *et, *ev, *tb;
    journal_tr = saved;
    /* the restore writes: with the hook off (an outer trace's journal
     * already holds what it needs of these storages) */
    stax_tensor_set_write_hook(NULL);
    stax_ops_set_read_hook(NULL);
    stax_tensor_set_read_hook(NULL);
    PyErr_Fetch(&et, &ev, &tb);
    stax_trace_snapshot_restore(tr->journal);
    PyErr_Restore(et, ev, tb);
    Py_CLEAR(tr->journal);
    tr->journal = PyList_New(0);
    if (tr->journal == NULL) {
        PyErr_Clear();
    }
    if (saved != NULL) {
        stax_tensor_set_write_hook(journal_hook);
        stax_ops_set_read_hook(read_hook);
        stax_tensor_set_read_hook(read_hook);
    }
}

/* RNG fork: returns the saved state (new ref) or None */
PyObject *
stax_trace_rng_save(void)
{
    PyObject *st = PyObject_CallMethod((PyObject *)stax_default_generator(),
                                       "get_state", NULL);
    if (st == NULL) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    return st;
}

void
stax_trace_rng_restore(PyObject *st)
{
    PyObject *r;
    if (st == NULL || st == Py_None) {
        return;
    }
    r = PyObject_CallMethod((PyObject *)stax_default_generator(), "set_state",
                            "(O)", st);
    Py_XDECREF(r);
    if (r == NULL) {
        PyErr_Clear();
    }
}

/* ------------------------------------------------------------------ */
/* random creation functions                                           */

/* tp.randn(3) inside fn has no proxy argument, so no __tensor_function__
 * sees it; frozen as a constant it would repeat the same numbers on every
 * call. While tracing, these attributes of the tensorplay module are
 * replaced by hooks recording call_function[target=the original]. */
static const char *random_creators[] = {
    "randn", "rand", "randint", "randperm", "normal", NULL,
};
/* deterministic creation functions are recorded too; at the end of the
 * trace those whose value was never modified in place become get_attr
 * constants (by reference), the others stay calls so that every run
 * starts from a fresh tensor */
static const char *const_creators[] = {
    "zeros", "ones", "full", "empty", "arange", "eye", "linspace",
    "logspace", "tensor", NULL,
};

typedef struct {
    PyObject_HEAD
    StaxTracer *tracer;
    PyObject *original;
    int random;
} CreationHook;

static PyTypeObject *CreationHook_Type = NULL;

static int
hook_traverse(CreationHook *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->tracer);
    Py_VISIT(self->original);
    return 0;
}

static int
hook_clear(CreationHook *self)
{
    Py_CLEAR(self->tracer);
    Py_CLEAR(self->original);
    return 0;
}

static void
hook_dealloc(CreationHook *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    hook_clear(self);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

/* 1 when the innermost Python frame is inside the tensorplay package */
int
stax_trace_called_from_package(void)
{
    PyFrameObject *f = PyEval_GetFrame();
    PyCodeObject *co;
    PyObject *fn;
    int r = 0;
    if (f == NULL || stax_trace_pkg_dir == NULL) {
        return 0;
    }
    co = PyFrame_GetCode(f);
    fn = PyObject_GetAttrString((PyObject *)co, "co_filename");
    Py_DECREF(co);
    if (fn == NULL) {
        PyErr_Clear();
        return 0;
    }
    if (PyUnicode_Check(fn)) {
        r = PyUnicode_Tailmatch(fn, stax_trace_pkg_dir, 0, PY_SSIZE_T_MAX, -1) == 1;
    }
    Py_DECREF(fn);
    return r;
}

static PyObject *
hook_call(CreationHook *self, PyObject *args, PyObject *kwds)
{
    PyObject *p, *v, *mark;
    StaxNode *n;
    if (!self->tracer->active || !stax_trace_active() || stax_trace_called_from_package()) {
        /* library code (nn.Module constructors, initializers) gets real
         * tensors: only the user's own calls are recorded; so does
         * another thread, which is not tracing */
        return PyObject_Call(self->original, args, kwds);
    }
    p = stax_trace_record(self->tracer, STAX_NODE_CALL_FUNCTION,
                          self->original, args, kwds);
    if (p == NULL) {
        return NULL;
    }
    n = ((StaxProxy *)p)->node;
    v = PyDict_GetItemString(n->meta, "val");
    if (self->random) {
        mark = PyUnicode_FromString("random");
    }
    else if (v != NULL && is_tensor(v)) {
        mark = PyLong_FromUnsignedLongLong(
            ((StaxTensor *)v)->storage->version);
    }
    else {
        return p;
    }
    if (mark == NULL
        || PyDict_SetItemString(n->meta, "creation", mark) < 0) {
        Py_XDECREF(mark);
        Py_DECREF(p);
        return NULL;
    }
    Py_DECREF(mark);
    return p;
}

static PyType_Slot hook_slots[] = {
    {Py_tp_dealloc, hook_dealloc},
    {Py_tp_traverse, hook_traverse},
    {Py_tp_clear, hook_clear},
    {Py_tp_call, hook_call},
    {0, NULL},
};

static PyType_Spec hook_spec = {
    .name = "tensorplay._C._CreationHook",
    .basicsize = sizeof(CreationHook),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .slots = hook_slots,
};

/* builtins.len while a trace with symbolic sizes runs: len(x) of a tensor
 * proxy in the user's code is its symbolic dim 0 (an int could only be an
 * exact size: a guard per length); anything else is the original len */
static PyObject *
len_hook(PyObject *orig, PyObject *arg)
{
    if (!stax_trace_called_from_package()) {
        PyObject *r = stax_trace_sym_len(arg);
        if (r != NULL || PyErr_Occurred()) {
            return r;
        }
    }
    return PyObject_CallOneArg(orig, arg);
}

static PyMethodDef len_hook_def = {
    "len", (PyCFunction)len_hook, METH_O,
    "len(obj): the original builtin, except for a tensor proxy traced with "
    "symbolic sizes (its dim 0, symbolic)."
};

static int
install_len_hook(PyObject *saved)
{
    PyObject *bi = PyImport_ImportModule("builtins"), *orig = NULL, *h = NULL, *e = NULL;
    int rc = -1;
    if (bi == NULL) {
        return -1;
    }
    orig = PyObject_GetAttrString(bi, "len");
    if (orig == NULL) {
        goto done;
    }
    if (PyCFunction_Check(orig) && PyCFunction_GetFunction(orig) == (PyCFunction)len_hook) {
        rc = 0;       /* a nested trace: already hooked */
        goto done;
    }
    h = PyCFunction_New(&len_hook_def, orig);
    e = Py_BuildValue("(OsO)", bi, "len", orig);
    if (h == NULL || e == NULL || PyList_Append(saved, e) < 0) {
        goto done;
    }
    rc = PyObject_SetAttrString(bi, "len", h);
done:
    Py_XDECREF(e);
    Py_XDECREF(h);
    Py_XDECREF(orig);
    Py_DECREF(bi);
    return rc;
}

/* Install the hooks; returns a list of (name, previous value) to restore
 * on the package, or (object, name, previous value). */
PyObject *
stax_trace_hooks_install(StaxTracer *tr)
{
    PyObject *mod = Py_XNewRef(stax_py_registered(STAX_PY_PACKAGE)), *saved;
    if (mod == NULL) {
        PyErr_Clear();
        return PyList_New(0);
    }
    saved = PyList_New(0);
    for (int j = 0; saved && j < 2; j++) {
    const char **names = j == 0 ? random_creators : const_creators;
    for (int i = 0; saved && names[i]; i++) {
        PyObject *orig = PyObject_GetAttrString(mod, names[i]);
        PyObject *e;
        CreationHook *h;
        if (orig == NULL) {
            PyErr_Clear();
            continue;
        }
        e = Py_BuildValue("(sO)", names[i], orig);
        h = PyObject_GC_New(CreationHook, CreationHook_Type);
        if (e == NULL || h == NULL || PyList_Append(saved, e) < 0) {
            Py_XDECREF(e);
            Py_XDECREF(h);
            Py_DECREF(orig);
            stax_trace_hooks_remove(saved);
            Py_CLEAR(saved);
            break;
        }
        Py_DECREF(e);
        h->tracer = (StaxTracer *)Py_NewRef(tr);
        h->random = j == 0;
        h->original = PyObject_TypeCheck(orig, CreationHook_Type)
                          ? Py_NewRef(((CreationHook *)orig)->original)
                          : Py_NewRef(orig);
        PyObject_GC_Track(h);
        Py_DECREF(orig);
        if (PyObject_SetAttrString(mod, names[i], (PyObject *)h) < 0) {
            Py_DECREF(h);
            stax_trace_hooks_remove(saved);
            Py_CLEAR(saved);
            break;
        }
        Py_DECREF(h);
    }
    }
    Py_DECREF(mod);
    if (saved != NULL && tr->symenv != NULL && install_len_hook(saved) < 0) {
        stax_trace_hooks_remove(saved);
        Py_CLEAR(saved);
    }
    return saved;
}

void
stax_trace_hooks_remove(PyObject *saved)
{
    PyObject *mod, *et, *ev, *tb;
    if (saved == NULL) {
        return;
    }
    PyErr_Fetch(&et, &ev, &tb);
    mod = Py_XNewRef(stax_py_registered(STAX_PY_PACKAGE));
    for (Py_ssize_t i = 0; mod && i < PyList_GET_SIZE(saved); i++) {
        PyObject *e = PyList_GET_ITEM(saved, i);
        int r = PyTuple_GET_SIZE(e) == 3
                    ? PyObject_SetAttrString(PyTuple_GET_ITEM(e, 0),
                                             PyUnicode_AsUTF8(PyTuple_GET_ITEM(e, 1)),
                                             PyTuple_GET_ITEM(e, 2))
                    : PyObject_SetAttr(mod, PyTuple_GET_ITEM(e, 0), PyTuple_GET_ITEM(e, 1));
        if (r < 0) {
            PyErr_Clear();
        }
    }
    Py_XDECREF(mod);
    PyErr_Clear();
    PyErr_Restore(et, ev, tb);
}

/* Deterministic creation nodes whose value was never modified in place
 * (and that are not gates themselves) become get_attr constants. */
int
stax_trace_demote_constants(StaxTracer *tr)
{
    PyObject *nodes = stax_graph_node_list((PyObject *)tr->graph);
    int rc = -1;
    if (nodes == NULL) {
        return -1;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(nodes); i++) {
        StaxNode *n = (StaxNode *)PyList_GET_ITEM(nodes, i);
        PyObject *mark = PyDict_GetItemString(n->meta, "creation");
        PyObject *v = PyDict_GetItemString(n->meta, "val"), *c, *ip, *r;
        int is_gate = 0;
        if (mark == NULL || !PyLong_Check(mark) || v == NULL
            || !is_tensor(v)
            || PyLong_AsUnsignedLongLong(mark)
                   != ((StaxTensor *)v)->storage->version) {
            PyErr_Clear();
            continue;
        }
        for (Py_ssize_t k = 0; k < PyList_GET_SIZE(tr->gates); k++) {
            if (PyTuple_GET_ITEM(PyList_GET_ITEM(tr->gates, k), 0)
                == (PyObject *)n) {
                is_gate = 1;
            }
        }
        if (is_gate) {
            continue;
        }
        {
            /* tp.arange(t) of a symbolic size t: its value depends on the
             * inputs' sizes, not a constant */
            PyObject *used = PyDict_New();
            int dep = used == NULL || stax_graph_collect_nodes(n->args, used) < 0
                      || (n->kwargs != NULL && stax_graph_collect_nodes(n->kwargs, used) < 0)
                      ? -1 : PyDict_GET_SIZE(used) > 0;
            Py_XDECREF(used);
            if (dep < 0) {
                goto done;
            }
            if (dep) {
                continue;
            }
        }
        ip = PyObject_CallMethod((PyObject *)tr->graph, "inserting_before",
                                 "(O)", n);
        if (ip == NULL) {
            goto done;
        }
        c = stax_trace_const_node(tr, v);
        r = PyObject_CallMethod(ip, "__exit__", "OOO", Py_None, Py_None,
                                Py_None);
        Py_DECREF(ip);
        Py_XDECREF(r);
        if (c == NULL || r == NULL) {
            Py_XDECREF(c);
            goto done;
        }
        if (stax_node_replace_all_uses_with(n, c) < 0
            || stax_graph_erase_node(tr->graph, n) < 0) {
            Py_DECREF(c);
            goto done;
        }
        Py_DECREF(c);
    }
    rc = 0;
done:
    Py_DECREF(nodes);
    return rc;
}

int
stax_trace_isolation_init(PyObject *m)
{
    (void)m;
    CreationHook_Type = (PyTypeObject *)PyType_FromSpec(&hook_spec);
    return CreationHook_Type ? 0 : -1;
}
