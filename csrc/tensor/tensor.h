/* Public header of the tensor room: the Tensor type (storage + offset + sizes
 * + strides + dtype + device + shared version counter), dtypes and type
 * promotion. Knows no op. */
#ifndef STAX_TENSOR_H
#define STAX_TENSOR_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define STAX_MAX_DIMS 64   /* torch allows at least 64 */

typedef enum {
    STAX_BOOL = 0,
    STAX_UINT8,
    STAX_INT8,
    STAX_INT16,
    STAX_INT32,
    STAX_INT64,
    STAX_FLOAT16,
    STAX_FLOAT32,
    STAX_FLOAT64,
    STAX_BFLOAT16,   /* last: the numbering of the others is kept in caches */
    STAX_NUM_DTYPES
} stax_dtype_t;

/* A storage: one NumPy array owns the bytes; every view shares the storage
 * and so shares its version counter (t._version). */
typedef struct {
    PyObject_HEAD
    PyObject *owner;      /* strong: the NumPy array owning the memory */
    char *data;           /* base pointer */
    int64_t nbytes;
    uint64_t version;     /* bumped by every in-place write to any view */
    int device;           /* STAX_DEV_CPU: owner is a NumPy array;
                             STAX_DEV_CUDA: owner is a device block of the
                             caching allocator and data a device address */
    uint64_t serial;      /* creation order (stax_storage_serial_now): the
                             tracer tells the caller's storages from its own */
} StaxStorage;

#define STAX_DEV_CPU 0
#define STAX_DEV_CUDA 1

typedef struct {
    PyObject_HEAD
    StaxStorage *storage;          /* strong */
    int64_t offset;                /* storage offset, in elements */
    int ndim;
    int64_t sizes[STAX_MAX_DIMS];
    int64_t strides[STAX_MAX_DIMS]; /* in elements */
    stax_dtype_t dtype;
    int requires_grad;
    PyObject *dict;                /* instance dict (subclasses, Parameter) */
    PyObject *weakreflist;
    /* added by the tensor room (after the contract's fields): */
    int nonleaf;                   /* 1: result of an op that requires grad
                                      (t.is_leaf is False) */
    PyObject *grad;                /* t.grad (NULL = None) */
    /* autograd (owned by csrc/autograd/, kept here so a tensor carries its
     * history): */
    PyObject *grad_fn;             /* strong: the Node that produced it */
    int output_nr;                 /* which output of grad_fn it is */
    int retains_grad;              /* retain_grad() was called */
    int ag_view;                   /* a view recorded by autograd */
    PyObject *grad_acc;            /* weakref to its AccumulateGrad node */
    PyObject *hooks;               /* list: tensor hooks of a leaf */
    PyObject *view_src;            /* strong: the tensor a view autograd did
                                      not record (its base did not require
                                      grad) was taken from, the root of a
                                      chain of views (torch's _base); an
                                      in-place write through the view that
                                      requires grad rebases that tensor */
} StaxTensor;

extern PyTypeObject *StaxTensor_Type;   /* tensorplay.Tensor */
extern PyTypeObject *StaxStorage_Type;
extern PyTypeObject *StaxDType_Type;    /* tensorplay.dtype */

#define StaxTensor_Check(o) PyObject_TypeCheck((o), StaxTensor_Type)
#define STAX_TENSOR_DATA(t) \
    ((t)->storage->data + (t)->offset * stax_dtype_itemsize((t)->dtype))

/* dtypes */
int stax_dtype_itemsize(stax_dtype_t dt);
const char *stax_dtype_name(stax_dtype_t dt);        /* "float32" */
const char *stax_dtype_title(stax_dtype_t dt);       /* torch's scalar type: "Float" */
int stax_dtype_is_floating(stax_dtype_t dt);
int stax_dtype_is_integral(stax_dtype_t dt);         /* bool excluded */
/* The NumPy type of the storage: a half-like dtype without a NumPy twin
 * (bfloat16) is stored as NPY_UINT16 bits. */
int stax_dtype_to_npy(stax_dtype_t dt);              /* NPY_FLOAT32 ... */
/* 16-bit floating dtypes (float16, bfloat16): stored as bits, computed in
 * float32 (torch's opmath type) and rounded to nearest even once per op.
 * The conversions are the only difference between the two. */
int stax_dtype_is_half_like(stax_dtype_t dt);
/* torch's checked conversion of a Python number v into dtype dt (fill_,
 * full, masked_fill): 0, or -1 + RuntimeError "value cannot be converted
 * to type ... without overflow" */
int stax_dtype_check_scalar(stax_dtype_t dt, PyObject *v);
int stax_tensor_check_no_overlap(PyObject *out, PyObject *o, int full);
double stax_half_like_to_double(stax_dtype_t dt, uint16_t bits);
/* float16 rounds directly from the double; bfloat16 goes through float32
 * first, as c10::BFloat16(float(d)) does */
uint16_t stax_double_to_half_like(stax_dtype_t dt, double d);
/* bfloat16 <-> float32: the bits are float32's high half; rounding is to
 * nearest even and every NaN becomes 0x7fc0 (c10's round_to_nearest_even) */
static inline float
stax_bf16_to_float(uint16_t b)
{
    union { uint32_t u; float f; } v;
    v.u = (uint32_t)b << 16;
    return v.f;
}
static inline uint16_t
stax_float_to_bf16(float f)
{
    union { uint32_t u; float f; } v;
    v.f = f;
    if ((v.u & 0x7fffffffu) > 0x7f800000u) {
        return 0x7fc0;
    }
    return (uint16_t)((v.u + 0x7fffu + ((v.u >> 16) & 1u)) >> 16);
}
int stax_dtype_from_npy(int npy_type, stax_dtype_t *out);   /* -1 + TypeError */
PyObject *stax_dtype_object(stax_dtype_t dt);        /* borrowed tp.float32 */
int stax_dtype_from_object(PyObject *o, stax_dtype_t *out); /* tp.float32, "float32", np.float32 */
stax_dtype_t stax_default_dtype(void);               /* float32 unless set */

/* PyTorch type promotion. Category order bool < integral < floating; a
 * dimensioned tensor outranks a 0-d tensor which outranks a Python scalar
 * within the same category. */
stax_dtype_t stax_promote_types(stax_dtype_t a, stax_dtype_t b);
/* operands: Tensors or Python scalars (bool/int/float). -1 + exception. */
int stax_result_type(PyObject *const *operands, Py_ssize_t n, stax_dtype_t *out);
/* The one promotion routine (stax_result_type and the lowering's
 * pointwise rule describe their operands to it): an operand is a
 * dimensioned tensor, a 0-d tensor, or a wrapped Python scalar (whose dtype
 * is bool, int64 or a floating one: see stax_scalar_dtype). No operand:
 * the default dtype. */
typedef enum {
    STAX_PROMO_TENSOR = 0,
    STAX_PROMO_ZERO_DIM,
    STAX_PROMO_SCALAR
} stax_promo_rank;
typedef struct {
    stax_dtype_t dtype;
    stax_promo_rank rank;
} stax_promo_operand;
stax_dtype_t stax_result_type_of(const stax_promo_operand *ops, Py_ssize_t n);
/* The dtype a Python scalar is wrapped as: bool, int64 or the default
 * floating dtype; -1 (no exception) for anything else. */
int stax_scalar_dtype(PyObject *o);

/* construction */
StaxTensor *stax_tensor_from_array(PyObject *ndarray); /* no copy; negative strides -> ValueError */
/* The device type of t's storage ("cpu"): one place to read it, so that
 * what picks a back end by device (lower) learns of "cuda" tensors when the
 * GPU runtime gives storages a device. */
const char *stax_tensor_device_type(const StaxTensor *t);
/* "cpu" or "cuda:0" (PyTorch's str(t.device)) */
const char *stax_tensor_device_str(const StaxTensor *t);
#define stax_tensor_is_cuda(t) ((t)->storage->device == STAX_DEV_CUDA)

/* ---- CUDA tensors (device_tensor.c; the device room does the work) ----
 * device: STAX_DEV_CPU / STAX_DEV_CUDA. Copies between devices carry no
 * autograd history (Tensor.to records it). */
StaxTensor *stax_tensor_empty_on(int ndim, const int64_t *sizes,
                                 stax_dtype_t dt, int device);
StaxTensor *stax_tensor_zeros_on(int ndim, const int64_t *sizes,
                                 stax_dtype_t dt, int device);
/* t itself (new ref) when already there, else a copy in torch's
 * preserve_format layout (a dense t keeps its strides) */
StaxTensor *stax_tensor_to_device(StaxTensor *t, int device);
/* a host tensor with t's sizes/strides viewing a host copy of the bytes a
 * CUDA tensor t reaches (synchronizes), and the write-back of such a copy */
StaxTensor *stax_tensor_host_span(StaxTensor *t);
int stax_tensor_upload_span(StaxTensor *t, StaxTensor *host);
/* None/str/device/int -> *device (None keeps it); "cuda" without a GPU:
 * RuntimeError("CUDA is not available: ...") */
int stax_parse_device(PyObject *o, int *device);
PyObject *stax_device_object(int device);   /* borrowed tensorplay.device */
/* contiguous, uninitialized, exact type Tensor; negative size or an
 * overflowing element count -> RuntimeError */
StaxTensor *stax_tensor_empty(int ndim, const int64_t *sizes, stax_dtype_t dt);
/* ---- layouts of fresh results (layout.c) ---------------------------
 * torch's memory formats; None as an argument is preserve_format */
typedef enum {
    STAX_MF_PRESERVE = 0,
    STAX_MF_CONTIGUOUS,
    STAX_MF_CHANNELS_LAST,
    STAX_MF_CHANNELS_LAST_3D
} stax_memory_format;
/* torch's is_non_overlapping_and_dense */
int stax_tensor_is_dense(const StaxTensor *t);
/* empty_like's strides for a tensor that is not dense: a dense layout in
 * the order of its strides (torch's infer_dense_strides) */
void stax_layout_dense_strides(int nd, const int64_t *sizes,
                               const int64_t *strides, int64_t *out);
/* the strides a copy of t gets under mf (preserve: t's own when t is dense,
 * else the dense layout in t's stride order); -1 + RuntimeError when
 * channels_last(_3d) meets a tensor of another rank */
int stax_layout_format_strides(const StaxTensor *t, stax_memory_format mf,
                               int64_t *out);
/* TensorIterator's output strides for an elementwise op of the given
 * operands (Tensors; anything else is a 0-d scalar) and broadcast shape:
 * the operands' common layout when they share shape and layout, else a
 * dense layout in the stride order of the first operand that orders each
 * pair of dims */
void stax_layout_iter_strides(int nops, PyObject *const *operands, int nd,
                              const int64_t *shape, int64_t *out);
/* uninitialized, numel elements, with strides of a dense layout (NULL:
 * contiguous) */
StaxTensor *stax_tensor_empty_strided_on(int ndim, const int64_t *sizes,
                                         const int64_t *strides,
                                         stax_dtype_t dt, int device);
/* torch's empty_like(t, dtype=dt, memory_format=mf) on device */
StaxTensor *stax_tensor_empty_like(StaxTensor *t, stax_dtype_t dt,
                                   stax_memory_format mf, int device);
/* a copy of t (any device) as dtype dt laid out by mf (torch's
 * _to_copy); requires grad as t does when dt is floating */
StaxTensor *stax_tensor_copy_as(StaxTensor *t, stax_dtype_t dt,
                                stax_memory_format mf);
/* torch's Tensor.to(dtype, copy=, memory_format=) on t's device: t itself
 * when nothing changes (torch's to_will_alias), else stax_tensor_copy_as */
StaxTensor *stax_tensor_to_format(StaxTensor *t, stax_dtype_t dt, int copy,
                                  stax_memory_format mf);
/* t.is_contiguous(memory_format=mf) (preserve: plain contiguity) */
int stax_tensor_is_contiguous_as(StaxTensor *t, stax_memory_format mf);
/* None or a tensorplay memory format -> *mf; TypeError naming fname */
int stax_parse_memory_format(PyObject *o, const char *fname,
                             stax_memory_format *mf);

/* a plain Tensor sharing base's storage (and version counter); it requires
 * grad (as a non-leaf) when base does and grad mode is on */
StaxTensor *stax_tensor_view(StaxTensor *base, int ndim, const int64_t *sizes,
                             const int64_t *strides, int64_t offset);
/* a NumPy array viewing the same bytes (no copy; base keeps storage alive);
 * bfloat16 has no NumPy type: TypeError("Got unsupported ScalarType
 * BFloat16"), as torch's t.numpy() */
PyObject *stax_tensor_as_array(StaxTensor *t);
/* the same view for byte-level work (gathers, copies between tensors of one
 * dtype): bfloat16 comes as its uint16 bits */
PyObject *stax_tensor_as_storage_array(StaxTensor *t);
/* a tensor of dtype dt on an array holding dt's storage type (the uint16
 * bits of bfloat16; for other dtypes the array's own dtype must be dt's) */
StaxTensor *stax_tensor_from_storage_array(PyObject *ndarray, stax_dtype_t dt);
int stax_tensor_is_contiguous(StaxTensor *t);
int64_t stax_tensor_numel(StaxTensor *t);
void stax_tensor_bump_version(StaxTensor *t);
/* Write hook (the tracer's journal of writes to the caller's tensors):
 * stax_tensor_will_write(t) runs hook(t, 0) before an in-place write of
 * t's storage, stax_tensor_bump_version(t) runs hook(t, 1) after it. One
 * hook at a time; NULL removes it. The hook must not raise. */
typedef void (*stax_write_hook_fn)(StaxTensor *t, int after);
void stax_tensor_set_write_hook(stax_write_hook_fn fn);
/* Read hook (the tracer's check of values read outside its graph): this
 * thread's hook(t) runs when t's elements are read through a host view of
 * its storage (stax_tensor_as_storage_array: NumPy kernels, tolist, numpy,
 * clone, copies) or as one Python number (item, float(t)). It must not
 * raise. NULL removes it. */
typedef void (*stax_read_hook_fn)(StaxTensor *t);
void stax_tensor_set_read_hook(stax_read_hook_fn fn);
void stax_tensor_will_write(StaxTensor *t);
/* the serial the next storage gets: storages created from now on have a
 * serial >= this value */
uint64_t stax_storage_serial_now(void);

/* grad mode (rho of the specialization key) */
int stax_grad_enabled(void);
void stax_set_grad_enabled(int on);
int stax_inference_mode_enabled(void);
/* 1 when grad mode is on and some operand is a Tensor requiring grad */
int stax_result_requires_grad(PyObject *const *operands, Py_ssize_t n);
/* marks an op's result: requires_grad = rg, is_leaf = !rg */
void stax_tensor_set_result_requires_grad(StaxTensor *out, int rg);

/* ---- added by the tensor room -------------------------------------- */
/* Tensor's tp_as_number / tp_richcompare hold trampolines from the start
 * (so Tensor.__add__, __radd__, __eq__ ... exist in the type's dict); the
 * ops room sets the real slot functions after stax_tensor_module_init and
 * the trampolines forward to them. nb_bool/nb_int/nb_float/nb_index,
 * sq_length/mp_length, mp_subscript/mp_ass_subscript (indexing below),
 * tp_iter and tp_hash (identity) are the tensor room's. */
/* a Python scalar for a one-element tensor; RuntimeError otherwise */
PyObject *stax_tensor_item_object(StaxTensor *t);
/* tensorplay.Size(sizes) (new reference) */
PyObject *stax_tensor_size_object(int ndim, const int64_t *sizes);
/* wrap a (possibly negative) dim into [0, ndim); IndexError like torch
 * ("Dimension out of range (expected to be in range of [-2, 1], but got
 * 5)"). A 0-d tensor accepts dims -1 and 0. */
int stax_tensor_wrap_dim(int64_t dim, int ndim, int *out);
/* copy src (Tensor / ndarray / scalar / nested list) into t with
 * broadcasting and casting; bumps t's version. -1 + exception. */
int stax_tensor_copy_from(StaxTensor *t, PyObject *src);
/* dtype conversion (copy=0 returns t itself, new ref, when dt matches) */
StaxTensor *stax_tensor_to(StaxTensor *t, stax_dtype_t dt, int copy);

/* Views: metadata only, the result shares t's storage and version counter.
 * Dims may be negative. New reference, or NULL + the exception PyTorch
 * raises (IndexError for dims out of range, RuntimeError for shapes).
 * stax_tensor_install_view_methods() installs the Tensor methods view,
 * reshape, view_as, reshape_as, permute, transpose/swapaxes/swapdims, t,
 * expand, expand_as, unsqueeze, squeeze, flatten, unflatten, narrow,
 * select, unbind, split, chunk, diagonal, as_strided, movedim; T and mT
 * are properties. The ops room may replace any of these methods with its
 * op-table dispatcher entries (install after stax_tensor_module_init). */
StaxTensor *stax_tensor_as_strided(StaxTensor *t, int ndim,
                                   const int64_t *sizes,
                                   const int64_t *strides,
                                   int64_t offset /* <0: keep t's */);
StaxTensor *stax_tensor_view_shape(StaxTensor *t, int ndim,
                                   const int64_t *shape);  /* one -1 ok */
StaxTensor *stax_tensor_reshape(StaxTensor *t, int ndim,
                                const int64_t *shape);  /* copies if needed */
StaxTensor *stax_tensor_permute(StaxTensor *t, const int64_t *dims, int n);
StaxTensor *stax_tensor_transpose(StaxTensor *t, int64_t d0, int64_t d1);
StaxTensor *stax_tensor_t(StaxTensor *t);    /* <= 2-D */
StaxTensor *stax_tensor_T(StaxTensor *t);    /* all dims reversed */
StaxTensor *stax_tensor_mT(StaxTensor *t);   /* last two swapped */
StaxTensor *stax_tensor_expand(StaxTensor *t, int ndim, const int64_t *sizes);
StaxTensor *stax_tensor_unsqueeze(StaxTensor *t, int64_t dim);
/* n < 0: squeeze every size-1 dim; else the listed dims (if size 1) */
StaxTensor *stax_tensor_squeeze(StaxTensor *t, const int64_t *dims, int n);
StaxTensor *stax_tensor_flatten(StaxTensor *t, int64_t start, int64_t end);
StaxTensor *stax_tensor_unflatten(StaxTensor *t, int64_t dim, int n,
                                  const int64_t *sizes);
StaxTensor *stax_tensor_narrow(StaxTensor *t, int64_t dim, int64_t start,
                               int64_t length);
StaxTensor *stax_tensor_select(StaxTensor *t, int64_t dim, int64_t index);
/* Python-style clamped slice along dim, step > 0 */
StaxTensor *stax_tensor_slice(StaxTensor *t, int64_t dim, int64_t start,
                              int64_t stop, int64_t step);
StaxTensor *stax_tensor_diagonal(StaxTensor *t, int64_t offset, int64_t d1,
                                 int64_t d2);
PyObject *stax_tensor_unbind(StaxTensor *t, int64_t dim);          /* tuple */
/* split_size: int or list of sizes */
PyObject *stax_tensor_split(StaxTensor *t, PyObject *split_size, int64_t dim);
PyObject *stax_tensor_chunk(StaxTensor *t, int64_t chunks, int64_t dim);
int stax_tensor_install_view_methods(PyTypeObject *tp);

/* Indexing (csrc/tensor/indexing.c): ints, slices (step > 0), None,
 * Ellipsis give views; bool masks and integer tensors/lists copy (through
 * NumPy). setitem writes into the storage and bumps the version. */
PyObject *stax_tensor_getitem(StaxTensor *t, PyObject *key);
int stax_tensor_setitem(StaxTensor *t, PyObject *key, PyObject *value);

/* ---- randomness: Philox4x32-10 (see docs/rng.md) --------------------
 * The stream is a pure function of (seed, offset, element index):
 *   key   = (uint32)seed, (uint32)(seed >> 32)
 *   word j of the stream (j = 0, 1, ...) is word j % 4 of the block
 *         stax_philox4x32(key, (lo32(c), hi32(c), 0, 0)),  c = offset/4 + j/4
 *   (offset: the generator's offset in 32-bit words, a multiple of 4).
 *   Element i of a draw (row-major order of the output) consumes the W
 *   words w[0..W-1] = words i*W .. i*W+W-1 (W divides 4, so one block):
 *   uniform float32/16 W=1: u = (w0 >> 8) * 2^-24; (float)(a + (b-a)*u)
 *   uniform float64    W=2: u53(w0,w1) = ((w0>>5)*2^26 + (w1>>6)) * 2^-53
 *   normal float32/16  W=2: u1 = (w0>>8)*2^-24, u2 = (w1>>8)*2^-24
 *   normal float64     W=4: u1 = u53(w0,w1), u2 = u53(w2,w3)
 *                     z = sqrt(-2 log(1-u1)) * cos(2 pi u2) in double;
 *                     mean + std*z rounded to the dtype
 *   randint(lo, hi)    W=2: lo + ((w0 | (uint64)w1 << 32) % (hi - lo))
 *   bernoulli(p)       W=2: u53(w0, w1) < p
 *   randperm(n)        W=2: stable argsort of (w0 | (uint64)w1 << 32) >> 1
 * After a draw of n elements the offset advances by n*W rounded up to a
 * multiple of 4. */
void stax_philox4x32(const uint32_t key[2], const uint32_t ctr[4],
                     uint32_t out[4]);
/* the default generator's state. stax_generator_reserve(g, nwords)
 * reserves nwords 32-bit words (rounded up to a multiple of 4) and returns
 * the offset the draw starts at (for kernels drawing in-line). */
typedef struct {
    PyObject_HEAD
    uint64_t seed;
    uint64_t offset;    /* in 32-bit words, multiple of 4 */
} StaxGenerator;
extern PyTypeObject *StaxGenerator_Type;
StaxGenerator *stax_default_generator(void);        /* borrowed */
uint64_t stax_generator_reserve(StaxGenerator *g, int64_t nwords);

/* ---- the Python side of the package (registry.c) ---------------------
 * Objects of the tensorplay package the C core calls back into, handed
 * over once by tensorplay/__init__.py (_C._register(name, obj)); C never
 * imports tensorplay.* at run time. */
typedef enum {
    STAX_PY_PACKAGE,          /* the tensorplay module (creation hooks) */
    STAX_PY_FUNCTIONAL,       /* tensorplay.functional (decompositions) */
    STAX_PY_OPS,              /* tensorplay.ops: tp.ops.<name>.<overload> */
    STAX_PY_REBUILD_TENSOR,   /* tensorplay._tensor._rebuild_tensor (pickle) */
    STAX_PY_REBUILD_ON_DEVICE, /* tensorplay.serialization._rebuild_on_device
                                  (pickle of a CUDA tensor) */
    STAX_PY_CUDA_DISPATCH,    /* tensorplay.cuda._dispatch: eager ops on CUDA
                                 tensors (kernels, cuBLAS, host fallback) */
    STAX_PY_BF16_DISPATCH,    /* tensorplay._ops._bf16_dispatch: eager ops
                                 with a bfloat16 operand (float32 compute) */
    STAX_PY_CUDA_DEVICE_OP,   /* tensorplay.cuda._device_op: advanced
                                 indexing, dtype conversion and strided copies
                                 of CUDA tensors on the device (or
                                 NotImplemented: a host copy) */
    STAX_PY_COUNT
} stax_py_key;
/* borrowed; NULL + RuntimeError when the package has not registered it */
PyObject *stax_py_registered(stax_py_key key);

/* room init: registers Tensor, dtype objects, creation functions, RNG. */
int stax_tensor_module_init(PyObject *m);

#endif
