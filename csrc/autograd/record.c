/* Recording: every op call with grad mode on and an operand that requires
 * grad runs with grad mode off and gets a Node (grad_fn) holding what its
 * formula needs. Three entrances: the op table's dispatcher (hook), the
 * tensor room's methods (views, clone, to, copy_, fill_, zero_: wrapped
 * here), and indexing (t[k], t[k] = v: the mapping slots). */
#include "autograd/autograd_internal.h"

#include <string.h>

/* ---- schemas: parameter names and which are keyword-only -------------- */

typedef struct {
    int n;
    int kwonly_from;
    PyObject *names;            /* tuple of str */
    char is_tensor[16];         /* Tensor / Tensor? */
    char is_list[16];           /* Tensor[] */
} sig_t;

static sig_t *sigs;             /* per op id, parsed lazily */

static int
parse_schema(const stax_op_info *op, sig_t *s)
{
    const char *p = op->schema;
    PyObject *names = PyList_New(0);
    if (names == NULL) {
        return -1;
    }
    s->n = 0;
    s->kwonly_from = -1;
    if (*p == '(') {
        p++;
    }
    while (*p && *p != ')') {
        const char *b, *e, *nb;
        int depth = 0;
        while (*p == ' ' || *p == ',') {
            p++;
        }
        b = p;
        while (*p && !((*p == ',' || *p == ')') && depth == 0)) {
            if (*p == '[' || *p == '(') {
                depth++;
            }
            else if (*p == ']' || *p == ')') {
                depth--;
            }
            p++;
        }
        e = p;
        if (e - b == 1 && *b == '*') {
            s->kwonly_from = s->n;
            continue;
        }
        {
            /* "Type name=default": the name is the word before '=' or end */
            const char *eq = memchr(b, '=', (size_t)(e - b));
            const char *ne = eq ? eq : e;
            PyObject *nm;
            while (ne > b && ne[-1] == ' ') {
                ne--;
            }
            nb = ne;
            while (nb > b && nb[-1] != ' ') {
                nb--;
            }
            if (s->n < 16) {
                s->is_tensor[s->n] = strncmp(b, "Tensor", 6) == 0;
                s->is_list[s->n] = strncmp(b, "Tensor[]", 8) == 0;
            }
            nm = PyUnicode_FromStringAndSize(nb, ne - nb);
            if (nm == NULL || PyList_Append(names, nm) < 0) {
                Py_XDECREF(nm);
                Py_DECREF(names);
                return -1;
            }
            Py_DECREF(nm);
            s->n++;
        }
    }
    if (s->kwonly_from < 0) {
        s->kwonly_from = s->n;
    }
    s->names = PyList_AsTuple(names);
    Py_DECREF(names);
    return s->names ? 0 : -1;
}

static const sig_t *
sig_of(const stax_op_info *op)
{
    sig_t *s = &sigs[op->id];
    if (s->names == NULL && parse_schema(op, s) < 0) {
        return NULL;
    }
    return s;
}

PyObject *
stax_ag_schema_names(const stax_op_info *op, int *kwonly_from)
{
    const sig_t *s = sig_of(op);
    if (s == NULL) {
        return NULL;
    }
    *kwonly_from = s->kwonly_from;
    return s->names;
}

/* ---- helpers ------------------------------------------------------------- */

PyObject *
stax_ag_call_nograd(PyObject *fn, PyObject *args, PyObject *kw)
{
    int prev = stax_grad_enabled();
    PyObject *r;
    stax_set_grad_enabled(0);
    r = PyObject_Call(fn, args, kw);
    stax_set_grad_enabled(prev);
    return r;
}

static int view_base_wants_grad(PyObject *o);

/* o (a tensor, or a list/tuple of them) requires grad: an unrecorded view
 * whose base requires grad now does too (torch: a view's requires_grad is
 * its base's) */
static int
wants_grad(PyObject *o)
{
    if (StaxTensor_Check(o)) {
        return ((StaxTensor *)o)->requires_grad || view_base_wants_grad(o);
    }
    if (PyList_Check(o) || PyTuple_Check(o)) {
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(o); i++) {
            PyObject *x = PySequence_Fast_GET_ITEM(o, i);
            if (StaxTensor_Check(x) && (((StaxTensor *)x)->requires_grad
                                        || view_base_wants_grad(x))) {
                return 1;
            }
        }
    }
    return 0;
}

static PyObject *
inplace_leaf_error(void)
{
    PyErr_SetString(PyExc_RuntimeError,
                    "a leaf Variable that requires grad is being used in an "
                    "in-place operation.");
    return NULL;
}

/* The base a view (recorded by autograd) views: its node's view_base;
 * NULL when unknown (borrowed). */
static StaxTensor *
view_base_of(StaxTensor *t)
{
    if (!t->ag_view || t->grad_fn == NULL || !StaxGradNode_Check(t->grad_fn)) {
        return NULL;
    }
    PyObject *b = ((StaxGradNode *)t->grad_fn)->view_base;
    return b != NULL && StaxTensor_Check(b) ? (StaxTensor *)b : NULL;
}

/* a view op's node: remember the root base of its outputs */
static void
set_view_base(StaxGradNode *n, PyObject *self)
{
    StaxTensor *b;
    if (self == NULL || !StaxTensor_Check(self)) {
        return;
    }
    b = view_base_of((StaxTensor *)self);
    Py_XSETREF(n->view_base, Py_NewRef(b != NULL ? (PyObject *)b : self));
}

/* The tensor t, a view autograd did not record, was taken from (its
 * root), while it still shares t's storage; NULL otherwise. Borrowed. */
static StaxTensor *
untracked_base(StaxTensor *t)
{
    StaxTensor *b;
    if (t->ag_view || t->grad_fn != NULL || t->view_src == NULL
        || !StaxTensor_Check(t->view_src)) {
        return NULL;
    }
    b = (StaxTensor *)t->view_src;
    if (b->storage != t->storage) {
        return NULL;
    }
    /* the root became a recorded view since (a write through it) */
    return view_base_of(b) != NULL ? view_base_of(b) : b;
}

static void
note_view(StaxTensor *root, StaxTensor *self, PyObject *o)
{
    StaxTensor *v = (StaxTensor *)o;
    if (!StaxTensor_Check(o) || v == root || v->requires_grad
        || v->storage != root->storage) {
        return;
    }
    if (v == self && self->view_src != NULL) {
        return;         /* a view op that returned its argument */
    }
    Py_XSETREF(v->view_src, Py_NewRef((PyObject *)root));
}

/* res: what a view op that autograd did not record returned for self (a
 * tensor, or a tuple/list of them): each view remembers self's root, so
 * that an in-place write through it that requires grad (copy_ of a tensor
 * that requires grad) gives the root torch's CopySlices history */
static void
note_untracked_views(PyObject *self, PyObject *res)
{
    StaxTensor *s, *root;
    if (self == NULL || res == NULL || !StaxTensor_Check(self)) {
        return;
    }
    s = (StaxTensor *)self;
    if (s->requires_grad || !stax_dtype_is_floating(s->dtype)) {
        return;
    }
    root = untracked_base(s);
    if (root == NULL) {
        root = s;
    }
    if (PyTuple_Check(res) || PyList_Check(res)) {
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(res); i++) {
            note_view(root, s, PySequence_Fast_GET_ITEM(res, i));
        }
    }
    else {
        note_view(root, s, res);
    }
}

/* 1 when an in-place write to t must be recorded although nothing it
 * reads requires grad: t is an unrecorded view of a tensor that requires
 * grad now (the write changes that tensor's history) */
static int
view_base_wants_grad(PyObject *o)
{
    StaxTensor *b;
    if (!StaxTensor_Check(o) || !stax_grad_enabled()) {
        return 0;
    }
    b = untracked_base((StaxTensor *)o);
    return b != NULL && b->requires_grad;
}

/* t, an unrecorded view of b that requires grad now, gets the history of
 * the same view taken now (as_strided of b: torch regenerates a view's
 * grad_fn from its base's history the same way) */
static int
track_view(StaxTensor *t, StaxTensor *b)
{
    PyObject *size = stax_tensor_size_object(t->ndim, t->sizes);
    PyObject *stride = size ? PyTuple_New(t->ndim) : NULL;
    PyObject *w = NULL, *bshape = NULL;
    StaxGradNode *wn;
    int prev, rc = -1;
    if (!stax_tensor_is_contiguous(b) || b->offset != 0) {
        PyErr_SetString(PyExc_RuntimeError,
                        "tensorplay: an in-place operation that requires grad on a "
                        "view taken before its base required grad is supported for "
                        "a contiguous base only; write into a clone() of the view "
                        "instead");
        goto done;
    }
    for (int i = 0; stride != NULL && i < t->ndim; i++) {
        PyObject *x = PyLong_FromLongLong(t->strides[i]);
        if (x == NULL) {
            Py_CLEAR(stride);
            break;
        }
        PyTuple_SET_ITEM(stride, i, x);
    }
    if (stride == NULL) {
        goto done;
    }
    prev = stax_grad_enabled();
    stax_set_grad_enabled(1);
    w = PyObject_CallMethod((PyObject *)b, "as_strided", "OOL", size, stride,
                            (long long)t->offset);
    stax_set_grad_enabled(prev);
    if (w == NULL) {
        goto done;
    }
    if (!StaxTensor_Check(w) || ((StaxTensor *)w)->grad_fn == NULL
        || !StaxGradNode_Check(((StaxTensor *)w)->grad_fn)
        || ((StaxGradNode *)((StaxTensor *)w)->grad_fn)->args == NULL) {
        PyErr_SetString(PyExc_RuntimeError,
                        "autograd: the view's history could not be rebuilt");
        goto done;
    }
    /* a view's backward reads its base's shape only (b is contiguous and
     * at offset 0: the storage offset is the base's element offset); the
     * write through t must not invalidate it, as for any other view */
    wn = (StaxGradNode *)((StaxTensor *)w)->grad_fn;
    bshape = stax_tensor_size_object(b->ndim, b->sizes);
    if (bshape == NULL) {
        goto done;
    }
    Py_SETREF(((PyTupleObject *)wn->args)->ob_item[0], Py_NewRef(bshape));
    wn->versions[0] = 0;
    t->requires_grad = 1;
    t->nonleaf = 1;
    t->ag_view = 1;
    t->output_nr = ((StaxTensor *)w)->output_nr;
    Py_XSETREF(t->grad_fn, Py_NewRef(((StaxTensor *)w)->grad_fn));
    Py_CLEAR(t->view_src);
    rc = 0;
done:
    Py_XDECREF(size);
    Py_XDECREF(stride);
    Py_XDECREF(w);
    Py_XDECREF(bshape);
    return rc;
}

/* the unrecorded views among o (a tensor, or a list/tuple of them) whose
 * base requires grad now get their history before an op reads them (torch
 * regenerates a view's grad_fn from its base when it is used) */
static int
regen_views(PyObject *o)
{
    if (StaxTensor_Check(o)) {
        return view_base_wants_grad(o)
               ? track_view((StaxTensor *)o, untracked_base((StaxTensor *)o)) : 0;
    }
    if (PyList_Check(o) || PyTuple_Check(o)) {
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(o); i++) {
            if (regen_views(PySequence_Fast_GET_ITEM(o, i)) < 0) {
                return -1;
            }
        }
    }
    return 0;
}

/* checks before an in-place write to t under grad mode; *base: for a view
 * of a tensor that requires grad, its base (the caller rebases the base's
 * history after the write: rebase_view). setitem: the write is t[k] = v;
 * for a view taken before its base required grad, torch rebuilds the
 * view's history from the base for an indexed write but refuses a direct
 * in-place op (the view of what was a leaf) */
static int
check_inplace_target(StaxTensor *t, StaxTensor **base, int setitem)
{
    *base = NULL;
    if (t->requires_grad && !t->nonleaf) {
        inplace_leaf_error();
        return -1;
    }
    if (t->ag_view) {
        StaxTensor *b = view_base_of(t);
        if (b == NULL) {
            PyErr_SetString(PyExc_RuntimeError,
                            "tensorplay: an in-place operation on this view of a "
                            "tensor that requires grad is not supported (its base "
                            "is unknown); write into a clone() of the view instead");
            return -1;
        }
        if (b->requires_grad && !b->nonleaf) {
            PyErr_SetString(PyExc_RuntimeError,
                            "a view of a leaf Variable that requires grad is being "
                            "used in an in-place operation.");
            return -1;
        }
        *base = b;
    }
    else if (untracked_base(t) != NULL) {
        StaxTensor *b = untracked_base(t);
        if (b->requires_grad && !b->nonleaf) {
            PyErr_SetString(PyExc_RuntimeError,
                            "a view of a leaf Variable that requires grad is being "
                            "used in an in-place operation.");
            return -1;
        }
        if (b->requires_grad && !setitem) {
            /* torch: the view of what was a leaf when it was taken */
            inplace_leaf_error();
            return -1;
        }
        if (b->requires_grad && track_view(t, b) < 0) {
            return -1;
        }
        *base = b;
    }
    return 0;
}

/* After an in-place write into the view v (its grad_fn now the write's
 * node), torch's CopySlices: the base's new history is one node whose
 * inputs are the base's old history and the view's new value; its backward
 * (_copy_slices) gives the old base the gradient outside the view's
 * elements and the view the gradient inside. v stays a view of base. */
static int
rebase_view(StaxTensor *v, StaxTensor *base)
{
    PyObject *mk = PyDict_GetItemString(stax_ag_helpers, "_copy_slices");
    PyObject *fn = NULL, *bsh = NULL, *vsh = NULL;
    StaxGradNode *n = NULL, *vn;
    int rc = -1;
    if (v->grad_fn == NULL || !StaxGradNode_Check(v->grad_fn)) {
        return 0;       /* the write recorded nothing (integer dtype) */
    }
    vn = (StaxGradNode *)v->grad_fn;
    if (mk == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "autograd helpers not loaded");
        return -1;
    }
    fn = PyObject_CallFunctionObjArgs(mk, (PyObject *)base, (PyObject *)v, NULL);
    bsh = fn ? stax_tensor_size_object(base->ndim, base->sizes) : NULL;
    vsh = bsh ? stax_tensor_size_object(v->ndim, v->sizes) : NULL;
    n = vsh ? stax_ag_node_new("copy_slices", NULL) : NULL;
    if (n == NULL) {
        goto done;
    }
    snprintf(n->name, sizeof(n->name), "CopySlices");
    n->pyfn = Py_NewRef(fn);
    n->n_in = 2;
    n->next = PyMem_Calloc(3, sizeof(stax_edge));
    n->in_param = PyMem_Calloc(3, sizeof(int));
    n->in_elem = PyMem_Calloc(3, sizeof(int));
    n->in_dtypes = PyMem_Calloc(3, sizeof(stax_dtype_t));
    n->in_shapes = PyTuple_Pack(2, bsh, vsh);
    n->out_dtypes = PyMem_Calloc(2, sizeof(stax_dtype_t));
    n->out_shapes = PyTuple_Pack(1, bsh);
    if (!n->next || !n->in_param || !n->in_elem || !n->in_dtypes
        || !n->in_shapes || !n->out_dtypes || !n->out_shapes) {
        goto done;
    }
    n->in_param[1] = 1;
    n->in_elem[0] = n->in_elem[1] = -1;
    n->in_dtypes[0] = base->dtype;
    n->in_dtypes[1] = v->dtype;
    if (base->requires_grad && stax_ag_grad_edge(base, &n->next[0]) < 0) {
        goto done;
    }
    n->next[1].fn = Py_NewRef((PyObject *)vn);
    n->next[1].nr = v->output_nr;
    n->n_out = 1;
    n->out_dtypes[0] = base->dtype;
    base->requires_grad = 1;
    base->nonleaf = 1;
    base->output_nr = 0;
    Py_XSETREF(base->grad_fn, Py_NewRef((PyObject *)n));
    /* later writes into v find the base again */
    v->ag_view = 1;
    Py_XSETREF(vn->view_base, Py_NewRef((PyObject *)base));
    rc = 0;
done:
    Py_XDECREF(fn);
    Py_XDECREF(bsh);
    Py_XDECREF(vsh);
    Py_XDECREF(n);
    return rc;
}

static PyObject *
shape_of(PyObject *o)
{
    StaxTensor *t = (StaxTensor *)o;
    return stax_tensor_size_object(t->ndim, t->sizes);
}

/* Build the node for a call: args (tuple) aligned with names, the input
 * edges (tensors and tensor-list elements), versions and shapes. For an
 * in-place op, args[0] is the target before the write (a clone when the
 * formula reads it) and its edge is its old history. */
static StaxGradNode *
make_node(const char *opname, const stax_deriv *d, PyObject *names,
          PyObject *args, int kwonly_from, PyObject *replay, PyObject *kwargs)
{
    Py_ssize_t na = PyTuple_GET_SIZE(args);
    StaxGradNode *n = stax_ag_node_new(opname, d);
    int nin = 0, keep_all;
    if (n == NULL) {
        return NULL;
    }
    n->names = Py_NewRef(names);
    n->kwonly_from = kwonly_from;
    n->versions = PyMem_Calloc((size_t)na + 1, sizeof(uint64_t));
    n->shapes = PyTuple_New(na);
    if (n->versions == NULL || n->shapes == NULL) {
        goto fail;
    }
    for (Py_ssize_t i = 0; i < na; i++) {
        PyObject *a = PyTuple_GET_ITEM(args, i);
        PyObject *sh = StaxTensor_Check(a) ? shape_of(a) : Py_NewRef(Py_None);
        if (sh == NULL) {
            goto fail;
        }
        PyTuple_SET_ITEM(n->shapes, i, sh);
        if (StaxTensor_Check(a)) {
            nin++;
            n->versions[i] = ((StaxTensor *)a)->storage->version;
        }
        else if (PyList_Check(a) || PyTuple_Check(a)) {
            for (Py_ssize_t k = 0; k < PySequence_Fast_GET_SIZE(a); k++) {
                nin += StaxTensor_Check(PySequence_Fast_GET_ITEM(a, k));
            }
        }
    }
    n->n_in = nin;
    n->next = PyMem_Calloc((size_t)nin + 1, sizeof(stax_edge));
    n->in_param = PyMem_Calloc((size_t)nin + 1, sizeof(int));
    n->in_elem = PyMem_Calloc((size_t)nin + 1, sizeof(int));
    n->in_dtypes = PyMem_Calloc((size_t)nin + 1, sizeof(stax_dtype_t));
    n->in_shapes = PyTuple_New(nin);
    if (!n->next || !n->in_param || !n->in_elem || !n->in_dtypes
        || !n->in_shapes) {
        goto fail;
    }
    nin = 0;
    for (Py_ssize_t i = 0; i < na; i++) {
        PyObject *a = PyTuple_GET_ITEM(args, i);
        Py_ssize_t cnt = StaxTensor_Check(a) ? 1
                         : (PyList_Check(a) || PyTuple_Check(a))
                           ? PySequence_Fast_GET_SIZE(a) : 0;
        for (Py_ssize_t k = 0; k < cnt; k++) {
            PyObject *x = StaxTensor_Check(a) ? a
                                              : PySequence_Fast_GET_ITEM(a, k);
            StaxTensor *t;
            PyObject *sh;
            if (!StaxTensor_Check(x)) {
                continue;
            }
            t = (StaxTensor *)x;
            n->in_param[nin] = (int)i;
            n->in_elem[nin] = StaxTensor_Check(a) ? -1 : (int)k;
            n->in_dtypes[nin] = t->dtype;
            sh = shape_of(x);
            if (sh == NULL) {
                goto fail;
            }
            PyTuple_SET_ITEM(n->in_shapes, nin, sh);
            if (stax_dtype_is_floating(t->dtype)
                && stax_ag_grad_edge(t, &n->next[nin]) < 0) {
                goto fail;
            }
            nin++;
        }
    }
    /* keep only the arguments the formula reads */
    keep_all = d == NULL || d->uses_node || d->names == NULL;
    n->args = PyTuple_New(na);
    if (n->args == NULL) {
        goto fail;
    }
    for (Py_ssize_t i = 0; i < na; i++) {
        PyObject *a = PyTuple_GET_ITEM(args, i);
        int keep = keep_all || !StaxTensor_Check(a);
        if (!keep) {
            keep = PySet_Contains(d->names, PyTuple_GET_ITEM(names, i));
            if (keep < 0) {
                goto fail;
            }
        }
        if (keep && StaxTensor_Check(a)) {
            n->had_saved = 1;
        }
        PyTuple_SET_ITEM(n->args, i, Py_NewRef(keep ? a : Py_None));
    }
    if (replay != NULL && d != NULL && d->uses_node) {
        n->replay = Py_NewRef(replay);
        n->kwargs = kwargs ? Py_NewRef(kwargs) : NULL;
    }
    return n;
fail:
    Py_DECREF(n);
    return NULL;
}

/* Saved arguments are checked against their versions after the op ran
 * (an op may write an argument it does not differentiate, like
 * batch_norm's running statistics), as torch saves after the forward. */
static void
snap_versions(StaxGradNode *n, StaxTensor *target)
{
    for (Py_ssize_t i = 0; n->args && i < PyTuple_GET_SIZE(n->args); i++) {
        PyObject *a = PyTuple_GET_ITEM(n->args, i);
        if (!StaxTensor_Check(a)) {
            continue;
        }
        /* an argument sharing the written target's memory (y.mul_(y)) keeps
         * its version from before the write: backward then refuses it, as
         * torch does, instead of reading the new values */
        if (target != NULL && i > 0
            && ((StaxTensor *)a)->storage == target->storage) {
            continue;
        }
        n->versions[i] = ((StaxTensor *)a)->storage->version;
    }
}

/* Give the op's outputs their history; saves the outputs the formula
 * reads. res: a Tensor or a tuple/list of them. */
static int
attach_outputs(StaxGradNode *n, PyObject *res, int is_view)
{
    int single = StaxTensor_Check(res);
    Py_ssize_t no = single ? 1 : PySequence_Fast_GET_SIZE(res);
    unsigned used = n->deriv ? n->deriv->results : 0;
    n->n_out = (int)no;
    n->out_shapes = PyTuple_New(no);
    n->out_dtypes = PyMem_Calloc((size_t)no + 1, sizeof(stax_dtype_t));
    n->res_versions = PyMem_Calloc((size_t)no + 1, sizeof(uint64_t));
    if (n->out_shapes == NULL || !n->out_dtypes || !n->res_versions) {
        return -1;
    }
    if (used) {
        n->results = PyTuple_New(no);
        if (n->results == NULL) {
            return -1;
        }
    }
    for (Py_ssize_t k = 0; k < no; k++) {
        PyObject *o = single ? res : PySequence_Fast_GET_ITEM(res, k);
        StaxTensor *t;
        PyObject *sh;
        if (!StaxTensor_Check(o)) {
            PyTuple_SET_ITEM(n->out_shapes, k, Py_NewRef(Py_None));
            if (n->results) {
                PyTuple_SET_ITEM(n->results, k, Py_NewRef(o));
            }
            continue;
        }
        t = (StaxTensor *)o;
        sh = shape_of(o);
        if (sh == NULL) {
            return -1;
        }
        PyTuple_SET_ITEM(n->out_shapes, k, sh);
        n->out_dtypes[k] = t->dtype;
        if (n->results) {
            /* a detached alias: the output without its grad_fn (no cycle) */
            StaxTensor *al = stax_tensor_as_strided(t, t->ndim, t->sizes,
                                                    t->strides, t->offset);
            if (al == NULL) {
                return -1;
            }
            al->requires_grad = 0;
            al->nonleaf = 0;
            Py_CLEAR(al->grad_fn);
            n->res_versions[k] = t->storage->version;
            PyTuple_SET_ITEM(n->results, k, (PyObject *)al);
            n->had_saved = 1;
        }
        if (!stax_dtype_is_floating(t->dtype)) {
            continue;
        }
        t->requires_grad = 1;
        t->nonleaf = 1;
        t->output_nr = (int)k;
        t->ag_view = is_view;
        Py_XSETREF(t->grad_fn, Py_NewRef(n));
    }
    return 0;
}

static int
has_float_output(PyObject *res)
{
    if (StaxTensor_Check(res)) {
        return stax_dtype_is_floating(((StaxTensor *)res)->dtype);
    }
    if (PyTuple_Check(res) || PyList_Check(res)) {
        for (Py_ssize_t k = 0; k < PySequence_Fast_GET_SIZE(res); k++) {
            PyObject *o = PySequence_Fast_GET_ITEM(res, k);
            if (StaxTensor_Check(o)
                && stax_dtype_is_floating(((StaxTensor *)o)->dtype)) {
                return 1;
            }
        }
    }
    return 0;
}

/* ---- the dispatcher hook -------------------------------------------------- */

static PyObject *
hook(const stax_op_info *op, PyObject *func, PyObject *const *args,
     size_t nargsf, PyObject *kwnames, stax_op_kernel_t kernel)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    int any = 0, inplace, prev, ninplace_param;
    const char *base_name;
    const stax_op_info *base;
    const stax_deriv *d;
    const sig_t *sig;
    PyObject *targs = NULL, *kw = NULL, *bound = NULL, *res = NULL;
    PyObject *saved_args = NULL;
    StaxGradNode *node = NULL;
    StaxTensor *self = NULL, *vbase = NULL;

    for (Py_ssize_t i = 0; i < nargs + nkw && !any; i++) {
        any = wants_grad(args[i]);
    }
    inplace = (op->flags & STAX_OPF_INPLACE)
              || op->name[strlen(op->name) - 1] == '_';
    if (!any) {
        res = kernel(op, func, args, nargsf, kwnames);
        if (op->kind == STAX_OPK_VIEW && !inplace && nargs > 0) {
            note_untracked_views(args[0], res);
        }
        return res;
    }
    base_name = (op->flags & STAX_OPF_INPLACE) && op->inplace ? op->inplace
                                                              : op->name;
    base = stax_op_by_name(base_name);
    d = stax_ag_deriv_for(base_name);
    if (base == NULL) {
        base = op;
    }
    sig = sig_of(base);
    if (sig == NULL) {
        return NULL;
    }
    /* bind to the schema: the formula reads parameters by name */
    targs = PyTuple_New(nargs);
    kw = nkw ? PyDict_New() : NULL;
    if (targs == NULL || (nkw && kw == NULL)) {
        goto done;
    }
    for (Py_ssize_t i = 0; i < nargs; i++) {
        PyTuple_SET_ITEM(targs, i, Py_NewRef(args[i]));
    }
    for (Py_ssize_t i = 0; i < nkw; i++) {
        if (PyDict_SetItem(kw, PyTuple_GET_ITEM(kwnames, i), args[nargs + i])
            < 0) {
            goto done;
        }
    }
    bound = stax_op_bind(op, targs, kw);
    if (bound == NULL) {
        goto done;
    }
    if (PyTuple_GET_SIZE(bound) != sig->n) {
        PyErr_Format(PyExc_RuntimeError, "autograd: op '%s' bound %zd "
                     "arguments, its schema has %d", op->name,
                     PyTuple_GET_SIZE(bound), sig->n);
        goto done;
    }
    /* an activation called with inplace=True writes its input */
    ninplace_param = -1;
    for (int i = 0; i < sig->n; i++) {
        if (PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(sig->names, i),
                                             "inplace") == 0) {
            ninplace_param = i;
        }
    }
    if (ninplace_param >= 0
        && PyObject_IsTrue(PyTuple_GET_ITEM(bound, ninplace_param)) == 1) {
        inplace = 1;
    }
    if (inplace && sig->n > 0 && StaxTensor_Check(PyTuple_GET_ITEM(bound, 0))) {
        self = (StaxTensor *)PyTuple_GET_ITEM(bound, 0);
        if (check_inplace_target(self, &vbase, 0) < 0) {
            goto done;
        }
    }
    for (Py_ssize_t i = self != NULL ? 1 : 0; i < PyTuple_GET_SIZE(bound); i++) {
        if (regen_views(PyTuple_GET_ITEM(bound, i)) < 0) {
            goto done;
        }
    }
    if (d == NULL || d->kind == STAX_DERIV_NONDIFF) {
        prev = stax_grad_enabled();
        stax_set_grad_enabled(0);
        res = kernel(op, func, args, nargsf, kwnames);
        stax_set_grad_enabled(prev);
        goto done;
    }
    node = make_node(base->name, d, sig->names, bound, sig->kwonly_from,
                     stax_op_function(base), NULL);
    if (node == NULL) {
        goto done;
    }
    if (self != NULL && d->kind == STAX_DERIV_FORMULA && d->names != NULL) {
        int reads = d->uses_node
                    || PySet_Contains(d->names, PyTuple_GET_ITEM(sig->names, 0));
        if (reads) {
            PyObject *c;
            int pg = stax_grad_enabled();
            stax_set_grad_enabled(0);
            c = PyObject_CallMethod((PyObject *)self, "clone", NULL);
            stax_set_grad_enabled(pg);
            if (c == NULL) {
                goto done;
            }
            /* the formula reads the target's value before the write: save
             * a copy (the edge stays the target's old history) */
            saved_args = PyTuple_GetSlice(node->args, 0, sig->n);
            if (saved_args == NULL) {
                Py_DECREF(c);
                goto done;
            }
            Py_SETREF(((PyTupleObject *)saved_args)->ob_item[0], c);
            Py_SETREF(node->args, saved_args);
            saved_args = NULL;
            node->versions[0] = ((StaxTensor *)c)->storage->version;
        }
    }
    prev = stax_grad_enabled();
    stax_set_grad_enabled(0);
    res = kernel(op, func, args, nargsf, kwnames);
    stax_set_grad_enabled(prev);
    if (res == NULL) {
        goto done;
    }
    snap_versions(node, self);
    if (!has_float_output(res)) {
        goto done;
    }
    if (attach_outputs(node, res, base->kind == STAX_OPK_VIEW) < 0) {
        Py_CLEAR(res);
    }
    else if (base->kind == STAX_OPK_VIEW && sig->n > 0) {
        set_view_base(node, PyTuple_GET_ITEM(bound, 0));
    }
    else if (vbase != NULL && res == (PyObject *)self && rebase_view(self, vbase) < 0) {
        Py_CLEAR(res);
    }
done:
    Py_XDECREF(targs);
    Py_XDECREF(kw);
    Py_XDECREF(bound);
    Py_XDECREF(saved_args);
    Py_XDECREF(node);
    return res;
}

/* ---- wrapped tensor-room methods ------------------------------------------ */

enum { WM_VIEW = 0, WM_IDENTITY, WM_COPY, WM_FILL, WM_PROPERTY };

typedef struct {
    PyObject_HEAD
    PyObject *orig;        /* the original descriptor */
    PyObject *name;
    int kind;
    const char *opname;    /* op row whose derivative it uses */
} WrapMethod;

static PyTypeObject *WrapMethod_Type;

static PyObject *
call_orig(WrapMethod *w, PyObject *self, PyObject *rest, PyObject *kw)
{
    PyObject *bound, *r;
    if (w->kind == WM_PROPERTY) {
        return Py_TYPE(w->orig)->tp_descr_get(w->orig, self,
                                              (PyObject *)Py_TYPE(self));
    }
    bound = Py_TYPE(w->orig)->tp_descr_get(w->orig, self,
                                           (PyObject *)Py_TYPE(self));
    if (bound == NULL) {
        return NULL;
    }
    r = PyObject_Call(bound, rest, kw);
    Py_DECREF(bound);
    return r;
}

static PyObject *
wrap_call(PyObject *o, PyObject *args, PyObject *kw)
{
    WrapMethod *w = (WrapMethod *)o;
    PyObject *self, *rest = NULL, *res = NULL, *names = NULL, *sargs = NULL;
    StaxGradNode *node = NULL;
    StaxTensor *vbase = NULL;
    const stax_deriv *d;
    int any, prev;
    if (PyTuple_GET_SIZE(args) < 1
        || !StaxTensor_Check(PyTuple_GET_ITEM(args, 0))) {
        PyErr_Format(PyExc_TypeError, "descriptor '%U' needs a Tensor",
                     w->name);
        return NULL;
    }
    self = PyTuple_GET_ITEM(args, 0);
    rest = PyTuple_GetSlice(args, 1, PyTuple_GET_SIZE(args));
    if (rest == NULL) {
        return NULL;
    }
    any = stax_grad_enabled() && wants_grad(self);
    if (stax_grad_enabled() && (w->kind == WM_COPY || w->kind == WM_FILL)) {
        PyObject *src = PyTuple_GET_SIZE(rest) > 0 ? PyTuple_GET_ITEM(rest, 0)
                        : kw ? PyDict_GetItemString(kw, w->kind == WM_COPY
                                                        ? "src" : "value")
                        : NULL;
        any = any || (src != NULL && wants_grad(src));
    }
    if (!any) {
        res = call_orig(w, self, rest, kw);
        Py_DECREF(rest);
        if (w->kind == WM_VIEW || w->kind == WM_PROPERTY) {
            note_untracked_views(self, res);
        }
        return res;
    }
    if (w->kind == WM_COPY || w->kind == WM_FILL) {
        PyObject *src = PyTuple_GET_SIZE(rest) > 0 ? PyTuple_GET_ITEM(rest, 0)
                        : kw ? PyDict_GetItemString(kw, w->kind == WM_COPY
                                                        ? "src" : "value")
                        : NULL;
        if (check_inplace_target((StaxTensor *)self, &vbase, 0) < 0
            || (src != NULL && regen_views(src) < 0)) {
            Py_DECREF(rest);
            return NULL;
        }
    }
    else if (regen_views(self) < 0) {
        Py_DECREF(rest);
        return NULL;
    }
    d = stax_ag_deriv_for(w->opname);
    if (w->kind == WM_COPY || w->kind == WM_FILL) {
        /* fill_(value) is copy_ of a scalar: a 0-d value requiring grad
         * gets the sum of the gradient */
        PyObject *src = PyTuple_GET_SIZE(rest) > 0 ? PyTuple_GET_ITEM(rest, 0)
                        : kw ? PyDict_GetItemString(kw, w->kind == WM_COPY
                                                        ? "src" : "value")
                        : Py_None;
        names = Py_BuildValue("(ss)", "self", "src");
        sargs = PyTuple_Pack(2, self, src ? src : Py_None);
    }
    else {
        Py_ssize_t nr = PyTuple_GET_SIZE(rest);
        names = PyTuple_New(nr + 1);
        sargs = PyTuple_New(nr + 1);
        if (names && sargs) {
            PyTuple_SET_ITEM(names, 0, PyUnicode_FromString("self"));
            PyTuple_SET_ITEM(sargs, 0, Py_NewRef(self));
            for (Py_ssize_t i = 0; i < nr; i++) {
                PyTuple_SET_ITEM(names, i + 1, PyUnicode_FromFormat("arg%zd", i));
                PyTuple_SET_ITEM(sargs, i + 1,
                                 Py_NewRef(PyTuple_GET_ITEM(rest, i)));
            }
        }
    }
    if (names == NULL || sargs == NULL) {
        goto done;
    }
    node = make_node(PyUnicode_AsUTF8(w->name), d, names, sargs, (int)PyTuple_GET_SIZE(sargs),
                     (PyObject *)w, kw);
    if (node == NULL) {
        goto done;
    }
    prev = stax_grad_enabled();
    stax_set_grad_enabled(0);
    res = call_orig(w, self, rest, kw);
    stax_set_grad_enabled(prev);
    snap_versions(node, w->kind == WM_COPY || w->kind == WM_FILL
                        ? (StaxTensor *)self : NULL);
    if (res == NULL || res == self || !has_float_output(res)) {
        if (res == self && (w->kind == WM_COPY || w->kind == WM_FILL)) {
            if (attach_outputs(node, res, 0) < 0
                || (vbase != NULL && rebase_view((StaxTensor *)self, vbase) < 0)) {
                Py_CLEAR(res);
            }
        }
        goto done;
    }
    if (attach_outputs(node, res, w->kind == WM_VIEW || w->kind == WM_PROPERTY)
        < 0) {
        Py_CLEAR(res);
    }
    else if (w->kind == WM_VIEW || w->kind == WM_PROPERTY) {
        set_view_base(node, self);
    }
done:
    Py_XDECREF(rest);
    Py_XDECREF(names);
    Py_XDECREF(sargs);
    Py_XDECREF(node);
    return res;
}

static PyObject *
wrap_descr_get(PyObject *self, PyObject *obj, PyObject *type)
{
    WrapMethod *w = (WrapMethod *)self;
    if (obj == NULL || obj == Py_None) {
        return Py_NewRef(self);
    }
    if (w->kind == WM_PROPERTY) {
        PyObject *a = PyTuple_Pack(1, obj), *r;
        if (a == NULL) {
            return NULL;
        }
        r = wrap_call(self, a, NULL);
        Py_DECREF(a);
        return r;
    }
    return PyMethod_New(self, obj);
}

static void
wrap_dealloc(PyObject *self)
{
    WrapMethod *w = (WrapMethod *)self;
    PyTypeObject *tp = Py_TYPE(self);
    Py_XDECREF(w->orig);
    Py_XDECREF(w->name);
    tp->tp_free(self);
    Py_DECREF(tp);
}

static PyObject *
wrap_repr(PyObject *self)
{
    return PyUnicode_FromFormat("<method '%U' of 'Tensor' objects>",
                                ((WrapMethod *)self)->name);
}

static PyObject *
wrap_get_doc(PyObject *self, void *c)
{
    return PyObject_GetAttrString(((WrapMethod *)self)->orig, "__doc__");
}

static PyObject *
wrap_get_name(PyObject *self, void *c)
{
    return Py_NewRef(((WrapMethod *)self)->name);
}

static PyGetSetDef wrap_getset[] = {
    {"__doc__", wrap_get_doc, NULL, NULL, NULL},
    {"__name__", wrap_get_name, NULL, NULL, NULL},
    {NULL},
};

static PyType_Slot wrap_slots[] = {
    {Py_tp_call, wrap_call},
    {Py_tp_descr_get, wrap_descr_get},
    {Py_tp_dealloc, wrap_dealloc},
    {Py_tp_repr, wrap_repr},
    {Py_tp_getset, wrap_getset},
    {0, NULL},
};

static PyType_Spec wrap_spec = {
    .name = "tensorplay._C._AutogradMethod",
    .basicsize = sizeof(WrapMethod),
    .flags = Py_TPFLAGS_DEFAULT,
    .slots = wrap_slots,
};

static const struct { const char *name; int kind; const char *op; } wrapped[] = {
    {"view", WM_VIEW, "getitem"}, {"reshape", WM_VIEW, "getitem"},
    {"view_as", WM_VIEW, "getitem"}, {"reshape_as", WM_VIEW, "getitem"},
    {"permute", WM_VIEW, "getitem"}, {"transpose", WM_VIEW, "getitem"},
    {"swapaxes", WM_VIEW, "getitem"}, {"swapdims", WM_VIEW, "getitem"},
    {"t", WM_VIEW, "getitem"}, {"expand", WM_VIEW, "getitem"},
    {"expand_as", WM_VIEW, "getitem"}, {"unsqueeze", WM_VIEW, "getitem"},
    {"squeeze", WM_VIEW, "getitem"}, {"flatten", WM_VIEW, "getitem"},
    {"unflatten", WM_VIEW, "getitem"}, {"narrow", WM_VIEW, "getitem"},
    {"select", WM_VIEW, "getitem"}, {"unbind", WM_VIEW, "getitem"},
    {"split", WM_VIEW, "getitem"}, {"chunk", WM_VIEW, "getitem"},
    {"diagonal", WM_VIEW, "getitem"}, {"as_strided", WM_VIEW, "as_strided"},
    {"movedim", WM_VIEW, "getitem"}, {"slice", WM_VIEW, "getitem"},
    {"clone", WM_IDENTITY, "clone"}, {"contiguous", WM_IDENTITY, "clone"},
    {"to", WM_IDENTITY, "clone"}, {"float", WM_IDENTITY, "clone"},
    {"double", WM_IDENTITY, "clone"}, {"half", WM_IDENTITY, "clone"},
    {"bfloat16", WM_IDENTITY, "clone"},
    {"type", WM_IDENTITY, "clone"},
    {"copy_", WM_COPY, "copy_"},
    {"fill_", WM_FILL, "copy_"}, {"zero_", WM_FILL, "copy_"},
    {"T", WM_PROPERTY, "getitem"}, {"mT", WM_PROPERTY, "getitem"},
};

static int
wrap_methods(void)
{
    PyObject *tdict = StaxTensor_Type->tp_dict;
    for (size_t i = 0; i < sizeof(wrapped) / sizeof(wrapped[0]); i++) {
        PyObject *orig = PyDict_GetItemString(tdict, wrapped[i].name);
        WrapMethod *w;
        if (orig == NULL || Py_TYPE(orig) == WrapMethod_Type
            || Py_TYPE(orig)->tp_descr_get == NULL) {
            continue;    /* absent, or an op-table dispatcher entry */
        }
        if (strcmp(Py_TYPE(orig)->tp_name, "tensorplay._C.OpFunction") == 0
            || strcmp(Py_TYPE(orig)->tp_name, "OpFunction") == 0) {
            continue;
        }
        w = PyObject_New(WrapMethod, WrapMethod_Type);
        if (w == NULL) {
            return -1;
        }
        Py_INCREF(WrapMethod_Type);
        w->orig = Py_NewRef(orig);
        w->name = PyUnicode_FromString(wrapped[i].name);
        w->kind = wrapped[i].kind;
        w->opname = wrapped[i].op;
        if (w->name == NULL
            || PyDict_SetItemString(tdict, wrapped[i].name, (PyObject *)w) < 0) {
            Py_DECREF(w);
            return -1;
        }
        Py_DECREF(w);
    }
    PyType_Modified(StaxTensor_Type);
    return 0;
}

/* ---- indexing -------------------------------------------------------------- */

static binaryfunc orig_subscript;
static objobjargproc orig_ass_subscript;
static PyObject *getitem_fn;       /* operator.getitem */
static PyObject *getitem_names;    /* ("self", "index") */
static PyObject *setitem_names;    /* ("self", "index", "value") */

static PyObject *
ag_subscript(PyObject *self, PyObject *key)
{
    PyObject *res, *sargs;
    StaxGradNode *node;
    int prev;
    if (!stax_grad_enabled() || !wants_grad(self)) {
        res = orig_subscript(self, key);
        note_untracked_views(self, res);
        return res;
    }
    if (regen_views(self) < 0) {
        return NULL;
    }
    sargs = PyTuple_Pack(2, self, key);
    if (sargs == NULL) {
        return NULL;
    }
    node = make_node("index", stax_ag_deriv_for("getitem"), getitem_names,
                     sargs, 2, getitem_fn, NULL);
    Py_DECREF(sargs);
    if (node == NULL) {
        return NULL;
    }
    prev = stax_grad_enabled();
    stax_set_grad_enabled(0);
    res = orig_subscript(self, key);
    stax_set_grad_enabled(prev);
    if (res != NULL && has_float_output(res)) {
        StaxTensor *r = (StaxTensor *)res;
        int is_view = r->storage == ((StaxTensor *)self)->storage;
        if (attach_outputs(node, res, is_view) < 0) {
            Py_CLEAR(res);
        }
        else if (is_view) {
            set_view_base(node, self);
        }
    }
    Py_DECREF(node);
    return res;
}

/* 1 when slice s takes all of a dim of length len */
static int
full_slice(PyObject *s, int64_t len)
{
    Py_ssize_t start, stop, step;
    if (!PySlice_Check(s)) {
        return 0;
    }
    if (PySlice_Unpack(s, &start, &stop, &step) < 0) {
        PyErr_Clear();
        return 0;
    }
    PySlice_AdjustIndices((Py_ssize_t)len, &start, &stop, step);
    return start == 0 && stop == (Py_ssize_t)len && step == 1;
}

/* 1 when t[key] is t itself in torch's indexing (an Ellipsis, full
 * slices): no view is taken, so t[key] = v writes t directly */
static int
whole_key(StaxTensor *t, PyObject *key)
{
    PyObject *items = PyTuple_Check(key) ? key : NULL;
    Py_ssize_t n = items ? PyTuple_GET_SIZE(items) : 1, ell = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *k = items ? PyTuple_GET_ITEM(items, i) : key;
        if (k == Py_Ellipsis) {
            if (ell >= 0) {
                return 0;
            }
            ell = i;
        }
        else if (!PySlice_Check(k)) {
            return 0;
        }
    }
    if (n - (ell >= 0) > t->ndim) {
        return 0;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *k = items ? PyTuple_GET_ITEM(items, i) : key;
        Py_ssize_t d = ell < 0 || i < ell ? i : t->ndim - (n - i);
        if (k != Py_Ellipsis && !full_slice(k, t->sizes[d])) {
            return 0;
        }
    }
    return 1;
}

static int
ag_ass_subscript(PyObject *self, PyObject *key, PyObject *value)
{
    StaxTensor *t = (StaxTensor *)self, *vbase = NULL;
    PyObject *sargs;
    StaxGradNode *node;
    int prev, rc;
    if (value == NULL || !stax_grad_enabled()
        || !(wants_grad(self) || wants_grad(value))) {
        return orig_ass_subscript(self, key, value);
    }
    /* t[...] = v writes t itself; t[k] = v writes a view of t taken now */
    if (check_inplace_target(t, &vbase, !whole_key(t, key)) < 0
        || regen_views(value) < 0) {
        return -1;
    }
    sargs = PyTuple_Pack(3, self, key, value);
    if (sargs == NULL) {
        return -1;
    }
    node = make_node("index_put", stax_ag_deriv_for("setitem"), setitem_names,
                     sargs, 3, NULL, NULL);
    Py_DECREF(sargs);
    if (node == NULL) {
        return -1;
    }
    prev = stax_grad_enabled();
    stax_set_grad_enabled(0);
    rc = orig_ass_subscript(self, key, value);
    stax_set_grad_enabled(prev);
    snap_versions(node, t);
    if (rc == 0 && stax_dtype_is_floating(t->dtype)
        && (attach_outputs(node, self, 0) < 0
            || (vbase != NULL && rebase_view(t, vbase) < 0))) {
        rc = -1;
    }
    Py_DECREF(node);
    return rc;
}

/* t.__getitem__(k) / t.__setitem__(k, v) called by name: the type's dict
 * entries wrap the slots as they were at type creation */
static PyObject *
m_getitem(PyObject *self, PyObject *key)
{
    return ag_subscript(self, key);
}

static PyObject *
m_setitem(PyObject *self, PyObject *args)
{
    PyObject *k, *v;
    if (!PyArg_UnpackTuple(args, "__setitem__", 2, 2, &k, &v)
        || ag_ass_subscript(self, k, v) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyMethodDef index_defs[] = {
    {"__getitem__", m_getitem, METH_O | METH_COEXIST, "Return self[key]."},
    {"__setitem__", m_setitem, METH_VARARGS | METH_COEXIST,
     "Set self[key] to value."},
};

static int
wrap_indexing(void)
{
    PyMappingMethods *mp = StaxTensor_Type->tp_as_mapping;
    PyObject *op = PyImport_ImportModule("operator");
    if (op == NULL) {
        return -1;
    }
    getitem_fn = PyObject_GetAttrString(op, "getitem");
    Py_DECREF(op);
    getitem_names = Py_BuildValue("(ss)", "self", "index");
    setitem_names = Py_BuildValue("(sss)", "self", "index", "value");
    if (getitem_fn == NULL || getitem_names == NULL || setitem_names == NULL) {
        return -1;
    }
    if (mp == NULL || mp->mp_subscript == NULL
        || mp->mp_ass_subscript == NULL) {
        PyErr_SetString(PyExc_RuntimeError,
                        "autograd: Tensor has no mapping slots");
        return -1;
    }
    orig_subscript = mp->mp_subscript;
    orig_ass_subscript = mp->mp_ass_subscript;
    mp->mp_subscript = ag_subscript;
    mp->mp_ass_subscript = ag_ass_subscript;
    for (int i = 0; i < 2; i++) {
        PyObject *d = PyDescr_NewMethod(StaxTensor_Type, &index_defs[i]);
        if (d == NULL
            || PyDict_SetItemString(StaxTensor_Type->tp_dict,
                                    index_defs[i].ml_name, d) < 0) {
            Py_XDECREF(d);
            return -1;
        }
        Py_DECREF(d);
    }
    PyType_Modified(StaxTensor_Type);
    return 0;
}

int
stax_ag_record_init(PyObject *m)
{
    PyObject *tp;
    (void)m;
    sigs = PyMem_Calloc(STAX_OP_COUNT, sizeof(sig_t));
    if (sigs == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    tp = PyType_FromSpec(&wrap_spec);
    if (tp == NULL) {
        return -1;
    }
    WrapMethod_Type = (PyTypeObject *)tp;
    if (wrap_methods() < 0 || wrap_indexing() < 0) {
        return -1;
    }
    stax_ops_set_autograd_hook(hook);
    return 0;
}

int
stax_autograd_module_init(PyObject *m)
{
    if (stax_ag_node_init(m) < 0 || stax_ag_formulas_init() < 0
        || stax_ag_engine_init(m) < 0 || stax_ag_record_init(m) < 0
        || stax_ag_joint_init(m) < 0) {
        return -1;
    }
    return 0;
}
