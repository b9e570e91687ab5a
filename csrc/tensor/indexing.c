/* Tensor indexing. Basic keys (ints, slices with step > 0, None, Ellipsis)
 * give views on the same storage; keys holding bool masks, integer tensors,
 * lists or arrays (advanced indexing) go through NumPy and copy, as in
 * PyTorch. Every write bumps the storage's version counter. */
#include "tensor/tensor_internal.h"
#include "tensor/stax_numpy.h"

static int
is_basic_item(PyObject *o)
{
    return (PyLong_Check(o) && !PyBool_Check(o)) || PySlice_Check(o)
           || o == Py_None || o == Py_Ellipsis;
}

static int
bad_index_type(PyObject *o)
{
    return PyFloat_Check(o) || PyUnicode_Check(o) || PyBytes_Check(o)
           || PyComplex_Check(o);
}

/* -1 error, 0 advanced, 1 basic. */
static int
classify(PyObject *key)
{
    Py_ssize_t n = PyTuple_GET_SIZE(key);
    int basic = 1, ell = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o = PyTuple_GET_ITEM(key, i);
        if (bad_index_type(o)) {
            PyErr_Format(PyExc_IndexError,
                         "only integers, slices (`:`), ellipsis (`...`), None "
                         "and long or byte or bool tensors are valid indices "
                         "(got %.100s)", Py_TYPE(o)->tp_name);
            return -1;
        }
        if (o == Py_Ellipsis && ell++) {
            PyErr_SetString(PyExc_IndexError,
                            "an index can only have a single ellipsis "
                            "('...')");
            return -1;
        }
        if (!is_basic_item(o)) {
            basic = 0;
        }
    }
    return basic;
}

static StaxTensor *
basic_index(StaxTensor *t, PyObject *key)
{
    Py_ssize_t n = PyTuple_GET_SIZE(key);
    int consumed = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o = PyTuple_GET_ITEM(key, i);
        if (o != Py_None && o != Py_Ellipsis) {
            consumed++;
        }
    }
    if (consumed > t->ndim) {
        PyErr_Format(PyExc_IndexError,
                     "too many indices for tensor of dimension %d", t->ndim);
        return NULL;
    }
    int64_t sz[STAX_MAX_DIMS], st[STAX_MAX_DIMS], off = t->offset;
    int k = 0, d = 0;
#define PUSH(S, T)                                                       \
    do {                                                                 \
        if (k >= STAX_MAX_DIMS) {                                        \
            PyErr_SetString(PyExc_IndexError, "too many dimensions");    \
            return NULL;                                                 \
        }                                                                \
        sz[k] = (S);                                                     \
        st[k] = (T);                                                     \
        k++;                                                             \
    } while (0)
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o = PyTuple_GET_ITEM(key, i);
        if (o == Py_None) {
            PUSH(1, d < t->ndim ? t->sizes[d] * t->strides[d] : 1);
        }
        else if (o == Py_Ellipsis) {
            int take = t->ndim - consumed;
            for (int j = 0; j < take; j++, d++) {
                PUSH(t->sizes[d], t->strides[d]);
            }
        }
        else if (PySlice_Check(o)) {
            Py_ssize_t start, stop, step;
            if (PySlice_Unpack(o, &start, &stop, &step) < 0) {
                return NULL;
            }
            if (step <= 0) {
                PyErr_SetString(PyExc_ValueError,
                                "step must be greater than zero");
                return NULL;
            }
            Py_ssize_t len = PySlice_AdjustIndices((Py_ssize_t)t->sizes[d],
                                                   &start, &stop, step);
            off += start * t->strides[d];
            PUSH(len, t->strides[d] * step);
            d++;
        }
        else {
            int64_t idx = PyLong_AsLongLong(o);
            if (idx == -1 && PyErr_Occurred()) {
                return NULL;
            }
            int64_t size = t->sizes[d];
            if (idx < -size || idx >= size) {
                PyErr_Format(PyExc_IndexError,
                             "index %lld is out of bounds for dimension %d "
                             "with size %lld", (long long)idx, d,
                             (long long)size);
                return NULL;
            }
            if (idx < 0) {
                idx += size;
            }
            off += idx * t->strides[d];
            d++;
        }
    }
    for (; d < t->ndim; d++) {
        PUSH(t->sizes[d], t->strides[d]);
    }
#undef PUSH
    return stax_tensor_view(t, k, sz, st, off);
}

/* a NumPy-ready key: tensors -> arrays, lists -> arrays */
static PyObject *
numpy_key(PyObject *key)
{
    Py_ssize_t n = PyTuple_GET_SIZE(key);
    PyObject *r = PyTuple_New(n);
    if (r == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o = PyTuple_GET_ITEM(key, i), *c;
        if (StaxTensor_Check(o)) {
            StaxTensor *it = (StaxTensor *)o;
            if (stax_dtype_is_floating(it->dtype) || it->dtype == STAX_INT8
                || it->dtype == STAX_INT16) {
                Py_DECREF(r);
                PyErr_SetString(PyExc_IndexError,
                                "tensors used as indices must be long, int, "
                                "byte or bool tensors");
                return NULL;
            }
            c = stax_tensor_as_array(it);
            if (c != NULL && it->dtype == STAX_UINT8) {
                /* torch: a byte tensor index is a mask (deprecated) */
                if (PyErr_WarnEx(PyExc_UserWarning,
                                 "indexing with dtype torch.uint8 is now deprecated, "
                                 "please use a dtype torch.bool instead.", 1) < 0) {
                    Py_CLEAR(c);
                }
                else {
                    Py_SETREF(c, (PyObject *)PyArray_Cast((PyArrayObject *)c, NPY_BOOL));
                }
            }
        }
        else if (PyList_Check(o)) {
            c = PyArray_FromAny(o, NULL, 0, 0, 0, NULL);
            if (c != NULL && PyArray_SIZE((PyArrayObject *)c) == 0) {
                Py_SETREF(c, (PyObject *)PyArray_Cast((PyArrayObject *)c,
                                                     NPY_INT64));
            }
            if (c != NULL && PyArray_ISFLOAT((PyArrayObject *)c)) {
                Py_DECREF(c);
                Py_DECREF(r);
                PyErr_SetString(PyExc_IndexError,
                                "tensors used as indices must be long, int, "
                                "byte or bool tensors");
                return NULL;
            }
        }
        else {
            c = Py_NewRef(o);
        }
        if (c == NULL) {
            Py_DECREF(r);
            return NULL;
        }
        PyTuple_SET_ITEM(r, i, c);
    }
    return r;
}

/* nk (as numpy_key made it) without an Ellipsis that stands for no dims:
 * torch counts advanced indices on either side of it as adjacent
 * (x[:2, i, j, ..., m] keeps the broadcast dims in place), NumPy as
 * separated (it moves them first). A new reference; NULL with an error. */
static PyObject *
drop_empty_ellipsis(StaxTensor *t, PyObject *nk)
{
    Py_ssize_t n = PyTuple_GET_SIZE(nk), used = 0, ell = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o = PyTuple_GET_ITEM(nk, i);
        if (o == Py_Ellipsis) {
            ell = i;
        }
        else if (PyArray_Check(o) && PyArray_ISBOOL((PyArrayObject *)o)) {
            used += PyArray_NDIM((PyArrayObject *)o);
        }
        else if (o != Py_None) {
            used += 1;
        }
    }
    if (ell < 0 || used != t->ndim) {
        return Py_NewRef(nk);
    }
    PyObject *r = PyTuple_New(n - 1);
    if (r == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0, j = 0; i < n; i++) {
        if (i != ell) {
            PyTuple_SET_ITEM(r, j++, Py_NewRef(PyTuple_GET_ITEM(nk, i)));
        }
    }
    return r;
}

/* torch's bounds error for the integer arrays of an advanced key (nk, as
 * numpy_key made it): "index i is out of bounds for dimension j with size
 * n", j counting the advanced indices before it (torch indexes the
 * advanced dims alone; NumPy's message names the tensor's own axis).
 * 0 in bounds (or not an integer array: NumPy judges), -1 raised. */
static int
adv_bounds(StaxTensor *t, PyObject *nk)
{
    Py_ssize_t n = PyTuple_GET_SIZE(nk);
    int consumed = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o = PyTuple_GET_ITEM(nk, i);
        if (o == Py_None || o == Py_Ellipsis) {
            continue;
        }
        consumed += PyArray_Check(o) && PyArray_ISBOOL((PyArrayObject *)o)
                    ? PyArray_NDIM((PyArrayObject *)o) : 1;
    }
    int d = 0, ord = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o = PyTuple_GET_ITEM(nk, i);
        if (o == Py_None) {
            continue;
        }
        if (o == Py_Ellipsis) {
            d += t->ndim - consumed;
            continue;
        }
        if (!PyArray_Check(o)) {
            d++;
            continue;
        }
        PyArrayObject *a = (PyArrayObject *)o;
        if (PyArray_ISBOOL(a)) {
            d += PyArray_NDIM(a);
            ord += PyArray_NDIM(a);
            continue;
        }
        if (!PyArray_ISINTEGER(a) || d >= t->ndim) {
            return 0;
        }
        PyArrayObject *c = (PyArrayObject *)PyArray_FromAny(
            o, PyArray_DescrFromType(NPY_INT64), 0, 0, NPY_ARRAY_CARRAY_RO, NULL);
        if (c == NULL) {
            PyErr_Clear();
            return 0;
        }
        const int64_t *v = (const int64_t *)PyArray_DATA(c);
        npy_intp m = PyArray_SIZE(c);
        int64_t size = t->sizes[d];
        for (npy_intp j = 0; j < m; j++) {
            if (v[j] < -size || v[j] >= size) {
                PyErr_Format(PyExc_IndexError,
                             "index %lld is out of bounds for dimension %d with size %lld",
                             (long long)v[j], ord, (long long)size);
                Py_DECREF(c);
                return -1;
            }
        }
        Py_DECREF(c);
        d++;
        ord++;
    }
    return 0;
}

/* NumPy's messages say "axis"; PyTorch's say "dimension" */
static void
translate_numpy_error(PyObject *as_type)
{
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    PyErr_NormalizeException(&et, &ev, &tb);
    PyObject *msg = ev ? PyObject_Str(ev) : NULL;
    PyObject *m2 = msg ? PyObject_CallMethod(msg, "replace", "ss", "axis",
                                             "dimension") : NULL;
    PyObject *m3 = m2 ? PyObject_CallMethod(m2, "replace", "ss", "array",
                                            "tensor") : NULL;
    if (m3 != NULL) {
        PyObject *typ = as_type ? as_type : et;
        if (PyErr_GivenExceptionMatches(et, PyExc_IndexError)) {
            typ = PyExc_IndexError;
        }
        PyErr_SetObject(typ, m3);
        Py_XDECREF(et);
        Py_XDECREF(ev);
        Py_XDECREF(tb);
    }
    else {
        PyErr_Restore(et, ev, tb);
    }
    Py_XDECREF(msg);
    Py_XDECREF(m2);
    Py_XDECREF(m3);
}

/* torch reads a 0-d integer tensor in a key (any integer dtype but uint8,
 * which is a mask as bool is) as the int it holds: a select, so x[t0] is a
 * view and x[t0, :, i] has the select's placement, not an advanced
 * index's. */
static int
is_int_scalar_tensor(PyObject *o)
{
    if (!StaxTensor_Check(o)) {
        return 0;
    }
    StaxTensor *it = (StaxTensor *)o;
    return it->ndim == 0 && !stax_dtype_is_floating(it->dtype)
           && it->dtype != STAX_BOOL && it->dtype != STAX_UINT8;
}

/* the key as a tuple, 0-d integer tensors replaced by their ints */
static PyObject *
as_key_tuple(PyObject *key)
{
    PyObject *k = PyTuple_Check(key) ? Py_NewRef(key) : PyTuple_Pack(1, key);
    if (k == NULL) {
        return NULL;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(k);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!is_int_scalar_tensor(PyTuple_GET_ITEM(k, i))) {
            continue;
        }
        PyObject *r = PyTuple_New(n);
        if (r == NULL) {
            Py_DECREF(k);
            return NULL;
        }
        for (Py_ssize_t j = 0; j < n; j++) {
            PyObject *o = PyTuple_GET_ITEM(k, j);
            PyObject *c = is_int_scalar_tensor(o) ? PyNumber_Index(o) : Py_NewRef(o);
            if (c == NULL) {
                Py_DECREF(r);
                Py_DECREF(k);
                return NULL;
            }
            PyTuple_SET_ITEM(r, j, c);
        }
        Py_DECREF(k);
        return r;
    }
    return k;
}

/* torch applies the ints of an advanced key as selects first (x[0, :, i]
 * has shape (3, len(i)) for x of shape (2, 3, 4); NumPy counts the 0 as an
 * advanced index and puts the broadcast dims first): *t1 = the selects
 * applied (a view), *k2 = the key without its ints. 0: done, 1: no ints
 * (nothing changed), -1: error */
static int
select_ints_first(StaxTensor *t, PyObject *k, StaxTensor **t1, PyObject **k2)
{
    Py_ssize_t n = PyTuple_GET_SIZE(k), nints = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o = PyTuple_GET_ITEM(k, i);
        nints += PyLong_Check(o) && !PyBool_Check(o);
    }
    if (nints == 0) {
        return 1;
    }
    PyObject *key1 = PyList_New(0), *key2 = PyList_New(0), *k1 = NULL;
    int rc = -1;
    if (key1 == NULL || key2 == NULL) {
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o = PyTuple_GET_ITEM(k, i);
        if (PyLong_Check(o) && !PyBool_Check(o)) {
            if (PyList_Append(key1, o) < 0) {
                goto done;
            }
            continue;
        }
        if (PyList_Append(key2, o) < 0) {
            goto done;
        }
        if (o == Py_None) {
            continue;
        }
        if (o == Py_Ellipsis) {
            if (PyList_Append(key1, o) < 0) {
                goto done;
            }
            continue;
        }
        /* a bool mask consumes as many dims as it has */
        Py_ssize_t dims = 1;
        if (StaxTensor_Check(o) && ((StaxTensor *)o)->dtype == STAX_BOOL) {
            dims = ((StaxTensor *)o)->ndim;
        }
        else if (PyList_Check(o) || PyArray_Check(o)) {
            PyObject *a = PyArray_FromAny(o, NULL, 0, 0, 0, NULL);
            if (a == NULL) {
                goto done;
            }
            if (PyArray_ISBOOL((PyArrayObject *)a)) {
                dims = PyArray_NDIM((PyArrayObject *)a);
            }
            Py_DECREF(a);
        }
        for (Py_ssize_t d = 0; d < dims; d++) {
            PyObject *full = PySlice_New(NULL, NULL, NULL);
            if (full == NULL || PyList_Append(key1, full) < 0) {
                Py_XDECREF(full);
                goto done;
            }
            Py_DECREF(full);
        }
    }
    k1 = PyList_AsTuple(key1);
    *k2 = k1 ? PyList_AsTuple(key2) : NULL;
    if (*k2 == NULL) {
        goto done;
    }
    *t1 = basic_index(t, k1);
    if (*t1 == NULL) {
        Py_CLEAR(*k2);
        goto done;
    }
    rc = 0;
done:
    Py_XDECREF(key1);
    Py_XDECREF(key2);
    Py_XDECREF(k1);
    return rc;
}

PyObject *
stax_tensor_getitem(StaxTensor *t, PyObject *key)
{
    PyObject *k = as_key_tuple(key), *nk = NULL, *arr = NULL, *res = NULL;
    PyObject *out = NULL;
    if (k == NULL) {
        return NULL;
    }
    int c = classify(k);
    if (c < 0) {
        goto done;
    }
    if (c == 1) {
        out = (PyObject *)basic_index(t, k);
        goto done;
    }
    if (stax_tensor_is_cuda(t)) {
        out = stax_tensor_cuda_getitem(t, k);
        goto done;
    }
    {
        StaxTensor *t1 = NULL;
        PyObject *k2 = NULL;
        int s = select_ints_first(t, k, &t1, &k2);
        if (s < 0) {
            goto done;
        }
        if (s == 0) {
            out = stax_tensor_getitem(t1, k2);
            if (out != NULL && StaxTensor_Check(out) && t->requires_grad && stax_grad_enabled()) {
                stax_tensor_set_result_requires_grad((StaxTensor *)out, 1);
            }
            Py_DECREF(t1);
            Py_DECREF(k2);
            goto done;
        }
    }
    nk = numpy_key(k);
    if (nk != NULL) {
        Py_SETREF(nk, drop_empty_ellipsis(t, nk));
    }
    if (nk != NULL && adv_bounds(t, nk) < 0) {
        goto done;
    }
    arr = nk ? stax_tensor_as_storage_array(t) : NULL;
    if (arr == NULL) {
        goto done;
    }
    res = PyObject_GetItem(arr, nk);
    if (res == NULL) {
        translate_numpy_error(NULL);
        goto done;
    }
    {
        PyObject *cp = PyArray_FromAny(res, NULL, 0, 0,
                                       NPY_ARRAY_DEFAULT | NPY_ARRAY_ENSURECOPY,
                                       NULL);
        if (cp == NULL) {
            goto done;
        }
        StaxTensor *r = stax_tensor_from_storage_array(cp, t->dtype);
        Py_DECREF(cp);
        if (r != NULL && t->requires_grad && stax_grad_enabled()) {
            stax_tensor_set_result_requires_grad(r, 1);
        }
        out = (PyObject *)r;
    }
done:
    Py_XDECREF(k);
    Py_XDECREF(nk);
    Py_XDECREF(arr);
    Py_XDECREF(res);
    return out;
}

/* the bfloat16 bits (a uint16 array) of numbers, lists or an array */
static PyObject *
bf16_bits_of(PyObject *value)
{
    PyObject *a = PyArray_FromAny(value,
                                  PyArray_DescrFromType(NPY_FLOAT32), 0, 0,
                                  NPY_ARRAY_DEFAULT | NPY_ARRAY_ENSURECOPY
                                  | NPY_ARRAY_FORCECAST, NULL), *r = NULL;
    StaxTensor *f = a ? stax_tensor_from_array(a) : NULL, *b;
    Py_XDECREF(a);
    b = f ? stax_tensor_to(f, STAX_BFLOAT16, 1) : NULL;
    Py_XDECREF(f);
    if (b != NULL) {
        r = stax_tensor_as_storage_array(b);
        Py_DECREF(b);
    }
    return r;
}

int
stax_tensor_setitem(StaxTensor *t, PyObject *key, PyObject *value)
{
    PyObject *k = NULL, *nk = NULL, *arr = NULL, *val = NULL;
    int rc = -1;
    if (value == NULL) {
        PyErr_SetString(PyExc_TypeError, "Tensor does not support item "
                        "deletion");
        return -1;
    }
    stax_tensor_will_write(t);
    k = as_key_tuple(key);
    if (k == NULL) {
        return -1;
    }
    int c = classify(k);
    if (c < 0) {
        goto done;
    }
    if (c == 1) {
        StaxTensor *v = basic_index(t, k);
        if (v == NULL) {
            goto done;
        }
        rc = stax_tensor_check_no_overlap((PyObject *)v, value, 0);
        if (rc == 0) {
            rc = stax_tensor_copy_from(v, value);   /* bumps the shared version */
        }
        Py_DECREF(v);
        goto done;
    }
    if (stax_tensor_is_cuda(t)) {
        rc = stax_tensor_cuda_setitem(t, k, value);
        goto done;
    }
    /* torch's index_put_: the value may not share memory with the
     * tensor written */
    if (stax_tensor_check_no_overlap((PyObject *)t, value, 1) < 0) {
        goto done;
    }
    {
        /* the ints select first, as in getitem: x[0, :, i] = v writes the
         * (3, len(i)) block getitem reads, not NumPy's (len(i), 3) */
        StaxTensor *t1 = NULL;
        PyObject *k2 = NULL;
        int s = select_ints_first(t, k, &t1, &k2);
        if (s < 0) {
            goto done;
        }
        if (s == 0) {
            rc = stax_tensor_setitem(t1, k2, value);
            Py_DECREF(t1);
            Py_DECREF(k2);
            goto done;
        }
    }
    nk = numpy_key(k);
    if (nk != NULL) {
        Py_SETREF(nk, drop_empty_ellipsis(t, nk));
    }
    if (nk != NULL && adv_bounds(t, nk) < 0) {
        goto done;
    }
    arr = nk ? stax_tensor_as_storage_array(t) : NULL;
    if (arr == NULL) {
        goto done;
    }
    if (StaxTensor_Check(value) && ((StaxTensor *)value)->dtype != t->dtype
        && (t->dtype == STAX_BFLOAT16
            || ((StaxTensor *)value)->dtype == STAX_BFLOAT16)) {
        /* NumPy casts bits: the values are converted first */
        StaxTensor *cv = stax_tensor_to((StaxTensor *)value, t->dtype, 1);
        val = cv ? stax_tensor_as_storage_array(cv) : NULL;
        Py_XDECREF(cv);
    }
    else if (StaxTensor_Check(value)) {
        val = stax_tensor_as_storage_array((StaxTensor *)value);
    }
    else if (t->dtype == STAX_BFLOAT16
             && (PyNumber_Check(value) || PyList_Check(value)
                 || PyTuple_Check(value) || PyArray_Check(value))) {
        val = bf16_bits_of(value);
    }
    else if (PyNumber_Check(value) || PyList_Check(value)
             || PyTuple_Check(value) || PyArray_Check(value)) {
        val = Py_NewRef(value);
    }
    else {
        PyErr_Format(PyExc_TypeError,
                     "can't assign a %.100s to a Tensor",
                     Py_TYPE(value)->tp_name);
        goto done;
    }
    if (val == NULL) {
        goto done;
    }
    if (PyObject_SetItem(arr, nk, val) < 0) {
        translate_numpy_error(PyExc_RuntimeError);
        goto done;
    }
    stax_tensor_bump_version(t);
    rc = 0;
done:
    Py_XDECREF(k);
    Py_XDECREF(nk);
    Py_XDECREF(arr);
    Py_XDECREF(val);
    return rc;
}
