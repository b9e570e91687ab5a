/* The derivative formulas for compiled autograd: one op call of the joint
 * forward+backward graph. The compiler (python/tensorplay/compiler/
 * _autograd.py) interprets the op-level graph on the tracer's proxies and,
 * walking it backwards, asks here for the gradients of each op's inputs.
 * This evaluates the very rows of derivatives.def the eager engine
 * evaluates (stax_ag_apply_formula on a Node built for the call): the
 * formula's ops then run on proxies and record themselves into the joint
 * graph, so eager and compiled backward share one source of formulas. */
#include "autograd/autograd_internal.h"

#include <string.h>

/* a value the formula may treat as a tensor operand: a Tensor or an
 * object standing for one (the tracer's Proxy) */
static int
tensor_like(PyObject *o)
{
    if (StaxTensor_Check(o)) {
        return 1;
    }
    if (o == Py_None || PyLong_Check(o) || PyFloat_Check(o)
        || PyUnicode_Check(o) || PyList_Check(o) || PyTuple_Check(o)
        || PyBool_Check(o)) {
        return 0;
    }
    return PyObject_HasAttrString(o, "shape")
           && PyObject_HasAttrString(o, "dtype");
}

static PyObject *
shape_obj(PyObject *o)
{
    return PyObject_GetAttrString(o, "shape");
}

static int
dtype_of(PyObject *o, stax_dtype_t *out)
{
    PyObject *d = PyObject_GetAttrString(o, "dtype");
    int r;
    if (d == NULL) {
        return -1;
    }
    r = stax_dtype_from_object(d, out);
    Py_DECREF(d);
    return r;
}

/* The (param, elem, tensor, None) rows of an op no gradient flows through. */
static int
append_no_grads(PyObject *out, PyObject *bound)
{
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(bound); i++) {
        PyObject *a = PyTuple_GET_ITEM(bound, i);
        Py_ssize_t cnt = tensor_like(a) ? 1
                         : (PyList_Check(a) || PyTuple_Check(a))
                           ? PySequence_Fast_GET_SIZE(a) : 0;
        for (Py_ssize_t k = 0; k < cnt; k++) {
            PyObject *x = tensor_like(a) ? a : PySequence_Fast_GET_ITEM(a, k);
            PyObject *t;
            if (!tensor_like(x)) {
                continue;
            }
            t = Py_BuildValue("(nnOO)", i, tensor_like(a) ? (Py_ssize_t)-1 : k,
                              x, Py_None);
            if (t == NULL || PyList_Append(out, t) < 0) {
                Py_XDECREF(t);
                return -1;
            }
            Py_DECREF(t);
        }
    }
    return 0;
}

/* The node's per-argument shapes and versions, and per tensor operand (a tensor
 * argument or an element of a tensor list) its parameter, element, shape, dtype and
 * whether its edge wants a gradient (by identity in need). */
static int
node_record_inputs(StaxGradNode *n, PyObject *bound, PyObject *need)
{
    int nin = 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(bound); i++) {
        PyObject *a = PyTuple_GET_ITEM(bound, i);
        PyObject *sh;
        Py_ssize_t cnt;
        if (tensor_like(a)) {
            sh = shape_obj(a);
            if (sh == NULL) {
                return -1;
            }
            if (StaxTensor_Check(a)) {
                n->versions[i] = ((StaxTensor *)a)->storage->version;
            }
        }
        else {
            sh = Py_NewRef(Py_None);
        }
        PyTuple_SET_ITEM(n->shapes, i, sh);
        cnt = tensor_like(a) ? 1
              : (PyList_Check(a) || PyTuple_Check(a))
                ? PySequence_Fast_GET_SIZE(a) : 0;
        for (Py_ssize_t k = 0; k < cnt; k++) {
            PyObject *x = tensor_like(a) ? a : PySequence_Fast_GET_ITEM(a, k);
            PyObject *xs;
            int want;
            if (!tensor_like(x)) {
                continue;
            }
            n->in_param[nin] = (int)i;
            n->in_elem[nin] = tensor_like(a) ? -1 : (int)k;
            xs = shape_obj(x);
            if (xs == NULL || dtype_of(x, &n->in_dtypes[nin]) < 0) {
                Py_XDECREF(xs);
                return -1;
            }
            PyTuple_SET_ITEM(n->in_shapes, nin, xs);
            /* by identity: == on proxies would record a comparison */
            want = 0;
            for (Py_ssize_t q = 0; q < PyTuple_GET_SIZE(need) && !want; q++) {
                want = PyTuple_GET_ITEM(need, q) == x;
            }
            /* an edge that wants a gradient; the formula only computes
             * the operands whose edge is set */
            n->next[nin].fn = want ? Py_NewRef(Py_None) : NULL;
            nin++;
        }
    }
    return 0;
}

/* The node's output shapes, dtypes and versions (None for a non-tensor result). */
static int
node_record_outputs(StaxGradNode *n, PyObject *results)
{
    Py_ssize_t no = PyTuple_GET_SIZE(results);
    n->n_out = (int)no;
    n->out_shapes = PyTuple_New(no);
    n->out_dtypes = PyMem_Calloc((size_t)no + 1, sizeof(stax_dtype_t));
    n->res_versions = PyMem_Calloc((size_t)no + 1, sizeof(uint64_t));
    n->results = Py_NewRef(results);
    if (n->out_shapes == NULL || !n->out_dtypes || !n->res_versions) {
        if (!PyErr_Occurred()) {
            PyErr_NoMemory();
        }
        return -1;
    }
    for (Py_ssize_t k = 0; k < no; k++) {
        PyObject *r = PyTuple_GET_ITEM(results, k), *sh;
        if (!tensor_like(r)) {
            PyTuple_SET_ITEM(n->out_shapes, k, Py_NewRef(Py_None));
            continue;
        }
        sh = shape_obj(r);
        if (sh == NULL || dtype_of(r, &n->out_dtypes[k]) < 0) {
            Py_XDECREF(sh);
            return -1;
        }
        PyTuple_SET_ITEM(n->out_shapes, k, sh);
        if (StaxTensor_Check(r)) {
            n->res_versions[k] = ((StaxTensor *)r)->storage->version;
        }
    }
    return 0;
}

/* _autograd_formula(op_name, args, kwargs, results, grads, need) -> list
 *   op_name  an op of the op table (the op-level graph's overload's op)
 *   args, kwargs  the call's arguments (proxies or tensors)
 *   results  tuple of the op's outputs (a 1-tuple for one output)
 *   grads    list per output: the gradient flowing into it, or None
 *   need     tuple of the operands (by identity) whose gradient to compute
 *   replay   (optional) callable(self, *args) re-running the op, for
 *            formulas whose helper replays it (_pick)
 * Returns a list of (argument index, element index or -1, operand,
 * gradient or None) per tensor operand, the gradient as the formula gives it (not yet
 * reduced to the operand's shape or cast to its dtype). */
static PyObject *
py_formula(PyObject *m, PyObject *args)
{
    const char *opname;
    PyObject *fargs, *fkw, *results, *grads, *need, *replay = Py_None;
    PyObject *bound = NULL, *names, *res = NULL, *gl = NULL, *out = NULL;
    const stax_op_info *op;
    const stax_deriv *d;
    StaxGradNode *n = NULL;
    int kwonly_from = 0, nin = 0;
    Py_ssize_t na, no;
    (void)m;
    if (!PyArg_ParseTuple(args, "sOOOOO|O:_autograd_formula", &opname, &fargs,
                          &fkw, &results, &grads, &need, &replay)) {
        return NULL;
    }
    op = stax_op_by_name(opname);
    if (op == NULL) {
        PyErr_Format(PyExc_ValueError, "_autograd_formula: no op '%s'", opname);
        return NULL;
    }
    if ((op->flags & STAX_OPF_INPLACE) && op->inplace != NULL) {
        const stax_op_info *b = stax_op_by_name(op->inplace);
        op = b ? b : op;
    }
    d = stax_ag_deriv_for(op->name);
    if (d == NULL || d->kind == STAX_DERIV_NOTIMPL) {
        PyErr_Format(PyExc_NotImplementedError,
                     "tensorplay: the derivative for '%s' is not implemented",
                     op->name);
        return NULL;
    }
    names = stax_ag_schema_names(op, &kwonly_from);
    if (names == NULL) {
        return NULL;
    }
    bound = stax_op_bind(op, fargs, fkw == Py_None ? NULL : fkw);
    if (bound == NULL) {
        goto done;
    }
    na = PyTuple_GET_SIZE(bound);
    if (na != PyTuple_GET_SIZE(names)) {
        PyErr_Format(PyExc_RuntimeError, "_autograd_formula: '%s' bound %zd "
                     "arguments, its schema has %zd", op->name, na,
                     PyTuple_GET_SIZE(names));
        goto done;
    }
    out = PyList_New(0);
    if (out == NULL) {
        goto done;
    }
    for (Py_ssize_t i = 0; i < na; i++) {
        PyObject *a = PyTuple_GET_ITEM(bound, i);
        if (tensor_like(a)) {
            nin++;
        }
        else if (PyList_Check(a) || PyTuple_Check(a)) {
            for (Py_ssize_t k = 0; k < PySequence_Fast_GET_SIZE(a); k++) {
                nin += tensor_like(PySequence_Fast_GET_ITEM(a, k));
            }
        }
    }
    if (d->kind == STAX_DERIV_NONDIFF) {
        /* no gradient flows through the op */
        if (append_no_grads(out, bound) < 0) {
            goto fail;
        }
        goto done;
    }
    if (!PyTuple_Check(need)) {
        PyErr_SetString(PyExc_TypeError, "_autograd_formula: need must be a tuple");
        goto fail;
    }
    n = stax_ag_node_new(op->name, d);
    if (n == NULL) {
        goto fail;
    }
    n->names = Py_NewRef(names);
    n->kwonly_from = kwonly_from;
    n->args = Py_NewRef(bound);
    n->versions = PyMem_Calloc((size_t)na + 1, sizeof(uint64_t));
    n->shapes = PyTuple_New(na);
    n->next = PyMem_Calloc((size_t)nin + 1, sizeof(stax_edge));
    n->in_param = PyMem_Calloc((size_t)nin + 1, sizeof(int));
    n->in_elem = PyMem_Calloc((size_t)nin + 1, sizeof(int));
    n->in_dtypes = PyMem_Calloc((size_t)nin + 1, sizeof(stax_dtype_t));
    n->in_shapes = PyTuple_New(nin);
    if (!n->versions || !n->shapes || !n->next || !n->in_param || !n->in_elem
        || !n->in_dtypes || !n->in_shapes) {
        if (!PyErr_Occurred()) {
            PyErr_NoMemory();
        }
        goto fail;
    }
    n->n_in = nin;
    if (node_record_inputs(n, bound, need) < 0) {
        goto fail;
    }
    no = PyTuple_GET_SIZE(results);
    if (node_record_outputs(n, results) < 0) {
        goto fail;
    }
    if (d->uses_node) {
        /* helpers that replay the op (_pick) call it on an index tensor:
         * the caller's callable, else the op's function */
        n->replay = replay != Py_None ? replay : stax_op_function(op);
        if (n->replay == NULL || n->replay == Py_None) {
            PyErr_Format(PyExc_RuntimeError, "_autograd_formula: '%s' replays "
                         "the op; pass replay=", op->name);
            n->replay = NULL;
            goto fail;
        }
        Py_INCREF(n->replay);
    }
    gl = PySequence_List(grads);
    if (gl == NULL) {
        goto fail;
    }
    if (PyList_GET_SIZE(gl) != no) {
        PyErr_Format(PyExc_ValueError, "_autograd_formula: '%s' has %zd "
                     "outputs, %zd gradients given", op->name, no,
                     PyList_GET_SIZE(gl));
        goto fail;
    }
    res = stax_ag_apply_formula(n, gl);
    if (res == NULL) {
        goto fail;
    }
    for (int i = 0; i < n->n_in; i++) {
        PyObject *a = PyTuple_GET_ITEM(bound, n->in_param[i]);
        PyObject *x = n->in_elem[i] < 0 ? a
                      : PySequence_Fast_GET_ITEM(a, n->in_elem[i]);
        PyObject *t = Py_BuildValue("(iiOO)", n->in_param[i], n->in_elem[i],
                                    x, PyList_GET_ITEM(res, i));
        if (t == NULL || PyList_Append(out, t) < 0) {
            Py_XDECREF(t);
            goto fail;
        }
        Py_DECREF(t);
    }
    goto done;
fail:
    Py_CLEAR(out);
done:
    Py_XDECREF(bound);
    Py_XDECREF(res);
    Py_XDECREF(gl);
    Py_XDECREF(n);
    return out;
}

static PyMethodDef joint_methods[] = {
    {"_autograd_formula", py_formula, METH_VARARGS,
     "_autograd_formula(op_name, args, kwargs, results, grads, need, replay=None) -> "
     "[(argument index, element index, gradient)]: one op's derivative "
     "formula (derivatives.def), evaluated on the given values"},
    {NULL},
};

int
stax_ag_joint_init(PyObject *m)
{
    return PyModule_AddFunctions(m, joint_methods);
}
