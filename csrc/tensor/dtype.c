/* dtypes (tensorplay.dtype singletons), PyTorch type promotion, the default
 * dtype, tensorplay.Size and tensorplay.device. */
#include "tensor/tensor_internal.h"
#include "tensor/stax_numpy.h"
#include <structmember.h>
#include <math.h>

static const char *dtype_names[STAX_NUM_DTYPES] = {
    "bool", "uint8", "int8", "int16", "int32", "int64",
    "float16", "float32", "float64", "bfloat16",
};
/* PyTorch's scalar-type names (x.type() "torch.FloatTensor", error messages) */
static const char *dtype_titles[STAX_NUM_DTYPES] = {
    "Bool", "Byte", "Char", "Short", "Int", "Long", "Half", "Float", "Double",
    "BFloat16",
};
static const int dtype_sizes[STAX_NUM_DTYPES] = {1, 1, 1, 2, 4, 8, 2, 4, 8, 2};
static const int dtype_npy[STAX_NUM_DTYPES] = {
    NPY_BOOL, NPY_UINT8, NPY_INT8, NPY_INT16, NPY_INT32, NPY_INT64,
    NPY_FLOAT16, NPY_FLOAT32, NPY_FLOAT64, NPY_UINT16,
};
static StaxDTypeObject dtype_objs[STAX_NUM_DTYPES];
static stax_dtype_t default_dtype = STAX_FLOAT32;

int
stax_dtype_itemsize(stax_dtype_t dt)
{
    return dtype_sizes[dt];
}

const char *
stax_dtype_name(stax_dtype_t dt)
{
    return dtype_names[dt];
}

const char *
stax_dtype_title(stax_dtype_t dt)
{
    return dt >= 0 && dt < STAX_NUM_DTYPES ? dtype_titles[dt] : "";
}

int
stax_dtype_is_floating(stax_dtype_t dt)
{
    return dt == STAX_FLOAT16 || dt == STAX_FLOAT32 || dt == STAX_FLOAT64
           || dt == STAX_BFLOAT16;
}

int
stax_dtype_is_half_like(stax_dtype_t dt)
{
    return dt == STAX_FLOAT16 || dt == STAX_BFLOAT16;
}

double
stax_half_like_to_double(stax_dtype_t dt, uint16_t bits)
{
    return dt == STAX_BFLOAT16 ? (double)stax_bf16_to_float(bits)
                               : stax_half_to_double(bits);
}

uint16_t
stax_double_to_half_like(stax_dtype_t dt, double d)
{
    return dt == STAX_BFLOAT16 ? stax_float_to_bf16((float)d)
                               : stax_double_to_half(d);
}

int
stax_dtype_is_integral(stax_dtype_t dt)
{
    return dt >= STAX_UINT8 && dt <= STAX_INT64;
}

int
stax_dtype_to_npy(stax_dtype_t dt)
{
    return dtype_npy[dt];
}

int
stax_dtype_from_npy(int npy_type, stax_dtype_t *out)
{
    switch (npy_type) {
    case NPY_BOOL: *out = STAX_BOOL; return 0;
    case NPY_UINT8: *out = STAX_UINT8; return 0;
    case NPY_INT8: *out = STAX_INT8; return 0;
    case NPY_INT16: *out = STAX_INT16; return 0;
    case NPY_INT32: *out = STAX_INT32; return 0;
    case NPY_FLOAT16: *out = STAX_FLOAT16; return 0;
    case NPY_FLOAT32: *out = STAX_FLOAT32; return 0;
    case NPY_FLOAT64: *out = STAX_FLOAT64; return 0;
    default: break;
    }
    if (npy_type == NPY_LONG || npy_type == NPY_LONGLONG) {
        *out = STAX_INT64;
        return 0;
    }
    if (npy_type == NPY_INT) {
        *out = STAX_INT32;
        return 0;
    }
    {
        PyArray_Descr *d = PyArray_DescrFromType(npy_type);
        PyObject *name = d ? PyObject_Str((PyObject *)d) : NULL;
        Py_XDECREF(d);
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError,
                     "can't convert np.ndarray of type numpy.%s. The only "
                     "supported types are: float64, float32, float16, int64, "
                     "int32, int16, int8, uint8, and bool.",
                     name ? PyUnicode_AsUTF8(name) : "?");
        Py_XDECREF(name);
    }
    return -1;
}

PyObject *
stax_dtype_object(stax_dtype_t dt)
{
    return (PyObject *)&dtype_objs[dt];
}

stax_dtype_t
stax_default_dtype(void)
{
    return default_dtype;
}

static const struct { const char *name; stax_dtype_t dt; } dtype_aliases[] = {
    {"bool", STAX_BOOL}, {"uint8", STAX_UINT8}, {"int8", STAX_INT8},
    {"int16", STAX_INT16}, {"short", STAX_INT16}, {"int32", STAX_INT32},
    {"int", STAX_INT32}, {"int64", STAX_INT64}, {"long", STAX_INT64},
    {"float16", STAX_FLOAT16}, {"half", STAX_FLOAT16},
    {"float32", STAX_FLOAT32}, {"float", STAX_FLOAT32},
    {"float64", STAX_FLOAT64}, {"double", STAX_FLOAT64},
    {"bfloat16", STAX_BFLOAT16},
    {NULL, STAX_BOOL},
};

int
stax_dtype_from_object(PyObject *o, stax_dtype_t *out)
{
    if (Py_IS_TYPE(o, &StaxDType_TypeObj)) {
        *out = ((StaxDTypeObject *)o)->dt;
        return 0;
    }
    if (PyUnicode_Check(o)) {
        const char *s = PyUnicode_AsUTF8(o);
        if (s == NULL) {
            return -1;
        }
        if (strncmp(s, "tensorplay.", 11) == 0) {
            s += 11;
        }
        else if (strncmp(s, "torch.", 6) == 0) {
            s += 6;
        }
        for (int i = 0; dtype_aliases[i].name; i++) {
            if (strcmp(s, dtype_aliases[i].name) == 0) {
                *out = dtype_aliases[i].dt;
                return 0;
            }
        }
        PyErr_Format(PyExc_TypeError, "invalid dtype string '%s'", s);
        return -1;
    }
    if (o == (PyObject *)&PyFloat_Type) {
        *out = STAX_FLOAT64;
        return 0;
    }
    if (o == (PyObject *)&PyLong_Type) {
        *out = STAX_INT64;
        return 0;
    }
    if (o == (PyObject *)&PyBool_Type) {
        *out = STAX_BOOL;
        return 0;
    }
    if (PyArray_DescrCheck(o)
        || (PyType_Check(o)
            && PyType_IsSubtype((PyTypeObject *)o, &PyGenericArrType_Type))) {
        PyArray_Descr *d = NULL;
        if (!PyArray_DescrConverter(o, &d)) {
            return -1;
        }
        int r = stax_dtype_from_npy(d->type_num, out);
        Py_DECREF(d);
        return r;
    }
    PyErr_Format(PyExc_TypeError,
                 "dtype must be a tensorplay.dtype, got %.100s",
                 Py_TYPE(o)->tp_name);
    return -1;
}

/* ---- promotion ---------------------------------------------------- */

stax_dtype_t
stax_promote_types(stax_dtype_t a, stax_dtype_t b)
{
    if (a == b) {
        return a;
    }
    if (a == STAX_BOOL) {
        return b;
    }
    if (b == STAX_BOOL) {
        return a;
    }
    int fa = stax_dtype_is_floating(a), fb = stax_dtype_is_floating(b);
    if (fa && fb) {
        /* bfloat16 and float16 meet in float32; bfloat16 ranks below
         * float32 (its enum value is past float64's) */
        if (a == STAX_BFLOAT16 || b == STAX_BFLOAT16) {
            stax_dtype_t o = a == STAX_BFLOAT16 ? b : a;
            return o == STAX_FLOAT16 ? STAX_FLOAT32 : o;
        }
        return a > b ? a : b;
    }
    if (fa) {
        return a;
    }
    if (fb) {
        return b;
    }
    /* both integral */
    if (a == STAX_UINT8 || b == STAX_UINT8) {
        stax_dtype_t o = a == STAX_UINT8 ? b : a;
        return o == STAX_INT8 ? STAX_INT16 : o;
    }
    return a > b ? a : b;
}

#define STAX_UNDEF (-1)

static int
promote_skip_undef(int a, int b)
{
    if (a == STAX_UNDEF) {
        return b;
    }
    if (b == STAX_UNDEF) {
        return a;
    }
    return (int)stax_promote_types((stax_dtype_t)a, (stax_dtype_t)b);
}

static int
combine_categories(int higher, int lower)
{
    if (higher != STAX_UNDEF && stax_dtype_is_floating(higher)) {
        return higher;
    }
    if (higher == STAX_BOOL
        || (lower != STAX_UNDEF && stax_dtype_is_floating(lower))) {
        return promote_skip_undef(higher, lower);
    }
    if (higher != STAX_UNDEF) {
        return higher;
    }
    return lower;
}

stax_dtype_t
stax_result_type_of(const stax_promo_operand *ops, Py_ssize_t n)
{
    int r[3] = {STAX_UNDEF, STAX_UNDEF, STAX_UNDEF};   /* per rank */
    for (Py_ssize_t i = 0; i < n; i++) {
        r[ops[i].rank] = promote_skip_undef(r[ops[i].rank], ops[i].dtype);
    }
    int out = combine_categories(r[STAX_PROMO_TENSOR],
                                 combine_categories(r[STAX_PROMO_ZERO_DIM],
                                                    r[STAX_PROMO_SCALAR]));
    return out == STAX_UNDEF ? default_dtype : (stax_dtype_t)out;
}

int
stax_scalar_dtype(PyObject *o)
{
    if (PyBool_Check(o) || PyArray_IsScalar(o, Bool)) {
        return STAX_BOOL;
    }
    if (PyLong_Check(o) || PyArray_IsScalar(o, Integer)) {
        return STAX_INT64;
    }
    if (PyFloat_Check(o) || PyArray_IsScalar(o, Floating)) {
        return default_dtype;
    }
    return -1;
}

int
stax_result_type(PyObject *const *ops, Py_ssize_t n, stax_dtype_t *out)
{
    stax_promo_operand small[8] = {{0}}, *d = n <= 8 ? small : PyMem_Malloc(sizeof(*d) * (size_t)n);
    if (d == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o = ops[i];
        if (StaxTensor_Check(o)) {
            StaxTensor *t = (StaxTensor *)o;
            d[i].dtype = t->dtype;
            d[i].rank = t->ndim > 0 ? STAX_PROMO_TENSOR : STAX_PROMO_ZERO_DIM;
            continue;
        }
        int sd = stax_scalar_dtype(o);
        if (sd == STAX_INT64 && PyLong_Check(o)
            && stax_dtype_check_scalar(STAX_FLOAT64, o) < 0) {
            /* beyond torch's int64/uint64 Scalar */
            if (d != small) {
                PyMem_Free(d);
            }
            return -1;
        }
        if (sd < 0) {
            PyErr_Format(PyExc_TypeError,
                         "result_type(): expected Tensor or Number, "
                         "but got %.100s", Py_TYPE(o)->tp_name);
            if (d != small) {
                PyMem_Free(d);
            }
            return -1;
        }
        d[i].dtype = (stax_dtype_t)sd;
        d[i].rank = STAX_PROMO_SCALAR;
    }
    *out = stax_result_type_of(d, n);
    if (d != small) {
        PyMem_Free(d);
    }
    if (!stax_dtype_is_floating(*out)) {
        /* a Python int in [2^63, 2^64) is torch's uint64 Scalar: it wraps
         * into an integral tensor's dtype, but meeting only bool it needs
         * a uint64 promotion, which torch refuses */
        int u64 = 0, integral = 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *o = ops[i];
            if (StaxTensor_Check(o)) {
                integral |= ((StaxTensor *)o)->dtype != STAX_BOOL;
            }
            else if (PyLong_Check(o) && !PyBool_Check(o)) {
                int ovf = 0;
                (void)PyLong_AsLongLongAndOverflow(o, &ovf);
                u64 |= ovf > 0;
            }
        }
        if (u64 && !integral) {
            PyErr_SetString(PyExc_RuntimeError,
                            "Promotion for uint16, uint32, uint64 types is not "
                            "supported, attempted to promote Bool and UInt64");
            return -1;
        }
    }
    return 0;
}

/* ---- the dtype type ----------------------------------------------- */

static PyObject *
dtype_repr(PyObject *self)
{
    return PyUnicode_FromFormat("tensorplay.%s",
                                dtype_names[((StaxDTypeObject *)self)->dt]);
}

static PyObject *
dtype_is_fp(PyObject *self, void *c)
{
    return PyBool_FromLong(stax_dtype_is_floating(((StaxDTypeObject *)self)->dt));
}

static PyObject *
dtype_is_signed(PyObject *self, void *c)
{
    stax_dtype_t dt = ((StaxDTypeObject *)self)->dt;
    return PyBool_FromLong(dt != STAX_BOOL && dt != STAX_UINT8);
}

static PyObject *
dtype_false(PyObject *self, void *c)
{
    Py_RETURN_FALSE;
}

static PyObject *
dtype_itemsize(PyObject *self, void *c)
{
    return PyLong_FromLong(dtype_sizes[((StaxDTypeObject *)self)->dt]);
}

static PyObject *
dtype_np(PyObject *self, void *c)
{
    if (((StaxDTypeObject *)self)->dt == STAX_BFLOAT16) {
        /* NumPy has no bfloat16: no silent stand-in (the uint16 storage
         * would compute on bits) */
        PyErr_SetString(PyExc_TypeError, "Got unsupported ScalarType BFloat16");
        return NULL;
    }
    return (PyObject *)PyArray_DescrFromType(
        dtype_npy[((StaxDTypeObject *)self)->dt]);
}

static PyObject *
dtype_reduce(PyObject *self, PyObject *unused)
{
    return PyUnicode_FromString(dtype_names[((StaxDTypeObject *)self)->dt]);
}

static PyGetSetDef dtype_getset[] = {
    {"is_floating_point", dtype_is_fp, NULL, NULL, NULL},
    {"is_signed", dtype_is_signed, NULL, NULL, NULL},
    {"is_complex", dtype_false, NULL, NULL, NULL},
    {"itemsize", dtype_itemsize, NULL, NULL, NULL},
    {"numpy_dtype", dtype_np, NULL, NULL, NULL},
    {NULL},
};

static PyMethodDef dtype_methods[] = {
    {"__reduce__", dtype_reduce, METH_NOARGS, NULL},
    {NULL},
};

PyTypeObject StaxDType_TypeObj = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tensorplay.dtype",
    .tp_basicsize = sizeof(StaxDTypeObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_repr = dtype_repr,
    .tp_getset = dtype_getset,
    .tp_methods = dtype_methods,
};

/* ---- Size ------------------------------------------------------------ */

PyObject *
stax_size_new(int ndim, const int64_t *sizes)
{
    PyObject *t = StaxSize_TypeObj.tp_alloc(&StaxSize_TypeObj, ndim);
    if (t == NULL) {
        return NULL;
    }
    for (int i = 0; i < ndim; i++) {
        PyObject *v = PyLong_FromLongLong(sizes[i]);
        if (v == NULL) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, v);
    }
    return t;
}

static PyObject *
size_repr(PyObject *self)
{
    PyObject *lst = PySequence_List(self), *r = NULL;
    if (lst == NULL) {
        return NULL;
    }
    r = PyUnicode_FromFormat("tensorplay.Size(%R)", lst);
    Py_DECREF(lst);
    return r;
}

static PyObject *
size_numel(PyObject *self, PyObject *unused)
{
    int64_t n = 1;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(self); i++) {
        int64_t v = PyLong_AsLongLong(PyTuple_GET_ITEM(self, i));
        if (v == -1 && PyErr_Occurred()) {
            return NULL;
        }
        n *= v;
    }
    return PyLong_FromLongLong(n);
}

/* a plain tuple result (steals r) as a Size; anything else as it is */
static PyObject *
size_wrap_tuple(PyObject *r)
{
    if (r != NULL && PyTuple_CheckExact(r)) {
        PyObject *args = PyTuple_Pack(1, r);
        Py_DECREF(r);
        if (args == NULL) {
            return NULL;
        }
        r = PyTuple_Type.tp_new(&StaxSize_TypeObj, args, NULL);
        Py_DECREF(args);
    }
    return r;
}

static PyObject *
size_subscript(PyObject *self, PyObject *key)
{
    PyObject *r = PyTuple_Type.tp_as_mapping->mp_subscript(self, key);
    return PySlice_Check(key) ? size_wrap_tuple(r) : r;
}

static PyObject *
size_add(PyObject *a, PyObject *b)
{
    if (!PyTuple_Check(a) || !PyTuple_Check(b)) {
        Py_RETURN_NOTIMPLEMENTED;
    }
    return size_wrap_tuple(PySequence_Concat(a, b));
}

static PyObject *
size_reduce(PyObject *self, PyObject *unused)
{
    PyObject *t = PySequence_Tuple(self);
    if (t == NULL) {
        return NULL;
    }
    return Py_BuildValue("(O(N))", (PyObject *)&StaxSize_TypeObj, t);
}

static PyMappingMethods size_as_mapping = {
    .mp_subscript = size_subscript,
};
static PyNumberMethods size_as_number = {
    .nb_add = size_add,
};
static PyMethodDef size_methods[] = {
    {"numel", size_numel, METH_NOARGS, NULL},
    {"__reduce__", size_reduce, METH_NOARGS, NULL},
    {NULL},
};

PyTypeObject StaxSize_TypeObj = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tensorplay.Size",
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_TUPLE_SUBCLASS,
    .tp_repr = size_repr,
    .tp_as_mapping = &size_as_mapping,
    .tp_as_number = &size_as_number,
    .tp_methods = size_methods,
};

/* ---- device ------------------------------------------------------------ */

static PyObject *cpu_device = NULL;

PyObject *
stax_cpu_device(void)
{
    return cpu_device;
}

static PyObject *
device_new(PyTypeObject *tp, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"type", "index", NULL};
    PyObject *type = NULL, *index = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|O:device", kwlist,
                                     &type, &index)) {
        return NULL;
    }
    if (Py_IS_TYPE(type, &StaxDevice_TypeObj)) {
        return Py_NewRef(type);
    }
    if (!PyUnicode_Check(type)) {
        PyErr_Format(PyExc_TypeError,
                     "device() received an invalid combination of arguments "
                     "- got (%.100s)", Py_TYPE(type)->tp_name);
        return NULL;
    }
    PyObject *name = NULL;
    Py_ssize_t colon = PyUnicode_FindChar(type, ':', 0,
                                          PyUnicode_GET_LENGTH(type), 1);
    if (colon >= 0) {
        name = PyUnicode_Substring(type, 0, colon);
        PyObject *idx_s = PyUnicode_Substring(type, colon + 1,
                                              PyUnicode_GET_LENGTH(type));
        index = idx_s ? PyLong_FromUnicodeObject(idx_s, 10) : NULL;
        Py_XDECREF(idx_s);
        if (index == NULL) {
            Py_XDECREF(name);
            return NULL;
        }
    }
    else {
        name = Py_NewRef(type);
        Py_INCREF(index);
    }
    if (name == NULL) {
        Py_DECREF(index);
        return NULL;
    }
    const char *s = PyUnicode_AsUTF8(name);
    if (s == NULL || (strcmp(s, "cpu") != 0 && strcmp(s, "cuda") != 0
                      && strcmp(s, "meta") != 0)) {
        if (s != NULL) {
            PyErr_Format(PyExc_RuntimeError,
                         "Expected one of cpu, cuda, meta device type at "
                         "start of device string: %s", s);
        }
        Py_DECREF(name);
        Py_DECREF(index);
        return NULL;
    }
    if (strcmp(s, "cpu") == 0 && index == Py_None && cpu_device != NULL) {
        Py_DECREF(name);
        Py_DECREF(index);
        return Py_NewRef(cpu_device);
    }
    StaxDeviceObject *d = (StaxDeviceObject *)tp->tp_alloc(tp, 0);
    if (d == NULL) {
        Py_DECREF(name);
        Py_DECREF(index);
        return NULL;
    }
    d->type = name;
    d->index = index;
    return (PyObject *)d;
}

static void
device_dealloc(PyObject *self)
{
    StaxDeviceObject *d = (StaxDeviceObject *)self;
    Py_XDECREF(d->type);
    Py_XDECREF(d->index);
    Py_TYPE(self)->tp_free(self);
}

static PyObject *
device_repr(PyObject *self)
{
    StaxDeviceObject *d = (StaxDeviceObject *)self;
    if (d->index == Py_None) {
        return PyUnicode_FromFormat("device(type='%U')", d->type);
    }
    return PyUnicode_FromFormat("device(type='%U', index=%R)", d->type,
                                d->index);
}

static PyObject *
device_str(PyObject *self)
{
    StaxDeviceObject *d = (StaxDeviceObject *)self;
    if (d->index == Py_None) {
        return Py_NewRef(d->type);
    }
    return PyUnicode_FromFormat("%U:%R", d->type, d->index);
}

static PyObject *
device_richcompare(PyObject *a, PyObject *b, int op)
{
    if (op != Py_EQ && op != Py_NE) {
        Py_RETURN_NOTIMPLEMENTED;
    }
    PyObject *sa = device_str(a), *sb = NULL;
    if (sa == NULL) {
        return NULL;
    }
    if (Py_IS_TYPE(b, &StaxDevice_TypeObj)) {
        sb = device_str(b);
    }
    else if (PyUnicode_Check(b)) {
        sb = Py_NewRef(b);
    }
    else {
        Py_DECREF(sa);
        Py_RETURN_NOTIMPLEMENTED;
    }
    if (sb == NULL) {
        Py_DECREF(sa);
        return NULL;
    }
    PyObject *r = PyObject_RichCompare(sa, sb, op);
    Py_DECREF(sa);
    Py_DECREF(sb);
    return r;
}

static Py_hash_t
device_hash(PyObject *self)
{
    PyObject *s = device_str(self);
    if (s == NULL) {
        return -1;
    }
    Py_hash_t h = PyObject_Hash(s);
    Py_DECREF(s);
    return h;
}

static PyObject *
device_reduce(PyObject *self, PyObject *unused)
{
    StaxDeviceObject *d = (StaxDeviceObject *)self;
    return Py_BuildValue("(O(OO))", (PyObject *)Py_TYPE(self), d->type,
                         d->index);
}

static PyMethodDef device_methods[] = {
    {"__reduce__", device_reduce, METH_NOARGS, NULL},
    {NULL},
};

static PyMemberDef device_members[] = {
    {"type", T_OBJECT, offsetof(StaxDeviceObject, type), READONLY, NULL},
    {"index", T_OBJECT, offsetof(StaxDeviceObject, index), READONLY, NULL},
    {NULL},
};

PyTypeObject StaxDevice_TypeObj = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tensorplay.device",
    .tp_basicsize = sizeof(StaxDeviceObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = device_new,
    .tp_dealloc = device_dealloc,
    .tp_repr = device_repr,
    .tp_str = device_str,
    .tp_richcompare = device_richcompare,
    .tp_hash = device_hash,
    .tp_members = device_members,
    .tp_methods = device_methods,
};

/* ---- helpers: dims and sizes ----------------------------------------- */

int
stax_wrap_dim(int64_t dim, int ndim, int *out)
{
    int n = ndim > 0 ? ndim : 1;
    if (dim < -n || dim >= n) {
        PyErr_Format(PyExc_IndexError,
                     "Dimension out of range (expected to be in range of "
                     "[%d, %d], but got %lld)", -n, n - 1, (long long)dim);
        return -1;
    }
    *out = (int)(dim < 0 ? dim + n : dim);
    return 0;
}

int
stax_parse_int_seq(PyObject *o, int64_t *vals, int *n, const char *what)
{
    PyObject *seq = PySequence_Fast(o, what);
    if (seq == NULL) {
        return -1;
    }
    Py_ssize_t len = PySequence_Fast_GET_SIZE(seq);
    if (len > STAX_MAX_DIMS) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError, "%s: at most %d dimensions", what,
                     STAX_MAX_DIMS);
        return -1;
    }
    for (Py_ssize_t i = 0; i < len; i++) {
        PyObject *it = PySequence_Fast_GET_ITEM(seq, i);
        if (PyFloat_Check(it) || PyBool_Check(it)
            || !PyIndex_Check(it)) {
            PyErr_Format(PyExc_TypeError,
                         "%s must be tuple of ints, but found element of "
                         "type %.100s at pos %zd", what,
                         Py_TYPE(it)->tp_name, i);
            Py_DECREF(seq);
            return -1;
        }
        vals[i] = PyLong_AsLongLong(it);
        if (vals[i] == -1 && PyErr_Occurred()) {
            Py_DECREF(seq);
            return -1;
        }
    }
    *n = (int)len;
    Py_DECREF(seq);
    return 0;
}

int
stax_parse_sizes(PyObject *args, int64_t *sizes, int *ndim)
{
    if (PyTuple_GET_SIZE(args) == 1) {
        PyObject *a = PyTuple_GET_ITEM(args, 0);
        if (PyTuple_Check(a) || PyList_Check(a)) {
            return stax_parse_int_seq(a, sizes, ndim, "size");
        }
    }
    return stax_parse_int_seq(args, sizes, ndim, "size");
}

/* ---- module-level functions --------------------------------------- */

static PyObject *
py_promote_types(PyObject *self, PyObject *args)
{
    PyObject *a, *b;
    stax_dtype_t da, db;
    if (!PyArg_ParseTuple(args, "OO:promote_types", &a, &b)
        || stax_dtype_from_object(a, &da) < 0
        || stax_dtype_from_object(b, &db) < 0) {
        return NULL;
    }
    return Py_NewRef(stax_dtype_object(stax_promote_types(da, db)));
}

static PyObject *
py_result_type(PyObject *self, PyObject *args)
{
    stax_dtype_t dt;
    if (stax_result_type(&PyTuple_GET_ITEM(args, 0), PyTuple_GET_SIZE(args),
                         &dt) < 0) {
        return NULL;
    }
    return Py_NewRef(stax_dtype_object(dt));
}

static PyObject *
py_get_default_dtype(PyObject *self, PyObject *unused)
{
    return Py_NewRef(stax_dtype_object(default_dtype));
}

static PyObject *
py_set_default_dtype(PyObject *self, PyObject *arg)
{
    stax_dtype_t dt;
    if (stax_dtype_from_object(arg, &dt) < 0) {
        return NULL;
    }
    if (!stax_dtype_is_floating(dt)) {
        PyErr_Format(PyExc_TypeError,
                     "only floating-point types are supported as the "
                     "default type");
        return NULL;
    }
    default_dtype = dt;
    Py_RETURN_NONE;
}

/* torch's checked scalar conversion (c10::overflows): a Python number
 * written into a tensor of dtype dt (fill_, full, masked_fill, clamp's
 * bounds) raises when it lies outside dt's finite range; inf and nan pass
 * into floating dtypes, unsigned dtypes take down to -max (two's
 * complement wrap), bool takes anything. 0, or -1 + RuntimeError. */
int
stax_dtype_check_scalar(stax_dtype_t dt, PyObject *v)
{
    static const char *names[STAX_NUM_DTYPES] = {
        "bool", "uint8_t", "int8_t", "int16_t", "int", "int64_t",
        "c10::Half", "float", "double", "c10::BFloat16"};
    double lo, hi, f;
    int over = 0;
    if (PyLong_Check(v) && !PyBool_Check(v)) {
        /* torch's Python-int -> Scalar step, before any dtype: int64, or
         * uint64 for [2^63, 2^64), else OverflowError */
        int ovf = 0;
        (void)PyLong_AsLongLongAndOverflow(v, &ovf);
        if (ovf > 0) {
            (void)PyLong_AsUnsignedLongLong(v);
            if (PyErr_Occurred()) {
                PyErr_Clear();
                ovf = 2;
            }
        }
        if (ovf < 0 || ovf == 2) {
            PyErr_SetString(PyExc_OverflowError,
                            ovf < 0 ? "can't convert negative int to unsigned"
                                    : "int too big to convert");
            return -1;
        }
    }
    if (dt == STAX_BOOL || dt == STAX_FLOAT64 || PyBool_Check(v)
        || !(PyLong_Check(v) || PyFloat_Check(v))) {
        return 0;
    }
    switch (dt) {
    case STAX_UINT8: lo = -255.0; hi = 255.0; break;
    case STAX_INT8: lo = -128.0; hi = 127.0; break;
    case STAX_INT16: lo = -32768.0; hi = 32767.0; break;
    case STAX_INT32: lo = -2147483648.0; hi = 2147483647.0; break;
    case STAX_INT64: lo = -9223372036854775808.0; hi = 9223372036854775807.0; break;
    case STAX_FLOAT16: lo = -65504.0; hi = 65504.0; break;
    case STAX_FLOAT32: lo = -3.4028234663852886e38; hi = 3.4028234663852886e38; break;
    case STAX_BFLOAT16: lo = -3.3895313892515355e38; hi = 3.3895313892515355e38; break;
    default: return 0;
    }
    if (PyLong_Check(v)) {
        int ovf = 0;
        long long x = PyLong_AsLongLongAndOverflow(v, &ovf);
        if (x == -1 && PyErr_Occurred()) {
            return -1;
        }
        if (ovf) {
            /* beyond int64: only float32/bfloat16 can hold it */
            double dv = PyLong_AsDouble(v);
            over = !(dt == STAX_FLOAT32 || dt == STAX_BFLOAT16)
                   || (dv == -1.0 && PyErr_Occurred()) || fabs(dv) > hi;
            PyErr_Clear();
        }
        else if (dt == STAX_INT64) {
            over = 0;
        }
        else {
            over = (double)x < lo || (double)x > hi;
        }
    }
    else {
        /* inf and nan fit only a floating dtype; a negative float does
         * not fit uint8 (torch wraps negative ints only) */
        f = PyFloat_AS_DOUBLE(v);
        if (dt == STAX_UINT8) {
            lo = 0.0;
        }
        over = isfinite(f) ? (f < lo || f > hi) : !stax_dtype_is_floating(dt);
    }
    if (over) {
        PyErr_Format(PyExc_RuntimeError,
                     "value cannot be converted to type %s without overflow", names[dt]);
        return -1;
    }
    return 0;
}

static PyObject *
py_check_scalar(PyObject *self, PyObject *args)
{
    PyObject *v, *d;
    stax_dtype_t dt;
    (void)self;
    if (!PyArg_ParseTuple(args, "OO:_check_scalar", &v, &d)
        || stax_dtype_from_object(d, &dt) < 0 || stax_dtype_check_scalar(dt, v) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
py_check_no_overlap(PyObject *self, PyObject *args)
{
    PyObject *a, *b;
    int full;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOp:_check_no_overlap", &a, &b, &full)
        || stax_tensor_check_no_overlap(a, b, full) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyMethodDef dtype_module_methods[] = {
    {"_check_no_overlap", py_check_no_overlap, METH_VARARGS,
     "_check_no_overlap(out, src, full): torch's RuntimeError when writing out "
     "would read src's memory (full: the same memory in the same layout too)"},
    {"_check_scalar", py_check_scalar, METH_VARARGS,
     "_check_scalar(value, dtype): RuntimeError as torch when the Python number "
     "overflows dtype (torch's checked scalar conversion)"},
    {"promote_types", py_promote_types, METH_VARARGS, NULL},
    {"result_type", py_result_type, METH_VARARGS, NULL},
    {"get_default_dtype", py_get_default_dtype, METH_NOARGS, NULL},
    {"set_default_dtype", py_set_default_dtype, METH_O, NULL},
    {NULL},
};

int
stax_tensor_dtype_init(PyObject *m)
{
    StaxSize_TypeObj.tp_base = &PyTuple_Type;
    if (PyType_Ready(&StaxDType_TypeObj) < 0
        || PyType_Ready(&StaxSize_TypeObj) < 0
        || PyType_Ready(&StaxDevice_TypeObj) < 0) {
        return -1;
    }
    StaxDType_Type = &StaxDType_TypeObj;
    for (int i = 0; i < STAX_NUM_DTYPES; i++) {
        PyObject *o = (PyObject *)&dtype_objs[i];
        Py_SET_TYPE(o, &StaxDType_TypeObj);
        Py_SET_REFCNT(o, 1);
        dtype_objs[i].dt = (stax_dtype_t)i;
        if (PyModule_AddObjectRef(m, dtype_names[i], o) < 0) {
            return -1;
        }
    }
    for (int i = 0; dtype_aliases[i].name; i++) {
        if (PyModule_AddObjectRef(m, dtype_aliases[i].name,
                                  stax_dtype_object(dtype_aliases[i].dt)) < 0) {
            return -1;
        }
    }
    cpu_device = PyObject_CallFunction((PyObject *)&StaxDevice_TypeObj, "s",
                                       "cpu");
    if (cpu_device == NULL) {
        return -1;
    }
    if (PyModule_AddObjectRef(m, "dtype", (PyObject *)&StaxDType_TypeObj) < 0
        || PyModule_AddObjectRef(m, "Size", (PyObject *)&StaxSize_TypeObj) < 0
        || PyModule_AddObjectRef(m, "device",
                                 (PyObject *)&StaxDevice_TypeObj) < 0
        || PyModule_AddFunctions(m, dtype_module_methods) < 0) {
        return -1;
    }
    return 0;
}
