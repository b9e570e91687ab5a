/* Layouts of fresh results, as PyTorch chooses them: the strides a copy
 * keeps under memory_format=preserve_format (empty_like, clone, to, the
 * *_like factories) and the strides TensorIterator gives the output of an
 * elementwise op (its operands' stride order). Both place the elements in
 * one dense block of numel elements. */
#include <string.h>

#include "tensor/tensor_internal.h"

/* torch's is_non_overlapping_and_dense: the elements fill one block of
 * memory without gaps, in some order of the dims (size 1 dims place
 * nothing; no element at all is contiguous, so dense) */
int
stax_tensor_is_dense(const StaxTensor *t)
{
    int perm[STAX_MAX_DIMS], n = 0;
    int64_t need = 1;
    for (int d = 0; d < t->ndim; d++) {
        if (t->sizes[d] == 0) {
            return 1;
        }
    }
    if (t->ndim == 1) {
        return t->sizes[0] < 2 || t->strides[0] == 1;
    }
    for (int d = 0; d < t->ndim; d++) {
        if (t->sizes[d] >= 2) {
            int k = n++;
            while (k > 0 && t->strides[perm[k - 1]] > t->strides[d]) {
                perm[k] = perm[k - 1];
                k--;
            }
            perm[k] = d;
        }
    }
    for (int i = 0; i < n; i++) {
        if (t->strides[perm[i]] != need) {
            return 0;
        }
        need *= t->sizes[perm[i]];
    }
    return 1;
}

/* The dims ordered innermost first by stride, as TensorIterator's
 * reorder_dimensions and empty_like's infer_dense_strides sort them: start
 * from the reversed dims and insertion-sort; an operand whose stride is 0
 * in either dim (broadcast) gives no opinion, equal strides put the
 * smaller size inner, and only a strict opinion stops the insertion. The
 * strides of operand k are strides[k][0..nd-1] (NULL: not an operand). */
static int
order_cmp(int nops, const int64_t *const *strides, const int64_t *shape,
          int d0, int d1)
{
    for (int k = 0; k < nops; k++) {
        int64_t s0, s1;
        if (strides[k] == NULL) {
            continue;
        }
        s0 = strides[k][d0];
        s1 = strides[k][d1];
        if (s0 == 0 || s1 == 0) {
            continue;
        }
        if (s0 != s1) {
            return s0 < s1 ? -1 : 1;
        }
        if (shape[d0] > shape[d1]) {
            return 1;
        }
    }
    return 0;
}

static void
stride_order(int nops, const int64_t *const *strides, int nd,
             const int64_t *shape, int *perm)
{
    for (int i = 0; i < nd; i++) {
        perm[i] = nd - 1 - i;
    }
    for (int i = 1; i < nd; i++) {
        int d1 = i;
        for (int d0 = i - 1; d0 >= 0; d0--) {
            int c = order_cmp(nops, strides, shape, perm[d0], perm[d1]);
            if (c > 0) {
                int tmp = perm[d0];
                perm[d0] = perm[d1];
                perm[d1] = tmp;
                d1 = d0;
            }
            else if (c < 0) {
                break;
            }
        }
    }
}

void
stax_layout_dense_strides(int nd, const int64_t *sizes,
                          const int64_t *strides, int64_t *out)
{
    int perm[STAX_MAX_DIMS];
    int64_t s = 1;
    stride_order(1, &strides, nd, sizes, perm);
    for (int i = 0; i < nd; i++) {
        out[perm[i]] = s;
        if (sizes[perm[i]] > 1) {
            s *= sizes[perm[i]];
        }
    }
}

/* torch's channels_last (NHWC) and channels_last_3d (NDHWC) strides */
static void
channels_last_strides(int nd, const int64_t *sizes, int64_t *out)
{
    int64_t s = sizes[1];    /* raw sizes: a size-0 dim zeroes the rest */
    out[1] = 1;
    for (int d = nd - 1; d >= 2; d--) {
        out[d] = s;
        s *= sizes[d];
    }
    out[0] = s;
}

int
stax_layout_format_strides(const StaxTensor *t, stax_memory_format mf,
                           int64_t *out)
{
    switch (mf) {
    case STAX_MF_PRESERVE:
        if (stax_tensor_is_dense(t)) {
            memcpy(out, t->strides, sizeof(int64_t) * (size_t)t->ndim);
        }
        else {
            stax_layout_dense_strides(t->ndim, t->sizes, t->strides, out);
        }
        return 0;
    case STAX_MF_CONTIGUOUS:
        stax_contiguous_strides(t->ndim, t->sizes, out);
        return 0;
    case STAX_MF_CHANNELS_LAST:
    case STAX_MF_CHANNELS_LAST_3D: {
        int want = mf == STAX_MF_CHANNELS_LAST ? 4 : 5;
        if (t->ndim != want) {
            PyErr_Format(PyExc_RuntimeError,
                         "required rank %d tensor to use %s format", want,
                         want == 4 ? "channels_last" : "channels_last_3d");
            return -1;
        }
        channels_last_strides(t->ndim, t->sizes, out);
        return 0;
    }
    }
    PyErr_SetString(PyExc_SystemError, "bad memory format");
    return -1;
}

/* channels-last contiguous (torch's is_contiguous(ChannelsLast)): 4-d, C
 * innermost, then W, H, N (5-d: C, W, H, D, N); size-1 dims place
 * nothing */
static int
is_channels_last_nd(const StaxTensor *t, int nd)
{
    static const int o4[4] = {1, 3, 2, 0}, o5[5] = {1, 4, 3, 2, 0};
    const int *order = nd == 4 ? o4 : o5;
    int64_t need = 1;
    if (t->ndim != nd) {
        return 0;
    }
    for (int i = 0; i < nd; i++) {
        int d = order[i];
        if (t->sizes[d] != 1) {
            if (t->strides[d] != need) {
                return 0;
            }
            need *= t->sizes[d];
        }
    }
    return 1;
}

static int
is_channels_last(const StaxTensor *t)
{
    return is_channels_last_nd(t, 4);
}

int
stax_tensor_is_contiguous_as(StaxTensor *t, stax_memory_format mf)
{
    switch (mf) {
    case STAX_MF_CHANNELS_LAST:
        return is_channels_last_nd(t, 4);
    case STAX_MF_CHANNELS_LAST_3D:
        return is_channels_last_nd(t, 5);
    default:
        return stax_tensor_is_contiguous(t);
    }
}

void
stax_layout_iter_strides(int nops, PyObject *const *operands, int nd,
                         const int64_t *shape, int64_t *out)
{
    int64_t bcast[STAX_MAX_DIMS > 8 ? 8 : STAX_MAX_DIMS][STAX_MAX_DIMS];
    const int64_t *strides[8];
    const StaxTensor *first = NULL;
    int same_shape = 1, all_contig = 1, all_cl = 1, all_dense = 1,
        same_strides = 1, has_scalar = 0, has_tensor = 0, perm[STAX_MAX_DIMS];
    int64_t s = 1;
    if (nops > 8) {
        nops = 8;   /* the output follows its first operands */
    }
    if (nd <= 1) {
        stax_contiguous_strides(nd, shape, out);
        return;
    }
    /* TensorIterator's fast setup: operands of one shape that are all
     * contiguous, all channels-last, or all dense with equal strides give
     * the output that layout as is */
    for (int k = 0; k < nops; k++) {
        const StaxTensor *t;
        if (!StaxTensor_Check(operands[k])) {
            has_scalar = 1;     /* a Python scalar: a 0-d operand */
            continue;
        }
        t = (const StaxTensor *)operands[k];
        if (t->ndim == 0) {
            has_scalar = 1;
        }
        else {
            has_tensor = 1;
        }
        if (t->ndim != nd || memcmp(t->sizes, shape, sizeof(int64_t) * (size_t)nd) != 0) {
            same_shape = 0;
        }
        all_contig &= stax_tensor_is_contiguous((StaxTensor *)t);
        all_cl &= is_channels_last(t);
        all_dense &= stax_tensor_is_dense(t);
        if (first == NULL) {
            first = t;
        }
        else if (memcmp(first->strides, t->strides,
                        sizeof(int64_t) * (size_t)nd) != 0) {
            same_strides = 0;
        }
    }
    if (has_scalar && has_tensor) {
        same_shape = 0;
    }
    if (first == NULL || (same_shape && all_contig)) {
        stax_contiguous_strides(nd, shape, out);
        return;
    }
    if (same_shape && all_cl) {
        channels_last_strides(nd, shape, out);
        return;
    }
    if (same_shape && all_dense && same_strides) {
        memcpy(out, first->strides, sizeof(int64_t) * (size_t)nd);
        return;
    }
    /* each operand's strides aligned right on the output's dims; a
     * broadcast dim (size 1 against a larger one) has stride 0 */
    for (int k = 0; k < nops; k++) {
        const StaxTensor *t;
        int off;
        strides[k] = NULL;
        if (!StaxTensor_Check(operands[k])) {
            continue;
        }
        t = (const StaxTensor *)operands[k];
        off = nd - t->ndim;
        if (off < 0) {
            continue;
        }
        for (int d = 0; d < nd; d++) {
            int64_t v = 0;
            if (d >= off && !(t->sizes[d - off] == 1 && shape[d] != 1)) {
                v = t->strides[d - off];
            }
            bcast[k][d] = v;
        }
        strides[k] = bcast[k];
    }
    stride_order(nops, strides, nd, shape, perm);
    for (int i = 0; i < nd; i++) {
        if (perm[i] != nd - 1 - i) {
            break;
        }
        if (i == nd - 1) {
            stax_contiguous_strides(nd, shape, out);
            return;
        }
    }
    for (int i = 0; i < nd; i++) {
        out[perm[i]] = s;
        s *= shape[perm[i]];
    }
}

StaxTensor *
stax_tensor_empty_strided_on(int ndim, const int64_t *sizes,
                             const int64_t *strides, stax_dtype_t dt,
                             int device)
{
    StaxTensor *base = stax_tensor_empty_on(ndim, sizes, dt, device);
    if (base == NULL || strides == NULL) {
        return base;
    }
    if (ndim > 0) {
        memcpy(base->strides, strides, sizeof(int64_t) * (size_t)ndim);
    }
    return base;
}

StaxTensor *
stax_tensor_empty_like(StaxTensor *t, stax_dtype_t dt, stax_memory_format mf,
                       int device)
{
    int64_t st[STAX_MAX_DIMS];
    if (stax_layout_format_strides(t, mf, st) < 0) {
        return NULL;
    }
    return stax_tensor_empty_strided_on(t->ndim, t->sizes, st, dt, device);
}

/* memory_format arguments: None is preserve_format; the objects are
 * tensorplay's (type tensorplay.memory_format, an int in _code) */
int
stax_parse_memory_format(PyObject *o, const char *fname,
                         stax_memory_format *mf)
{
    PyObject *code;
    long v;
    if (o == NULL || o == Py_None) {
        *mf = STAX_MF_PRESERVE;
        return 0;
    }
    if (strcmp(Py_TYPE(o)->tp_name, "memory_format") != 0
        || (code = PyObject_GetAttrString(o, "_code")) == NULL) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s(): argument 'memory_format' must "
                     "be torch.memory_format, not %.100s", fname,
                     Py_TYPE(o)->tp_name);
        return -1;
    }
    v = PyLong_AsLong(code);
    Py_DECREF(code);
    if (v < STAX_MF_PRESERVE || v > STAX_MF_CHANNELS_LAST_3D) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_SystemError, "bad memory_format code");
        }
        return -1;
    }
    *mf = (stax_memory_format)v;
    return 0;
}

/* ---- Python helpers (tensorplay._C) ------------------------------------ */

static PyObject *
strides_tuple(int nd, const int64_t *st)
{
    PyObject *r = PyTuple_New(nd);
    for (int i = 0; r != NULL && i < nd; i++) {
        PyObject *v = PyLong_FromLongLong(st[i]);
        if (v == NULL) {
            Py_CLEAR(r);
            break;
        }
        PyTuple_SET_ITEM(r, i, v);
    }
    return r;
}

/* _layout_strides(t, memory_format=None, fname="empty_like") -> the
 * strides a copy of t gets */
static PyObject *
py_layout_strides(PyObject *m, PyObject *args)
{
    PyObject *t, *mfo = Py_None;
    const char *fname = "empty_like";
    stax_memory_format mf;
    int64_t st[STAX_MAX_DIMS];
    (void)m;
    if (!PyArg_ParseTuple(args, "O!|Os:_layout_strides", &StaxTensor_TypeObj,
                          &t, &mfo, &fname)
        || stax_parse_memory_format(mfo, fname, &mf) < 0
        || stax_layout_format_strides((StaxTensor *)t, mf, st) < 0) {
        return NULL;
    }
    return strides_tuple(((StaxTensor *)t)->ndim, st);
}

/* _iter_strides(shape, *operands) -> TensorIterator's output strides */
static PyObject *
py_iter_strides(PyObject *m, PyObject *const *args, Py_ssize_t n)
{
    int64_t shape[STAX_MAX_DIMS], st[STAX_MAX_DIMS];
    int nd;
    (void)m;
    if (n < 1) {
        PyErr_SetString(PyExc_TypeError, "_iter_strides(shape, *operands)");
        return NULL;
    }
    if (stax_parse_int_seq(args[0], shape, &nd, "shape") < 0) {
        return NULL;
    }
    stax_layout_iter_strides((int)(n - 1 > 8 ? 8 : n - 1), args + 1, nd,
                             shape, st);
    return strides_tuple(nd, st);
}

/* _restrided(t, sizes, strides) -> a fresh tensor on the storage of t (a
 * contiguous tensor at offset 0 of as many elements) with the given sizes
 * and strides of a dense layout: the *_like factories fill a contiguous
 * tensor in the target's memory order and give it the target's strides */
static PyObject *
py_restrided(PyObject *m, PyObject *args)
{
    PyObject *to, *zo, *so;
    StaxTensor *t;
    int64_t sz[STAX_MAX_DIMS], st[STAX_MAX_DIMS], reach = 0, numel = 1;
    int n, ns;
    (void)m;
    if (!PyArg_ParseTuple(args, "O!OO:_restrided", &StaxTensor_TypeObj, &to,
                          &zo, &so)
        || stax_parse_int_seq(zo, sz, &n, "size") < 0
        || stax_parse_int_seq(so, st, &ns, "stride") < 0) {
        return NULL;
    }
    t = (StaxTensor *)to;
    for (int d = 0; d < n; d++) {
        numel *= sz[d];
        reach += sz[d] > 0 ? (sz[d] - 1) * st[d] : 0;
    }
    if (n != ns || t->offset != 0 || !stax_tensor_is_contiguous(t)
        || numel != stax_tensor_numel(t) || (numel > 0 && reach >= numel)) {
        PyErr_SetString(PyExc_ValueError, "_restrided: a contiguous tensor "
                        "and a dense layout of as many elements");
        return NULL;
    }
    Py_INCREF(t->storage);
    return (PyObject *)stax_tensor_on_storage(t->storage, t->dtype, n, sz, st);
}

/* _copy_as(t, dtype=None, memory_format=None) -> torch's _to_copy on t's
 * device (clone and _to_copy of the op table) */
static PyObject *
py_copy_as(PyObject *m, PyObject *args)
{
    PyObject *t, *dto = Py_None, *mfo = Py_None;
    stax_dtype_t dt;
    stax_memory_format mf;
    (void)m;
    if (!PyArg_ParseTuple(args, "O!|OO:_copy_as", &StaxTensor_TypeObj, &t,
                          &dto, &mfo)
        || stax_parse_memory_format(mfo, "clone", &mf) < 0) {
        return NULL;
    }
    dt = ((StaxTensor *)t)->dtype;
    if (dto != Py_None && stax_dtype_from_object(dto, &dt) < 0) {
        return NULL;
    }
    return (PyObject *)stax_tensor_copy_as((StaxTensor *)t, dt, mf);
}

static PyMethodDef layout_methods[] = {
    {"_copy_as", py_copy_as, METH_VARARGS, NULL},
    {"_layout_strides", py_layout_strides, METH_VARARGS,
     "_layout_strides(t, memory_format=None): the strides of a copy of t"},
    {"_iter_strides", (PyCFunction)(void (*)(void))py_iter_strides,
     METH_FASTCALL,
     "_iter_strides(shape, *operands): an elementwise result's strides"},
    {"_restrided", py_restrided, METH_VARARGS, NULL},
    {NULL},
};

int
stax_tensor_layout_init(PyObject *m)
{
    return PyModule_AddFunctions(m, layout_methods);
}
