/* The Tensor and Storage types and their lifecycle: the Storage type, the
 * Tensor type's slots (traverse/clear/dealloc, hash, repr, construction
 * from sizes or data, number/sequence/mapping slots, iteration), the type
 * object itself, the room's module functions and its init.  The C API on
 * tensors (construction from/to NumPy without copies, conversions, copies)
 * is in tensor_api.c; metadata getters and the small methods every tensor
 * has are in tensor_methods.c. */
#include "tensor/tensor_internal.h"
#include "tensor/stax_numpy.h"
#include <structmember.h>

PyObject *stax_repr_hook = NULL;

/* ---- Storage -------------------------------------------------------- */

static void
storage_dealloc(PyObject *self)
{
    StaxStorage *s = (StaxStorage *)self;
    Py_XDECREF(s->owner);
    Py_TYPE(self)->tp_free(self);
}

static PyObject *
storage_nbytes(PyObject *self, PyObject *unused)
{
    return PyLong_FromLongLong(((StaxStorage *)self)->nbytes);
}

static PyObject *
storage_data_ptr(PyObject *self, PyObject *unused)
{
    return PyLong_FromVoidPtr(((StaxStorage *)self)->data);
}

static Py_ssize_t
storage_len(PyObject *self)
{
    return (Py_ssize_t)((StaxStorage *)self)->nbytes;
}

static PySequenceMethods storage_as_sequence = {
    .sq_length = storage_len,
};

static PyMethodDef storage_methods[] = {
    {"nbytes", storage_nbytes, METH_NOARGS, NULL},
    {"size", storage_nbytes, METH_NOARGS, NULL},
    {"data_ptr", storage_data_ptr, METH_NOARGS, NULL},
    {NULL},
};

static PyMemberDef storage_members[] = {
    {"_version", T_ULONGLONG, offsetof(StaxStorage, version), READONLY, NULL},
    {"owner", T_OBJECT, offsetof(StaxStorage, owner), READONLY, NULL},
    {NULL},
};

PyTypeObject StaxStorage_TypeObj = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tensorplay.Storage",
    .tp_basicsize = sizeof(StaxStorage),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = storage_dealloc,
    .tp_as_sequence = &storage_as_sequence,
    .tp_methods = storage_methods,
    .tp_members = storage_members,
};

/* ---- Tensor type slots -------------------------------------------- */

static int
tensor_traverse(PyObject *self, visitproc visit, void *arg)
{
    StaxTensor *t = (StaxTensor *)self;
    Py_VISIT(t->dict);
    Py_VISIT(t->grad);
    Py_VISIT(t->grad_fn);
    Py_VISIT(t->hooks);
    Py_VISIT(t->view_src);
    return 0;
}

static int
tensor_clear(PyObject *self)
{
    StaxTensor *t = (StaxTensor *)self;
    Py_CLEAR(t->dict);
    Py_CLEAR(t->grad);
    Py_CLEAR(t->grad_fn);
    Py_CLEAR(t->hooks);
    Py_CLEAR(t->grad_acc);
    Py_CLEAR(t->view_src);
    return 0;
}

static void
tensor_dealloc(PyObject *self)
{
    StaxTensor *t = (StaxTensor *)self;
    PyObject_GC_UnTrack(self);
    if (t->weakreflist != NULL) {
        PyObject_ClearWeakRefs(self);
    }
    tensor_clear(self);
    Py_CLEAR(t->storage);
    Py_TYPE(self)->tp_free(self);
}

static Py_hash_t
tensor_hash(PyObject *self)
{
    return _Py_HashPointer(self);
}

static PyObject *
tensor_repr(PyObject *self)
{
    if (stax_repr_hook != NULL) {
        return PyObject_CallOneArg(stax_repr_hook, self);
    }
    PyObject *arr = stax_tensor_as_array((StaxTensor *)self), *r = NULL;
    if (arr == NULL) {
        return NULL;
    }
    r = PyUnicode_FromFormat("tensor(%R)", arr);
    Py_DECREF(arr);
    return r;
}

static int
fill_from_data(StaxTensor *t, PyObject *data, stax_dtype_t dt)
{
    /* bfloat16 (no NumPy type) is made from float32 values */
    int npy = dt == STAX_BFLOAT16 ? NPY_FLOAT32 : stax_dtype_to_npy(dt);
    PyObject *arr = PyArray_FromAny(
        data, PyArray_DescrFromType(npy), 0, 0,
        NPY_ARRAY_DEFAULT | NPY_ARRAY_ENSURECOPY | NPY_ARRAY_FORCECAST, NULL);
    if (arr == NULL) {
        return -1;
    }
    StaxTensor *src = stax_tensor_from_array(arr);
    Py_DECREF(arr);
    if (src != NULL && dt == STAX_BFLOAT16) {
        Py_SETREF(src, stax_tensor_to_dtype(src, dt, 1));
    }
    if (src == NULL) {
        return -1;
    }
    t->storage = (StaxStorage *)Py_NewRef(src->storage);
    t->ndim = src->ndim;
    t->dtype = dt;
    memcpy(t->sizes, src->sizes, sizeof(t->sizes));
    memcpy(t->strides, src->strides, sizeof(t->strides));
    Py_DECREF(src);
    return 0;
}

/* tensorplay.Tensor(*sizes) / Tensor(data): default dtype */
static PyObject *
tensor_new(PyTypeObject *tp, PyObject *args, PyObject *kwds)
{
    StaxTensor *t = stax_tensor_alloc(tp), *tmp = NULL;
    if (t == NULL) {
        return NULL;
    }
    stax_dtype_t dt = stax_default_dtype();
    Py_ssize_t n = PyTuple_GET_SIZE(args);
    if (n == 1 && !PyLong_Check(PyTuple_GET_ITEM(args, 0))
        && !PyTuple_Check(PyTuple_GET_ITEM(args, 0))) {
        PyObject *a = PyTuple_GET_ITEM(args, 0);
        if (StaxTensor_Check(a)) {
            tmp = (StaxTensor *)a;
            t->storage = (StaxStorage *)Py_NewRef(tmp->storage);
            t->ndim = tmp->ndim;
            t->offset = tmp->offset;
            t->dtype = tmp->dtype;
            memcpy(t->sizes, tmp->sizes, sizeof(t->sizes));
            memcpy(t->strides, tmp->strides, sizeof(t->strides));
            return (PyObject *)t;
        }
        if (fill_from_data(t, a, dt) < 0) {
            Py_DECREF(t);
            return NULL;
        }
        return (PyObject *)t;
    }
    int64_t sizes[STAX_MAX_DIMS];
    int nd = 1;
    sizes[0] = 0;
    if (n > 0 && stax_parse_sizes(args, sizes, &nd) < 0) {
        Py_DECREF(t);
        return NULL;
    }
    tmp = stax_tensor_empty(nd, sizes, dt);
    if (tmp == NULL) {
        Py_DECREF(t);
        return NULL;
    }
    memset(STAX_TENSOR_DATA(tmp), 0, tmp->storage->nbytes);
    t->storage = (StaxStorage *)Py_NewRef(tmp->storage);
    t->ndim = tmp->ndim;
    t->dtype = dt;
    memcpy(t->sizes, tmp->sizes, sizeof(t->sizes));
    memcpy(t->strides, tmp->strides, sizeof(t->strides));
    Py_DECREF(tmp);
    return (PyObject *)t;
}

/* ---- number slots for one-element tensors ----------------------------- */

static int
tensor_bool(PyObject *self)
{
    StaxTensor *t = (StaxTensor *)self;
    int64_t n = stax_tensor_numel(t);
    if (n == 0) {
        PyErr_SetString(PyExc_RuntimeError,
                        "Boolean value of Tensor with no values is ambiguous");
        return -1;
    }
    if (n > 1) {
        PyErr_SetString(PyExc_RuntimeError,
                        "Boolean value of Tensor with more than one value is "
                        "ambiguous");
        return -1;
    }
    PyObject *v = stax_tensor_item(t);
    if (v == NULL) {
        return -1;
    }
    int r = PyObject_IsTrue(v);
    Py_DECREF(v);
    return r;
}

static PyObject *
scalar_of(PyObject *self)
{
    StaxTensor *t = (StaxTensor *)self;
    if (stax_tensor_numel(t) != 1) {
        PyErr_SetString(PyExc_ValueError,
                        "only one element tensors can be converted to Python "
                        "scalars");
        return NULL;
    }
    return stax_tensor_item(t);
}

/* int(t) / float(t): the one element converted by conv */
static PyObject *
scalar_as(PyObject *self, PyObject *(*conv)(PyObject *))
{
    PyObject *v = scalar_of(self), *r;
    if (v == NULL) {
        return NULL;
    }
    r = conv(v);
    Py_DECREF(v);
    return r;
}

static PyObject *
tensor_int(PyObject *self)
{
    return scalar_as(self, PyNumber_Long);
}

static PyObject *
tensor_float(PyObject *self)
{
    return scalar_as(self, PyNumber_Float);
}

static PyObject *
tensor_index(PyObject *self)
{
    StaxTensor *t = (StaxTensor *)self;
    if (stax_tensor_numel(t) != 1 || !stax_dtype_is_integral(t->dtype)) {
        PyErr_SetString(PyExc_TypeError,
                        "only integer tensors of a single element can be "
                        "converted to an index");
        return NULL;
    }
    return stax_tensor_item(t);
}

#define TRAMP(S) .S = stax_tramp_##S,
static PyNumberMethods tensor_as_number = {
    STAX_TENSOR_BINARY_SLOTS(TRAMP)
    STAX_TENSOR_UNARY_SLOTS(TRAMP)
    STAX_TENSOR_TERNARY_SLOTS(TRAMP)
    .nb_bool = tensor_bool,
    .nb_int = tensor_int,
    .nb_float = tensor_float,
    .nb_index = tensor_index,
};

static Py_ssize_t
tensor_len(PyObject *self)
{
    StaxTensor *t = (StaxTensor *)self;
    if (t->ndim == 0) {
        PyErr_SetString(PyExc_TypeError, "len() of a 0-d tensor");
        return -1;
    }
    return (Py_ssize_t)t->sizes[0];
}

/* `v in t`: the Python-level Tensor.__contains__ that tensorplay/_tensor.py
 * installs into the type dict (an installed dunder reaches no slot, and
 * without one Python's `in` iterated the rows and asked bool() of each) */
static int
tensor_contains(PyObject *self, PyObject *el)
{
    PyObject *fn = PyDict_GetItemString(StaxTensor_TypeObj.tp_dict, "__contains__");
    if (fn == NULL || Py_IS_TYPE(fn, &PyWrapperDescr_Type)) {
        PyErr_SetString(PyExc_TypeError, "Tensor.__contains__ is not installed");
        return -1;
    }
    PyObject *r = PyObject_CallFunctionObjArgs(fn, self, el, NULL);
    if (r == NULL) {
        return -1;
    }
    int b = PyObject_IsTrue(r);
    Py_DECREF(r);
    return b;
}

static PySequenceMethods tensor_as_sequence = {
    .sq_length = tensor_len,
    .sq_contains = tensor_contains,
};

static PyObject *
tensor_subscript(PyObject *self, PyObject *key)
{
    int h;
    PyObject *r = stax_tensor_override_item(self, key, NULL, &h);
    if (h) {
        return r;
    }
    return stax_tensor_getitem((StaxTensor *)self, key);
}

static int
tensor_ass_subscript(PyObject *self, PyObject *key, PyObject *value)
{
    int h;
    if (value != NULL) {
        PyObject *r = stax_tensor_override_item(self, key, value, &h);
        if (h) {
            Py_XDECREF(r);
            return r == NULL ? -1 : 0;
        }
    }
    return stax_tensor_setitem((StaxTensor *)self, key, value);
}

static PyMappingMethods tensor_as_mapping = {
    .mp_length = tensor_len,
    .mp_subscript = tensor_subscript,
    .mp_ass_subscript = tensor_ass_subscript,
};

static PyObject *
tensor_iter(PyObject *self)
{
    StaxTensor *t = (StaxTensor *)self;
    if (t->ndim == 0) {
        PyErr_SetString(PyExc_TypeError, "iteration over a 0-d tensor");
        return NULL;
    }
    PyObject *l = PyList_New(t->sizes[0]), *it;
    if (l == NULL) {
        return NULL;
    }
    for (int64_t i = 0; i < t->sizes[0]; i++) {
        StaxTensor *v = stax_tensor_view(t, t->ndim - 1, t->sizes + 1,
                                         t->strides + 1,
                                         t->offset + i * t->strides[0]);
        if (v == NULL) {
            Py_DECREF(l);
            return NULL;
        }
        PyList_SET_ITEM(l, i, (PyObject *)v);
    }
    it = PyObject_GetIter(l);
    Py_DECREF(l);
    return it;
}

PyTypeObject StaxTensor_TypeObj = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tensorplay.Tensor",
    .tp_basicsize = sizeof(StaxTensor),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "tensorplay.Tensor: a strided view of a NumPy-owned storage.",
    .tp_new = tensor_new,
    .tp_dealloc = tensor_dealloc,
    .tp_traverse = tensor_traverse,
    .tp_clear = tensor_clear,
    .tp_hash = tensor_hash,
    .tp_richcompare = stax_tramp_richcompare,
    .tp_repr = tensor_repr,
    .tp_as_number = &tensor_as_number,
    .tp_as_sequence = &tensor_as_sequence,
    .tp_as_mapping = &tensor_as_mapping,
    .tp_iter = tensor_iter,
    .tp_getset = stax_tensor_getset,
    .tp_methods = stax_tensor_methods,
    .tp_dictoffset = offsetof(StaxTensor, dict),
    .tp_weaklistoffset = offsetof(StaxTensor, weakreflist),
};

/* ---- module functions ------------------------------------------------ */

static PyObject *
py_from_numpy(PyObject *self, PyObject *arr)
{
    return (PyObject *)stax_tensor_from_array(arr);
}

/* _external_memory(t) -> t: t's storage wraps memory that existed before
 * it (tp.from_numpy, tp.as_tensor of an array): it counts as older than
 * any trace, so a trace that writes it through a tensor it wrapped while
 * tracing journals the write and undoes it (trace/isolation.c), as it does
 * for the caller's tensors */
static PyObject *
py_external_memory(PyObject *self, PyObject *t)
{
    (void)self;
    if (!StaxTensor_Check(t)) {
        PyErr_SetString(PyExc_TypeError, "_external_memory(t): t must be a Tensor");
        return NULL;
    }
    ((StaxTensor *)t)->storage->serial = 0;
    return Py_NewRef(t);
}

static PyObject *
py_set_repr_hook(PyObject *self, PyObject *fn)
{
    Py_XSETREF(stax_repr_hook, fn == Py_None ? NULL : Py_NewRef(fn));
    Py_RETURN_NONE;
}

/* _tensor_install(name, obj): put a Python-level method/property on
 * Tensor (used by tensorplay/_tensor.py for its Python-side helpers). */
static PyObject *
py_tensor_install(PyObject *self, PyObject *args)
{
    PyObject *name, *obj;
    if (!PyArg_ParseTuple(args, "UO:_tensor_install", &name, &obj)) {
        return NULL;
    }
    if (PyDict_SetItem(StaxTensor_TypeObj.tp_dict, name, obj) < 0) {
        return NULL;
    }
    PyType_Modified(&StaxTensor_TypeObj);
    Py_RETURN_NONE;
}

static PyObject *
py_is_tensor(PyObject *self, PyObject *o)
{
    return PyBool_FromLong(StaxTensor_Check(o));
}

static PyObject *
py_empty_strided(PyObject *self, PyObject *args)
{
    PyObject *size, *stride, *dto;
    int64_t sz[STAX_MAX_DIMS], st[STAX_MAX_DIMS];
    int n1, n2;
    stax_dtype_t dt;
    if (!PyArg_ParseTuple(args, "OOO", &size, &stride, &dto)
        || stax_parse_int_seq(size, sz, &n1, "size") < 0
        || stax_parse_int_seq(stride, st, &n2, "stride") < 0
        || stax_dtype_from_object(dto, &dt) < 0) {
        return NULL;
    }
    if (n1 != n2) {
        PyErr_SetString(PyExc_RuntimeError, "mismatch in length of strides "
                        "and shape");
        return NULL;
    }
    int64_t extent = 1;
    for (int i = 0; i < n1; i++) {
        if (sz[i] == 0) {
            extent = 0;
            break;
        }
        extent += (sz[i] - 1) * st[i];
    }
    StaxTensor *base = stax_tensor_empty(1, &extent, dt);
    if (base == NULL) {
        return NULL;
    }
    StaxTensor *t = stax_tensor_view(base, n1, sz, st, 0);
    Py_DECREF(base);
    return (PyObject *)t;
}

static PyMethodDef tensor_module_methods[] = {
    {"from_numpy", py_from_numpy, METH_O, NULL},
    {"_external_memory", py_external_memory, METH_O,
     "_external_memory(t) -> t: mark t's storage as memory older than any trace"},
    {"_set_repr_hook", py_set_repr_hook, METH_O, NULL},
    {"_tensor_install", py_tensor_install, METH_VARARGS, NULL},
    {"is_tensor", py_is_tensor, METH_O, NULL},
    {"empty_strided", py_empty_strided, METH_VARARGS, NULL},
    {NULL},
};

int
stax_tensor_type_init(PyObject *m)
{
    if (PyType_Ready(&StaxStorage_TypeObj) < 0
        || PyType_Ready(&StaxTensor_TypeObj) < 0) {
        return -1;
    }
    StaxTensor_Type = &StaxTensor_TypeObj;
    StaxStorage_Type = &StaxStorage_TypeObj;
    /* make NumPy defer binary ops to Tensor */
    PyObject *prio = PyFloat_FromDouble(1000.0);
    if (prio == NULL
        || PyDict_SetItemString(StaxTensor_TypeObj.tp_dict,
                                "__array_priority__", prio) < 0) {
        Py_XDECREF(prio);
        return -1;
    }
    Py_DECREF(prio);
    PyType_Modified(&StaxTensor_TypeObj);
    if (PyModule_AddObjectRef(m, "Tensor", (PyObject *)&StaxTensor_TypeObj) < 0
        || PyModule_AddObjectRef(m, "Storage",
                                 (PyObject *)&StaxStorage_TypeObj) < 0
        || PyModule_AddFunctions(m, tensor_module_methods) < 0) {
        return -1;
    }
    return 0;
}
