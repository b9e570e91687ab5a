"""Hand-written CUDA kernels for the eager ops that the lowering has no
loop IR for (sorting, scans, stream compaction, scatter-add, matmul of
integer and half dtypes): CUDA C text, compiled once per (kernel, dtype)
by NVRTC for the device's ``sm_XY`` and launched on the device's stream
through ``_C._cuda_launch``.

Every kernel is a grid-stride loop in which each index is independent of
the others (no ``__syncthreads``, no shared memory; the only cross-thread
effects are atomics: ``atomicAdd``, ``atomicMax``, a ``atomicCAS`` loop), so an algorithm is a sequence of launches, each
one obviously right on its own. That also lets the test suite run the very
same source on the host, one "thread" after another (``set_launcher``:
tests/_cuda_emu.py compiles it with g++ behind a small shim), and compile
it to PTX with NVRTC, without a GPU.

A kernel's parameters are all 8 bytes: tensors pass their data address
(``T *``), ints a ``long long`` (or an address: flip passes one inside a
tensor), floats a ``double``.
"""
import functools

from tensorplay import _C

BLOCK = 256
MAX_GRID = 65535 * 4

PRELUDE = r"""
typedef long long i64;
typedef unsigned long long u64;
typedef unsigned short u16;
#define STAX_D static __device__ __forceinline__
#define STAX_LOOP(i, n) for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; \
                             i < (n); i += (i64)blockDim.x * gridDim.x)
#ifdef __CUDACC_RTC__
STAX_D float stax_h2f(u16 h)
{ float f; asm("{ cvt.f32.f16 %0, %1; }" : "=f"(f) : "h"(h)); return f; }
STAX_D u16 stax_f2h(float f)
{ u16 h; asm("{ cvt.rn.f16.f32 %0, %1; }" : "=h"(h) : "f"(f)); return h; }
#endif
STAX_D u64 stax_d2u(double d)
{
#ifdef __CUDACC_RTC__
    return (u64)__double_as_longlong(d);
#else
    u64 u; memcpy(&u, &d, 8); return u;
#endif
}
STAX_D float stax_b2f(u16 h) { return __uint_as_float((unsigned)h << 16); }
STAX_D u16 stax_f2b(float f)   /* nearest even, NaN 0x7fc0 (the tensor room's rule) */
{ unsigned u = __float_as_uint(f); if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
  return (u16)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); }
"""

# dtype name -> (storage type S, compute type A, load S->A, store A->S)
DTYPES = {
    "float32": ("float", "float", "(A)(v)", "(S)(v)"),
    "float64": ("double", "double", "(A)(v)", "(S)(v)"),
    "float16": ("u16", "float", "stax_h2f(v)", "stax_f2h(v)"),
    "bfloat16": ("u16", "float", "stax_b2f(v)", "stax_f2b(v)"),
    "int8": ("signed char", "int", "(A)(v)", "(S)(v)"),
    "uint8": ("unsigned char", "int", "(A)(v)", "(S)(v)"),
    "int16": ("short", "int", "(A)(v)", "(S)(v)"),
    "int32": ("int", "int", "(A)(v)", "(S)(v)"),
    "int64": ("i64", "i64", "(A)(v)", "(S)(v)"),
    "bool": ("unsigned char", "int", "(A)(v)", "(S)((v) != 0)"),
}
FLOATS = ("float32", "float64", "float16", "bfloat16")


def dtype_name(dt):
    return str(dt).split(".")[-1]


def _types(dt):
    s, a, ld, st = DTYPES[dt]
    return (f"typedef {s} S;\ntypedef {a} A;\n"
            f"STAX_D A LD(S v) {{ return {ld}; }}\n"
            f"STAX_D S ST(A v) {{ return {st}; }}\n")


def _in_types(dt):
    """SI / LDI: a second, input-only element type (scans read one dtype
    and write another: int32 in, int64 out)"""
    s, a, ld, _ = DTYPES[dt]
    ld = ld.replace("(A)", f"({a})")
    return f"typedef {s} SI;\nSTAX_D {a} LDI(SI v) {{ return {ld}; }}\n"


# ------------------------------------------------------------------ sort
# A bitonic sorting network over each row padded to p = 2^m elements, one
# launch per (k, j) stage. The order is strict and total: a key before
# another (ascending, or descending), NaN the greatest value (as torch),
# ties by original index, padding after everything. So the network's
# result is unique: the stable sort, whatever `stable` says.
SORT = r"""
STAX_D bool before(S ks, i64 ia, S kt, i64 ib, i64 n, i64 desc)
{
    bool pa = ia >= n, pb = ib >= n;
    if (pa || pb) return pb && (!pa || ia < ib);
    A a = LD(ks), b = LD(kt);
    bool na = a != a, nb = b != b;
    if (na || nb) {
        if (na && nb) return ia < ib;
        return desc ? na : nb;
    }
    if (a < b) return !desc;
    if (b < a) return desc != 0;
    return ia < ib;
}
extern "C" __global__ void sort_init_@(const S *__restrict__ x, S *__restrict__ key,
    i64 *__restrict__ idx, i64 rows, i64 n, i64 p)
{
    STAX_LOOP(t, rows * p) {
        i64 r = t / p, i = t - r * p;
        key[t] = x[r * n + (i < n ? i : 0)];
        idx[t] = i;
    }
}
extern "C" __global__ void sort_step_@(S *__restrict__ key, i64 *__restrict__ idx,
    i64 rows, i64 n, i64 p, i64 k, i64 j, i64 desc)
{
    STAX_LOOP(t, rows * p) {
        i64 r = t / p, i = t - r * p, l = i ^ j;
        if (l > i) {
            i64 a = r * p + i, b = r * p + l;
            bool sw = (i & k) == 0 ? before(key[b], idx[b], key[a], idx[a], n, desc)
                                   : before(key[a], idx[a], key[b], idx[b], n, desc);
            if (sw) {
                S tk = key[a]; key[a] = key[b]; key[b] = tk;
                i64 ti = idx[a]; idx[a] = idx[b]; idx[b] = ti;
            }
        }
    }
}
extern "C" __global__ void sort_out_@(const S *__restrict__ key,
    const i64 *__restrict__ idx, S *__restrict__ vals, i64 *__restrict__ ind,
    i64 rows, i64 p, i64 m)
{
    STAX_LOOP(t, rows * m) {
        i64 r = t / m, i = t - r * m;
        vals[t] = key[r * p + i];
        ind[t] = idx[r * p + i];
    }
}
extern "C" __global__ void median_pick_@(const S *__restrict__ key,
    const i64 *__restrict__ idx, S *__restrict__ vals, i64 *__restrict__ ind,
    i64 rows, i64 n, i64 p)
{
    /* rows sorted ascending: NaNs (if any) are a suffix in original order;
       the median is the first NaN, else the lower middle */
    STAX_LOOP(r, rows) {
        const S *k = key + r * p;
        i64 pos = (n - 1) / 2;
        A last = LD(k[n - 1]);
        if (last != last) {
            i64 lo = 0, hi = n - 1;
            while (lo < hi) {
                i64 mid = lo + (hi - lo) / 2;
                A v = LD(k[mid]);
                if (v != v) hi = mid; else lo = mid + 1;
            }
            pos = lo;
        }
        vals[r] = k[pos];
        ind[r] = idx[r * p + pos];
    }
}
"""

# ------------------------------------------------------------ unique(dim)
# Row orders of unique(dim) over the slices as rows (n, c), contiguous.
# row_cmp: torch's comparator, lexicographic over the values (as A:
# -0.0 meets 0.0), the first element where a < b or a > b decides; a NaN
# element compares neither way.
# rowsort_step: one (k, j) stage of a bitonic network over the row indices
# idx (padded to p = 2^m; an index >= n is padding, last), rows compared by
# row_cmp, ties by index: without NaN, the stable lexicographic sort
# (np.lexsort's order, eager's), one network whatever the row length.
# std_sort_rows: input holding NaN: eager takes the order libstdc++'s
# std::sort leaves under torch's comparator, which is no strict weak order
# there, so only that algorithm gives it (tensorplay/_ops.py
# _std_sort_order, the same steps: introsort, median-of-three quicksort
# down to runs of 16, heapsort past 2 floor(log2 n) levels, a final
# insertion sort); one thread runs it, O(n log n) row comparisons. The
# left part of a partition waits on a stack while the right part is
# sorted, as the recursion orders them.
UNIQUE_ROWS = r"""
STAX_D int row_cmp(const S *rows, i64 c, i64 a, i64 b)
{
    const S *ra = rows + a * c, *rb = rows + b * c;
    for (i64 q = 0; q < c; q++) {
        A x = LD(ra[q]), y = LD(rb[q]);
        if (x < y) return -1;
        if (x > y) return 1;
    }
    return 0;
}
STAX_D bool row_before(const S *rows, i64 c, i64 a, i64 b, i64 n)
{
    bool pa = a >= n, pb = b >= n;
    if (pa || pb) return pb && (!pa || a < b);
    int r = row_cmp(rows, c, a, b);
    return r < 0 || (r == 0 && a < b);
}
extern "C" __global__ void rowsort_step_@(const S *__restrict__ rows, i64 *__restrict__ idx,
    i64 n, i64 c, i64 p, i64 k, i64 j)
{
    STAX_LOOP(i, p) {
        i64 l = i ^ j;
        if (l > i) {
            bool sw = (i & k) == 0 ? row_before(rows, c, idx[l], idx[i], n)
                                   : row_before(rows, c, idx[i], idx[l], n);
            if (sw) { i64 t = idx[i]; idx[i] = idx[l]; idx[l] = t; }
        }
    }
}
#define RLESS(a, b) (row_cmp(rows, c, (a), (b)) < 0)
STAX_D void std_insertion(const S *rows, i64 c, i64 *idx, i64 lo, i64 hi, bool guarded)
{
    for (i64 i = guarded ? lo + 1 : lo; i < hi; i++) {
        i64 v = idx[i];
        if (guarded && RLESS(v, idx[lo])) {
            for (i64 q = i; q > lo; q--) idx[q] = idx[q - 1];
            idx[lo] = v;
            continue;
        }
        i64 j = i;
        while (j > 0 && RLESS(v, idx[j - 1])) { idx[j] = idx[j - 1]; j--; }
        idx[j] = v;
    }
}
STAX_D void std_sift(const S *rows, i64 c, i64 *idx, i64 base, i64 hole, i64 len, i64 v)
{
    i64 top = hole, child = hole;
    while (child < (len - 1) / 2) {
        child = 2 * (child + 1);
        if (RLESS(idx[base + child], idx[base + child - 1])) child--;
        idx[base + hole] = idx[base + child];
        hole = child;
    }
    if ((len & 1) == 0 && child == (len - 2) / 2) {
        child = 2 * (child + 1);
        idx[base + hole] = idx[base + child - 1];
        hole = child - 1;
    }
    while (hole > top && RLESS(idx[base + (hole - 1) / 2], v)) {
        idx[base + hole] = idx[base + (hole - 1) / 2];
        hole = (hole - 1) / 2;
    }
    idx[base + hole] = v;
}
STAX_D void std_heapsort(const S *rows, i64 c, i64 *idx, i64 lo, i64 hi)
{
    i64 len = hi - lo;
    for (i64 q = (len - 2) / 2; q >= 0; q--) std_sift(rows, c, idx, lo, q, len, idx[lo + q]);
    for (i64 end = len - 1; end > 0; end--) {
        i64 v = idx[lo + end];
        idx[lo + end] = idx[lo];
        std_sift(rows, c, idx, lo, 0, end, v);
    }
}
STAX_D void std_median_to_first(const S *rows, i64 c, i64 *idx, i64 r, i64 a, i64 b, i64 d)
{
    i64 m;
    if (RLESS(idx[a], idx[b])) {
        if (RLESS(idx[b], idx[d])) m = b;
        else if (RLESS(idx[a], idx[d])) m = d;
        else m = a;
    }
    else if (RLESS(idx[a], idx[d])) m = a;
    else if (RLESS(idx[b], idx[d])) m = d;
    else m = b;
    i64 t = idx[r]; idx[r] = idx[m]; idx[m] = t;
}
extern "C" __global__ void std_sort_rows_@(const S *__restrict__ rows, i64 *__restrict__ idx,
    i64 n, i64 c)
{
    STAX_LOOP(t, 1) {
        for (i64 i = 0; i < n; i++) idx[i] = i;
        if (n > 1) {
            i64 slo[132], shi[132], sd[132];
            int top = 0;
            i64 lg = 0;
            for (i64 m = n; m > 1; m >>= 1) lg++;
            slo[0] = 0; shi[0] = n; sd[0] = 2 * lg; top = 1;
            while (top > 0) {
                top--;
                i64 lo = slo[top], hi = shi[top], depth = sd[top];
                while (hi - lo > 16) {
                    if (depth == 0) {
                        std_heapsort(rows, c, idx, lo, hi);
                        break;
                    }
                    depth--;
                    std_median_to_first(rows, c, idx, lo, lo + 1, lo + (hi - lo) / 2, hi - 1);
                    i64 first = lo + 1, last = hi, piv = idx[lo];
                    for (;;) {
                        while (first < n && RLESS(idx[first], piv)) first++;
                        last--;
                        while (RLESS(piv, idx[last])) last--;
                        if (first >= last) break;
                        i64 s = idx[first]; idx[first] = idx[last]; idx[last] = s;
                        first++;
                    }
                    /* the left part [lo, first) after the right one */
                    slo[top] = lo; shi[top] = first; sd[top] = depth; top++;
                    lo = first;
                }
            }
            if (n > 16) {
                std_insertion(rows, c, idx, 0, 16, true);
                std_insertion(rows, c, idx, 16, n, false);
            }
            else {
                std_insertion(rows, c, idx, 0, n, true);
            }
        }
    }
}
"""

# ------------------------------------------------------------------ scans
# An inclusive scan of each row of x (rows, n; dtype SI) into out (dtype S) in three launches: each
# chunk's total; per row the exclusive scan of its chunk totals (serial
# over nc chunks); each chunk rescanned from its offset. Integers
# accumulate in u64 (wrapping, exact in any order), float16/bfloat16 in
# float (rounded once per element, as eager), float32/float64 in their own
# type. OP(a, b) is + or *; ID its identity.
SCAN = r"""
typedef @ACC C;
STAX_D C OP(C a, C b) { return @OP; }
extern "C" __global__ void scan_chunks_@(const SI *__restrict__ x, C *__restrict__ part,
    i64 rows, i64 n, i64 cs, i64 nc)
{
    STAX_LOOP(t, rows * nc) {
        i64 r = t / nc, c = t - r * nc, e = (c + 1) * cs < n ? (c + 1) * cs : n;
        C acc = (C)@ID;
        for (i64 i = c * cs; i < e; i++) acc = OP(acc, (C)LDI(x[r * n + i]));
        part[t] = acc;
    }
}
extern "C" __global__ void scan_partials_@(C *__restrict__ part, i64 rows, i64 nc)
{
    STAX_LOOP(r, rows) {
        C acc = (C)@ID;
        for (i64 c = 0; c < nc; c++) {
            C v = part[r * nc + c];
            part[r * nc + c] = acc;
            acc = OP(acc, v);
        }
    }
}
extern "C" __global__ void scan_apply_@(const SI *__restrict__ x, const C *__restrict__ part,
    S *__restrict__ out, i64 rows, i64 n, i64 cs, i64 nc)
{
    STAX_LOOP(t, rows * nc) {
        i64 r = t / nc, c = t - r * nc, e = (c + 1) * cs < n ? (c + 1) * cs : n;
        C acc = part[t];
        for (i64 i = c * cs; i < e; i++) {
            acc = OP(acc, (C)LDI(x[r * n + i]));
            out[r * n + i] = ST((A)acc);
        }
    }
}
"""

# ------------------------------------------------------ stream compaction
# nonzero: flag (N,) bytes, cnt (N,) the inclusive prefix count of flags,
# shape (nd,) the sizes; each flagged element writes its coordinates at
# row cnt[i] - 1 of out (count, nd).
NONZERO = r"""
extern "C" __global__ void nonzero_scatter(const unsigned char *__restrict__ flag,
    const i64 *__restrict__ cnt, const i64 *__restrict__ shape, i64 *__restrict__ out,
    i64 total, i64 nd)
{
    STAX_LOOP(i, total) {
        if (flag[i]) {
            i64 row = cnt[i] - 1, rest = i;
            for (i64 d = nd - 1; d >= 0; d--) {
                out[row * nd + d] = rest % shape[d];
                rest /= shape[d];
            }
        }
    }
}
"""

# repeat_interleave: output position p comes from the first i with
# cum[i] > p (cum: the inclusive sum of the repeats, n entries)
REPEAT_INDEX = r"""
extern "C" __global__ void repeat_index(const i64 *__restrict__ cum, i64 *__restrict__ out,
    i64 n, i64 total)
{
    STAX_LOOP(p, total) {
        i64 lo = 0, hi = n;
        while (lo < hi) {
            i64 mid = lo + (hi - lo) / 2;
            if (cum[mid] <= p) lo = mid + 1; else hi = mid;
        }
        out[p] = lo;
    }
}
"""

# unique's inverse: out[idx[i]] = src[i] (idx a permutation: no two
# threads write one element)
SCATTER = r"""
extern "C" __global__ void scatter_i64(i64 *__restrict__ out, const i64 *__restrict__ idx,
    const i64 *__restrict__ src, i64 n)
{
    STAX_LOOP(i, n) { out[idx[i]] = src[i]; }
}
"""

# x[mask] = v: row idx[i] of out (rows of `inner` elements, contiguous)
# takes row i of src; the rows of a mask are distinct
PUT_ROWS = r"""
extern "C" __global__ void put_rows_@(S *__restrict__ out, const i64 *__restrict__ rows,
    const S *__restrict__ src, i64 count, i64 inner)
{
    STAX_LOOP(t, count * inner) {
        i64 i = t / inner, q = t - i * inner;
        out[rows[i] * inner + q] = src[t];
    }
}
"""

# x[key] = v for any advanced key: element off[i] of out (an address, t's
# data) takes src[i]; repeated offsets: one of the writes wins
PUT_AT = r"""
extern "C" __global__ void put_at_@(S *__restrict__ out, const i64 *__restrict__ off,
    const S *__restrict__ src, i64 count)
{
    STAX_LOOP(i, count) { out[off[i]] = src[i]; }
}
"""

# a copy into a view whose elements share memory (as_strided): the element
# last in row-major order (of the dims as _native orders them) wins; pass 1
# records each address's last writer (t + 1, atomicMax), pass 2 writes the
# winners only
LAST_WRITER = r"""
extern "C" __global__ void last_writer(const i64 *__restrict__ off, u64 *win, i64 n)
{
    STAX_LOOP(t, n) { atomicMax((unsigned long long *)(win + off[t]), (unsigned long long)(t + 1)); }
}
"""
PUT_LAST = r"""
extern "C" __global__ void put_last_@(S *__restrict__ out, const i64 *__restrict__ off,
    const u64 *__restrict__ win, const S *__restrict__ src, i64 n)
{
    STAX_LOOP(t, n) { if (win[off[t]] == (u64)(t + 1)) out[off[t]] = src[t]; }
}
"""

# dtype conversion and copies between layouts: out[o] = x[i] converted,
# for each index of sizes meta[0:nd], i and o its offsets by the strides
# meta[nd:2nd] (x) and meta[2nd:3nd] (out); nd = 0: both contiguous.
# Conversions are C's (round to nearest; integers wrap), which are NumPy's
# astype for the pairs cast_ok admits; to bool: != 0 (NaN is True), with
# two exceptions written out so that the GPU and the host emulation agree:
#
# * float -> integer truncates toward zero (the host's result wherever the
#   value fits); out of range, torch's CUDA casts (PTX cvt.rzi, as read off
#   torch 2.11 on an H200): int64 and int32 saturate; int16 and int8 go
#   through int32 (saturated) and keep its low bits; uint8 goes through
#   int64 and keeps the low byte (torch's TypeCast). NaN gives int64's
#   minimum through int64 (so 0 in uint8), and through int32 0 from a
#   float32/float16/bfloat16 (converted in float) but int32's minimum from a
#   float64 (so 0 in int16/int8 either way);
# * float64 -> float16 rounds once, to nearest even, from the double (the
#   host's stax_double_to_half; through float it would round twice).
#   float64/int -> bfloat16 round through float32 as the host does.
CAST_CONV = r"""
STAX_D i64 stax_f2i64(double v)
{
    if (v != v) return -0x7fffffffffffffffLL - 1;
    if (v >= 9223372036854775808.0) return 0x7fffffffffffffffLL;
    if (v <= -9223372036854775808.0) return -0x7fffffffffffffffLL - 1;
    return (i64)v;
}
STAX_D i64 stax_f2i32(double v, i64 nan)
{
    if (v != v) return nan;
    if (v <= -2147483648.0) return -2147483647LL - 1;
    if (v >= 2147483647.0) return 2147483647LL;
    return (i64)v;
}
STAX_D u16 stax_d2h(double d)
{
    u64 u = stax_d2u(d);
    u16 s = (u16)((u >> 48) & 0x8000u);
    u64 a = u & 0x7fffffffffffffffULL;
    if (a > 0x7ff0000000000000ULL) return s | 0x7e00;     /* NaN */
    if (a >= 0x40effe0000000000ULL) return s | 0x7c00;    /* >= 65520: inf */
    int e = (int)(a >> 52);
    if (e == 0) return s;                                 /* double subnormal */
    u64 m = (a & 0xfffffffffffffULL) | 0x10000000000000ULL;
    /* normal halves keep 11 significant bits; below 2^-14 the subnormal
       grid is 2^-24 */
    int shift = e >= 1009 ? 42 : 1051 - e;
    if (shift > 60) return s;
    u64 q = m >> shift, r = m & ((1ULL << shift) - 1), h = 1ULL << (shift - 1);
    if (r > h || (r == h && (q & 1))) q++;
    if (e >= 1009) return s | (u16)(((u64)(e - 1008) << 10) + q - 1024);
    return s | (u16)q;
}
"""
CAST = r"""
extern "C" __global__ void cast_@(const SI *__restrict__ x, S *__restrict__ out,
    const i64 *__restrict__ meta, i64 nd, i64 n)
{
    STAX_LOOP(t, n) {
        i64 i = t, o = t;
        if (nd > 0) {
            i64 rest = t;
            i = 0; o = 0;
            for (i64 d = nd - 1; d >= 0; d--) {
                i64 c = rest % meta[d];
                rest /= meta[d];
                i += c * meta[nd + d];
                o += c * meta[2 * nd + d];
            }
        }
        out[o] = @CONV;
    }
}
"""

_INTS = ("int8", "uint8", "int16", "int32", "int64", "bool")


def cast_ok(src, dst):
    """dtype pairs the cast kernel converts (all of DTYPES' pairs; see
    CAST for the float -> integer rule)."""
    return src in DTYPES and dst in DTYPES


def _conv(src, dst):
    """the cast kernel's expression for out[o] from x[i]"""
    if dst == "bool":
        return "(S)(LDI(x[i]) != 0)"
    if src in FLOATS and dst in _INTS:
        v = "(double)LDI(x[i])"
        i32 = f"stax_f2i32({v}, {'-2147483647LL - 1' if src == 'float64' else '0'})"
        return {"int64": f"(S)stax_f2i64({v})",
                "uint8": f"(S)(unsigned char)(u64)stax_f2i64({v})",
                "int32": f"(S){i32}",
                "int16": f"(S)(unsigned short){i32}",
                "int8": f"(S)(unsigned char){i32}"}[dst]
    if src == "float64" and dst == "float16":
        return "stax_d2h(LDI(x[i]))"
    return "ST((A)LDI(x[i]))"

# ------------------------------------------------------------ index_add
# out (outer, n, inner) += alpha * src (outer, m, inner) at index[j] along
# the middle dim. atomicAdd: float32/float64 (the order of additions to
# one element may vary between runs, as torch's CUDA kernel), int32/int64
# (exact whatever the order). The 1- and 2-byte dtypes (float16, bfloat16,
# int8, uint8, int16, bool) have no atomicAdd: a compare-and-swap loop on
# the aligned 32-bit word holding the element, each addition rounded (or
# wrapped; for bool an or) to the dtype as eager's sequential loop does
# (float16: alpha * src rounded to float16 first, as eager; bfloat16 is
# eager's float32 op rounded once, so _native runs the float32 kernel).
INDEX_ADD = r"""
STAX_D void add_to(float *p, float v) { atomicAdd(p, v); }
STAX_D void add_to(double *p, double v) { atomicAdd(p, v); }
STAX_D void add_to(int *p, int v) { atomicAdd(p, v); }
STAX_D void add_to(i64 *p, i64 v)
{ atomicAdd((unsigned long long *)p, (unsigned long long)v); }
STAX_D unsigned small_bits(S v)
{ return sizeof(S) == 1 ? (unsigned)(unsigned char)v : (unsigned)(u16)v; }
STAX_D void add_small(S *p, A v)
{
    unsigned *w = (unsigned *)((u64)p & ~(u64)3);
    unsigned sh = (unsigned)(((u64)p & 3) * 8);
    unsigned mask = (sizeof(S) == 1 ? 0xffu : 0xffffu) << sh;
    unsigned old = *w, seen;
    do {
        seen = old;
        S cur = (S)((seen & mask) >> sh);
        S nv = ST(LD(cur) + v);
        old = atomicCAS(w, seen, (seen & ~mask) | (small_bits(nv) << sh));
    } while (old != seen);
}
extern "C" __global__ void index_add_@(S *__restrict__ out, const IX *__restrict__ index,
    const S *__restrict__ src, i64 outer, i64 n, i64 m, i64 inner, @ALPHA alpha)
{
    STAX_LOOP(t, outer * m * inner) {
        i64 o = t / (m * inner), rest = t - o * (m * inner);
        i64 j = rest / inner, q = rest - j * inner;
        i64 d = (i64)index[j];
        if (d < 0) d += n;
        @ADD(out + (o * n + d) * inner + q, @SCALE);
    }
}
"""

# ----------------------------------------------------------------- matmul
# c (b, m, n) = a (b, m, k) @ w (b, k, n), contiguous operands, one thread
# per output element, k summed in order; float16/bfloat16 accumulate in
# float and round once (as eager and cuBLAS's GemmEx with fp32 compute),
# integers in u64 (wrapping as eager's).
MATMUL = r"""
typedef @ACC C;
extern "C" __global__ void matmul_@(const S *__restrict__ a, const S *__restrict__ w,
    S *__restrict__ c, i64 b, i64 m, i64 k, i64 n)
{
    STAX_LOOP(t, b * m * n) {
        i64 bi = t / (m * n), rest = t - bi * (m * n);
        i64 i = rest / n, j = rest - i * n;
        const S *ar = a + (bi * m + i) * k;
        const S *wc = w + bi * k * n + j;
        C acc = (C)0;
        for (i64 q = 0; q < k; q++) acc += (C)LD(ar[q]) * (C)LD(wc[q * n]);
        c[t] = ST((A)acc);
    }
}
"""


def _scan_acc(dt):
    if dt in ("float16", "bfloat16", "float32"):
        return "float"
    if dt == "float64":
        return "double"
    return "u64"


@functools.lru_cache(maxsize=None)
def sources(kind, dt):
    """{kernel name: CUDA C source} of one kernel family for dtype dt
    (a dtype name; for "scan" a (dtype, op) pair; "nonzero": None)."""
    if kind == "nonzero":
        return {"nonzero_scatter": PRELUDE + NONZERO}
    if kind == "scatter":
        return {"scatter_i64": PRELUDE + SCATTER}
    if kind == "repeat_index":
        return {"repeat_index": PRELUDE + REPEAT_INDEX}
    if kind == "cast":
        src, dst = dt
        return {f"cast_{src}_{dst}": PRELUDE + _types(dst) + _in_types(src) + CAST_CONV
                + CAST.replace("@CONV", _conv(src, dst)).replace("_@", f"_{src}_{dst}")}
    if kind == "last_writer":
        return {"last_writer": PRELUDE + LAST_WRITER}
    if kind == "put_last":
        return {f"put_last_{dt}": PRELUDE + _types(dt) + PUT_LAST.replace("_@", "_" + dt)}
    if kind == "put_at":
        return {f"put_at_{dt}": PRELUDE + _types(dt) + PUT_AT.replace("_@", "_" + dt)}
    if kind == "put_rows":
        return {f"put_rows_{dt}": PRELUDE + _types(dt) + PUT_ROWS.replace("_@", "_" + dt)}
    if kind == "scan":
        idt, dt, op = dt
        acc = _scan_acc(dt)
        body = (SCAN.replace("@ACC", acc)
                .replace("@OP", "a + b" if op == "sum" else "a * b")
                .replace("@ID", "0" if op == "sum" else "1"))
        tag = f"{op}_{idt}_{dt}"
        src = PRELUDE + _types(dt) + _in_types(idt) + body.replace("_@", "_" + tag)
        return {f"scan_{p}_{tag}": src for p in ("chunks", "partials", "apply")}
    if kind == "sort":
        src = PRELUDE + _types(dt) + SORT.replace("_@", "_" + dt)
        return {f"{p}_{dt}": src for p in ("sort_init", "sort_step", "sort_out",
                                              "median_pick")}
    if kind == "unique_rows":
        src = PRELUDE + _types(dt) + UNIQUE_ROWS.replace("_@", "_" + dt)
        return {f"{p}_{dt}": src for p in ("rowsort_step", "std_sort_rows")}
    if kind == "index_add":
        dt, ix = dt
        fl = dt in FLOATS
        small = dt not in ("float32", "float64", "int32", "int64")
        assert dt != "bfloat16"
        if not small:
            add, scale = "add_to", ("(S)(src[(o * m + j) * inner + q] * (S)alpha)" if fl else
                                    "(S)((u64)(i64)src[(o * m + j) * inner + q] * (u64)alpha)")
        elif fl:      # float16: alpha and the product rounded to float16, as eager
            add, scale = ("add_small",
                          "LD(ST(LD(src[(o * m + j) * inner + q]) * LD(stax_d2h(alpha))))")
        else:         # int8 / uint8 / int16 / bool: wrapping (A is int)
            add, scale = "add_small", "(A)((u64)(i64)LD(src[(o * m + j) * inner + q]) * (u64)alpha)"
        body = (INDEX_ADD.replace("@ALPHA", "double" if fl else "i64")
                .replace("@ADD", add).replace("@SCALE", scale))
        ixt = "typedef %s IX;\n" % ("i64" if ix == "int64" else "int")
        return {f"index_add_{dt}_{ix}": PRELUDE + _types(dt) + ixt + CAST_CONV
                + body.replace("_@", f"_{dt}_{ix}")}
    if kind == "matmul":
        acc = _scan_acc(dt)
        return {f"matmul_{dt}": PRELUDE + _types(dt)
                + MATMUL.replace("@ACC", acc).replace("_@", "_" + dt)}
    raise KeyError(kind)


def all_sources():
    """Every (name, source) this module can launch: NVRTC compiles each to
    PTX in the test suite (tests/test_cuda_kernels_host.py)."""
    out = {}
    for dt in DTYPES:
        out.update(sources("sort", dt))
        out.update(sources("unique_rows", dt))
        out.update(sources("put_rows", dt))
        out.update(sources("put_at", dt))
        out.update(sources("put_last", dt))
        for op in ("sum", "prod"):
            if dt != "bool":
                out.update(sources("scan", (dt, dt, op)))
            if dt not in FLOATS and dt != "int64":
                out.update(sources("scan", (dt, "int64", op)))
    for dt in DTYPES:
        for ix in ("int32", "int64"):
            if dt != "bfloat16":
                out.update(sources("index_add", (dt, ix)))
    for dt in ("float16", "bfloat16", "int8", "uint8", "int16", "int32", "int64"):
        out.update(sources("matmul", dt))
    out.update(sources("nonzero", None))
    out.update(sources("scatter", None))
    out.update(sources("last_writer", None))
    out.update(sources("repeat_index", None))
    for a in DTYPES:
        for b in DTYPES:
            if cast_ok(a, b):
                out.update(sources("cast", (a, b)))
    return out


# ------------------------------------------------------------- launching

_images = {}           # source -> CUBIN for the device (one NVRTC run per source)
_functions = {}        # (name, source) -> CUfunction handle
_launcher = [None]     # tests: a host emulator (name, source, grid, block, args)


def set_launcher(fn):
    """Run kernels through fn(name, source, grid, block, args) instead of
    the GPU (tests/_cuda_emu.py: the same source on the host); None: the
    GPU. Returns the previous launcher."""
    prev = _launcher[0]
    _launcher[0] = fn
    return prev


def _function(name, src):
    key = (name, src)
    f = _functions.get(key)
    if f is None:
        img = _images.get(src)
        if img is None:
            img = _images[src] = _C.nvrtc_compile(src, "stax_native.cu",
                                                  arch=_C.cuda_arch())
        f = _functions[key] = _C._cuda_function(img, name)
    return f


def launch(kind, dt, name, n, *args):
    """Launch kernel `name` of family (kind, dt) over n independent indices
    (its grid-stride loop covers them whatever the grid)."""
    if n <= 0:
        return
    src = sources(kind, dt)[name]
    grid = max(1, min((n + BLOCK - 1) // BLOCK, MAX_GRID))
    if _launcher[0] is not None:
        _launcher[0](name, src, grid, BLOCK, args)
        return
    _C._cuda_launch(_function(name, src), (grid,), (BLOCK,), tuple(args))
