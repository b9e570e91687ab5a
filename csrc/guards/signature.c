/* Signature sigma (seed section 2.2) and the level-2 fingerprint.
 *
 * sigma of a tensor is ('tensor', type, shape, dtype, device, requires_grad,
 * strides): the shape at index 2, so dimension 0 of the first positional
 * tensor sits at inputs[0][0][2][0]. None/bool/int/float/str map to
 * (type, value); tuple/list to (type, (child, ...)); dict to
 * (type, ((key, child), ...)); NumPy scalars (np.float64(2.0), np.int64,
 * np.bool_) to (type, value) like Python's; anything else to (type, id). */
#include "guards/guards.h"
#include "tensor/stax_numpy.h"

#include <xxhash.h>

static PyObject *str_tensor = NULL;   /* interned 'tensor' */
static PyObject *str_cpu = NULL;      /* interned 'cpu' */
static PyObject *str_cuda = NULL;     /* interned 'cuda:0' */

static int
is_tensor(PyObject *o)
{
    return StaxTensor_Type != NULL && StaxTensor_Check(o);
}

/* t's strides as sigma keys them: the stride of a size-1 dimension is
 * never used to address an element, so it is canonical -- the stride that
 * dimension would have in a row-major layout over its inner neighbour (the
 * next dimension of size != 1), 1 when there is none. out[:, -1] of a
 * (1, t, d) tensor has strides (t*d, 1), keyed as (d, 1): the same key at
 * every t. */
static void
canon_strides(const StaxTensor *t, int64_t *st)
{
    int64_t inner = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (t->sizes[d] == 1) {
            st[d] = inner;
        }
        else {
            st[d] = t->strides[d];
            inner = t->strides[d] * t->sizes[d];
        }
    }
}

/* t's dims from the smallest (canonical) stride to the largest (insertion
 * sort, stable; ties keep the inner, later, dim first): the order both the
 * stride signature and the dynamic-mode stride classes walk */
static void
stride_order(const StaxTensor *t, const int64_t *strides, int order[STAX_MAX_DIMS])
{
    int n = t->ndim;
    for (int i = 0; i < n; i++) {
        order[i] = i;
    }
    for (int i = 1; i < n; i++) {
        int d = order[i], j = i - 1;
        while (j >= 0 && (strides[order[j]] > strides[d]
                          || (strides[order[j]] == strides[d]
                              && order[j] < d))) {
            order[j + 1] = order[j];
            j--;
        }
        order[j + 1] = d;
    }
}

/* The dynamic-mode stride expressions: dimensions in increasing stride
 * order; stride 1 -> 1; stride == inner stride * inner size -> the string
 * "size<inner>*<inner expr>"; otherwise the number. */
static PyObject *
stride_signature(StaxTensor *t)
{
    int n = t->ndim, order[STAX_MAX_DIMS];
    PyObject *exprs[STAX_MAX_DIMS] = {NULL};
    PyObject *res = NULL;
    int64_t cs[STAX_MAX_DIMS];
    canon_strides(t, cs);
    stride_order(t, cs, order);
    for (int k = 0; k < n; k++) {
        int d = order[k];
        int64_t st = cs[d];
        if (st == 1) {
            exprs[d] = PyLong_FromLong(1);
        }
        else if (k > 0 && st == cs[order[k - 1]]
                 * t->sizes[order[k - 1]]) {
            int p = order[k - 1];
            exprs[d] = PyUnicode_FromFormat("size%d*%S", p, exprs[p]);
        }
        else {
            exprs[d] = PyLong_FromLongLong(st);
        }
        if (exprs[d] == NULL) {
            goto done;
        }
    }
    res = PyTuple_New(n);
    if (res == NULL) {
        goto done;
    }
    for (int i = 0; i < n; i++) {
        PyTuple_SET_ITEM(res, i, exprs[i]);
        exprs[i] = NULL;
    }
done:
    for (int i = 0; i < n; i++) {
        Py_XDECREF(exprs[i]);
    }
    return res;
}

static PyObject *
int64_tuple(const int64_t *v, int n)
{
    PyObject *t = PyTuple_New(n);
    if (t == NULL) {
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        PyObject *x = PyLong_FromLongLong(v[i]);
        if (x == NULL) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, x);
    }
    return t;
}

static PyObject *
tensor_signature(StaxTensor *t, int dynamic)
{
    PyObject *shape = NULL, *strides = NULL, *dt = NULL;
    if (dynamic) {
        shape = PyLong_FromLong(t->ndim);
        strides = stride_signature(t);
    }
    else {
        int64_t cs[STAX_MAX_DIMS];
        canon_strides(t, cs);
        shape = int64_tuple(t->sizes, t->ndim);
        strides = int64_tuple(cs, t->ndim);
    }
    dt = PyUnicode_FromString(stax_dtype_name(t->dtype));
    PyObject *res = NULL;
    if (shape != NULL && strides != NULL && dt != NULL) {
        res = PyTuple_Pack(7, str_tensor, (PyObject *)Py_TYPE(t), shape, dt,
                           stax_tensor_is_cuda(t) ? str_cuda : str_cpu,
                           t->requires_grad ? Py_True : Py_False,
                           strides);
    }
    Py_XDECREF(shape);
    Py_XDECREF(strides);
    Py_XDECREF(dt);
    return res;
}

/* a NumPy number or bool scalar: a value (the trace reads it as a constant) */
static int
is_np_scalar(PyObject *o)
{
    return PyArray_IsScalar(o, Number) || PyArray_IsScalar(o, Bool);
}

PyObject *
stax_guard_signature(PyObject *o, int dynamic)
{
    PyObject *children = NULL, *res = NULL;
    if (is_tensor(o)) {
        return tensor_signature((StaxTensor *)o, dynamic);
    }
    if (o == Py_None || PyBool_Check(o) || PyLong_Check(o)
        || PyFloat_Check(o) || PyUnicode_Check(o) || is_np_scalar(o)) {
        return PyTuple_Pack(2, (PyObject *)Py_TYPE(o), o);
    }
    if (PyTuple_Check(o) || PyList_Check(o)) {
        PyObject *seq = PySequence_Fast(o, "");
        if (seq == NULL) {
            return NULL;
        }
        Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
        children = PyTuple_New(n);
        for (Py_ssize_t i = 0; children != NULL && i < n; i++) {
            PyObject *c = stax_guard_signature(
                PySequence_Fast_GET_ITEM(seq, i), dynamic);
            if (c == NULL) {
                Py_CLEAR(children);
                break;
            }
            PyTuple_SET_ITEM(children, i, c);
        }
        Py_DECREF(seq);
        goto pack;
    }
    if (PyDict_Check(o)) {
        Py_ssize_t pos = 0, i = 0;
        PyObject *k, *v;
        children = PyTuple_New(PyDict_GET_SIZE(o));
        while (children != NULL && PyDict_Next(o, &pos, &k, &v)) {
            PyObject *c = stax_guard_signature(v, dynamic);
            PyObject *kv = c ? PyTuple_Pack(2, k, c) : NULL;
            Py_XDECREF(c);
            if (kv == NULL) {
                Py_CLEAR(children);
                break;
            }
            PyTuple_SET_ITEM(children, i++, kv);
        }
        goto pack;
    }
    children = PyLong_FromVoidPtr(o);
pack:
    if (children == NULL) {
        return NULL;
    }
    res = PyTuple_Pack(2, (PyObject *)Py_TYPE(o), children);
    Py_DECREF(children);
    return res;
}

/* ---- key buffers ---- */

void
stax_kb_init(stax_keybuf *b)
{
    b->p = b->inl;
    b->n = 0;
    b->cap = sizeof b->inl;
}

void
stax_kb_free(stax_keybuf *b)
{
    if (b->p != b->inl) {
        PyMem_Free(b->p);
    }
    stax_kb_init(b);
}

/* room for n more bytes */
int
stax_kb_grow(stax_keybuf *b, size_t n)
{
    {
        size_t cap = b->cap * 2;
        while (cap < b->n + n) {
            cap *= 2;
        }
        unsigned char *q = PyMem_Malloc(cap);
        if (q == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        memcpy(q, b->p, b->n);
        if (b->p != b->inl) {
            PyMem_Free(b->p);
        }
        b->p = q;
        b->cap = cap;
    }
    return 0;
}

/* ---- fingerprint (dispatch level 2) ----
 * The value tree is written as a byte string (then hashed): the words
 * below, tensors by identity, version and metadata. */

typedef struct {
    uint64_t tag;
    uint64_t a;
    uint64_t b;
} fp_word;

int
stax_guard_fp_header(stax_keybuf *kb, PyTypeObject *type, int tag,
                     uint64_t n)
{
    fp_word w = {(uint64_t)tag, (uint64_t)(uintptr_t)type, n};
    return stax_kb_put(kb, &w, sizeof w);
}

int
stax_guard_fp_cstr(stax_keybuf *kb, const char *s)
{
    size_t n = strlen(s);
    if (stax_guard_fp_header(kb, &PyUnicode_Type, 5, n) < 0) {
        return -1;
    }
    return stax_kb_put(kb, s, n);
}

int
stax_guard_fp_feed(stax_keybuf *kb, PyObject *o)
{
    fp_word w = {0, (uint64_t)(uintptr_t)Py_TYPE(o), 0};
    if (is_tensor(o)) {
        StaxTensor *t = (StaxTensor *)o;
        w.tag = 1;
        w.a = (uint64_t)(uintptr_t)o;
        w.b = t->storage ? t->storage->version : 0;
        /* in-place metadata changes (requires_grad_, t_) keep the identity */
        int64_t meta[3] = {t->requires_grad, t->ndim, t->offset};
        meta[0] |= (int64_t)t->dtype << 8;
        meta[0] |= (int64_t)(t->storage ? t->storage->device : 0) << 16;
        if (stax_kb_put(kb, &w, sizeof w) < 0
            || stax_kb_put(kb, meta, sizeof meta) < 0
            || stax_kb_put(kb, t->sizes, sizeof(int64_t) * t->ndim) < 0
            || stax_kb_put(kb, t->strides, sizeof(int64_t) * t->ndim) < 0) {
            return -1;
        }
        return 0;
    }
    if (o == Py_None || PyBool_Check(o)) {
        w.tag = 2;
        w.b = (uint64_t)(uintptr_t)o;
        return stax_kb_put(kb, &w, sizeof w);
    }
    if (PyLong_Check(o)) {
        int overflow = 0;
        long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
        if (v == -1 && PyErr_Occurred()) {
            return -1;
        }
        if (!overflow) {
            w.tag = 3;
            w.b = (uint64_t)v;
            return stax_kb_put(kb, &w, sizeof w);
        }
        PyObject *s = PyObject_Str(o);
        if (s == NULL) {
            return -1;
        }
        int r = stax_guard_fp_feed(kb, s);
        Py_DECREF(s);
        return r;
    }
    if (is_np_scalar(o)) {
        /* by value (w.a holds the NumPy type): equal scalars, one key */
        PyObject *item = PyObject_CallMethod(o, "item", NULL);
        if (item == NULL) {
            return -1;
        }
        w.tag = 9;
        int r = stax_kb_put(kb, &w, sizeof w) < 0 ? -1 : stax_guard_fp_feed(kb, item);
        Py_DECREF(item);
        return r;
    }
    if (PyFloat_Check(o)) {
        double d = PyFloat_AS_DOUBLE(o);
        w.tag = 4;
        memcpy(&w.b, &d, sizeof d);
        return stax_kb_put(kb, &w, sizeof w);
    }
    if (PyUnicode_Check(o)) {
        Py_ssize_t n;
        const char *s = PyUnicode_AsUTF8AndSize(o, &n);
        if (s == NULL) {
            return -1;
        }
        w.tag = 5;
        w.b = (uint64_t)n;
        if (stax_kb_put(kb, &w, sizeof w) < 0) {
            return -1;
        }
        return stax_kb_put(kb, s, (size_t)n);
    }
    if (PyTuple_CheckExact(o)) {
        Py_ssize_t n = PyTuple_GET_SIZE(o);
        w.tag = 6;
        w.b = (uint64_t)n;
        if (stax_kb_put(kb, &w, sizeof w) < 0) {
            return -1;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            if (stax_guard_fp_feed(kb, PyTuple_GET_ITEM(o, i)) < 0) {
                return -1;
            }
        }
        return 0;
    }
    if (PyTuple_Check(o) || PyList_Check(o)) {
        Py_ssize_t n = PySequence_Size(o);
        if (n < 0) {
            return -1;
        }
        w.tag = 6;
        w.b = (uint64_t)n;
        if (stax_kb_put(kb, &w, sizeof w) < 0) {
            return -1;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *c = PySequence_GetItem(o, i);
            int r = c ? stax_guard_fp_feed(kb, c) : -1;
            Py_XDECREF(c);
            if (r < 0) {
                return -1;
            }
        }
        return 0;
    }
    if (PyDict_Check(o)) {
        Py_ssize_t pos = 0;
        PyObject *k, *v;
        w.tag = 7;
        w.b = (uint64_t)PyDict_GET_SIZE(o);
        if (stax_kb_put(kb, &w, sizeof w) < 0) {
            return -1;
        }
        while (PyDict_Next(o, &pos, &k, &v)) {
            if (stax_guard_fp_feed(kb, k) < 0
                || stax_guard_fp_feed(kb, v) < 0) {
                return -1;
            }
        }
        return 0;
    }
    w.tag = 8;
    w.b = (uint64_t)(uintptr_t)o;
    return stax_kb_put(kb, &w, sizeof w);
}

void
stax_guard_hash(const stax_keybuf *kb, unsigned char out[16])
{
    XXH128_hash_t h = XXH3_128bits(kb->p, kb->n);
    uint64_t words[2] = {h.low64, h.high64};
    memcpy(out, words, sizeof words);
}

PyObject *
stax_guard_fingerprint(PyObject *obj)
{
    stax_keybuf kb;
    unsigned char h[16];
    PyObject *res = NULL;
    stax_kb_init(&kb);
    if (stax_guard_fp_feed(&kb, obj) == 0) {
        stax_guard_hash(&kb, h);
        res = PyBytes_FromStringAndSize((const char *)h, sizeof h);
    }
    stax_kb_free(&kb);
    return res;
}

/* ---- the signature sigma as bytes (dispatch level 3 in C) ----
 * Equal bytes imply equal signature tuples (stax_guard_signature), so a
 * byte key may stand for the tuple key of the Python driver. Values whose
 * tuple equality the bytes cannot reproduce exactly (NaN, int/float/str
 * subclasses, container subclasses, huge ints, unusual dict keys) are
 * reported as not encodable: that call takes the Python path. */

enum { SIG_OK = 0, SIG_BAIL = 1 };

static int
put_u8(stax_keybuf *kb, unsigned v)
{
    unsigned char c = (unsigned char)v;
    return stax_kb_put(kb, &c, 1);
}

static int
put_ptr(stax_keybuf *kb, const void *p)
{
    return stax_kb_put(kb, &p, sizeof p);
}

static int
put_i64(stax_keybuf *kb, int64_t v)
{
    return stax_kb_put(kb, &v, sizeof v);
}

/* the dynamic-mode stride classes, as stride_signature computes them:
 * per dimension 0 (stride 1), 1 + the inner dimension (contiguous over
 * it), or 2 and the stride itself */
static int
stride_classes(stax_keybuf *kb, StaxTensor *t)
{
    int n = t->ndim, order[STAX_MAX_DIMS];
    int64_t cls[STAX_MAX_DIMS][2], cs[STAX_MAX_DIMS];
    canon_strides(t, cs);
    stride_order(t, cs, order);
    for (int k = 0; k < n; k++) {
        int d = order[k];
        int64_t st = cs[d];
        if (st == 1) {
            cls[d][0] = 0;
            cls[d][1] = 0;
        }
        else if (k > 0 && st == cs[order[k - 1]]
                 * t->sizes[order[k - 1]]) {
            cls[d][0] = 1;
            cls[d][1] = order[k - 1];
        }
        else {
            cls[d][0] = 2;
            cls[d][1] = st;
        }
    }
    return stax_kb_put(kb, cls, sizeof(int64_t) * 2 * n);
}

static int
sig_scalar(stax_keybuf *kb, PyObject *o)
{
    if (o == Py_None) {
        return put_u8(kb, 'N');
    }
    if (PyBool_Check(o)) {
        return put_u8(kb, o == Py_True ? 'b' : 'B');
    }
    if (PyLong_CheckExact(o)) {
        int overflow = 0;
        long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
        if (v == -1 && PyErr_Occurred()) {
            return -1;
        }
        if (overflow) {
            return SIG_BAIL;
        }
        return put_u8(kb, 'I') < 0 || put_i64(kb, v) < 0 ? -1 : 0;
    }
    if (PyFloat_CheckExact(o)) {
        double d = PyFloat_AS_DOUBLE(o);
        if (d != d) {
            return SIG_BAIL;       /* NaN: tuple equality is by identity */
        }
        if (d == 0.0) {
            d = 0.0;               /* -0.0 == 0.0 */
        }
        return put_u8(kb, 'F') < 0 || stax_kb_put(kb, &d, sizeof d) < 0
               ? -1 : 0;
    }
    if (PyUnicode_CheckExact(o)) {
        Py_ssize_t n;
        const char *s = PyUnicode_AsUTF8AndSize(o, &n);
        if (s == NULL) {
            PyErr_Clear();         /* lone surrogates: let Python compare */
            return SIG_BAIL;
        }
        return put_u8(kb, 'S') < 0 || put_i64(kb, n) < 0
               || stax_kb_put(kb, s, (size_t)n) < 0 ? -1 : 0;
    }
    return SIG_BAIL;
}

int
stax_guard_sig_feed(stax_keybuf *kb, PyObject *o, int dynamic)
{
    if (is_tensor(o)) {
        StaxTensor *t = (StaxTensor *)o;
        unsigned char h[5] = {'T', (unsigned char)t->ndim,
                              (unsigned char)t->dtype,
                              (unsigned char)(t->requires_grad != 0),
                              (unsigned char)t->storage->device};
        if (put_ptr(kb, Py_TYPE(o)) < 0 || stax_kb_put(kb, h, 5) < 0) {
            return -1;
        }
        if (dynamic) {
            return stride_classes(kb, t);
        }
        int64_t cs[STAX_MAX_DIMS];
        canon_strides(t, cs);
        return stax_kb_put(kb, t->sizes, sizeof(int64_t) * t->ndim) < 0
               || stax_kb_put(kb, cs, sizeof(int64_t) * t->ndim) < 0 ? -1 : 0;
    }
    if (o == Py_None || PyBool_Check(o) || PyLong_Check(o)
        || PyFloat_Check(o) || PyUnicode_Check(o)) {
        return sig_scalar(kb, o);
    }
    if (PyTuple_CheckExact(o) || PyList_CheckExact(o)) {
        Py_ssize_t n = PySequence_Fast_GET_SIZE(o);
        PyObject **items = PySequence_Fast_ITEMS(o);
        if (put_u8(kb, PyTuple_CheckExact(o) ? '(' : '[') < 0
            || put_i64(kb, n) < 0) {
            return -1;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            int r = stax_guard_sig_feed(kb, items[i], dynamic);
            if (r != SIG_OK) {
                return r;
            }
        }
        return SIG_OK;
    }
    if (PyDict_CheckExact(o)) {
        Py_ssize_t pos = 0;
        PyObject *k, *v;
        if (put_u8(kb, '{') < 0 || put_i64(kb, PyDict_GET_SIZE(o)) < 0) {
            return -1;
        }
        while (PyDict_Next(o, &pos, &k, &v)) {
            int r = sig_scalar(kb, k);
            if (r == SIG_OK) {
                r = stax_guard_sig_feed(kb, v, dynamic);
            }
            if (r != SIG_OK) {
                return r;
            }
        }
        return SIG_OK;
    }
    if (PyTuple_Check(o) || PyList_Check(o) || PyDict_Check(o)) {
        return SIG_BAIL;
    }
    return stax_guard_sig_identity(kb, o);
}

int
stax_guard_sig_identity(stax_keybuf *kb, PyObject *o)
{
    return put_u8(kb, 'O') < 0 || put_ptr(kb, Py_TYPE(o)) < 0
           || put_ptr(kb, o) < 0 ? -1 : 0;
}

static PyObject *
py_signature(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError,
                        "_guard_signature(obj, dynamic=False)");
        return NULL;
    }
    int dyn = nargs == 2 ? PyObject_IsTrue(args[1]) : 0;
    if (dyn < 0) {
        return NULL;
    }
    return stax_guard_signature(args[0], dyn);
}

static PyObject *
py_fingerprint(PyObject *self, PyObject *obj)
{
    (void)self;
    return stax_guard_fingerprint(obj);
}

static PyObject *
py_grad_mode(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    return PyBool_FromLong(stax_grad_enabled());
}

static PyObject *
py_default_dtype(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    return PyUnicode_FromString(stax_dtype_name(stax_default_dtype()));
}

/* None when no two of the tensors share a storage (the common case), else
 * a tuple giving, for each tensor, the index of the first tensor sharing
 * its storage (its own index if none). The trace (and a back end) depends
 * on which inputs alias: part of the key. */
static PyObject *
aliasing_of(PyObject *const *items, Py_ssize_t n)
{
    PyObject *res = NULL;
    int any = 0;
    for (Py_ssize_t i = 1; i < n && !any; i++) {
        PyObject *a = items[i];
        if (!StaxTensor_Check(a)) {
            continue;
        }
        for (Py_ssize_t j = 0; j < i; j++) {
            PyObject *b = items[j];
            if (StaxTensor_Check(b) && ((StaxTensor *)a)->storage
                                           == ((StaxTensor *)b)->storage) {
                any = 1;
                break;
            }
        }
    }
    if (!any) {
        Py_RETURN_NONE;
    }
    res = PyTuple_New(n);
    for (Py_ssize_t i = 0; res != NULL && i < n; i++) {
        PyObject *a = items[i], *ix;
        Py_ssize_t first = i;
        if (StaxTensor_Check(a)) {
            for (Py_ssize_t j = 0; j < i; j++) {
                PyObject *b = items[j];
                if (StaxTensor_Check(b) && ((StaxTensor *)a)->storage
                                               == ((StaxTensor *)b)->storage) {
                    first = j;
                    break;
                }
            }
        }
        ix = PyLong_FromSsize_t(first);
        if (ix == NULL) {
            Py_CLEAR(res);
            break;
        }
        PyTuple_SET_ITEM(res, i, ix);
    }
    return res;
}

/* _guard_aliasing(tensors): aliasing_of a sequence */
static PyObject *
py_aliasing(PyObject *self, PyObject *seq)
{
    PyObject *fast = PySequence_Fast(seq, "_guard_aliasing expects a sequence");
    (void)self;
    if (fast == NULL) {
        return NULL;
    }
    PyObject *res = aliasing_of(PySequence_Fast_ITEMS(fast),
                                PySequence_Fast_GET_SIZE(fast));
    Py_DECREF(fast);
    return res;
}

PyObject *
stax_guard_call_key(PyObject *args, PyObject *kwargs, PyObject *free,
                    const unsigned char *effect, int dyn,
                    PyObject *const *flat, Py_ssize_t nflat)
{
    PyObject *sa = NULL, *sk = NULL, *sf = NULL, *al = NULL, *res = NULL;
    Py_ssize_t na = PyTuple_GET_SIZE(args), nf = PyTuple_GET_SIZE(free);
    sa = PyTuple_New(na);
    sk = PyTuple_New(PyDict_GET_SIZE(kwargs));
    sf = PyTuple_New(nf);
    if (sa == NULL || sk == NULL || sf == NULL) {
        goto done;
    }
    for (Py_ssize_t i = 0; i < na; i++) {
        PyObject *g = stax_guard_signature(PyTuple_GET_ITEM(args, i), dyn);
        if (g == NULL) {
            goto done;
        }
        PyTuple_SET_ITEM(sa, i, g);
    }
    Py_ssize_t pos = 0, i = 0;
    PyObject *k, *v;
    while (PyDict_Next(kwargs, &pos, &k, &v)) {
        PyObject *g = stax_guard_signature(v, dyn);
        PyObject *kv = g ? PyTuple_Pack(2, k, g) : NULL;
        Py_XDECREF(g);
        if (kv == NULL) {
            goto done;
        }
        PyTuple_SET_ITEM(sk, i++, kv);
    }
    for (Py_ssize_t j = 0; j < nf; j++) {
        PyObject *fv = PyTuple_GET_ITEM(free, j), *g = NULL;
        if (effect != NULL && effect[j]) {
            /* an effect-only container: its identity, not its contents */
            PyObject *id = PyLong_FromVoidPtr(fv);
            g = id ? PyTuple_Pack(2, (PyObject *)Py_TYPE(fv), id) : NULL;
            Py_XDECREF(id);
        }
        else {
            g = stax_guard_signature(fv, dyn);
        }
        if (g == NULL) {
            goto done;
        }
        PyTuple_SET_ITEM(sf, j, g);
    }
    al = aliasing_of(flat, nflat);
    if (al != NULL) {
        res = PyTuple_Pack(4, sa, sk, sf, al);
    }
done:
    Py_XDECREF(sa);
    Py_XDECREF(sk);
    Py_XDECREF(sf);
    Py_XDECREF(al);
    return res;
}

PyObject *
stax_guard_call_key_of(PyObject *args, PyObject *kwargs, PyObject *free,
                       PyObject *effect_only, int dyn, PyObject *flat)
{
    PyObject *fast = NULL, *res = NULL;
    unsigned char *effect = NULL;
    if (!PyTuple_Check(args) || !PyDict_Check(kwargs) || !PyTuple_Check(free)
        || !PyTuple_Check(effect_only)) {
        PyErr_SetString(PyExc_TypeError, "_guard_call_key(args, kwargs, "
                        "free, effect_only, dynamic, flat)");
        return NULL;
    }
    Py_ssize_t nf = PyTuple_GET_SIZE(free);
    effect = PyMem_Calloc(nf ? nf : 1, 1);
    if (effect == NULL) {
        return PyErr_NoMemory();
    }
    for (Py_ssize_t e = 0; e < PyTuple_GET_SIZE(effect_only); e++) {
        Py_ssize_t ix = PyLong_AsSsize_t(PyTuple_GET_ITEM(effect_only, e));
        if (ix == -1 && PyErr_Occurred()) {
            goto done;
        }
        if (ix >= 0 && ix < nf) {
            effect[ix] = 1;
        }
    }
    fast = PySequence_Fast(flat, "_guard_call_key: flat is a sequence");
    if (fast != NULL) {
        res = stax_guard_call_key(args, kwargs, free, effect, dyn,
                                  PySequence_Fast_ITEMS(fast),
                                  PySequence_Fast_GET_SIZE(fast));
    }
done:
    PyMem_Free(effect);
    Py_XDECREF(fast);
    return res;
}

/* _guard_call_key(args, kwargs, free, effect_only, dynamic, flat) ->
 * stax_guard_call_key, effect_only the indices of free values keyed by
 * (type, id) (the Python driver's whole-call path keys a call so). */
static PyObject *
py_call_key(PyObject *self, PyObject *const *a, Py_ssize_t n)
{
    (void)self;
    if (n != 6) {
        PyErr_SetString(PyExc_TypeError, "_guard_call_key(args, kwargs, "
                        "free, effect_only, dynamic, flat)");
        return NULL;
    }
    int dyn = PyObject_IsTrue(a[4]);
    return dyn < 0 ? NULL : stax_guard_call_key_of(a[0], a[1], a[2], a[3], dyn, a[5]);
}

static PyMethodDef signature_methods[] = {
    {"_guard_aliasing", py_aliasing, METH_O,
     "_guard_aliasing(tensors): None, or per tensor the index of the first "
     "one sharing its storage"},
    {"_guard_default_dtype", py_default_dtype, METH_NOARGS,
     "_guard_default_dtype(): the default dtype's name, as keyed"},
    {"_guard_signature", (PyCFunction)(void (*)(void))py_signature,
     METH_FASTCALL,
     "_guard_signature(obj, dynamic=False): the signature sigma of obj"},
    {"_guard_call_key", (PyCFunction)(void (*)(void))py_call_key,
     METH_FASTCALL,
     "_guard_call_key(args, kwargs, free, effect_only, dynamic, flat): "
     "(sig_args, sig_kwargs, sig_free, aliasing)"},
    {"_guard_fingerprint", py_fingerprint, METH_O,
     "_guard_fingerprint(obj): 16-byte XXH3-128 fingerprint (level 2)"},
    {"_guard_grad_mode", py_grad_mode, METH_NOARGS,
     "_guard_grad_mode(): grad mode as the dispatcher reads it (rho)"},
    {NULL, NULL, 0, NULL},
};

int
stax_guard_signature_init(PyObject *m)
{
    str_tensor = PyUnicode_InternFromString("tensor");
    str_cpu = PyUnicode_InternFromString("cpu");
    str_cuda = PyUnicode_InternFromString("cuda:0");
    if (str_tensor == NULL || str_cpu == NULL || str_cuda == NULL) {
        return -1;
    }
    return PyModule_AddFunctions(m, signature_methods);
}
