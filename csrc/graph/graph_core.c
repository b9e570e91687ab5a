/* Graph (FX-style): node list, argument walking, unique names, insertion
 * points, erase, lint, regions(). Node lives in graph_node.c. */
#include "graph/graph_internal.h"
#include <string.h>
#include "structmember.h"

PyTypeObject *StaxNode_Type = NULL;
PyTypeObject *StaxGraph_Type = NULL;
static PyTypeObject *InsertPoint_Type = NULL;

static const char *op_names[] = {
    "placeholder", "get_attr", "call_function", "call_method",
    "call_module", "output",
};

const char *
stax_node_op_name(stax_node_op_t op)
{
    if ((int)op < 0 || (int)op > STAX_NODE_OUTPUT) {
        return "?";
    }
    return op_names[op];
}

int
stax_node_op_from_name(const char *s, stax_node_op_t *out)
{
    for (int i = 0; i <= STAX_NODE_OUTPUT; i++) {
        if (strcmp(s, op_names[i]) == 0) {
            *out = (stax_node_op_t)i;
            return 0;
        }
    }
    PyErr_Format(PyExc_ValueError, "unknown node opcode '%s'", s);
    return -1;
}

/* ------------------------------------------------------------------ */
/* argument walking                                                    */

int
stax_graph_collect_nodes(PyObject *obj, PyObject *out)
{
    if (StaxNode_Check(obj)) {
        return PyDict_SetItem(out, obj, Py_None);
    }
    if (PyTuple_Check(obj) || PyList_Check(obj)) {
        Py_ssize_t n = PySequence_Fast_GET_SIZE(obj);
        for (Py_ssize_t i = 0; i < n; i++) {
            if (stax_graph_collect_nodes(PySequence_Fast_GET_ITEM(obj, i),
                                         out) < 0) {
                return -1;
            }
        }
        return 0;
    }
    if (PyDict_Check(obj)) {
        Py_ssize_t pos = 0;
        PyObject *k, *v;
        while (PyDict_Next(obj, &pos, &k, &v)) {
            if (stax_graph_collect_nodes(v, out) < 0) {
                return -1;
            }
        }
        return 0;
    }
    if (PySlice_Check(obj)) {
        PySliceObject *s = (PySliceObject *)obj;
        if (stax_graph_collect_nodes(s->start, out) < 0
            || stax_graph_collect_nodes(s->stop, out) < 0
            || stax_graph_collect_nodes(s->step, out) < 0) {
            return -1;
        }
    }
    return 0;
}

PyObject *
stax_graph_map_leaves(PyObject *obj, int exact, stax_leaf_fn leaf, void *ctx)
{
    PyObject *r = leaf(obj, ctx);
    if (r != NULL || PyErr_Occurred()) {
        return r;
    }
    if (exact ? (PyTuple_CheckExact(obj) || PyList_CheckExact(obj))
              : (PyTuple_Check(obj) || PyList_Check(obj))) {
        Py_ssize_t n = PySequence_Fast_GET_SIZE(obj);
        PyObject *res = PyTuple_Check(obj) ? PyTuple_New(n) : PyList_New(n);
        if (res == NULL) {
            return NULL;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *v = stax_graph_map_leaves(
                PySequence_Fast_GET_ITEM(obj, i), exact, leaf, ctx);
            if (v == NULL) {
                Py_DECREF(res);
                return NULL;
            }
            if (PyTuple_Check(res)) {
                PyTuple_SET_ITEM(res, i, v);
            }
            else {
                PyList_SET_ITEM(res, i, v);
            }
        }
        return res;
    }
    if (exact ? PyDict_CheckExact(obj) : PyDict_Check(obj)) {
        PyObject *res = PyDict_New();
        Py_ssize_t pos = 0;
        PyObject *k, *v;
        if (res == NULL) {
            return NULL;
        }
        while (PyDict_Next(obj, &pos, &k, &v)) {
            PyObject *m = stax_graph_map_leaves(v, exact, leaf, ctx);
            if (m == NULL || PyDict_SetItem(res, k, m) < 0) {
                Py_XDECREF(m);
                Py_DECREF(res);
                return NULL;
            }
            Py_DECREF(m);
        }
        return res;
    }
    if (PySlice_Check(obj)) {
        PySliceObject *s = (PySliceObject *)obj;
        PyObject *a = stax_graph_map_leaves(s->start, exact, leaf, ctx);
        PyObject *b = a ? stax_graph_map_leaves(s->stop, exact, leaf, ctx)
                        : NULL;
        PyObject *c = b ? stax_graph_map_leaves(s->step, exact, leaf, ctx)
                        : NULL;
        PyObject *res = c ? PySlice_New(a, b, c) : NULL;
        Py_XDECREF(a);
        Py_XDECREF(b);
        Py_XDECREF(c);
        return res;
    }
    return Py_NewRef(obj);
}

typedef struct {
    PyObject *(*fn)(PyObject *, void *);
    void *ctx;
} node_map_ctx;

static PyObject *
node_leaf(PyObject *o, void *vctx)
{
    node_map_ctx *c = vctx;
    return StaxNode_Check(o) ? c->fn(o, c->ctx) : NULL;
}

PyObject *
stax_graph_map_arg(PyObject *obj, PyObject *(*fn)(PyObject *, void *),
                   void *ctx)
{
    node_map_ctx c = {fn, ctx};
    return stax_graph_map_leaves(obj, 0, node_leaf, &c);
}

PyObject *
stax_graph_input_set(PyObject *args, PyObject *kwargs)
{
    PyObject *s = PyDict_New();
    if (s == NULL) {
        return NULL;
    }
    if ((args && stax_graph_collect_nodes(args, s) < 0)
        || (kwargs && stax_graph_collect_nodes(kwargs, s) < 0)) {
        Py_DECREF(s);
        return NULL;
    }
    return s;
}

/* ------------------------------------------------------------------ */
/* names                                                               */

static PyObject *reserved_names = NULL;   /* set: builtins, keywords, ... */

static int
name_taken(StaxGraph *g, PyObject *name)
{
    int r = PySet_Contains(g->names, name);
    if (r != 0) {
        return r;
    }
    return PySet_Contains(reserved_names, name);
}

/* New reference: a sanitized identifier made from s. */
static PyObject *
sanitize(PyObject *s)
{
    Py_ssize_t n;
    const char *c = PyUnicode_AsUTF8AndSize(s, &n);
    char *buf;
    PyObject *res;
    Py_ssize_t j = 0;
    if (c == NULL) {
        return NULL;
    }
    buf = PyMem_Malloc(n + 2);
    if (buf == NULL) {
        return PyErr_NoMemory();
    }
    if (n == 0 || (c[0] >= '0' && c[0] <= '9')) {
        buf[j++] = '_';
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        char ch = c[i];
        int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z')
                 || (ch >= '0' && ch <= '9') || ch == '_';
        buf[j++] = ok ? ch : '_';
    }
    res = PyUnicode_FromStringAndSize(buf, j);
    PyMem_Free(buf);
    return res;
}

/* New reference: strip a trailing _<digits> (add_0 -> add). */
static PyObject *
strip_suffix(PyObject *s)
{
    Py_ssize_t n;
    const char *c = PyUnicode_AsUTF8AndSize(s, &n);
    Py_ssize_t i = n;
    if (c == NULL) {
        return NULL;
    }
    while (i > 0 && c[i - 1] >= '0' && c[i - 1] <= '9') {
        i--;
    }
    if (i < n && i > 1 && c[i - 1] == '_') {
        return PyUnicode_FromStringAndSize(c, i - 1);
    }
    return Py_NewRef(s);
}

/* New reference: a free name for hint; registers it in g->names. */
PyObject *
stax_graph_unique_name(StaxGraph *g, PyObject *hint)
{
    PyObject *base = NULL, *cand = NULL;
    int r;
    base = sanitize(hint);
    if (base == NULL) {
        return NULL;
    }
    r = name_taken(g, base);
    if (r < 0) {
        goto error;
    }
    if (r == 0) {
        cand = Py_NewRef(base);
    }
    else {
        PyObject *b2 = strip_suffix(base);
        if (b2 == NULL) {
            goto error;
        }
        Py_SETREF(base, b2);
        for (long i = 0;; i++) {
            cand = PyUnicode_FromFormat("%U_%ld", base, i);
            if (cand == NULL) {
                goto error;
            }
            r = name_taken(g, cand);
            if (r < 0) {
                goto error;
            }
            if (r == 0) {
                break;
            }
            Py_CLEAR(cand);
        }
    }
    if (PySet_Add(g->names, cand) < 0) {
        goto error;
    }
    Py_DECREF(base);
    return cand;
error:
    Py_XDECREF(base);
    Py_XDECREF(cand);
    return NULL;
}

/* New reference: base name of a node from its opcode and target. */
static PyObject *
name_hint(stax_node_op_t op, PyObject *target)
{
    if (op == STAX_NODE_OUTPUT) {
        return PyUnicode_FromString("output");
    }
    if (PyUnicode_Check(target)) {
        /* get_attr "a.b" -> a_b (sanitize) */
        return Py_NewRef(target);
    }
    PyObject *nm = PyObject_GetAttrString(target, "__name__");
    if (nm != NULL && PyUnicode_Check(nm)) {
        return nm;
    }
    Py_XDECREF(nm);
    PyErr_Clear();
    return PyUnicode_FromString(Py_TYPE(target)->tp_name);
}

/* ------------------------------------------------------------------ */
/* Graph                                                               */

PyObject *
stax_graph_node_list(PyObject *graph)
{
    if (!StaxGraph_Check(graph)) {
        PyErr_SetString(PyExc_TypeError, "expected a Graph");
        return NULL;
    }
    return PyList_GetSlice(((StaxGraph *)graph)->nodes, 0, PY_SSIZE_T_MAX);
}

static PyObject *
graph_alloc(PyTypeObject *tp, PyObject *args, PyObject *kwds)
{
    StaxGraph *g = (StaxGraph *)tp->tp_alloc(tp, 0);
    if (g == NULL) {
        return NULL;
    }
    g->nodes = PyList_New(0);
    g->names = PySet_New(NULL);
    g->insert_node = NULL;
    g->insert_mode = 0;
    g->version = 0;
    if (g->nodes == NULL || g->names == NULL) {
        Py_DECREF(g);
        return NULL;
    }
    return (PyObject *)g;
}

PyObject *
stax_graph_new(void)
{
    return graph_alloc(StaxGraph_Type, NULL, NULL);
}

static void
detach_nodes(StaxGraph *g)
{
    if (g->nodes == NULL) {
        return;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(g->nodes); i++) {
        StaxNode *n = (StaxNode *)PyList_GET_ITEM(g->nodes, i);
        if (n->graph == g) {
            n->graph = NULL;
        }
    }
}

static int
graph_traverse(StaxGraph *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->nodes);
    Py_VISIT(self->names);
    Py_VISIT(self->insert_node);
    return 0;
}

static int
graph_clear(StaxGraph *self)
{
    detach_nodes(self);
    Py_CLEAR(self->nodes);
    Py_CLEAR(self->names);
    Py_CLEAR(self->insert_node);
    return 0;
}

static void
graph_dealloc(StaxGraph *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    if (self->weakreflist) {
        PyObject_ClearWeakRefs((PyObject *)self);
    }
    graph_clear(self);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static int
insert_node_at(StaxGraph *g, PyObject *n)
{
    Py_ssize_t idx = PyList_GET_SIZE(g->nodes);
    if (g->insert_mode != 0 && g->insert_node != NULL) {
        Py_ssize_t a = stax_graph_index(g, g->insert_node);
        if (a >= 0) {
            idx = g->insert_mode == 1 ? a : a + 1;
        }
        else if (g->insert_mode == 1) {
            idx = PyList_GET_SIZE(g->nodes);
        }
    }
    else if (g->insert_mode == 1) {
        idx = 0;     /* inserting_before(None): at the start */
    }
    if (PyList_Insert(g->nodes, idx, n) < 0) {
        return -1;
    }
    if (g->insert_mode == 2) {
        /* keep creation order: the next node goes after this one */
        Py_XSETREF(g->insert_node, Py_NewRef(n));
    }
    return 0;
}

StaxNode *
stax_graph_create_node(StaxGraph *g, stax_node_op_t op, PyObject *target,
                       PyObject *args, PyObject *kwargs, PyObject *name)
{
    StaxNode *n = NULL;
    PyObject *hint = NULL, *empty_a = NULL, *empty_k = NULL;
    n = (StaxNode *)stax_graph_node_new_raw();
    if (n == NULL) {
        return NULL;
    }
    n->op = op;
    n->target = Py_NewRef(target);
    n->args = PyTuple_New(0);
    n->kwargs = PyDict_New();
    if (n->args == NULL || n->kwargs == NULL) {
        goto error;
    }
    if (stax_node_set_args(n, args ? args : n->args,
                           kwargs ? kwargs : n->kwargs) < 0) {
        goto error;
    }
    hint = name ? Py_NewRef(name) : name_hint(op, target);
    if (hint == NULL) {
        goto error;
    }
    n->name = stax_graph_unique_name(g, hint);
    if (n->name == NULL) {
        goto error;
    }
    if (insert_node_at(g, (PyObject *)n) < 0) {
        PySet_Discard(g->names, n->name);
        goto error;
    }
    n->graph = g;
    g->version++;
    Py_DECREF(hint);
    return n;
error:
    if (n->args) {
        /* drop the users links made by set_args */
        PyObject *e = PyTuple_New(0), *d = PyDict_New();
        if (e && d) {
            PyObject *et, *ev, *tb;
            PyErr_Fetch(&et, &ev, &tb);
            stax_node_set_args(n, e, d);
            PyErr_Restore(et, ev, tb);
        }
        Py_XDECREF(e);
        Py_XDECREF(d);
    }
    Py_XDECREF(hint);
    Py_XDECREF(empty_a);
    Py_XDECREF(empty_k);
    Py_DECREF(n);
    return NULL;
}

int
stax_graph_erase_node(StaxGraph *g, StaxNode *n)
{
    Py_ssize_t i;
    PyObject *e = NULL, *d = NULL;
    if (n->graph != g) {
        PyErr_Format(PyExc_RuntimeError,
                     "erase_node: node %S is not in this graph", n->name);
        return -1;
    }
    if (PyDict_GET_SIZE(n->users) > 0) {
        PyErr_Format(PyExc_RuntimeError,
                     "erase_node: node %S still has %zd users", n->name,
                     PyDict_GET_SIZE(n->users));
        return -1;
    }
    i = stax_graph_index(g, (PyObject *)n);
    if (i < 0) {
        PyErr_SetString(PyExc_RuntimeError, "erase_node: node not listed");
        return -1;
    }
    /* drop the links to its inputs, keep its args for inspection */
    {
        PyObject *s = stax_graph_input_set(n->args, n->kwargs);
        PyObject *k, *v;
        Py_ssize_t pos = 0;
        if (s == NULL) {
            return -1;
        }
        while (PyDict_Next(s, &pos, &k, &v)) {
            if (PyDict_DelItem(((StaxNode *)k)->users, (PyObject *)n) < 0) {
                PyErr_Clear();
            }
        }
        Py_DECREF(s);
    }
    if (g->insert_node == (PyObject *)n) {
        /* moving anchor: keep the position */
        if (g->insert_mode == 2 && i > 0) {
            Py_SETREF(g->insert_node,
                      Py_NewRef(PyList_GET_ITEM(g->nodes, i - 1)));
        }
        else if (i + 1 < PyList_GET_SIZE(g->nodes)) {
            Py_SETREF(g->insert_node,
                      Py_NewRef(PyList_GET_ITEM(g->nodes, i + 1)));
            g->insert_mode = 1;
        }
        else {
            Py_CLEAR(g->insert_node);
            g->insert_mode = 0;
        }
    }
    if (PySet_Discard(g->names, n->name) < 0) {
        return -1;
    }
    n->graph = NULL;
    Py_INCREF(n);
    if (PySequence_DelItem(g->nodes, i) < 0) {
        Py_DECREF(n);
        return -1;
    }
    Py_DECREF(n);
    g->version++;
    (void)e;
    (void)d;
    return 0;
}

/* -- Python API ------------------------------------------------------ */

static PyObject *
graph_get_nodes(StaxGraph *self, void *c)
{
    return PyList_GetSlice(self->nodes, 0, PY_SSIZE_T_MAX);
}

StaxNode *
stax_graph_insert_before(StaxGraph *g, StaxNode *before, stax_node_op_t op,
                         PyObject *target, PyObject *args, PyObject *kwargs,
                         PyObject *name)
{
    PyObject *prev_node;
    int prev_mode;
    StaxNode *n;
    if (before == NULL) {
        return stax_graph_create_node(g, op, target, args, kwargs, name);
    }
    prev_node = g->insert_node;      /* the reference moves to us */
    prev_mode = g->insert_mode;
    g->insert_node = Py_NewRef((PyObject *)before);
    g->insert_mode = 1;
    n = stax_graph_create_node(g, op, target, args, kwargs, name);
    Py_XSETREF(g->insert_node, prev_node);
    g->insert_mode = prev_mode;
    return n;
}

static PyObject *
graph_create_node_impl(StaxGraph *self, stax_node_op_t op, PyObject *target,
                       PyObject *args, PyObject *kwargs, PyObject *name)
{
    PyObject *a = NULL;
    StaxNode *n;
    if (args == Py_None) {
        args = NULL;
    }
    if (kwargs == Py_None) {
        kwargs = NULL;
    }
    if (name == Py_None) {
        name = NULL;
    }
    if (args != NULL && !PyTuple_Check(args)) {
        a = PySequence_Tuple(args);
        if (a == NULL) {
            return NULL;
        }
        args = a;
    }
    if (kwargs != NULL && !PyDict_Check(kwargs)) {
        PyErr_SetString(PyExc_TypeError, "kwargs must be a dict");
        Py_XDECREF(a);
        return NULL;
    }
    if (name != NULL && !PyUnicode_Check(name)) {
        PyErr_SetString(PyExc_TypeError, "name must be a str");
        Py_XDECREF(a);
        return NULL;
    }
    n = stax_graph_create_node(self, op, target, args, kwargs, name);
    Py_XDECREF(a);
    return (PyObject *)n;
}

static PyObject *
graph_create_node(StaxGraph *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"op", "target", "args", "kwargs", "name",
                             "type_expr", NULL};
    const char *ops;
    PyObject *target, *a = NULL, *kw = NULL, *name = NULL, *te = NULL;
    stax_node_op_t op;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "sO|OOOO", kwlist, &ops,
                                     &target, &a, &kw, &name, &te)) {
        return NULL;
    }
    if (stax_node_op_from_name(ops, &op) < 0) {
        return NULL;
    }
    return graph_create_node_impl(self, op, target, a, kw, name);
}

static PyObject *
graph_call_kind(StaxGraph *self, PyObject *args, PyObject *kwds,
                stax_node_op_t op, const char *tname)
{
    char *kwlist[] = {(char *)tname, "args", "kwargs", "type_expr", "name",
                      NULL};
    PyObject *target, *a = NULL, *kw = NULL, *te = NULL, *name = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|OOOO", kwlist, &target,
                                     &a, &kw, &te, &name)) {
        return NULL;
    }
    return graph_create_node_impl(self, op, target, a, kw, name);
}

static PyObject *
graph_call_function(StaxGraph *self, PyObject *args, PyObject *kwds)
{
    return graph_call_kind(self, args, kwds, STAX_NODE_CALL_FUNCTION,
                           "the_function");
}

static PyObject *
graph_call_method(StaxGraph *self, PyObject *args, PyObject *kwds)
{
    return graph_call_kind(self, args, kwds, STAX_NODE_CALL_METHOD,
                           "method_name");
}

static PyObject *
graph_call_module(StaxGraph *self, PyObject *args, PyObject *kwds)
{
    return graph_call_kind(self, args, kwds, STAX_NODE_CALL_MODULE,
                           "module_name");
}

static PyObject *
graph_placeholder(StaxGraph *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"name", "type_expr", "default_value", NULL};
    PyObject *name, *te = NULL, *dv = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "U|OO", kwlist, &name, &te,
                                     &dv)) {
        return NULL;
    }
    StaxNode *n = stax_graph_create_node(self, STAX_NODE_PLACEHOLDER, name,
                                         NULL, NULL, name);
    if (n == NULL) {
        return NULL;
    }
    /* the target follows the (unique) name, as in Listing 3.1 */
    Py_SETREF(n->target, Py_NewRef(n->name));
    return (PyObject *)n;
}

static PyObject *
graph_get_attr(StaxGraph *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"qualified_name", "type_expr", NULL};
    PyObject *name, *te = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "U|O", kwlist, &name, &te)) {
        return NULL;
    }
    return (PyObject *)stax_graph_create_node(self, STAX_NODE_GET_ATTR, name,
                                              NULL, NULL, NULL);
}

static PyObject *
graph_output(StaxGraph *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"result", "type_expr", NULL};
    PyObject *res, *te = NULL, *a, *tgt;
    StaxNode *n;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|O", kwlist, &res, &te)) {
        return NULL;
    }
    a = PyTuple_Pack(1, res);
    if (a == NULL) {
        return NULL;
    }
    tgt = PyUnicode_InternFromString("output");
    n = tgt ? stax_graph_create_node(self, STAX_NODE_OUTPUT, tgt, a, NULL,
                                     NULL)
            : NULL;
    Py_XDECREF(tgt);
    Py_DECREF(a);
    return (PyObject *)n;
}

static PyObject *
graph_erase_node(StaxGraph *self, PyObject *n)
{
    if (!StaxNode_Check(n)) {
        PyErr_SetString(PyExc_TypeError, "erase_node expects a Node");
        return NULL;
    }
    if (stax_graph_erase_node(self, (StaxNode *)n) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

/* insertion point context manager */
typedef struct {
    PyObject_HEAD
    StaxGraph *graph;
    PyObject *prev_node;
    int prev_mode;
} InsertPoint;

static int
ip_traverse(InsertPoint *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->graph);
    Py_VISIT(self->prev_node);
    return 0;
}

static int
ip_clear(InsertPoint *self)
{
    Py_CLEAR(self->graph);
    Py_CLEAR(self->prev_node);
    return 0;
}

static void
ip_dealloc(InsertPoint *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    ip_clear(self);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyObject *
ip_enter(InsertPoint *self, PyObject *unused)
{
    return Py_NewRef(self);
}

static PyObject *
ip_exit(InsertPoint *self, PyObject *args)
{
    StaxGraph *g = self->graph;
    if (g != NULL) {
        Py_XSETREF(g->insert_node, Py_XNewRef(self->prev_node));
        g->insert_mode = self->prev_mode;
    }
    Py_RETURN_FALSE;
}

static PyMethodDef ip_methods[] = {
    {"__enter__", (PyCFunction)ip_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)ip_exit, METH_VARARGS, NULL},
    {NULL},
};

static PyType_Slot ip_slots[] = {
    {Py_tp_dealloc, ip_dealloc},
    {Py_tp_traverse, ip_traverse},
    {Py_tp_clear, ip_clear},
    {Py_tp_methods, ip_methods},
    {0, NULL},
};

static PyType_Spec ip_spec = {
    .name = "tensorplay._C._InsertPoint",
    .basicsize = sizeof(InsertPoint),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .slots = ip_slots,
};

static PyObject *
graph_inserting(StaxGraph *self, PyObject *args, int mode)
{
    PyObject *n = Py_None;
    InsertPoint *ip;
    if (!PyArg_ParseTuple(args, "|O", &n)) {
        return NULL;
    }
    if (n != Py_None && !StaxNode_Check(n)) {
        PyErr_SetString(PyExc_TypeError, "expected a Node or None");
        return NULL;
    }
    ip = PyObject_GC_New(InsertPoint, InsertPoint_Type);
    if (ip == NULL) {
        return NULL;
    }
    ip->graph = (StaxGraph *)Py_NewRef(self);
    ip->prev_node = Py_XNewRef(self->insert_node);
    ip->prev_mode = self->insert_mode;
    PyObject_GC_Track(ip);
    if (n == Py_None) {
        Py_CLEAR(self->insert_node);
        self->insert_mode = mode == 1 ? 1 : 0;   /* before None = start */
    }
    else {
        Py_XSETREF(self->insert_node, Py_NewRef(n));
        self->insert_mode = mode;
    }
    return (PyObject *)ip;
}

static PyObject *
graph_inserting_before(StaxGraph *self, PyObject *args)
{
    return graph_inserting(self, args, 1);
}

static PyObject *
graph_inserting_after(StaxGraph *self, PyObject *args)
{
    return graph_inserting(self, args, 2);
}

typedef struct {
    PyObject *fn;   /* callable node -> value, or a dict */
} copy_ctx;

static PyObject *
copy_map_fn(PyObject *node, void *vctx)
{
    copy_ctx *c = vctx;
    if (PyDict_Check(c->fn)) {
        PyObject *v = PyDict_GetItemWithError(c->fn, node);
        if (v == NULL) {
            if (!PyErr_Occurred()) {
                PyErr_Format(PyExc_KeyError,
                             "node_copy: no value for input %S", node);
            }
            return NULL;
        }
        return Py_NewRef(v);
    }
    return PyObject_CallOneArg(c->fn, node);
}

static PyObject *
graph_node_copy(StaxGraph *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"node", "arg_transform", NULL};
    PyObject *node, *fn = Py_None, *a = NULL, *kw = NULL, *meta = NULL;
    StaxNode *src, *n = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!|O", kwlist,
                                     StaxNode_Type, &node, &fn)) {
        return NULL;
    }
    src = (StaxNode *)node;
    if (fn == Py_None) {
        a = Py_NewRef(src->args);
        kw = Py_NewRef(src->kwargs);
    }
    else {
        copy_ctx c = {fn};
        a = stax_graph_map_arg(src->args, copy_map_fn, &c);
        kw = a ? stax_graph_map_arg(src->kwargs, copy_map_fn, &c) : NULL;
        if (kw == NULL) {
            goto done;
        }
    }
    n = stax_graph_create_node(self, src->op, src->target, a, kw, src->name);
    if (n == NULL) {
        goto done;
    }
    if (src->op == STAX_NODE_PLACEHOLDER) {
        Py_SETREF(n->target, Py_NewRef(n->name));
    }
    meta = PyDict_Copy(src->meta);
    if (meta == NULL) {
        Py_CLEAR(n);
        goto done;
    }
    Py_SETREF(n->meta, meta);
done:
    Py_XDECREF(a);
    Py_XDECREF(kw);
    return (PyObject *)n;
}

int
stax_graph_lint(StaxGraph *g)
{
    PyObject *seen = PyDict_New(), *names = PySet_New(NULL), *ins = NULL;
    Py_ssize_t n = PyList_GET_SIZE(g->nodes);
    int rc = -1;
    if (seen == NULL || names == NULL) {
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        StaxNode *nd = (StaxNode *)PyList_GET_ITEM(g->nodes, i);
        PyObject *k, *v;
        Py_ssize_t pos = 0;
        int r;
        if (nd->graph != g) {
            PyErr_Format(PyExc_RuntimeError,
                         "lint: node %S does not belong to this graph",
                         nd->name);
            goto done;
        }
        r = PySet_Contains(names, nd->name);
        if (r != 0) {
            if (r > 0) {
                PyErr_Format(PyExc_RuntimeError,
                             "lint: name %S is used twice", nd->name);
            }
            goto done;
        }
        if (PySet_Add(names, nd->name) < 0) {
            goto done;
        }
        if (nd->op == STAX_NODE_OUTPUT && i != n - 1) {
            PyErr_Format(PyExc_RuntimeError,
                         "lint: output node %S is not last", nd->name);
            goto done;
        }
        Py_XSETREF(ins, stax_graph_input_set(nd->args, nd->kwargs));
        if (ins == NULL) {
            goto done;
        }
        while (PyDict_Next(ins, &pos, &k, &v)) {
            StaxNode *in = (StaxNode *)k;
            r = PyDict_Contains(seen, k);
            if (r <= 0) {
                if (r == 0) {
                    PyErr_Format(PyExc_RuntimeError,
                                 "lint: node %S uses %S, which is not "
                                 "defined before it in this graph "
                                 "(topological order)", nd->name, in->name);
                }
                goto done;
            }
            r = PyDict_Contains(in->users, (PyObject *)nd);
            if (r <= 0) {
                if (r == 0) {
                    PyErr_Format(PyExc_RuntimeError,
                                 "lint: %S uses %S but is not in its users",
                                 nd->name, in->name);
                }
                goto done;
            }
        }
        pos = 0;
        while (PyDict_Next(nd->users, &pos, &k, &v)) {
            StaxNode *u = (StaxNode *)k;
            PyObject *uin;
            if (u->graph != g) {
                PyErr_Format(PyExc_RuntimeError,
                             "lint: user %S of %S is not in this graph",
                             u->name, nd->name);
                goto done;
            }
            uin = stax_graph_input_set(u->args, u->kwargs);
            if (uin == NULL) {
                goto done;
            }
            r = PyDict_Contains(uin, (PyObject *)nd);
            Py_DECREF(uin);
            if (r <= 0) {
                if (r == 0) {
                    PyErr_Format(PyExc_RuntimeError,
                                 "lint: %S lists user %S, which does not "
                                 "use it", nd->name, u->name);
                }
                goto done;
            }
        }
        if (PyDict_SetItem(seen, (PyObject *)nd, Py_None) < 0) {
            goto done;
        }
    }
    rc = 0;
done:
    Py_XDECREF(seen);
    Py_XDECREF(names);
    Py_XDECREF(ins);
    return rc;
}

static PyObject *
graph_lint_py(StaxGraph *self, PyObject *unused)
{
    if (stax_graph_lint(self) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
graph_regions(StaxGraph *self, PyObject *unused)
{
    PyObject *res = PyList_New(0);
    if (res == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(self->nodes); i++) {
        StaxNode *n = (StaxNode *)PyList_GET_ITEM(self->nodes, i);
        PyObject *reg, *kind = Py_None, *rid = Py_None, *t;
        if (n->op == STAX_NODE_PLACEHOLDER || n->op == STAX_NODE_OUTPUT
            || n->op == STAX_NODE_GET_ATTR) {
            continue;
        }
        reg = PyDict_GetItemString(n->meta, "region");
        if (reg != NULL && reg != Py_None) {
            if (PyTuple_Check(reg) && PyTuple_GET_SIZE(reg) == 2) {
                kind = PyTuple_GET_ITEM(reg, 0);
                rid = PyTuple_GET_ITEM(reg, 1);
            }
            else {
                PyObject *k = PyDict_GetItemString(n->meta, "region_kind");
                kind = k ? k : NULL;
                rid = reg;
            }
        }
        if (kind == NULL) {
            t = Py_BuildValue("(OsO)", n->name, "pointwise", rid);
        }
        else {
            t = PyTuple_Pack(3, n->name, kind, rid);
        }
        if (t == NULL || PyList_Append(res, t) < 0) {
            Py_XDECREF(t);
            Py_DECREF(res);
            return NULL;
        }
        Py_DECREF(t);
    }
    return res;
}

static PyObject *
graph_find_nodes(StaxGraph *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"op", "target", NULL};
    const char *ops = NULL;
    PyObject *target = NULL, *res;
    stax_node_op_t op = STAX_NODE_PLACEHOLDER;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|$zO", kwlist, &ops,
                                     &target)) {
        return NULL;
    }
    if (ops && stax_node_op_from_name(ops, &op) < 0) {
        return NULL;
    }
    res = PyList_New(0);
    if (res == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(self->nodes); i++) {
        StaxNode *n = (StaxNode *)PyList_GET_ITEM(self->nodes, i);
        if (ops && n->op != op) {
            continue;
        }
        if (target) {
            int r = PyObject_RichCompareBool(n->target, target, Py_EQ);
            if (r < 0) {
                Py_DECREF(res);
                return NULL;
            }
            if (!r) {
                continue;
            }
        }
        if (PyList_Append(res, (PyObject *)n) < 0) {
            Py_DECREF(res);
            return NULL;
        }
    }
    return res;
}

static PyObject *
graph_str(StaxGraph *self)
{
    return stax_graph_str(self);
}

static PyObject *
graph_python_code(StaxGraph *self, PyObject *unused)
{
    PyObject *g = PyDict_New(), *src;
    if (g == NULL) {
        return NULL;
    }
    src = stax_graph_codegen(self, g);
    Py_DECREF(g);
    return src;
}

static PyObject *
graph_get_version(StaxGraph *self, void *c)
{
    return PyLong_FromUnsignedLongLong(self->version);
}

static PyObject *
graph_output_node(StaxGraph *self, PyObject *unused)
{
    Py_ssize_t n = PyList_GET_SIZE(self->nodes);
    if (n > 0) {
        StaxNode *last = (StaxNode *)PyList_GET_ITEM(self->nodes, n - 1);
        if (last->op == STAX_NODE_OUTPUT) {
            return Py_NewRef(last);
        }
    }
    Py_RETURN_NONE;
}

static PyMethodDef graph_methods[] = {
    {"create_node", (PyCFunction)(void (*)(void))graph_create_node,
     METH_VARARGS | METH_KEYWORDS,
     "create_node(op, target, args=(), kwargs=None, name=None)"},
    {"call_function", (PyCFunction)(void (*)(void))graph_call_function,
     METH_VARARGS | METH_KEYWORDS, NULL},
    {"call_method", (PyCFunction)(void (*)(void))graph_call_method,
     METH_VARARGS | METH_KEYWORDS, NULL},
    {"call_module", (PyCFunction)(void (*)(void))graph_call_module,
     METH_VARARGS | METH_KEYWORDS, NULL},
    {"placeholder", (PyCFunction)(void (*)(void))graph_placeholder,
     METH_VARARGS | METH_KEYWORDS, NULL},
    {"get_attr", (PyCFunction)(void (*)(void))graph_get_attr,
     METH_VARARGS | METH_KEYWORDS, NULL},
    {"output", (PyCFunction)(void (*)(void))graph_output,
     METH_VARARGS | METH_KEYWORDS, NULL},
    {"erase_node", (PyCFunction)graph_erase_node, METH_O, NULL},
    {"inserting_before", (PyCFunction)graph_inserting_before, METH_VARARGS,
     "Context manager: new nodes go before n (None: at the start)."},
    {"inserting_after", (PyCFunction)graph_inserting_after, METH_VARARGS,
     "Context manager: new nodes go after n, in creation order (None: at "
     "the end)."},
    {"node_copy", (PyCFunction)(void (*)(void))graph_node_copy,
     METH_VARARGS | METH_KEYWORDS,
     "node_copy(node, arg_transform=None): arg_transform maps input nodes "
     "(a callable or a dict)."},
    {"lint", (PyCFunction)graph_lint_py, METH_NOARGS,
     "Check topological order, users consistency, unique names."},
    {"regions", (PyCFunction)graph_regions, METH_NOARGS,
     "[(name, 'pointwise' or None, region id or None)] from meta['region']."},
    {"find_nodes", (PyCFunction)(void (*)(void))graph_find_nodes,
     METH_VARARGS | METH_KEYWORDS, NULL},
    {"python_code", (PyCFunction)graph_python_code, METH_NOARGS,
     "Source of forward(self, ...)."},
    {"output_node", (PyCFunction)graph_output_node, METH_NOARGS, NULL},
    {NULL},
};

static PyGetSetDef graph_getset[] = {
    {"nodes", (getter)graph_get_nodes, NULL,
     "list of nodes in order (a copy)", NULL},
    {"_version", (getter)graph_get_version, NULL, NULL, NULL},
    {NULL},
};

static PyMemberDef graph_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(StaxGraph, weakreflist),
     READONLY},
    {NULL},
};

static PyType_Slot graph_slots[] = {
    {Py_tp_new, graph_alloc},
    {Py_tp_dealloc, graph_dealloc},
    {Py_tp_traverse, graph_traverse},
    {Py_tp_clear, graph_clear},
    {Py_tp_str, graph_str},
    {Py_tp_methods, graph_methods},
    {Py_tp_getset, graph_getset},
    {Py_tp_members, graph_members},
    {Py_tp_doc, "A computation graph (torch.fx style)."},
    {0, NULL},
};

static PyType_Spec graph_spec = {
    .name = "tensorplay._C.Graph",
    .basicsize = sizeof(StaxGraph),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_BASETYPE,
    .slots = graph_slots,
};

static int
init_reserved(void)
{
    PyObject *b = NULL, *kw = NULL, *kwl = NULL;
    const char *extra[] = {"self", "operator", "tensorplay", "torch",
                           "math", "inf", "nan", NULL};
    reserved_names = PySet_New(NULL);
    if (reserved_names == NULL) {
        return -1;
    }
    b = PyImport_ImportModule("builtins");
    if (b == NULL) {
        return -1;
    }
    {
        PyObject *d = PyModule_GetDict(b);
        PyObject *k, *v;
        Py_ssize_t pos = 0;
        while (PyDict_Next(d, &pos, &k, &v)) {
            if (PySet_Add(reserved_names, k) < 0) {
                goto error;
            }
        }
    }
    kw = PyImport_ImportModule("keyword");
    if (kw == NULL) {
        goto error;
    }
    kwl = PyObject_GetAttrString(kw, "kwlist");
    if (kwl == NULL || !PyList_Check(kwl)) {
        goto error;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(kwl); i++) {
        if (PySet_Add(reserved_names, PyList_GET_ITEM(kwl, i)) < 0) {
            goto error;
        }
    }
    for (int i = 0; extra[i]; i++) {
        PyObject *s = PyUnicode_FromString(extra[i]);
        if (s == NULL || PySet_Add(reserved_names, s) < 0) {
            Py_XDECREF(s);
            goto error;
        }
        Py_DECREF(s);
    }
    Py_DECREF(b);
    Py_DECREF(kw);
    Py_DECREF(kwl);
    return 0;
error:
    Py_XDECREF(b);
    Py_XDECREF(kw);
    Py_XDECREF(kwl);
    return -1;
}

int
stax_graph_core_init(PyObject *m)
{
    if (init_reserved() < 0) {
        return -1;
    }
    StaxNode_Type = (PyTypeObject *)PyType_FromSpec(&stax_graph_node_spec);
    StaxGraph_Type = (PyTypeObject *)PyType_FromSpec(&graph_spec);
    InsertPoint_Type = (PyTypeObject *)PyType_FromSpec(&ip_spec);
    if (StaxNode_Type == NULL || StaxGraph_Type == NULL
        || InsertPoint_Type == NULL) {
        return -1;
    }
    if (PyModule_AddObjectRef(m, "Node", (PyObject *)StaxNode_Type) < 0
        || PyModule_AddObjectRef(m, "Graph", (PyObject *)StaxGraph_Type) < 0) {
        return -1;
    }
    if (stax_graph_print_init(m) < 0 || stax_graph_gm_init(m) < 0) {
        return -1;
    }
    return 0;
}
