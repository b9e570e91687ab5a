/* Counter-based randomness: Philox4x32-10 (Salmon et al., SC'11), the
 * tensorplay.Generator type and the fills behind rand/randn/randint/
 * randperm/bernoulli/normal_/uniform_. The exact stream is documented in
 * tensor.h and docs/rng.md: element i of a draw consumes words i*W ..
 * i*W+W-1 (W = 1, 2 or 4 by distribution and dtype); word j is word j%4 of
 * the block at counter offset/4 + j/4, so a kernel can draw the same
 * numbers independently. */
#include "tensor/tensor_internal.h"
#include "tensor/stax_numpy.h"
#include <math.h>
#include <pthread.h>
#include <unistd.h>

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u
#define STAX_DEFAULT_SEED 67280421310721ULL

PyTypeObject *StaxGenerator_Type = NULL;
static StaxGenerator *default_gen = NULL;

void
stax_philox4x32(const uint32_t key[2], const uint32_t ctr[4], uint32_t out[4])
{
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)PHILOX_M0 * c0;
        uint64_t p1 = (uint64_t)PHILOX_M1 * c2;
        uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

static inline void
block(uint64_t seed, uint64_t c, uint32_t w[4])
{
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    uint32_t ctr[4] = {(uint32_t)c, (uint32_t)(c >> 32), 0, 0};
    stax_philox4x32(key, ctr, w);
}

static inline double
u53(uint32_t a, uint32_t b)
{
    return ((double)(a >> 5) * 67108864.0 + (double)(b >> 6))
           * (1.0 / 9007199254740992.0);
}

StaxGenerator *
stax_default_generator(void)
{
    return default_gen;
}

uint64_t
stax_generator_reserve(StaxGenerator *g, int64_t nwords)
{
    uint64_t old = g->offset;
    g->offset += ((uint64_t)nwords + 3) & ~(uint64_t)3;
    return old;
}

/* ---- fills ------------------------------------------------------------ */

enum { DIST_UNIFORM, DIST_NORMAL, DIST_RANDINT, DIST_BERNOULLI_SCALAR,
       DIST_BERNOULLI_TENSOR, DIST_KEYS };

static void
store(char *p, stax_dtype_t dt, double v)
{
    switch (dt) {
    case STAX_BOOL: *(npy_bool *)p = v != 0; break;
    case STAX_UINT8: *(uint8_t *)p = (uint8_t)(int64_t)v; break;
    case STAX_INT8: *(int8_t *)p = (int8_t)(int64_t)v; break;
    case STAX_INT16: *(int16_t *)p = (int16_t)(int64_t)v; break;
    case STAX_INT32: *(int32_t *)p = (int32_t)(int64_t)v; break;
    case STAX_INT64: *(int64_t *)p = (int64_t)v; break;
    case STAX_FLOAT16:
    case STAX_BFLOAT16: *(uint16_t *)p = stax_double_to_half_like(dt, v); break;
    case STAX_FLOAT32: *(float *)p = (float)v; break;
    case STAX_FLOAT64: *(double *)p = v; break;
    default: break;
    }
}

static void
store_i64(char *p, stax_dtype_t dt, int64_t v)
{
    switch (dt) {
    case STAX_INT64: *(int64_t *)p = v; break;
    case STAX_FLOAT64: *(double *)p = (double)v; break;
    case STAX_FLOAT32: *(float *)p = (float)v; break;
    default: store(p, dt, (double)v); break;
    }
}

static double
load(const char *p, stax_dtype_t dt)
{
    switch (dt) {
    case STAX_BOOL: return *(const npy_bool *)p != 0;
    case STAX_UINT8: return *(const uint8_t *)p;
    case STAX_INT8: return *(const int8_t *)p;
    case STAX_INT16: return *(const int16_t *)p;
    case STAX_INT32: return *(const int32_t *)p;
    case STAX_INT64: return (double)*(const int64_t *)p;
    case STAX_FLOAT16:
    case STAX_BFLOAT16: return stax_half_like_to_double(dt, *(const uint16_t *)p);
    case STAX_FLOAT32: return *(const float *)p;
    case STAX_FLOAT64: return *(const double *)p;
    default: return 0;
    }
}

/* Words each element consumes (1, 2 or 4: an element never straddles two
 * Philox blocks). */
static int
words_per_element(int dist, stax_dtype_t dt)
{
    switch (dist) {
    case DIST_UNIFORM: return dt == STAX_FLOAT64 ? 2 : 1;
    case DIST_NORMAL: return dt == STAX_FLOAT64 ? 4 : 2;
    default: return 2;
    }
}

/* One element's value from its words w[0..W-1]; pv: bernoulli's p. */
static inline void
gen_elem(int dist, stax_dtype_t dt, int W, const uint32_t *w, double a,
         double b, int64_t ia, uint64_t range, double pv, char *dst)
{
    switch (dist) {
    case DIST_UNIFORM:
        if (dt == STAX_FLOAT64) {
            *(double *)dst = a + (b - a) * u53(w[0], w[1]);
        }
        else {
            double u = (double)(w[0] >> 8) * (1.0 / 16777216.0);
            float v = (float)(a + (b - a) * u);
            if (dt == STAX_FLOAT32) {
                *(float *)dst = v;
            }
            else {
                store(dst, dt, (double)v);
            }
        }
        break;
    case DIST_NORMAL: {
        double u1, u2;
        if (W == 4) {
            u1 = u53(w[0], w[1]);
            u2 = u53(w[2], w[3]);
        }
        else {
            u1 = (double)(w[0] >> 8) * (1.0 / 16777216.0);
            u2 = (double)(w[1] >> 8) * (1.0 / 16777216.0);
        }
        double z = sqrt(-2.0 * log(1.0 - u1)) * cos(2.0 * M_PI * u2);
        if (dt == STAX_FLOAT32) {
            *(float *)dst = (float)(a + b * z);
        }
        else {
            store(dst, dt, a + b * z);
        }
        break;
    }
    case DIST_RANDINT: {
        uint64_t r = (uint64_t)w[0] | ((uint64_t)w[1] << 32);
        store_i64(dst, dt, ia + (int64_t)(r % range));
        break;
    }
    case DIST_BERNOULLI_SCALAR:
        store(dst, dt, u53(w[0], w[1]) < a ? 1.0 : 0.0);
        break;
    case DIST_BERNOULLI_TENSOR:
        store(dst, dt, u53(w[0], w[1]) < pv ? 1.0 : 0.0);
        break;
    case DIST_KEYS:
        *(int64_t *)dst = (int64_t)(((uint64_t)w[0]
                                     | ((uint64_t)w[1] << 32)) >> 1);
        break;
    }
}

typedef struct {
    int dist, W, isz;
    stax_dtype_t dt;
    uint64_t seed, base, range;
    double a, b;
    int64_t ia, i0, i1;
    char *data;        /* element 0 of a contiguous output */
} fill_job;

static void *
fill_contiguous(void *arg)
{
    fill_job *j = (fill_job *)arg;
    uint32_t blk[4];
    uint64_t cached = UINT64_MAX;
    for (int64_t i = j->i0; i < j->i1; i++) {
        uint64_t wj = (uint64_t)i * j->W, bi = j->base + (wj >> 2);
        if (bi != cached) {
            block(j->seed, bi, blk);
            cached = bi;
        }
        gen_elem(j->dist, j->dt, j->W, blk + (wj & 3), j->a, j->b, j->ia,
                 j->range, 0.0, j->data + i * j->isz);
    }
    return NULL;
}

#define STAX_RNG_MAX_THREADS 8
#define STAX_RNG_PAR_MIN (1 << 17)

static void
fill_parallel(fill_job *proto, int64_t n)
{
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int nt = (int)(ncpu < 1 ? 1 : ncpu > STAX_RNG_MAX_THREADS
                   ? STAX_RNG_MAX_THREADS : ncpu);
    if (n < STAX_RNG_PAR_MIN || nt < 2) {
        proto->i0 = 0;
        proto->i1 = n;
        fill_contiguous(proto);
        return;
    }
    fill_job jobs[STAX_RNG_MAX_THREADS];
    pthread_t th[STAX_RNG_MAX_THREADS];
    int started[STAX_RNG_MAX_THREADS] = {0};
    int64_t chunk = (n + nt - 1) / nt;
    chunk = (chunk + 3) & ~(int64_t)3;
    Py_BEGIN_ALLOW_THREADS
    for (int k = 0; k < nt; k++) {
        jobs[k] = *proto;
        jobs[k].i0 = k * chunk < n ? k * chunk : n;
        jobs[k].i1 = (k + 1) * chunk < n ? (k + 1) * chunk : n;
        if (k > 0 && jobs[k].i0 < jobs[k].i1) {
            started[k] = pthread_create(&th[k], NULL, fill_contiguous,
                                        &jobs[k]) == 0;
            if (!started[k]) {
                fill_contiguous(&jobs[k]);
            }
        }
    }
    fill_contiguous(&jobs[0]);
    for (int k = 1; k < nt; k++) {
        if (started[k]) {
            pthread_join(th[k], NULL);
        }
    }
    Py_END_ALLOW_THREADS
}

/* Fill t (any strides) in row-major element order: element i uses words
 * j = i*W .. i*W+W-1 of the stream, word j being word j%4 of the block at
 * counter offset/4 + j/4. a, b: parameters. */
static int
fill(StaxTensor *t, StaxGenerator *g, int dist, double a, double b,
     int64_t ia, int64_t ib, StaxTensor *p)
{
    int64_t n = stax_tensor_numel(t);
    if (n == 0) {
        return 0;
    }
    stax_tensor_will_write(t);
    if (stax_tensor_is_cuda(t) || (p != NULL && stax_tensor_is_cuda(p))) {
        /* the same words as on the host: draw there, copy in */
        StaxTensor *h = stax_tensor_is_cuda(t) ? stax_tensor_host_span(t)
                                               : (StaxTensor *)Py_NewRef(t);
        StaxTensor *hp = p == NULL ? NULL
            : stax_tensor_is_cuda(p) ? stax_tensor_host_span(p)
            : (StaxTensor *)Py_NewRef(p);
        int rc = -1;
        if (h != NULL && (p == NULL || hp != NULL)
            && fill(h, g, dist, a, b, ia, ib, hp) == 0) {
            rc = stax_tensor_is_cuda(t) ? stax_tensor_upload_span(t, h) : 0;
        }
        Py_XDECREF(h);
        Py_XDECREF(hp);
        return rc;
    }
    int W = words_per_element(dist, t->dtype);
    uint64_t base = g->offset / 4;
    g->offset += ((uint64_t)n * W + 3) & ~(uint64_t)3;
    int isz = stax_dtype_itemsize(t->dtype);
    uint64_t range = (uint64_t)(ib - ia);
    if (p == NULL && stax_tensor_is_contiguous(t)) {
        fill_job job = {dist, W, isz, t->dtype, g->seed, base, range, a, b,
                        ia, 0, n, STAX_TENSOR_DATA(t)};
        fill_parallel(&job, n);
        stax_tensor_bump_version(t);
        return 0;
    }
    int pisz = p ? stax_dtype_itemsize(p->dtype) : 0;
    int64_t idx[STAX_MAX_DIMS] = {0};
    int64_t off = t->offset, poff = p ? p->offset : 0;
    uint32_t blk[4];
    uint64_t cached = UINT64_MAX;
    char *data = t->storage->data;
    for (int64_t i = 0; i < n; i++) {
        uint64_t j = (uint64_t)i * W, bi = base + (j >> 2);
        if (bi != cached) {
            block(g->seed, bi, blk);
            cached = bi;
        }
        double pv = p ? load(p->storage->data + poff * pisz, p->dtype) : 0.0;
        gen_elem(dist, t->dtype, W, blk + (j & 3), a, b, ia, range, pv,
                 data + off * isz);
        for (int d = t->ndim - 1; d >= 0; d--) {
            off += t->strides[d];
            if (p) {
                poff += p->strides[d];
            }
            if (++idx[d] < t->sizes[d]) {
                break;
            }
            off -= t->strides[d] * t->sizes[d];
            if (p) {
                poff -= p->strides[d] * p->sizes[d];
            }
            idx[d] = 0;
        }
    }
    stax_tensor_bump_version(t);
    return 0;
}

static StaxGenerator *
gen_arg(PyObject *o)
{
    if (o == NULL || o == Py_None) {
        return default_gen;
    }
    if (!PyObject_TypeCheck(o, &StaxGenerator_TypeObj)) {
        PyErr_Format(PyExc_TypeError,
                     "generator must be a tensorplay.Generator, not %.100s",
                     Py_TYPE(o)->tp_name);
        return NULL;
    }
    return (StaxGenerator *)o;
}

static int
check_float(StaxTensor *t, const char *what)
{
    if (!stax_dtype_is_floating(t->dtype)) {
        PyErr_Format(PyExc_NotImplementedError,
                     "\"%s\" not implemented for '%s'", what,
                     stax_dtype_title(t->dtype));
        return -1;
    }
    return 0;
}

/* the arguments (t, a, b[, generator]) of _fill_uniform / _fill_normal; t
 * must be floating (what names the kernel in the error); -1 with an
 * exception set */
static int
parse_float_fill(PyObject *args, const char *what, StaxTensor **t, double *a,
                 double *b, StaxGenerator **g)
{
    PyObject *go = Py_None;
    if (!PyArg_ParseTuple(args, "O!dd|O", &StaxTensor_TypeObj, t, a, b, &go)
        || (*g = gen_arg(go)) == NULL || check_float(*t, what) < 0) {
        return -1;
    }
    return 0;
}

/* _C._fill_uniform(t, low, high, generator) -> t */
static PyObject *
py_fill_uniform(PyObject *self, PyObject *args)
{
    StaxTensor *t;
    double a, b;
    StaxGenerator *g;
    if (parse_float_fill(args, "check_uniform_bounds", &t, &a, &b, &g) < 0) {
        return NULL;
    }
    if (a > b) {
        PyErr_Format(PyExc_RuntimeError,
                     "uniform_ expects to return a [from, to) range, but found "
                     "from=%R > to=%R", PyTuple_GET_ITEM(args, 1),
                     PyTuple_GET_ITEM(args, 2));
        return NULL;
    }
    if (fill(t, g, DIST_UNIFORM, a, b, 0, 0, NULL) < 0) {
        return NULL;
    }
    return Py_NewRef(t);
}

static PyObject *
py_fill_normal(PyObject *self, PyObject *args)
{
    StaxTensor *t;
    double a, b;
    StaxGenerator *g;
    if (parse_float_fill(args, "normal_kernel_cpu", &t, &a, &b, &g) < 0) {
        return NULL;
    }
    if (b < 0) {
        PyErr_Format(PyExc_RuntimeError,
                     "normal expects std >= 0.0, but found std %R",
                     PyTuple_GET_ITEM(args, 2));
        return NULL;
    }
    if (fill(t, g, DIST_NORMAL, a, b, 0, 0, NULL) < 0) {
        return NULL;
    }
    return Py_NewRef(t);
}

static PyObject *
py_fill_randint(PyObject *self, PyObject *args)
{
    StaxTensor *t;
    long long lo, hi;
    PyObject *go = Py_None;
    StaxGenerator *g;
    if (!PyArg_ParseTuple(args, "O!LL|O", &StaxTensor_TypeObj, &t, &lo, &hi,
                          &go) || (g = gen_arg(go)) == NULL) {
        return NULL;
    }
    if (lo >= hi) {
        PyErr_Format(PyExc_RuntimeError,
                     "random_ expects 'from' to be less than 'to', but got "
                     "from=%lld >= to=%lld", lo, hi);
        return NULL;
    }
    if (fill(t, g, DIST_RANDINT, 0, 0, lo, hi, NULL) < 0) {
        return NULL;
    }
    return Py_NewRef(t);
}

static PyObject *
py_fill_bernoulli(PyObject *self, PyObject *args)
{
    StaxTensor *t;
    PyObject *p, *go = Py_None;
    StaxGenerator *g;
    if (!PyArg_ParseTuple(args, "O!O|O", &StaxTensor_TypeObj, &t, &p, &go)
        || (g = gen_arg(go)) == NULL) {
        return NULL;
    }
    if (StaxTensor_Check(p)) {
        StaxTensor *pt = (StaxTensor *)p;
        /* broadcast p to t */
        StaxTensor *pe = stax_tensor_expand(pt, t->ndim, t->sizes);
        if (pe == NULL) {
            return NULL;
        }
        int r = fill(t, g, DIST_BERNOULLI_TENSOR, 0, 0, 0, 0, pe);
        Py_DECREF(pe);
        if (r < 0) {
            return NULL;
        }
        return Py_NewRef(t);
    }
    double pv = PyFloat_AsDouble(p);
    if (pv == -1.0 && PyErr_Occurred()) {
        return NULL;
    }
    if (!(pv >= 0 && pv <= 1)) {
        PyErr_Format(PyExc_RuntimeError,
                     "bernoulli_ expects p to be in [0, 1], but got p=%R", p);
        return NULL;
    }
    if (fill(t, g, DIST_BERNOULLI_SCALAR, pv, 0, 0, 0, NULL) < 0) {
        return NULL;
    }
    return Py_NewRef(t);
}

/* _C._fill_keys(int64 tensor, generator): 63-bit keys for randperm */
static PyObject *
py_fill_keys(PyObject *self, PyObject *args)
{
    StaxTensor *t;
    PyObject *go = Py_None;
    StaxGenerator *g;
    if (!PyArg_ParseTuple(args, "O!|O", &StaxTensor_TypeObj, &t, &go)
        || (g = gen_arg(go)) == NULL) {
        return NULL;
    }
    if (t->dtype != STAX_INT64) {
        PyErr_SetString(PyExc_TypeError, "_fill_keys needs an int64 tensor");
        return NULL;
    }
    if (fill(t, g, DIST_KEYS, 0, 0, 0, 0, NULL) < 0) {
        return NULL;
    }
    return Py_NewRef(t);
}

/* one race's standing: the larger key first, on a tie the lower index
 * (a stable descending sort's order) */
typedef struct {
    double key;
    int64_t i;
} race_t;

static int
race_cmp(const void *x, const void *y)
{
    const race_t *a = x, *b = y;
    if (a->key != b->key) {
        return a->key > b->key ? -1 : 1;
    }
    return a->i < b->i ? -1 : a->i > b->i;
}

/* _C._multinomial_races(input, num_samples, generator) -> int64 tensor, or
 * None where the Python implementation must decide.  multinomial without
 * replacement of a contiguous float32/float64 CPU input of 1 or 2 dims whose
 * rows are valid distributions with at least num_samples positive entries:
 * the same float64 uniform draw as rand(rows, n, dtype=float64, generator=)
 * (one word pair per category), keys p / -log1p(-u) (-1 where p == 0), the
 * num_samples largest keys in a stable descending sort's order.  Anything
 * else (an error to raise, another layout) returns None before drawing, so
 * the Python path draws and raises as before.  Eager generate() loops pay
 * about 60 us per token for the NumPy version's dozen calls on one row. */
static PyObject *
py_multinomial_races(PyObject *self, PyObject *args)
{
    StaxTensor *t, *u = NULL, *out = NULL;
    Py_ssize_t ns;
    PyObject *go = Py_None;
    double *keys = NULL;
    race_t *races = NULL;
    if (!PyArg_ParseTuple(args, "O!n|O", &StaxTensor_TypeObj, &t, &ns, &go)) {
        return NULL;
    }
    if ((go != Py_None && !PyObject_TypeCheck(go, &StaxGenerator_TypeObj))
        || (t->ndim != 1 && t->ndim != 2) || stax_tensor_is_cuda(t)
        || (t->dtype != STAX_FLOAT32 && t->dtype != STAX_FLOAT64)
        || !stax_tensor_is_contiguous(t)) {
        Py_RETURN_NONE;
    }
    StaxGenerator *g = gen_arg(go);
    int64_t n = t->sizes[t->ndim - 1], rows = t->ndim == 2 ? t->sizes[0] : 1;
    if (g == NULL || ns <= 0 || ns > n || rows <= 0 || n <= 0) {
        Py_RETURN_NONE;
    }
    const char *src = STAX_TENSOR_DATA(t);
    int isz = stax_dtype_itemsize(t->dtype);
    for (int64_t r = 0; r < rows; r++) {
        int64_t pos = 0;
        for (int64_t i = 0; i < n; i++) {
            double v = load(src + (r * n + i) * isz, t->dtype);
            if (!isfinite(v) || v < 0) {
                Py_RETURN_NONE;
            }
            pos += v > 0;
        }
        if (pos < ns) {         /* also a zero row (sum <= 0) */
            Py_RETURN_NONE;
        }
    }
    int64_t ushape[2] = {rows, n}, oshape[2] = {rows, ns};
    u = stax_tensor_empty(2, ushape, STAX_FLOAT64);
    if (u == NULL || fill(u, g, DIST_UNIFORM, 0.0, 1.0, 0, 0, NULL) < 0) {
        goto fail;
    }
    out = stax_tensor_empty(t->ndim, t->ndim == 2 ? oshape : oshape + 1, STAX_INT64);
    keys = malloc(sizeof(double) * (size_t)n);
    races = ns > 16 ? malloc(sizeof(race_t) * (size_t)n) : NULL;
    if (out == NULL || keys == NULL || (ns > 16 && races == NULL)) {
        if (out != NULL) {
            PyErr_NoMemory();
        }
        goto fail;
    }
    const double *ud = (const double *)STAX_TENSOR_DATA(u);
    int64_t *od = (int64_t *)STAX_TENSOR_DATA(out);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t i = 0; i < n; i++) {
            double v = load(src + (r * n + i) * isz, t->dtype);
            keys[i] = v > 0 ? v / -log1p(-ud[r * n + i]) : -1.0;
        }
        if (races == NULL) {
            /* a few samples: the first maximum, ns times */
            for (Py_ssize_t s = 0; s < ns; s++) {
                int64_t best = 0;
                for (int64_t i = 1; i < n; i++) {
                    if (keys[i] > keys[best]) {
                        best = i;
                    }
                }
                od[r * ns + s] = best;
                keys[best] = -INFINITY;
            }
        }
        else {
            for (int64_t i = 0; i < n; i++) {
                races[i].key = keys[i];
                races[i].i = i;
            }
            qsort(races, (size_t)n, sizeof(race_t), race_cmp);
            for (Py_ssize_t s = 0; s < ns; s++) {
                od[r * ns + s] = races[s].i;
            }
        }
    }
    free(keys);
    free(races);
    Py_DECREF(u);
    return (PyObject *)out;
fail:
    free(keys);
    free(races);
    Py_XDECREF(u);
    Py_XDECREF(out);
    return NULL;
}

static PyObject *
py_philox(PyObject *self, PyObject *args)
{
    unsigned int k0, k1, c0, c1, c2, c3;
    if (!PyArg_ParseTuple(args, "(II)(IIII)", &k0, &k1, &c0, &c1, &c2, &c3)) {
        return NULL;
    }
    uint32_t key[2] = {k0, k1}, ctr[4] = {c0, c1, c2, c3}, out[4];
    stax_philox4x32(key, ctr, out);
    return Py_BuildValue("(kkkk)", (unsigned long)out[0],
                         (unsigned long)out[1], (unsigned long)out[2],
                         (unsigned long)out[3]);
}

/* ---- Generator type ------------------------------------------------- */

static PyObject *
gen_new(PyTypeObject *tp, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"device", NULL};
    PyObject *dev = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:Generator", kwlist, &dev)) {
        return NULL;
    }
    StaxGenerator *g = (StaxGenerator *)tp->tp_alloc(tp, 0);
    if (g != NULL) {
        g->seed = STAX_DEFAULT_SEED;
        g->offset = 0;
    }
    return (PyObject *)g;
}

static PyObject *
gen_manual_seed(PyObject *self, PyObject *seed)
{
    StaxGenerator *g = (StaxGenerator *)self;
    PyObject *mask = NULL, *v = NULL;
    if (!PyLong_Check(seed)) {
        if (!PyIndex_Check(seed)) {
            PyErr_Format(PyExc_TypeError,
                         "manual_seed expected a long, but got %.100s",
                         Py_TYPE(seed)->tp_name);
            return NULL;
        }
    }
    /* negative seeds wrap modulo 2^64 like torch */
    mask = PyLong_FromUnsignedLongLong(0xFFFFFFFFFFFFFFFFULL);
    v = mask ? PyNumber_And(seed, mask) : NULL;
    Py_XDECREF(mask);
    if (v == NULL) {
        return NULL;
    }
    g->seed = PyLong_AsUnsignedLongLong(v);
    Py_DECREF(v);
    if (PyErr_Occurred()) {
        return NULL;
    }
    g->offset = 0;
    return Py_NewRef(self);
}

static PyObject *os_urandom;   /* os.urandom, from init */

static PyObject *
gen_seed(PyObject *self, PyObject *unused)
{
    StaxGenerator *g = (StaxGenerator *)self;
    PyObject *b = PyObject_CallFunction(os_urandom, "i", 8);
    if (b == NULL) {
        return NULL;
    }
    uint64_t s;
    memcpy(&s, PyBytes_AS_STRING(b), 8);
    Py_DECREF(b);
    s &= 0x7FFFFFFFFFFFFFFFULL;
    g->seed = s;
    g->offset = 0;
    return PyLong_FromUnsignedLongLong(s);
}

static PyObject *
gen_initial_seed(PyObject *self, PyObject *unused)
{
    return PyLong_FromUnsignedLongLong(((StaxGenerator *)self)->seed);
}

/* state: 16 bytes, little-endian seed then offset, as a uint8 tensor */
static PyObject *
gen_get_state(PyObject *self, PyObject *unused)
{
    StaxGenerator *g = (StaxGenerator *)self;
    int64_t n = 16;
    StaxTensor *t = stax_tensor_empty(1, &n, STAX_UINT8);
    if (t == NULL) {
        return NULL;
    }
    uint8_t *p = (uint8_t *)STAX_TENSOR_DATA(t);
    for (int i = 0; i < 8; i++) {
        p[i] = (uint8_t)(g->seed >> (8 * i));
        p[8 + i] = (uint8_t)(g->offset >> (8 * i));
    }
    return (PyObject *)t;
}

static PyObject *
gen_set_state(PyObject *self, PyObject *state)
{
    StaxGenerator *g = (StaxGenerator *)self;
    if (!StaxTensor_Check(state)) {
        PyErr_Format(PyExc_TypeError,
                     "expected a torch.ByteTensor, but got %.100s",
                     Py_TYPE(state)->tp_name);
        return NULL;
    }
    StaxTensor *t = (StaxTensor *)state;
    if (t->dtype != STAX_UINT8 || stax_tensor_numel(t) != 16) {
        PyErr_SetString(PyExc_RuntimeError,
                        "Expected a uint8 state tensor of 16 bytes (seed, "
                        "offset) from Generator.get_state()");
        return NULL;
    }
    StaxTensor *c = stax_tensor_to_dtype(t, STAX_UINT8, 1);
    if (c == NULL) {
        return NULL;
    }
    uint8_t *p = (uint8_t *)STAX_TENSOR_DATA(c);
    uint64_t s = 0, o = 0;
    for (int i = 0; i < 8; i++) {
        s |= (uint64_t)p[i] << (8 * i);
        o |= (uint64_t)p[8 + i] << (8 * i);
    }
    Py_DECREF(c);
    if (o % 4 != 0) {
        PyErr_SetString(PyExc_RuntimeError,
                        "generator offset must be a multiple of 4");
        return NULL;
    }
    g->seed = s;
    g->offset = o;
    return Py_NewRef(self);
}

static PyObject *
gen_get_offset(PyObject *self, void *c)
{
    return PyLong_FromUnsignedLongLong(((StaxGenerator *)self)->offset);
}

static int
gen_set_offset(PyObject *self, PyObject *v, void *c)
{
    unsigned long long o = v ? PyLong_AsUnsignedLongLong(v) : 0;
    if (PyErr_Occurred()) {
        return -1;
    }
    if (o % 4 != 0) {
        PyErr_SetString(PyExc_ValueError, "offset must be a multiple of 4");
        return -1;
    }
    ((StaxGenerator *)self)->offset = o;
    return 0;
}

static PyObject *
gen_device(PyObject *self, void *c)
{
    return Py_NewRef(stax_cpu_device());
}

static PyMethodDef gen_methods[] = {
    {"manual_seed", gen_manual_seed, METH_O, NULL},
    {"seed", gen_seed, METH_NOARGS, NULL},
    {"initial_seed", gen_initial_seed, METH_NOARGS, NULL},
    {"get_state", gen_get_state, METH_NOARGS, NULL},
    {"set_state", gen_set_state, METH_O, NULL},
    {NULL},
};

static PyGetSetDef gen_getset[] = {
    {"offset", gen_get_offset, gen_set_offset,
     "Philox offset in 32-bit words (multiple of 4)", NULL},
    {"device", gen_device, NULL, NULL, NULL},
    {NULL},
};

PyTypeObject StaxGenerator_TypeObj = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tensorplay.Generator",
    .tp_basicsize = sizeof(StaxGenerator),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_new = gen_new,
    .tp_methods = gen_methods,
    .tp_getset = gen_getset,
};

static PyMethodDef random_methods[] = {
    {"_fill_uniform", py_fill_uniform, METH_VARARGS, NULL},
    {"_fill_normal", py_fill_normal, METH_VARARGS, NULL},
    {"_fill_randint", py_fill_randint, METH_VARARGS, NULL},
    {"_fill_bernoulli", py_fill_bernoulli, METH_VARARGS, NULL},
    {"_fill_keys", py_fill_keys, METH_VARARGS, NULL},
    {"_multinomial_races", py_multinomial_races, METH_VARARGS,
     "_multinomial_races(input, num_samples, generator) -> int64 tensor or None"},
    {"_philox4x32", py_philox, METH_VARARGS,
     "_philox4x32((k0, k1), (c0, c1, c2, c3)) -> 4 uint32 words"},
    {NULL},
};

int
stax_tensor_random_init(PyObject *m)
{
    if (PyType_Ready(&StaxGenerator_TypeObj) < 0) {
        return -1;
    }
    StaxGenerator_Type = &StaxGenerator_TypeObj;
    {
        PyObject *os = PyImport_ImportModule("os");
        os_urandom = os ? PyObject_GetAttrString(os, "urandom") : NULL;
        Py_XDECREF(os);
        if (os_urandom == NULL) {
            return -1;
        }
    }
    default_gen = (StaxGenerator *)PyObject_CallNoArgs(
        (PyObject *)&StaxGenerator_TypeObj);
    if (default_gen == NULL) {
        return -1;
    }
    if (PyModule_AddObjectRef(m, "Generator",
                              (PyObject *)&StaxGenerator_TypeObj) < 0
        || PyModule_AddObjectRef(m, "default_generator",
                                 (PyObject *)default_gen) < 0
        || PyModule_AddFunctions(m, random_methods) < 0) {
        return -1;
    }
    return 0;
}
