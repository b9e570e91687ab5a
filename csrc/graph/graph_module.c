/* GraphModule: holds a Graph, generates the Python source of its forward
 * (regenerated whenever the graph changed), and runs it: gm(*args). */
#include "graph/graph.h"
#include "structmember.h"

PyTypeObject *StaxGraphModule_Type = NULL;

static int
gm_traverse(StaxGraphModule *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->graph);
    Py_VISIT(self->dict);
    Py_VISIT(self->code);
    Py_VISIT(self->forward);
    Py_VISIT(self->globals);
    return 0;
}

static int
gm_clear(StaxGraphModule *self)
{
    Py_CLEAR(self->graph);
    Py_CLEAR(self->dict);
    Py_CLEAR(self->code);
    Py_CLEAR(self->forward);
    Py_CLEAR(self->globals);
    return 0;
}

static void
gm_dealloc(StaxGraphModule *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    if (self->weakreflist) {
        PyObject_ClearWeakRefs((PyObject *)self);
    }
    gm_clear(self);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static int
copy_attrs(StaxGraphModule *gm, PyObject *root)
{
    /* get_attr targets read from root (a dict or an object) */
    PyObject *nodes = ((StaxGraph *)gm->graph)->nodes;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(nodes); i++) {
        StaxNode *n = (StaxNode *)PyList_GET_ITEM(nodes, i);
        PyObject *v;
        if (n->op != STAX_NODE_GET_ATTR || !PyUnicode_Check(n->target)) {
            continue;
        }
        if (PyDict_Check(root)) {
            v = PyDict_GetItemWithError(root, n->target);
            Py_XINCREF(v);
        }
        else {
            v = PyObject_GetAttr(root, n->target);
        }
        if (v == NULL) {
            if (PyErr_Occurred()) {
                return -1;
            }
            continue;
        }
        if (PyDict_SetItem(gm->dict, n->target, v) < 0) {
            Py_DECREF(v);
            return -1;
        }
        Py_DECREF(v);
    }
    return 0;
}

static PyObject *
gm_new(PyTypeObject *tp, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"root", "graph", NULL};
    PyObject *a = NULL, *b = NULL, *graph, *root = NULL;
    StaxGraphModule *gm;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|O", kwlist, &a, &b)) {
        return NULL;
    }
    if (b == NULL) {
        graph = a;
    }
    else {
        root = a;
        graph = b;
    }
    if (!StaxGraph_Check(graph)) {
        PyErr_SetString(PyExc_TypeError,
                        "GraphModule(graph) or GraphModule(root, graph)");
        return NULL;
    }
    gm = (StaxGraphModule *)tp->tp_alloc(tp, 0);
    if (gm == NULL) {
        return NULL;
    }
    gm->graph = Py_NewRef(graph);
    gm->dict = PyDict_New();
    if (gm->dict == NULL) {
        Py_DECREF(gm);
        return NULL;
    }
    if (root != NULL && root != Py_None && copy_attrs(gm, root) < 0) {
        Py_DECREF(gm);
        return NULL;
    }
    return (PyObject *)gm;
}

PyObject *
stax_graph_module_new(PyObject *graph)
{
    PyObject *args = PyTuple_Pack(1, graph), *res;
    if (args == NULL) {
        return NULL;
    }
    res = gm_new(StaxGraphModule_Type, args, NULL);
    Py_DECREF(args);
    return res;
}

/* Generate and exec the source when the graph changed since last time. */
static int
gm_ensure(StaxGraphModule *self)
{
    StaxGraph *g = (StaxGraph *)self->graph;
    PyObject *globals = NULL, *src = NULL, *code = NULL, *r = NULL,
             *fwd = NULL;
    int rc = -1;
    if (self->forward != NULL && self->code_version == g->version) {
        return 0;
    }
    globals = PyDict_New();
    if (globals == NULL
        || PyDict_SetItemString(globals, "__builtins__",
                                PyEval_GetBuiltins()) < 0) {
        goto done;
    }
    src = stax_graph_codegen(g, globals);
    if (src == NULL) {
        goto done;
    }
    {
        const char *s = PyUnicode_AsUTF8(src);
        if (s == NULL) {
            goto done;
        }
        code = Py_CompileString(s, "<stax GraphModule>", Py_file_input);
    }
    if (code == NULL) {
        goto done;
    }
    r = PyEval_EvalCode(code, globals, globals);
    if (r == NULL) {
        goto done;
    }
    fwd = PyDict_GetItemString(globals, "forward");
    if (fwd == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "codegen produced no forward");
        goto done;
    }
    Py_XSETREF(self->forward, Py_NewRef(fwd));
    Py_XSETREF(self->code, Py_NewRef(src));
    Py_XSETREF(self->globals, Py_NewRef(globals));
    self->code_version = g->version;
    rc = 0;
done:
    Py_XDECREF(globals);
    Py_XDECREF(src);
    Py_XDECREF(code);
    Py_XDECREF(r);
    return rc;
}

static PyObject *
gm_call(StaxGraphModule *self, PyObject *args, PyObject *kwds)
{
    PyObject *full, *res;
    Py_ssize_t n = PyTuple_GET_SIZE(args);
    if (gm_ensure(self) < 0) {
        return NULL;
    }
    full = PyTuple_New(n + 1);
    if (full == NULL) {
        return NULL;
    }
    PyTuple_SET_ITEM(full, 0, Py_NewRef(self));
    for (Py_ssize_t i = 0; i < n; i++) {
        PyTuple_SET_ITEM(full, i + 1, Py_NewRef(PyTuple_GET_ITEM(args, i)));
    }
    res = PyObject_Call(self->forward, full, kwds);
    Py_DECREF(full);
    return res;
}

static PyObject *
gm_forward(StaxGraphModule *self, PyObject *args, PyObject *kwds)
{
    return gm_call(self, args, kwds);
}

static PyObject *
gm_recompile(StaxGraphModule *self, PyObject *unused)
{
    Py_CLEAR(self->forward);
    if (gm_ensure(self) < 0) {
        return NULL;
    }
    return Py_NewRef(self->code);
}

static PyObject *
gm_get_code(StaxGraphModule *self, void *c)
{
    if (gm_ensure(self) < 0) {
        return NULL;
    }
    return Py_NewRef(self->code);
}

static PyObject *
gm_get_graph(StaxGraphModule *self, void *c)
{
    return Py_NewRef(self->graph);
}

static int
gm_set_graph(StaxGraphModule *self, PyObject *v, void *c)
{
    if (v == NULL || !StaxGraph_Check(v)) {
        PyErr_SetString(PyExc_TypeError, "graph must be a Graph");
        return -1;
    }
    Py_SETREF(self->graph, Py_NewRef(v));
    Py_CLEAR(self->forward);
    return 0;
}

static PyObject *
gm_str(StaxGraphModule *self)
{
    return gm_get_code(self, NULL);
}

static PyObject *
gm_print_readable(StaxGraphModule *self, PyObject *args, PyObject *kwds)
{
    PyObject *code = gm_get_code(self, NULL), *r;
    if (code == NULL) {
        return NULL;
    }
    r = PyObject_CallFunction(PyDict_GetItemString(PyEval_GetBuiltins(),
                                                   "print"),
                              "O", code);
    Py_XDECREF(r);
    return code;
}

static PyMethodDef gm_methods[] = {
    {"forward", (PyCFunction)(void (*)(void))gm_forward,
     METH_VARARGS | METH_KEYWORDS, "Run the graph eagerly."},
    {"recompile", (PyCFunction)gm_recompile, METH_NOARGS,
     "Regenerate forward from the graph; returns the source."},
    {"print_readable", (PyCFunction)(void (*)(void))gm_print_readable,
     METH_VARARGS | METH_KEYWORDS, NULL},
    {NULL},
};

static PyGetSetDef gm_getset[] = {
    {"graph", (getter)gm_get_graph, (setter)gm_set_graph, NULL, NULL},
    {"code", (getter)gm_get_code, NULL, "Python source of forward", NULL},
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL,
     NULL},
    {NULL},
};

static PyMemberDef gm_members[] = {
    {"__weaklistoffset__", T_PYSSIZET,
     offsetof(StaxGraphModule, weakreflist), READONLY},
    {"__dictoffset__", T_PYSSIZET, offsetof(StaxGraphModule, dict),
     READONLY},
    {NULL},
};

static PyType_Slot gm_slots[] = {
    {Py_tp_new, gm_new},
    {Py_tp_dealloc, gm_dealloc},
    {Py_tp_traverse, gm_traverse},
    {Py_tp_clear, gm_clear},
    {Py_tp_call, gm_call},
    {Py_tp_str, gm_str},
    {Py_tp_methods, gm_methods},
    {Py_tp_getset, gm_getset},
    {Py_tp_members, gm_members},
    {Py_tp_doc, "GraphModule(graph): a graph with a generated forward."},
    {0, NULL},
};

static PyType_Spec gm_spec = {
    .name = "tensorplay._C.GraphModule",
    .basicsize = sizeof(StaxGraphModule),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_BASETYPE,
    .slots = gm_slots,
};

int
stax_graph_gm_init(PyObject *m)
{
    StaxGraphModule_Type = (PyTypeObject *)PyType_FromSpec(&gm_spec);
    if (StaxGraphModule_Type == NULL) {
        return -1;
    }
    return PyModule_AddObjectRef(m, "GraphModule",
                                 (PyObject *)StaxGraphModule_Type);
}
