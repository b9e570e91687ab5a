/* Node (FX-style): fields, users kept up to date when args change,
 * replace_all_uses_with, the Python attributes. */
#include "graph/graph_internal.h"
#include <string.h>

/* ------------------------------------------------------------------ */
/* Node                                                                */

static int
node_traverse(StaxNode *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->name);
    Py_VISIT(self->target);
    Py_VISIT(self->args);
    Py_VISIT(self->kwargs);
    Py_VISIT(self->users);
    Py_VISIT(self->meta);
    return 0;
}

static int
node_clear(StaxNode *self)
{
    Py_CLEAR(self->name);
    Py_CLEAR(self->target);
    Py_CLEAR(self->args);
    Py_CLEAR(self->kwargs);
    Py_CLEAR(self->users);
    Py_CLEAR(self->meta);
    return 0;
}

static void
node_dealloc(StaxNode *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    node_clear(self);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

PyObject *
stax_graph_node_new_raw(void)
{
    StaxNode *n = PyObject_GC_New(StaxNode, StaxNode_Type);
    if (n == NULL) {
        return NULL;
    }
    n->op = STAX_NODE_CALL_FUNCTION;
    n->name = NULL;
    n->target = NULL;
    n->args = NULL;
    n->kwargs = NULL;
    n->graph = NULL;
    n->users = PyDict_New();
    n->meta = PyDict_New();
    PyObject_GC_Track(n);
    if (n->users == NULL || n->meta == NULL) {
        Py_DECREF(n);
        return NULL;
    }
    return (PyObject *)n;
}

static PyObject *
node_repr(StaxNode *self)
{
    if (self->name == NULL) {
        return PyUnicode_FromString("<cleared node>");
    }
    return Py_NewRef(self->name);
}

static void
bump(StaxNode *n)
{
    if (n->graph) {
        n->graph->version++;
    }
}

int
stax_node_set_args(StaxNode *n, PyObject *args, PyObject *kwargs)
{
    PyObject *olds = NULL, *news = NULL, *a = NULL, *kw = NULL;
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    int rc = -1;
    if (args == NULL) {
        a = Py_NewRef(n->args);
    }
    else if (PyTuple_Check(args)) {
        a = Py_NewRef(args);
    }
    else {
        a = PySequence_Tuple(args);
        if (a == NULL) {
            goto done;
        }
    }
    if (kwargs == NULL) {
        kw = Py_NewRef(n->kwargs);
    }
    else if (PyDict_Check(kwargs)) {
        kw = PyDict_Copy(kwargs);
        if (kw == NULL) {
            goto done;
        }
    }
    else {
        PyErr_SetString(PyExc_TypeError, "node kwargs must be a dict");
        goto done;
    }
    olds = stax_graph_input_set(n->args, n->kwargs);
    news = stax_graph_input_set(a, kw);
    if (olds == NULL || news == NULL) {
        goto done;
    }
    while (PyDict_Next(olds, &pos, &k, &v)) {
        int r = PyDict_Contains(news, k);
        if (r < 0) {
            goto done;
        }
        if (r == 0 && PyDict_DelItem(((StaxNode *)k)->users,
                                     (PyObject *)n) < 0) {
            PyErr_Clear();
        }
    }
    pos = 0;
    while (PyDict_Next(news, &pos, &k, &v)) {
        if (PyDict_SetItem(((StaxNode *)k)->users, (PyObject *)n,
                           Py_None) < 0) {
            goto done;
        }
    }
    Py_XSETREF(n->args, a);
    a = NULL;
    Py_XSETREF(n->kwargs, kw);
    kw = NULL;
    bump(n);
    rc = 0;
done:
    Py_XDECREF(olds);
    Py_XDECREF(news);
    Py_XDECREF(a);
    Py_XDECREF(kw);
    return rc;
}

typedef struct {
    PyObject *old;
    PyObject *repl;
} replace_ctx;

static PyObject *
replace_fn(PyObject *node, void *vctx)
{
    replace_ctx *c = vctx;
    return Py_NewRef(node == c->old ? c->repl : node);
}

static int
node_replace_input(StaxNode *user, PyObject *old, PyObject *repl)
{
    replace_ctx c = {old, repl};
    PyObject *a = stax_graph_map_arg(user->args, replace_fn, &c);
    PyObject *kw = a ? stax_graph_map_arg(user->kwargs, replace_fn, &c)
                     : NULL;
    int rc = kw ? stax_node_set_args(user, a, kw) : -1;
    Py_XDECREF(a);
    Py_XDECREF(kw);
    return rc;
}

int
stax_node_replace_all_uses_with(StaxNode *n, PyObject *repl)
{
    PyObject *users = PyDict_Keys(n->users);
    if (users == NULL) {
        return -1;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(users); i++) {
        StaxNode *u = (StaxNode *)PyList_GET_ITEM(users, i);
        if ((PyObject *)u == repl) {
            continue;
        }
        if (node_replace_input(u, (PyObject *)n, repl) < 0) {
            Py_DECREF(users);
            return -1;
        }
    }
    Py_DECREF(users);
    return 0;
}

static PyObject *
node_get_op(StaxNode *self, void *c)
{
    return PyUnicode_FromString(stax_node_op_name(self->op));
}

static PyObject *
node_get_args(StaxNode *self, void *c)
{
    return Py_NewRef(self->args);
}

static int
node_set_args_attr(StaxNode *self, PyObject *v, void *c)
{
    if (v == NULL) {
        PyErr_SetString(PyExc_AttributeError, "cannot delete args");
        return -1;
    }
    return stax_node_set_args(self, v, NULL);
}

static PyObject *
node_get_kwargs(StaxNode *self, void *c)
{
    return Py_NewRef(self->kwargs);
}

static int
node_set_kwargs_attr(StaxNode *self, PyObject *v, void *c)
{
    if (v == NULL) {
        PyErr_SetString(PyExc_AttributeError, "cannot delete kwargs");
        return -1;
    }
    return stax_node_set_args(self, NULL, v);
}

static PyObject *
node_get_target(StaxNode *self, void *c)
{
    return Py_NewRef(self->target);
}

static int
node_set_target(StaxNode *self, PyObject *v, void *c)
{
    if (v == NULL) {
        PyErr_SetString(PyExc_AttributeError, "cannot delete target");
        return -1;
    }
    Py_SETREF(self->target, Py_NewRef(v));
    bump(self);
    return 0;
}

static PyObject *
node_get_name(StaxNode *self, void *c)
{
    return Py_NewRef(self->name);
}

static int
node_set_name(StaxNode *self, PyObject *v, void *c)
{
    PyObject *nm;
    if (v == NULL || !PyUnicode_Check(v)) {
        PyErr_SetString(PyExc_TypeError, "node name must be a str");
        return -1;
    }
    if (self->graph == NULL) {
        Py_SETREF(self->name, Py_NewRef(v));
        return 0;
    }
    if (PyUnicode_Compare(v, self->name) == 0) {
        return 0;
    }
    if (PySet_Discard(self->graph->names, self->name) < 0) {
        return -1;
    }
    nm = stax_graph_unique_name(self->graph, v);
    if (nm == NULL) {
        return -1;
    }
    Py_SETREF(self->name, nm);
    bump(self);
    return 0;
}

static PyObject *
node_get_users(StaxNode *self, void *c)
{
    return Py_NewRef(self->users);
}

static PyObject *
node_get_meta(StaxNode *self, void *c)
{
    return Py_NewRef(self->meta);
}

static int
node_set_meta(StaxNode *self, PyObject *v, void *c)
{
    if (v == NULL || !PyDict_Check(v)) {
        PyErr_SetString(PyExc_TypeError, "node meta must be a dict");
        return -1;
    }
    Py_SETREF(self->meta, Py_NewRef(v));
    return 0;
}

static PyObject *
node_get_graph(StaxNode *self, void *c)
{
    return Py_NewRef(self->graph ? (PyObject *)self->graph : Py_None);
}

static PyObject *
node_get_inputs(StaxNode *self, void *c)
{
    PyObject *s = stax_graph_input_set(self->args, self->kwargs);
    PyObject *res;
    if (s == NULL) {
        return NULL;
    }
    res = PyDict_Keys(s);
    Py_DECREF(s);
    return res;
}

static PyObject *
node_get_stack(StaxNode *self, void *c)
{
    PyObject *v = PyDict_GetItemString(self->meta, "stack");
    return Py_NewRef(v ? v : Py_None);
}

Py_ssize_t
stax_graph_index(StaxGraph *g, PyObject *n)
{
    Py_ssize_t len = PyList_GET_SIZE(g->nodes);
    for (Py_ssize_t i = 0; i < len; i++) {
        if (PyList_GET_ITEM(g->nodes, i) == n) {
            return i;
        }
    }
    return -1;
}

static PyObject *
node_neighbor(StaxNode *self, int delta)
{
    Py_ssize_t i;
    if (self->graph == NULL) {
        Py_RETURN_NONE;
    }
    i = stax_graph_index(self->graph, (PyObject *)self) + delta;
    if (i < 0 || i >= PyList_GET_SIZE(self->graph->nodes)) {
        Py_RETURN_NONE;
    }
    return Py_NewRef(PyList_GET_ITEM(self->graph->nodes, i));
}

static PyObject *
node_get_prev(StaxNode *self, void *c)
{
    return node_neighbor(self, -1);
}

static PyObject *
node_get_next(StaxNode *self, void *c)
{
    return node_neighbor(self, 1);
}

static PyObject *
node_rauw(StaxNode *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"replace_with", "delete_user_cb", NULL};
    PyObject *repl, *cb = NULL, *users;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|O", kwlist, &repl, &cb)) {
        return NULL;
    }
    users = PyDict_Keys(self->users);
    if (users == NULL) {
        return NULL;
    }
    if (stax_node_replace_all_uses_with(self, repl) < 0) {
        Py_DECREF(users);
        return NULL;
    }
    return users;
}

static PyObject *
node_replace_input_with(StaxNode *self, PyObject *args)
{
    PyObject *old, *repl;
    if (!PyArg_ParseTuple(args, "OO", &old, &repl)) {
        return NULL;
    }
    if (node_replace_input(self, old, repl) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
node_update_arg(StaxNode *self, PyObject *args)
{
    Py_ssize_t i;
    PyObject *v, *lst, *tup;
    int rc;
    if (!PyArg_ParseTuple(args, "nO", &i, &v)) {
        return NULL;
    }
    lst = PySequence_List(self->args);
    if (lst == NULL) {
        return NULL;
    }
    if (PyList_SetItem(lst, i, Py_NewRef(v)) < 0) {
        Py_DECREF(lst);
        return NULL;
    }
    tup = PyList_AsTuple(lst);
    Py_DECREF(lst);
    if (tup == NULL) {
        return NULL;
    }
    rc = stax_node_set_args(self, tup, NULL);
    Py_DECREF(tup);
    if (rc < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
node_update_kwarg(StaxNode *self, PyObject *args)
{
    PyObject *k, *v, *d;
    int rc;
    if (!PyArg_ParseTuple(args, "OO", &k, &v)) {
        return NULL;
    }
    d = PyDict_Copy(self->kwargs);
    if (d == NULL || PyDict_SetItem(d, k, v) < 0) {
        Py_XDECREF(d);
        return NULL;
    }
    rc = stax_node_set_args(self, NULL, d);
    Py_DECREF(d);
    if (rc < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
node_format(StaxNode *self, PyObject *unused)
{
    return stax_graph_format_node(self);
}

static PyMethodDef node_methods[] = {
    {"replace_all_uses_with", (PyCFunction)(void (*)(void))node_rauw,
     METH_VARARGS | METH_KEYWORDS,
     "Redirect every user of this node to another node or constant."},
    {"replace_input_with", (PyCFunction)node_replace_input_with,
     METH_VARARGS, "replace_input_with(old, new)"},
    {"update_arg", (PyCFunction)node_update_arg, METH_VARARGS,
     "update_arg(index, value)"},
    {"update_kwarg", (PyCFunction)node_update_kwarg, METH_VARARGS,
     "update_kwarg(key, value)"},
    {"format_node", (PyCFunction)node_format, METH_NOARGS,
     "One line in the Listing 3.1 format."},
    {NULL},
};

static PyGetSetDef node_getset[] = {
    {"op", (getter)node_get_op, NULL, "opcode", NULL},
    {"target", (getter)node_get_target, (setter)node_set_target, NULL, NULL},
    {"args", (getter)node_get_args, (setter)node_set_args_attr, NULL, NULL},
    {"kwargs", (getter)node_get_kwargs, (setter)node_set_kwargs_attr, NULL,
     NULL},
    {"name", (getter)node_get_name, (setter)node_set_name, NULL, NULL},
    {"users", (getter)node_get_users, NULL, "dict user -> None", NULL},
    {"meta", (getter)node_get_meta, (setter)node_set_meta, NULL, NULL},
    {"graph", (getter)node_get_graph, NULL, NULL, NULL},
    {"all_input_nodes", (getter)node_get_inputs, NULL, NULL, NULL},
    {"stack_trace", (getter)node_get_stack, NULL, NULL, NULL},
    {"prev", (getter)node_get_prev, NULL, NULL, NULL},
    {"next", (getter)node_get_next, NULL, NULL, NULL},
    {NULL},
};

static PyType_Slot node_slots[] = {
    {Py_tp_dealloc, node_dealloc},
    {Py_tp_traverse, node_traverse},
    {Py_tp_clear, node_clear},
    {Py_tp_repr, node_repr},
    {Py_tp_methods, node_methods},
    {Py_tp_getset, node_getset},
    {Py_tp_doc, "A node of a Graph (torch.fx style)."},
    {0, NULL},
};

PyType_Spec stax_graph_node_spec = {
    .name = "tensorplay._C.Node",
    .basicsize = sizeof(StaxNode),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .slots = node_slots,
};
