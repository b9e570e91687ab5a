/* Views: metadata-only functions sharing the storage (and its version
 * counter). Each C function takes a tensor and its arguments and returns a
 * new reference (or NULL + an exception worded like PyTorch's). The
 * matching Tensor methods are installed by stax_tensor_install_view_methods
 * (the ops room may replace them with op-table entries). */
#include "tensor/tensor_internal.h"

static PyObject *
int_list(int n, const int64_t *v)
{
    PyObject *l = PyList_New(n);
    for (int i = 0; l && i < n; i++) {
        PyList_SET_ITEM(l, i, PyLong_FromLongLong(v[i]));
    }
    return l;
}

StaxTensor *
stax_tensor_as_strided(StaxTensor *t, int ndim, const int64_t *sizes,
                       const int64_t *strides, int64_t offset)
{
    for (int i = 0; i < ndim; i++) {
        if (sizes[i] < 0) {
            PyErr_Format(PyExc_RuntimeError,
                         "as_strided: Negative sizes are not supported");
            return NULL;
        }
        if (strides[i] < 0) {
            PyObject *l = int_list(ndim, strides);
            PyErr_Format(PyExc_RuntimeError,
                         "as_strided: Negative strides are not supported at "
                         "the moment, got strides: %S", l);
            Py_XDECREF(l);
            return NULL;
        }
    }
    if (offset < 0) {
        offset = t->offset;
    }
    /* bounds check against the storage */
    int64_t isz = stax_dtype_itemsize(t->dtype), need = offset;
    int empty = 0;
    for (int i = 0; i < ndim; i++) {
        if (sizes[i] == 0) {
            empty = 1;
        }
        need += (sizes[i] - 1) * strides[i];
    }
    if (!empty && (need + 1) * isz > t->storage->nbytes) {
        PyObject *l = int_list(ndim, sizes), *l2 = int_list(ndim, strides);
        PyErr_Format(PyExc_RuntimeError,
                     "setStorage: sizes %S, strides %S, storage offset %lld, "
                     "and itemsize %lld requiring a storage size of %lld are "
                     "out of bounds for storage of size %lld",
                     l, l2, (long long)offset,
                     (long long)isz, (long long)((need + 1) * isz),
                     (long long)t->storage->nbytes);
        Py_XDECREF(l);
        Py_XDECREF(l2);
        return NULL;
    }
    return stax_tensor_view(t, ndim, sizes, strides, offset);
}

/* resolve one -1 and check numel; RuntimeError like torch */
static int
infer_size(StaxTensor *t, int ndim, const int64_t *shape, int64_t *out)
{
    int64_t numel = stax_tensor_numel(t), prod = 1;
    int infer = -1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] == -1) {
            if (infer >= 0) {
                PyErr_SetString(PyExc_RuntimeError,
                                "only one dimension can be inferred");
                return -1;
            }
            infer = i;
        }
        else if (shape[i] < 0) {
            PyErr_Format(PyExc_RuntimeError, "invalid shape dimension %lld",
                         (long long)shape[i]);
            return -1;
        }
        else {
            prod *= shape[i];
        }
        out[i] = shape[i];
    }
    if (infer >= 0 && prod != 0 && numel % prod == 0) {
        out[infer] = numel / prod;
        return 0;
    }
    if (infer < 0 && prod == numel) {
        return 0;
    }
    PyObject *l = int_list(ndim, shape);
    if (l != NULL) {
        PyErr_Format(PyExc_RuntimeError,
                     "shape '%S' is invalid for input of size %lld", l,
                     (long long)numel);
        Py_DECREF(l);
    }
    return -1;
}

/* torch's computeStride: 1 if a view is possible (strides in newstride). */
static int
compute_stride(StaxTensor *t, int nd, const int64_t *newshape,
               int64_t *newstride)
{
    int old_nd = t->ndim;
    const int64_t one = 1;
    const int64_t *oldshape = old_nd ? t->sizes : &one;
    const int64_t *oldstride = old_nd ? t->strides : &one;
    if (old_nd == 0) {
        old_nd = 1;
    }
    if (stax_tensor_numel(t) == 0) {
        stax_contiguous_strides(nd, newshape, newstride);
        return 1;
    }
    int view_d = nd - 1;
    int64_t chunk_base_stride = oldstride[old_nd - 1];
    int64_t tensor_numel = 1, view_numel = 1;
    for (int td = old_nd - 1; td >= 0; td--) {
        tensor_numel *= oldshape[td];
        if (td == 0 || (oldshape[td - 1] != 1
                        && oldstride[td - 1] != tensor_numel * chunk_base_stride)) {
            while (view_d >= 0 && (view_numel < tensor_numel
                                   || newshape[view_d] == 1)) {
                newstride[view_d] = view_numel * chunk_base_stride;
                view_numel *= newshape[view_d];
                view_d--;
            }
            if (view_numel != tensor_numel) {
                return 0;
            }
            if (td > 0) {
                chunk_base_stride = oldstride[td - 1];
                tensor_numel = 1;
                view_numel = 1;
            }
        }
    }
    return view_d == -1;
}

StaxTensor *
stax_tensor_view_shape(StaxTensor *t, int ndim, const int64_t *shape)
{
    int64_t sz[STAX_MAX_DIMS], st[STAX_MAX_DIMS];
    if (infer_size(t, ndim, shape, sz) < 0) {
        return NULL;
    }
    if (!compute_stride(t, ndim, sz, st)) {
        PyErr_SetString(PyExc_RuntimeError,
                        "view size is not compatible with input tensor's size "
                        "and stride (at least one dimension spans across two "
                        "contiguous subspaces). Use .reshape(...) instead.");
        return NULL;
    }
    return stax_tensor_view(t, ndim, sz, st, t->offset);
}

StaxTensor *
stax_tensor_reshape(StaxTensor *t, int ndim, const int64_t *shape)
{
    int64_t sz[STAX_MAX_DIMS], st[STAX_MAX_DIMS];
    if (infer_size(t, ndim, shape, sz) < 0) {
        return NULL;
    }
    if (compute_stride(t, ndim, sz, st)) {
        return stax_tensor_view(t, ndim, sz, st, t->offset);
    }
    StaxTensor *c = stax_tensor_to_dtype(t, t->dtype, 1), *r;
    if (c == NULL) {
        return NULL;
    }
    stax_contiguous_strides(ndim, sz, st);
    r = stax_tensor_view(c, ndim, sz, st, 0);
    if (r != NULL) {
        r->requires_grad = c->requires_grad;
        r->nonleaf = c->nonleaf;
    }
    Py_DECREF(c);
    return r;
}

StaxTensor *
stax_tensor_permute(StaxTensor *t, const int64_t *dims, int n)
{
    int64_t sz[STAX_MAX_DIMS], st[STAX_MAX_DIMS];
    int seen[STAX_MAX_DIMS] = {0};
    if (n != t->ndim) {
        PyErr_Format(PyExc_RuntimeError,
                     "permute(sparse_coo): number of dimensions in the tensor "
                     "input does not match the length of the desired ordering "
                     "of dimensions i.e. input.dim() = %d is not equal to "
                     "len(dims) = %d", t->ndim, n);
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        int d;
        if (stax_wrap_dim(dims[i], t->ndim, &d) < 0) {
            return NULL;
        }
        if (seen[d]) {
            PyErr_SetString(PyExc_RuntimeError,
                            "permute(): duplicate dims are not allowed.");
            return NULL;
        }
        seen[d] = 1;
        sz[i] = t->sizes[d];
        st[i] = t->strides[d];
    }
    return stax_tensor_view(t, n, sz, st, t->offset);
}

StaxTensor *
stax_tensor_transpose(StaxTensor *t, int64_t d0, int64_t d1)
{
    int a, b;
    if (stax_wrap_dim(d0, t->ndim, &a) < 0
        || stax_wrap_dim(d1, t->ndim, &b) < 0) {
        return NULL;
    }
    int64_t sz[STAX_MAX_DIMS], st[STAX_MAX_DIMS];
    memcpy(sz, t->sizes, sizeof(sz));
    memcpy(st, t->strides, sizeof(st));
    if (t->ndim > 0) {
        sz[a] = t->sizes[b];
        sz[b] = t->sizes[a];
        st[a] = t->strides[b];
        st[b] = t->strides[a];
    }
    return stax_tensor_view(t, t->ndim, sz, st, t->offset);
}

StaxTensor *
stax_tensor_t(StaxTensor *t)
{
    if (t->ndim > 2) {
        PyErr_Format(PyExc_RuntimeError,
                     "t() expects a tensor with <= 2 dimensions, but self is "
                     "%dD", t->ndim);
        return NULL;
    }
    if (t->ndim < 2) {
        return stax_tensor_view(t, t->ndim, t->sizes, t->strides, t->offset);
    }
    return stax_tensor_transpose(t, 0, 1);
}

StaxTensor *
stax_tensor_T(StaxTensor *t)
{
    int64_t dims[STAX_MAX_DIMS];
    for (int i = 0; i < t->ndim; i++) {
        dims[i] = t->ndim - 1 - i;
    }
    return stax_tensor_permute(t, dims, t->ndim);
}

StaxTensor *
stax_tensor_mT(StaxTensor *t)
{
    if (t->ndim < 2) {
        PyErr_Format(PyExc_RuntimeError,
                     "tensor.mT is only supported on matrices or batches of "
                     "matrices. Got %d-D tensor.", t->ndim);
        return NULL;
    }
    return stax_tensor_transpose(t, -2, -1);
}

StaxTensor *
stax_tensor_expand(StaxTensor *t, int ndim, const int64_t *sizes)
{
    int64_t sz[STAX_MAX_DIMS], st[STAX_MAX_DIMS];
    if (ndim < t->ndim) {
        PyObject *l = int_list(t->ndim, t->sizes);
        PyErr_Format(PyExc_RuntimeError,
                     "expand(torch.%sTensor{%S}, size=[%d]): the number of "
                     "sizes provided (%d) must be greater or equal to the "
                     "number of dimensions in the tensor (%d)",
                     stax_dtype_is_floating(t->dtype) ? "Float" : "Long",
                     l, ndim, ndim, t->ndim);
        Py_XDECREF(l);
        return NULL;
    }
    for (int i = ndim - 1; i >= 0; i--) {
        int off = ndim - 1 - i, td = t->ndim - 1 - off;
        int64_t want = sizes[i];
        if (td >= 0) {
            int64_t have = t->sizes[td];
            if (want == -1) {
                want = have;
            }
            if (have == want) {
                sz[i] = have;
                st[i] = t->strides[td];
            }
            else if (have == 1 && want >= 0) {
                sz[i] = want;
                st[i] = 0;
            }
            else {
                PyObject *a = int_list(ndim, sizes);
                PyObject *b = int_list(t->ndim, t->sizes);
                PyErr_Format(PyExc_RuntimeError,
                             "The expanded size of the tensor (%lld) must "
                             "match the existing size (%lld) at non-singleton "
                             "dimension %d.  Target sizes: %S.  Tensor sizes: "
                             "%S", (long long)want, (long long)have, i, a, b);
                Py_XDECREF(a);
                Py_XDECREF(b);
                return NULL;
            }
        }
        else {
            if (want < 0) {
                PyErr_Format(PyExc_RuntimeError,
                             "The expanded size of the tensor (%lld) isn't "
                             "allowed in a leading, non-existing dimension %d",
                             (long long)want, i);
                return NULL;
            }
            sz[i] = want;
            st[i] = 0;
        }
    }
    return stax_tensor_view(t, ndim, sz, st, t->offset);
}

StaxTensor *
stax_tensor_unsqueeze(StaxTensor *t, int64_t dim)
{
    int d;
    if (t->ndim >= STAX_MAX_DIMS) {
        PyErr_Format(PyExc_RuntimeError,
                     "tensorplay tensors have at most %d dimensions",
                     STAX_MAX_DIMS);
        return NULL;
    }
    if (stax_wrap_dim(dim, t->ndim + 1, &d) < 0) {
        return NULL;
    }
    int64_t sz[STAX_MAX_DIMS], st[STAX_MAX_DIMS];
    for (int i = 0, j = 0; i <= t->ndim; i++) {
        if (i == d) {
            sz[i] = 1;
            st[i] = d < t->ndim ? t->sizes[d] * t->strides[d] : 1;
        }
        else {
            sz[i] = t->sizes[j];
            st[i] = t->strides[j];
            j++;
        }
    }
    return stax_tensor_view(t, t->ndim + 1, sz, st, t->offset);
}

StaxTensor *
stax_tensor_squeeze(StaxTensor *t, const int64_t *dims, int n)
{
    int drop[STAX_MAX_DIMS] = {0};
    int64_t sz[STAX_MAX_DIMS], st[STAX_MAX_DIMS];
    if (n < 0) {
        for (int i = 0; i < t->ndim; i++) {
            drop[i] = t->sizes[i] == 1;
        }
    }
    else {
        for (int i = 0; i < n; i++) {
            int d;
            if (stax_wrap_dim(dims[i], t->ndim, &d) < 0) {
                return NULL;
            }
            if (t->ndim > 0 && t->sizes[d] == 1) {
                drop[d] = 1;
            }
        }
    }
    int k = 0;
    for (int i = 0; i < t->ndim; i++) {
        if (!drop[i]) {
            sz[k] = t->sizes[i];
            st[k] = t->strides[i];
            k++;
        }
    }
    return stax_tensor_view(t, k, sz, st, t->offset);
}

StaxTensor *
stax_tensor_flatten(StaxTensor *t, int64_t start, int64_t end)
{
    int s, e;
    if (stax_wrap_dim(start, t->ndim, &s) < 0
        || stax_wrap_dim(end, t->ndim, &e) < 0) {
        return NULL;
    }
    if (s > e) {
        PyErr_SetString(PyExc_RuntimeError,
                        "flatten() has invalid args: start_dim cannot come "
                        "after end_dim");
        return NULL;
    }
    if (t->ndim == 0) {
        int64_t one = 1;
        return stax_tensor_reshape(t, 1, &one);
    }
    if (s == e) {
        return stax_tensor_view(t, t->ndim, t->sizes, t->strides, t->offset);
    }
    int64_t sz[STAX_MAX_DIMS];
    int k = 0;
    for (int i = 0; i < s; i++) {
        sz[k++] = t->sizes[i];
    }
    int64_t p = 1;
    for (int i = s; i <= e; i++) {
        p *= t->sizes[i];
    }
    sz[k++] = p;
    for (int i = e + 1; i < t->ndim; i++) {
        sz[k++] = t->sizes[i];
    }
    return stax_tensor_reshape(t, k, sz);
}

StaxTensor *
stax_tensor_unflatten(StaxTensor *t, int64_t dim, int n, const int64_t *sizes)
{
    int d;
    if (stax_wrap_dim(dim, t->ndim, &d) < 0) {
        return NULL;
    }
    if (n == 0) {
        PyErr_SetString(PyExc_RuntimeError,
                        "unflatten: sizes must be non-empty");
        return NULL;
    }
    if (t->ndim + n - 1 > STAX_MAX_DIMS) {
        PyErr_SetString(PyExc_RuntimeError, "unflatten: too many dimensions");
        return NULL;
    }
    int64_t sz[STAX_MAX_DIMS];
    int k = 0;
    for (int i = 0; i < d; i++) {
        sz[k++] = t->sizes[i];
    }
    int64_t prod = 1, infer = -1;
    for (int i = 0; i < n; i++) {
        if (sizes[i] == -1) {
            infer = k;
        }
        else {
            prod *= sizes[i];
        }
        sz[k++] = sizes[i];
    }
    if (infer >= 0 && prod != 0) {
        sz[infer] = t->sizes[d] / prod;
        prod *= sz[infer];
    }
    if (prod != t->sizes[d]) {
        PyObject *l = int_list(n, sizes);
        PyErr_Format(PyExc_RuntimeError,
                     "unflatten: Provided sizes %S don't multiply up to the "
                     "size of dim %d (%lld) in the input tensor", l, d,
                     (long long)t->sizes[d]);
        Py_XDECREF(l);
        return NULL;
    }
    for (int i = d + 1; i < t->ndim; i++) {
        sz[k++] = t->sizes[i];
    }
    return stax_tensor_reshape(t, k, sz);
}

StaxTensor *
stax_tensor_slice(StaxTensor *t, int64_t dim, int64_t start, int64_t stop,
                  int64_t step)
{
    int d;
    if (t->ndim == 0) {
        PyErr_SetString(PyExc_IndexError,
                        "slice() cannot be applied to a 0-dim tensor.");
        return NULL;
    }
    if (stax_wrap_dim(dim, t->ndim, &d) < 0) {
        return NULL;
    }
    if (step <= 0) {
        PyErr_SetString(PyExc_ValueError, "step must be greater than zero");
        return NULL;
    }
    int64_t n = t->sizes[d];
    if (start < 0) {
        start += n;
    }
    if (stop < 0) {
        stop += n;
    }
    start = start < 0 ? 0 : (start > n ? n : start);
    stop = stop < start ? start : (stop > n ? n : stop);
    int64_t sz[STAX_MAX_DIMS], st[STAX_MAX_DIMS];
    memcpy(sz, t->sizes, sizeof(sz));
    memcpy(st, t->strides, sizeof(st));
    sz[d] = (stop - start + step - 1) / step;
    st[d] = t->strides[d] * step;
    return stax_tensor_view(t, t->ndim, sz, st,
                            t->offset + start * t->strides[d]);
}

StaxTensor *
stax_tensor_narrow(StaxTensor *t, int64_t dim, int64_t start, int64_t length)
{
    int d;
    if (t->ndim == 0) {
        PyErr_SetString(PyExc_RuntimeError,
                        "narrow() cannot be applied to a 0-dim tensor.");
        return NULL;
    }
    if (stax_wrap_dim(dim, t->ndim, &d) < 0) {
        return NULL;
    }
    int64_t n = t->sizes[d];
    if (start < -n || start > n) {
        PyErr_Format(PyExc_IndexError,
                     "start out of range (expected to be in range of [%lld, "
                     "%lld], but got %lld)", (long long)-n, (long long)n,
                     (long long)start);
        return NULL;
    }
    if (start < 0) {
        start += n;
    }
    if (length < 0 || start + length > n) {
        PyErr_Format(PyExc_RuntimeError,
                     "start (%lld) + length (%lld) exceeds dimension size "
                     "(%lld).", (long long)start, (long long)length,
                     (long long)n);
        return NULL;
    }
    return stax_tensor_slice(t, d, start, start + length, 1);
}

StaxTensor *
stax_tensor_select(StaxTensor *t, int64_t dim, int64_t index)
{
    int d;
    if (t->ndim == 0) {
        PyErr_SetString(PyExc_IndexError,
                        "select() cannot be applied to a 0-dim tensor.");
        return NULL;
    }
    if (stax_wrap_dim(dim, t->ndim, &d) < 0) {
        return NULL;
    }
    int64_t n = t->sizes[d];
    if (index < -n || index >= n) {
        PyObject *l = int_list(t->ndim, t->sizes);
        PyErr_Format(PyExc_IndexError,
                     "index %lld is out of bounds for dimension %d with size "
                     "%lld", (long long)index, d, (long long)n);
        Py_XDECREF(l);
        return NULL;
    }
    if (index < 0) {
        index += n;
    }
    int64_t sz[STAX_MAX_DIMS], st[STAX_MAX_DIMS];
    for (int i = 0, k = 0; i < t->ndim; i++) {
        if (i != d) {
            sz[k] = t->sizes[i];
            st[k] = t->strides[i];
            k++;
        }
    }
    return stax_tensor_view(t, t->ndim - 1, sz, st,
                            t->offset + index * t->strides[d]);
}

StaxTensor *
stax_tensor_diagonal(StaxTensor *t, int64_t off, int64_t dim1, int64_t dim2)
{
    int a, b;
    if (stax_wrap_dim(dim1, t->ndim, &a) < 0
        || stax_wrap_dim(dim2, t->ndim, &b) < 0) {
        return NULL;
    }
    if (a == b) {
        PyErr_Format(PyExc_RuntimeError,
                     "diagonal dimensions cannot be identical %lld, %lld",
                     (long long)dim1, (long long)dim2);
        return NULL;
    }
    int64_t n, offset = t->offset;
    if (off >= 0) {
        n = t->sizes[a] < t->sizes[b] - off ? t->sizes[a] : t->sizes[b] - off;
        if (n > 0) {
            offset += off * t->strides[b];
        }
    }
    else {
        n = t->sizes[a] + off < t->sizes[b] ? t->sizes[a] + off : t->sizes[b];
        if (n > 0) {
            offset -= off * t->strides[a];
        }
    }
    if (n < 0) {
        n = 0;
    }
    int64_t sz[STAX_MAX_DIMS], st[STAX_MAX_DIMS];
    int k = 0;
    for (int i = 0; i < t->ndim; i++) {
        if (i != a && i != b) {
            sz[k] = t->sizes[i];
            st[k] = t->strides[i];
            k++;
        }
    }
    sz[k] = n;
    st[k] = t->strides[a] + t->strides[b];
    return stax_tensor_view(t, k + 1, sz, st, offset);
}

PyObject *
stax_tensor_unbind(StaxTensor *t, int64_t dim)
{
    int d;
    if (t->ndim == 0) {
        PyErr_SetString(PyExc_IndexError,
                        "Dimension specified as 0 but tensor has no "
                        "dimensions");
        return NULL;
    }
    if (stax_wrap_dim(dim, t->ndim, &d) < 0) {
        return NULL;
    }
    PyObject *r = PyTuple_New(t->sizes[d]);
    for (int64_t i = 0; r && i < t->sizes[d]; i++) {
        PyObject *v = (PyObject *)stax_tensor_select(t, d, i);
        if (v == NULL) {
            Py_CLEAR(r);
            break;
        }
        PyTuple_SET_ITEM(r, i, v);
    }
    return r;
}

static PyObject *
split_sizes(StaxTensor *t, int d, int n, const int64_t *parts)
{
    PyObject *r = PyTuple_New(n);
    int64_t start = 0;
    for (int i = 0; r && i < n; i++) {
        PyObject *v = (PyObject *)stax_tensor_slice(t, d, start,
                                                    start + parts[i], 1);
        if (v == NULL) {
            Py_CLEAR(r);
            break;
        }
        PyTuple_SET_ITEM(r, i, v);
        start += parts[i];
    }
    return r;
}

PyObject *
stax_tensor_split(StaxTensor *t, PyObject *spec, int64_t dim)
{
    int d;
    if (t->ndim == 0) {
        PyErr_SetString(PyExc_RuntimeError,
                        "split expects at least a 1-dimensional tensor");
        return NULL;
    }
    if (stax_wrap_dim(dim, t->ndim, &d) < 0) {
        return NULL;
    }
    int64_t n = t->sizes[d];
    if (PyTuple_Check(spec) || PyList_Check(spec)) {
        Py_ssize_t k = PySequence_Size(spec);
        int64_t *parts = PyMem_Malloc((k + 1) * sizeof(int64_t)), sum = 0;
        if (parts == NULL) {
            return PyErr_NoMemory();
        }
        for (Py_ssize_t i = 0; i < k; i++) {
            PyObject *it = PySequence_GetItem(spec, i);
            parts[i] = it ? PyLong_AsLongLong(it) : -1;
            Py_XDECREF(it);
            if (parts[i] == -1 && PyErr_Occurred()) {
                PyMem_Free(parts);
                return NULL;
            }
            sum += parts[i];
        }
        if (sum != n) {
            PyObject *l = PySequence_List(spec);
            PyErr_Format(PyExc_RuntimeError,
                         "split_with_sizes expects split_sizes to sum exactly "
                         "to %lld (input tensor's size at dimension %d), but "
                         "got split_sizes=%S", (long long)n, d, l);
            Py_XDECREF(l);
            PyMem_Free(parts);
            return NULL;
        }
        PyObject *r = split_sizes(t, d, (int)k, parts);
        PyMem_Free(parts);
        return r;
    }
    int64_t ss = PyLong_AsLongLong(spec);
    if (ss == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (ss < 0 || (ss == 0 && n != 0)) {
        PyErr_Format(PyExc_RuntimeError,
                     "split_size can only be 0 if dimension size is 0, but "
                     "got dimension size of %lld", (long long)n);
        return NULL;
    }
    int64_t k = ss == 0 ? 1 : (n + ss - 1) / ss;
    if (k == 0) {
        k = 1;
    }
    int64_t *parts = PyMem_Malloc(k * sizeof(int64_t));
    if (parts == NULL) {
        return PyErr_NoMemory();
    }
    for (int64_t i = 0; i < k; i++) {
        parts[i] = (i == k - 1) ? n - ss * (k - 1) : ss;
    }
    PyObject *r = split_sizes(t, d, (int)k, parts);
    PyMem_Free(parts);
    return r;
}

PyObject *
stax_tensor_chunk(StaxTensor *t, int64_t chunks, int64_t dim)
{
    int d;
    if (chunks <= 0) {
        PyErr_Format(PyExc_RuntimeError,
                     "chunk expects `chunks` to be greater than 0, got: %lld",
                     (long long)chunks);
        return NULL;
    }
    if (t->ndim == 0) {
        PyErr_SetString(PyExc_RuntimeError,
                        "chunk expects at least a 1-dimensional tensor");
        return NULL;
    }
    if (stax_wrap_dim(dim, t->ndim, &d) < 0) {
        return NULL;
    }
    int64_t n = t->sizes[d], ss = (n + chunks - 1) / chunks;
    if (ss == 0 && n == 0) {
        PyObject *sp = PyList_New(chunks);
        for (int64_t i = 0; sp && i < chunks; i++) {
            PyList_SET_ITEM(sp, i, PyLong_FromLong(0));
        }
        PyObject *r = sp ? stax_tensor_split(t, sp, d) : NULL;
        Py_XDECREF(sp);
        return r;
    }
    PyObject *o = PyLong_FromLongLong(ss), *r;
    if (o == NULL) {
        return NULL;
    }
    r = stax_tensor_split(t, o, d);
    Py_DECREF(o);
    return r;
}

/* ---- Tensor methods ---------------------------------------------------- */

#define SELF ((StaxTensor *)self)

static int
arg_int(PyObject *o, int64_t *v, const char *name)
{
    if (PyFloat_Check(o) || (!PyLong_Check(o) && !PyIndex_Check(o))) {
        PyErr_Format(PyExc_TypeError,
                     "%s must be int, not %.100s", name, Py_TYPE(o)->tp_name);
        return -1;
    }
    *v = PyLong_AsLongLong(o);
    return (*v == -1 && PyErr_Occurred()) ? -1 : 0;
}

/* positional args or kwarg name; def_ when missing (has_def) */
static int
get_arg(PyObject *args, PyObject *kw, Py_ssize_t pos, const char *name,
        PyObject **out)
{
    if (pos < PyTuple_GET_SIZE(args)) {
        *out = PyTuple_GET_ITEM(args, pos);
        return 1;
    }
    if (kw != NULL) {
        PyObject *v = PyDict_GetItemString(kw, name);
        if (v != NULL) {
            *out = v;
            return 1;
        }
    }
    return 0;
}

static int
get_int_arg(PyObject *args, PyObject *kw, Py_ssize_t pos, const char *name,
            int64_t def, int required, int64_t *out, const char *fn)
{
    PyObject *o = NULL;
    if (!get_arg(args, kw, pos, name, &o) || o == Py_None) {
        if (required) {
            PyErr_Format(PyExc_TypeError,
                         "%s() missing required argument '%s' (pos %zd)", fn,
                         name, pos + 1);
            return -1;
        }
        *out = def;
        return 0;
    }
    return arg_int(o, out, name);
}

/* sizes as varargs or a single sequence, or under kwarg `name` */
static int
get_sizes(PyObject *args, PyObject *kw, const char *name, int64_t *v, int *n)
{
    if (PyTuple_GET_SIZE(args) == 0 && kw != NULL) {
        PyObject *o = PyDict_GetItemString(kw, name);
        if (o != NULL) {
            if (PyLong_Check(o)) {
                v[0] = PyLong_AsLongLong(o);
                *n = 1;
                return 0;
            }
            return stax_parse_int_seq(o, v, n, name);
        }
    }
    return stax_parse_sizes(args, v, n);
}

/* x.view(dtype): the same bytes read as another dtype (torch). With a
 * different element size the last dim (stride 1) is split or merged and
 * the other strides and the offset are rescaled; torch's errors. */
static PyObject *
view_dtype(StaxTensor *t, stax_dtype_t dt)
{
    int64_t sz[STAX_MAX_DIMS], st[STAX_MAX_DIMS], off = t->offset;
    int oi = stax_dtype_itemsize(t->dtype), ni = stax_dtype_itemsize(dt), n = t->ndim;
    const char *from = stax_dtype_title(t->dtype), *to = stax_dtype_title(dt);
    StaxTensor *r;
    memcpy(sz, t->sizes, sizeof(int64_t) * (size_t)n);
    memcpy(st, t->strides, sizeof(int64_t) * (size_t)n);
    if (oi != ni) {
        if (n == 0) {
            PyErr_Format(PyExc_RuntimeError, "self.dim() cannot be 0 to view %s as %s "
                         "(different element sizes)", from, to);
            return NULL;
        }
        if (st[n - 1] != 1) {
            PyErr_Format(PyExc_RuntimeError, "self.stride(-1) must be 1 to view %s as "
                         "%s (different element sizes), but got %lld", from, to,
                         (long long)st[n - 1]);
            return NULL;
        }
    }
    if (oi > ni) {
        int64_t k = oi / ni;
        for (int i = 0; i < n - 1; i++) {
            st[i] *= k;
        }
        sz[n - 1] *= k;
        off *= k;
    }
    else if (oi < ni) {
        int64_t k = ni / oi;
        if (sz[n - 1] % k != 0) {
            PyErr_Format(PyExc_RuntimeError, "self.size(-1) must be divisible by %lld "
                         "to view %s as %s (different element sizes), but got %lld",
                         (long long)k, from, to, (long long)sz[n - 1]);
            return NULL;
        }
        if (off % k != 0) {
            PyErr_Format(PyExc_RuntimeError, "self.storage_offset() must be divisible "
                         "by %lld to view %s as %s (different element sizes), but got "
                         "%lld", (long long)k, from, to, (long long)off);
            return NULL;
        }
        for (int i = 0; i < n - 1; i++) {
            if (st[i] % k != 0) {
                PyErr_Format(PyExc_RuntimeError, "self.stride(%d) must be divisible by "
                             "%lld to view %s as %s (different element sizes), but got "
                             "%lld", i, (long long)k, from, to, (long long)st[i]);
                return NULL;
            }
            st[i] /= k;
        }
        sz[n - 1] /= k;
        off /= k;
    }
    r = stax_tensor_view(t, n, sz, st, off);
    if (r != NULL) {
        r->dtype = dt;
        if (!stax_dtype_is_floating(dt)) {    /* integer views carry no grad */
            r->requires_grad = 0;
            r->nonleaf = 0;
        }
    }
    return (PyObject *)r;
}

static PyObject *
vm_view(PyObject *self, PyObject *args, PyObject *kw)
{
    STAX_OVERRIDE_VARARGS("view");
    int64_t v[STAX_MAX_DIMS];
    int n;
    if (PyTuple_GET_SIZE(args) == 1
        && Py_IS_TYPE(PyTuple_GET_ITEM(args, 0), StaxDType_Type)) {
        stax_dtype_t dt;
        stax_dtype_from_object(PyTuple_GET_ITEM(args, 0), &dt);
        return view_dtype(SELF, dt);
    }
    if (get_sizes(args, kw, "size", v, &n) < 0) {
        return NULL;
    }
    return (PyObject *)stax_tensor_view_shape(SELF, n, v);
}

static PyObject *
vm_reshape(PyObject *self, PyObject *args, PyObject *kw)
{
    STAX_OVERRIDE_VARARGS("reshape");
    int64_t v[STAX_MAX_DIMS];
    int n;
    if (get_sizes(args, kw, "shape", v, &n) < 0) {
        return NULL;
    }
    return (PyObject *)stax_tensor_reshape(SELF, n, v);
}

static PyObject *
vm_view_as(PyObject *self, PyObject *other)
{
    STAX_OVERRIDE_O("view_as", other);
    if (!StaxTensor_Check(other)) {
        PyErr_SetString(PyExc_TypeError, "view_as(): argument 'other' must "
                        "be Tensor");
        return NULL;
    }
    StaxTensor *o = (StaxTensor *)other;
    return (PyObject *)stax_tensor_view_shape(SELF, o->ndim, o->sizes);
}

static PyObject *
vm_reshape_as(PyObject *self, PyObject *other)
{
    STAX_OVERRIDE_O("reshape_as", other);
    if (!StaxTensor_Check(other)) {
        PyErr_SetString(PyExc_TypeError, "reshape_as(): argument 'other' "
                        "must be Tensor");
        return NULL;
    }
    StaxTensor *o = (StaxTensor *)other;
    return (PyObject *)stax_tensor_reshape(SELF, o->ndim, o->sizes);
}

static PyObject *
vm_permute(PyObject *self, PyObject *args, PyObject *kw)
{
    STAX_OVERRIDE_VARARGS("permute");
    int64_t v[STAX_MAX_DIMS];
    int n;
    if (get_sizes(args, kw, "dims", v, &n) < 0) {
        return NULL;
    }
    return (PyObject *)stax_tensor_permute(SELF, v, n);
}

static PyObject *
vm_transpose(PyObject *self, PyObject *args, PyObject *kw)
{
    STAX_OVERRIDE_VARARGS("transpose");
    int64_t a, b;
    if (get_int_arg(args, kw, 0, "dim0", 0, 1, &a, "transpose") < 0
        || get_int_arg(args, kw, 1, "dim1", 0, 1, &b, "transpose") < 0) {
        return NULL;
    }
    return (PyObject *)stax_tensor_transpose(SELF, a, b);
}

static PyObject *
vm_t(PyObject *self, PyObject *unused)
{
    return (PyObject *)stax_tensor_t(SELF);
}

static PyObject *
vm_expand(PyObject *self, PyObject *args, PyObject *kw)
{
    STAX_OVERRIDE_VARARGS("expand");
    int64_t v[STAX_MAX_DIMS];
    int n;
    if (get_sizes(args, kw, "size", v, &n) < 0) {
        return NULL;
    }
    return (PyObject *)stax_tensor_expand(SELF, n, v);
}

static PyObject *
vm_expand_as(PyObject *self, PyObject *other)
{
    STAX_OVERRIDE_O("expand_as", other);
    if (!StaxTensor_Check(other)) {
        PyErr_SetString(PyExc_TypeError, "expand_as(): argument 'other' must "
                        "be Tensor");
        return NULL;
    }
    StaxTensor *o = (StaxTensor *)other;
    return (PyObject *)stax_tensor_expand(SELF, o->ndim, o->sizes);
}

static PyObject *
vm_unsqueeze(PyObject *self, PyObject *args, PyObject *kw)
{
    STAX_OVERRIDE_VARARGS("unsqueeze");
    int64_t d;
    if (get_int_arg(args, kw, 0, "dim", 0, 1, &d, "unsqueeze") < 0) {
        return NULL;
    }
    return (PyObject *)stax_tensor_unsqueeze(SELF, d);
}

static PyObject *
vm_squeeze(PyObject *self, PyObject *args, PyObject *kw)
{
    STAX_OVERRIDE_VARARGS("squeeze");
    PyObject *o = NULL;
    int64_t v[STAX_MAX_DIMS];
    int n = -1;
    if (get_arg(args, kw, 0, "dim", &o) && o != Py_None) {
        if (PyTuple_Check(o) || PyList_Check(o)) {
            if (stax_parse_int_seq(o, v, &n, "dim") < 0) {
                return NULL;
            }
        }
        else {
            if (arg_int(o, &v[0], "dim") < 0) {
                return NULL;
            }
            n = 1;
        }
    }
    return (PyObject *)stax_tensor_squeeze(SELF, v, n);
}

static PyObject *
vm_flatten(PyObject *self, PyObject *args, PyObject *kw)
{
    STAX_OVERRIDE_VARARGS("flatten");
    int64_t s, e;
    if (get_int_arg(args, kw, 0, "start_dim", 0, 0, &s, "flatten") < 0
        || get_int_arg(args, kw, 1, "end_dim", -1, 0, &e, "flatten") < 0) {
        return NULL;
    }
    return (PyObject *)stax_tensor_flatten(SELF, s, e);
}

static PyObject *
vm_unflatten(PyObject *self, PyObject *args, PyObject *kw)
{
    STAX_OVERRIDE_VARARGS("unflatten");
    int64_t d, v[STAX_MAX_DIMS];
    int n;
    PyObject *o = NULL;
    if (get_int_arg(args, kw, 0, "dim", 0, 1, &d, "unflatten") < 0) {
        return NULL;
    }
    if (!get_arg(args, kw, 1, "sizes", &o)) {
        PyErr_SetString(PyExc_TypeError,
                        "unflatten() missing required argument 'sizes'");
        return NULL;
    }
    if (stax_parse_int_seq(o, v, &n, "sizes") < 0) {
        return NULL;
    }
    return (PyObject *)stax_tensor_unflatten(SELF, d, n, v);
}

static PyObject *
vm_narrow(PyObject *self, PyObject *args, PyObject *kw)
{
    STAX_OVERRIDE_VARARGS("narrow");
    int64_t d, s, l;
    if (get_int_arg(args, kw, 0, "dim", 0, 1, &d, "narrow") < 0
        || get_int_arg(args, kw, 1, "start", 0, 1, &s, "narrow") < 0
        || get_int_arg(args, kw, 2, "length", 0, 1, &l, "narrow") < 0) {
        return NULL;
    }
    return (PyObject *)stax_tensor_narrow(SELF, d, s, l);
}

static PyObject *
vm_select(PyObject *self, PyObject *args, PyObject *kw)
{
    STAX_OVERRIDE_VARARGS("select");
    int64_t d, i;
    if (get_int_arg(args, kw, 0, "dim", 0, 1, &d, "select") < 0
        || get_int_arg(args, kw, 1, "index", 0, 1, &i, "select") < 0) {
        return NULL;
    }
    return (PyObject *)stax_tensor_select(SELF, d, i);
}

static PyObject *
vm_unbind(PyObject *self, PyObject *args, PyObject *kw)
{
    STAX_OVERRIDE_VARARGS("unbind");
    int64_t d;
    if (get_int_arg(args, kw, 0, "dim", 0, 0, &d, "unbind") < 0) {
        return NULL;
    }
    return stax_tensor_unbind(SELF, d);
}

static PyObject *
vm_split(PyObject *self, PyObject *args, PyObject *kw)
{
    STAX_OVERRIDE_VARARGS("split");
    PyObject *spec = NULL;
    int64_t d;
    if (!get_arg(args, kw, 0, "split_size", &spec)
        && !get_arg(args, kw, 0, "split_size_or_sections", &spec)) {
        PyErr_SetString(PyExc_TypeError,
                        "split() missing required argument 'split_size'");
        return NULL;
    }
    if (get_int_arg(args, kw, 1, "dim", 0, 0, &d, "split") < 0) {
        return NULL;
    }
    return stax_tensor_split(SELF, spec, d);
}

static PyObject *
vm_chunk(PyObject *self, PyObject *args, PyObject *kw)
{
    STAX_OVERRIDE_VARARGS("chunk");
    int64_t c, d;
    if (get_int_arg(args, kw, 0, "chunks", 0, 1, &c, "chunk") < 0
        || get_int_arg(args, kw, 1, "dim", 0, 0, &d, "chunk") < 0) {
        return NULL;
    }
    return stax_tensor_chunk(SELF, c, d);
}

static PyObject *
vm_diagonal(PyObject *self, PyObject *args, PyObject *kw)
{
    STAX_OVERRIDE_VARARGS("diagonal");
    int64_t o, a, b;
    if (get_int_arg(args, kw, 0, "offset", 0, 0, &o, "diagonal") < 0
        || get_int_arg(args, kw, 1, "dim1", 0, 0, &a, "diagonal") < 0
        || get_int_arg(args, kw, 2, "dim2", 1, 0, &b, "diagonal") < 0) {
        return NULL;
    }
    return (PyObject *)stax_tensor_diagonal(SELF, o, a, b);
}

static PyObject *
vm_as_strided(PyObject *self, PyObject *args, PyObject *kw)
{
    STAX_OVERRIDE_VARARGS("as_strided");
    PyObject *so = NULL, *sto = NULL;
    int64_t sz[STAX_MAX_DIMS], st[STAX_MAX_DIMS], off;
    int n1, n2;
    if (!get_arg(args, kw, 0, "size", &so)
        || !get_arg(args, kw, 1, "stride", &sto)) {
        PyErr_SetString(PyExc_TypeError,
                        "as_strided() missing required arguments 'size' and "
                        "'stride'");
        return NULL;
    }
    if (stax_parse_int_seq(so, sz, &n1, "size") < 0
        || stax_parse_int_seq(sto, st, &n2, "stride") < 0
        || get_int_arg(args, kw, 2, "storage_offset", -1, 0, &off,
                       "as_strided") < 0) {
        return NULL;
    }
    if (n1 != n2) {
        PyErr_Format(PyExc_RuntimeError,
                     "mismatch in length of strides and shape");
        return NULL;
    }
    return (PyObject *)stax_tensor_as_strided(SELF, n1, sz, st, off);
}

/* "[0, 1]": a dims list as torch prints it */
static PyObject *
dims_str(const int64_t *v, int n)
{
    PyObject *l = PyList_New(n);
    for (int i = 0; l != NULL && i < n; i++) {
        PyObject *x = PyLong_FromLongLong(v[i]);
        if (x == NULL) {
            Py_CLEAR(l);
            break;
        }
        PyList_SET_ITEM(l, i, x);
    }
    PyObject *r = l ? PyObject_Str(l) : NULL;
    Py_XDECREF(l);
    return r;
}

/* movedim(tuple source, tuple destination): torch's permutation (the
 * named dims go to their places, the others keep their order) */
static PyObject *
movedim_seq(StaxTensor *t, PyObject *so, PyObject *dobj)
{
    int64_t src[STAX_MAX_DIMS], dst[STAX_MAX_DIMS];
    int ns = 0, nd = 0, n = t->ndim;
    if (stax_parse_int_seq(so, src, &ns, "source") < 0
        || stax_parse_int_seq(dobj, dst, &nd, "destination") < 0) {
        return NULL;
    }
    if (ns != nd) {
        PyObject *a = dims_str(src, ns), *b = a ? dims_str(dst, nd) : NULL;
        if (b != NULL) {
            PyErr_Format(PyExc_RuntimeError,
                         "movedim: Invalid source or destination dims: source (%U dims) should "
                         "contain the same number of dims as destination (%U dims)", a, b);
        }
        Py_XDECREF(a);
        Py_XDECREF(b);
        return NULL;
    }
    int ws[STAX_MAX_DIMS], wd[STAX_MAX_DIMS];
    for (int i = 0; i < ns; i++) {
        if (stax_wrap_dim(src[i], n, &ws[i]) < 0) {
            return NULL;
        }
    }
    for (int i = 0; i < nd; i++) {
        if (stax_wrap_dim(dst[i], n, &wd[i]) < 0) {
            return NULL;
        }
    }
    for (int which = 0; which < 2; which++) {
        const int *w = which ? wd : ws;
        for (int i = 0; i < ns; i++) {
            for (int j = 0; j < i; j++) {
                if (w[i] == w[j]) {
                    PyObject *a = dims_str(which ? dst : src, ns);
                    if (a != NULL) {
                        PyErr_Format(PyExc_RuntimeError, "movedim: repeated dim in `%s` (%U)",
                                     which ? "destination" : "source", a);
                        Py_DECREF(a);
                    }
                    return NULL;
                }
            }
        }
    }
    int64_t order[STAX_MAX_DIMS];
    int src_used[STAX_MAX_DIMS] = {0}, dst_used[STAX_MAX_DIMS] = {0};
    for (int i = 0; i < ns; i++) {
        order[wd[i]] = ws[i];
        src_used[ws[i]] = dst_used[wd[i]] = 1;
    }
    for (int i = 0, j = 0; i < n; i++) {     /* the rest, in order */
        if (dst_used[i]) {
            continue;
        }
        while (src_used[j]) {
            j++;
        }
        order[i] = j++;
    }
    return (PyObject *)stax_tensor_permute(t, order, n);
}

static PyObject *
movedim_impl(PyObject *self, PyObject *args, PyObject *kw, const char *fn)
{
    PyObject *so = NULL, *dobj = NULL;
    get_arg(args, kw, 0, "source", &so);
    get_arg(args, kw, 1, "destination", &dobj);
    int sseq = so && (PyTuple_Check(so) || PyList_Check(so));
    int dseq = dobj && (PyTuple_Check(dobj) || PyList_Check(dobj));
    if (sseq && dseq) {
        return movedim_seq(SELF, so, dobj);
    }
    if (so != NULL && dobj != NULL && (sseq || dseq || !PyLong_Check(so) || !PyLong_Check(dobj))) {
        PyErr_Format(PyExc_TypeError,
                     "%s() received an invalid combination of arguments - got (%s, %s), "
                     "but expected one of:\n * (int source, int destination)\n"
                     " * (tuple of ints source, tuple of ints destination)\n", fn,
                     StaxTensor_Check(so) ? "Tensor" : Py_TYPE(so)->tp_name,
                     StaxTensor_Check(dobj) ? "Tensor" : Py_TYPE(dobj)->tp_name);
        return NULL;
    }
    int64_t s, d;
    if (get_int_arg(args, kw, 0, "source", 0, 1, &s, "movedim") < 0
        || get_int_arg(args, kw, 1, "destination", 0, 1, &d, "movedim") < 0) {
        return NULL;
    }
    int a, b;
    if (stax_wrap_dim(s, SELF->ndim, &a) < 0
        || stax_wrap_dim(d, SELF->ndim, &b) < 0) {
        return NULL;
    }
    int64_t perm[STAX_MAX_DIMS];
    int k = 0;
    for (int i = 0; i < SELF->ndim; i++) {
        if (i != a) {
            perm[k++] = i;
        }
    }
    memmove(perm + b + 1, perm + b, (SELF->ndim - 1 - b) * sizeof(int64_t));
    perm[b] = a;
    return (PyObject *)stax_tensor_permute(SELF, perm, SELF->ndim);
}

static PyObject *
vm_movedim(PyObject *self, PyObject *args, PyObject *kw)
{
    STAX_OVERRIDE_VARARGS("movedim");
    return movedim_impl(self, args, kw, "movedim");
}

static PyObject *
vm_moveaxis(PyObject *self, PyObject *args, PyObject *kw)
{
    STAX_OVERRIDE_VARARGS("moveaxis");
    return movedim_impl(self, args, kw, "moveaxis");
}

#define KW METH_VARARGS | METH_KEYWORDS
#define F(f) (PyCFunction)(void (*)(void))(f)
static PyMethodDef view_methods[] = {
    {"view", F(vm_view), KW, NULL},
    {"reshape", F(vm_reshape), KW, NULL},
    {"view_as", vm_view_as, METH_O, NULL},
    {"reshape_as", vm_reshape_as, METH_O, NULL},
    {"permute", F(vm_permute), KW, NULL},
    {"transpose", F(vm_transpose), KW, NULL},
    {"swapaxes", F(vm_transpose), KW, NULL},
    {"swapdims", F(vm_transpose), KW, NULL},
    {"t", vm_t, METH_NOARGS, NULL},
    {"expand", F(vm_expand), KW, NULL},
    {"expand_as", vm_expand_as, METH_O, NULL},
    {"unsqueeze", F(vm_unsqueeze), KW, NULL},
    {"squeeze", F(vm_squeeze), KW, NULL},
    {"flatten", F(vm_flatten), KW, NULL},
    {"unflatten", F(vm_unflatten), KW, NULL},
    {"narrow", F(vm_narrow), KW, NULL},
    {"select", F(vm_select), KW, NULL},
    {"unbind", F(vm_unbind), KW, NULL},
    {"split", F(vm_split), KW, NULL},
    {"chunk", F(vm_chunk), KW, NULL},
    {"diagonal", F(vm_diagonal), KW, NULL},
    {"as_strided", F(vm_as_strided), KW, NULL},
    {"movedim", F(vm_movedim), KW, NULL},
    {"moveaxis", F(vm_moveaxis), KW, NULL},
    {NULL},
};

int
stax_tensor_install_view_methods(PyTypeObject *tp)
{
    for (PyMethodDef *d = view_methods; d->ml_name; d++) {
        PyObject *descr = PyDescr_NewMethod(tp, d);
        if (descr == NULL
            || PyDict_SetItemString(tp->tp_dict, d->ml_name, descr) < 0) {
            Py_XDECREF(descr);
            return -1;
        }
        Py_DECREF(descr);
    }
    PyType_Modified(tp);
    return 0;
}
