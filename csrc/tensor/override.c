/* __tensor_function__ (contract 3) for the tensor room's own Tensor
 * methods and item access: when an argument (also inside lists/tuples,
 * two levels deep) is an object whose type defines __tensor_function__ and
 * is not exactly Tensor, the call goes to
 *   type(arg).__tensor_function__(func, types, args, kwargs)
 * with func the Tensor method (Tensor.copy_, ...) or operator.getitem /
 * operator.setitem for item access. The fast path (every argument a
 * Tensor, int, float, bool, None, str, slice or Ellipsis) costs a type
 * check per argument. */
#include "tensor/tensor_internal.h"

static PyObject *tf_name = NULL;

static int
plain(PyObject *o)
{
    PyTypeObject *t = Py_TYPE(o);
    return t == &StaxTensor_TypeObj || t == &PyLong_Type
           || t == &PyFloat_Type || t == &PyBool_Type || o == Py_None
           || t == &PyUnicode_Type || t == &PySlice_Type || o == Py_Ellipsis
           || t == &StaxDType_TypeObj;
}

/* 1 if some leaf of o (two levels of lists/tuples) overrides */
static int
any_override(PyObject *o, int depth)
{
    if (plain(o)) {
        return 0;
    }
    if ((PyTuple_Check(o) || PyList_Check(o)) && depth < 2) {
        Py_ssize_t n = PySequence_Fast_GET_SIZE(o);
        PyObject **items = PySequence_Fast_ITEMS(o);
        for (Py_ssize_t i = 0; i < n; i++) {
            if (any_override(items[i], depth + 1)) {
                return 1;
            }
        }
        return 0;
    }
    return Py_TYPE(o) != &StaxTensor_TypeObj
           && _PyType_Lookup(Py_TYPE(o), tf_name) != NULL;
}

/* whether a call's arguments (args a tuple, NULL for none; kwargs a dict or
 * NULL) hold an object whose type overrides __tensor_function__ */
static int
any_override_call(PyObject *args, PyObject *kwargs)
{
    int found = args != NULL && any_override(args, 0);
    if (!found && kwargs != NULL) {
        PyObject *k, *v;
        Py_ssize_t pos = 0;
        while (!found && PyDict_Next(kwargs, &pos, &k, &v)) {
            found = any_override(v, 1);
        }
    }
    return found;
}

/* append overriding types of o to types (a list); -1 on error */
static int
collect(PyObject *o, PyObject *types, int depth)
{
    if (plain(o)) {
        return 0;
    }
    if ((PyTuple_Check(o) || PyList_Check(o)) && depth < 2) {
        Py_ssize_t n = PySequence_Fast_GET_SIZE(o);
        PyObject **items = PySequence_Fast_ITEMS(o);
        for (Py_ssize_t i = 0; i < n; i++) {
            if (collect(items[i], types, depth + 1) < 0) {
                return -1;
            }
        }
        return 0;
    }
    PyTypeObject *t = Py_TYPE(o);
    if (t == &StaxTensor_TypeObj) {
        return 0;
    }
    PyObject *attr = _PyType_Lookup(t, tf_name);   /* borrowed */
    if (attr == NULL) {
        return 0;
    }
    int has = PySequence_Contains(types, (PyObject *)t);
    if (has < 0) {
        return -1;
    }
    return has ? 0 : PyList_Append(types, (PyObject *)t);
}

PyObject *
stax_tensor_override(PyObject *func, PyObject *args, PyObject *kwargs,
                     int *handled)
{
    *handled = 0;
    if (!any_override_call(args, kwargs)) {
        return NULL;
    }
    PyObject *types = PyList_New(0), *tt = NULL, *r = NULL;
    if (types == NULL) {
        *handled = 1;
        return NULL;
    }
    if (collect(args, types, 0) < 0) {
        goto error;
    }
    if (kwargs != NULL) {
        PyObject *k, *v;
        Py_ssize_t pos = 0;
        while (PyDict_Next(kwargs, &pos, &k, &v)) {
            if (collect(v, types, 1) < 0) {
                goto error;
            }
        }
    }
    if (PyList_GET_SIZE(types) == 0) {
        Py_DECREF(types);
        return NULL;
    }
    *handled = 1;
    tt = PyList_AsTuple(types);
    if (tt == NULL) {
        goto error;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(tt); i++) {
        PyObject *meth = PyObject_GetAttr(PyTuple_GET_ITEM(tt, i), tf_name);
        if (meth == NULL) {
            goto error;
        }
        r = PyObject_CallFunctionObjArgs(meth, func, tt, args,
                                         kwargs ? kwargs : Py_None, NULL);
        Py_DECREF(meth);
        if (r == NULL) {
            goto error;
        }
        if (r != Py_NotImplemented) {
            Py_DECREF(tt);
            Py_DECREF(types);
            return r;
        }
        Py_CLEAR(r);
    }
    PyErr_Format(PyExc_TypeError,
                 "no implementation found for '%S' on types that implement "
                 "__tensor_function__: %S", func, types);
error:
    *handled = 1;
    Py_XDECREF(tt);
    Py_DECREF(types);
    return NULL;
}

/* method call self.name(*args, **kw): prepend self and dispatch */
PyObject *
stax_tensor_override_method(const char *name, PyObject *self,
                            PyObject *args, PyObject *kw, int *handled)
{
    *handled = 0;
    if (!any_override_call(args, kw)) {
        return NULL;
    }
    Py_ssize_t n = args ? PyTuple_GET_SIZE(args) : 0;
    PyObject *full = PyTuple_New(n + 1), *r;
    if (full == NULL) {
        *handled = 1;
        return NULL;
    }
    PyTuple_SET_ITEM(full, 0, Py_NewRef(self));
    for (Py_ssize_t i = 0; i < n; i++) {
        PyTuple_SET_ITEM(full, i + 1, Py_NewRef(PyTuple_GET_ITEM(args, i)));
    }
    r = stax_tensor_override(stax_tensor_method_object(name), full, kw,
                             handled);
    Py_DECREF(full);
    return r;
}

/* the Tensor method object for name (borrowed from Tensor's dict) */
PyObject *
stax_tensor_method_object(const char *name)
{
    PyObject *d = PyDict_GetItemString(StaxTensor_TypeObj.tp_dict, name);
    return d != NULL ? d : Py_None;
}

static PyObject *op_getitem = NULL, *op_setitem = NULL;

/* x[key] / x[key] = value with an overriding key or value */
PyObject *
stax_tensor_override_item(PyObject *self, PyObject *key, PyObject *value,
                          int *handled)
{
    *handled = 0;
    if (plain(key) && (value == NULL || plain(value))) {
        return NULL;
    }
    if (!any_override(key, 0) && (value == NULL || !any_override(value, 0))) {
        return NULL;
    }
    PyObject *args = value ? PyTuple_Pack(3, self, key, value)
                           : PyTuple_Pack(2, self, key), *r;
    if (args == NULL) {
        *handled = 1;
        return NULL;
    }
    r = stax_tensor_override(value ? op_setitem : op_getitem, args, NULL,
                             handled);
    Py_DECREF(args);
    return r;
}

int
stax_tensor_override_init(void)
{
    tf_name = PyUnicode_InternFromString("__tensor_function__");
    PyObject *op = PyImport_ImportModule("operator");
    if (op == NULL || tf_name == NULL) {
        Py_XDECREF(op);
        return -1;
    }
    op_getitem = PyObject_GetAttrString(op, "getitem");
    op_setitem = PyObject_GetAttrString(op, "setitem");
    Py_DECREF(op);
    return op_getitem && op_setitem ? 0 : -1;
}
