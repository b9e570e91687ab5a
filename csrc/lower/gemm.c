/* A float32 GEMM for the compiled matmul steps on CPUs with AVX-512
 * (docs/lowering.md, "The matmul path").  NumPy's OpenBLAS runs on this
 * machine with OPENBLAS_CORETYPE=Haswell set by its environment (AVX2
 * kernels) while torch's oneDNN uses AVX-512; the compiled ResNet's
 * convolution GEMMs (M = 16..32 output channels, K = 27..288, N = the
 * output pixels of one image) are where the compiled CNN spent most of its
 * time.  Register-blocked outer products: an 8 x 32 tile of C lives in 16
 * zmm accumulators while k runs; each step loads one row of B's panel (two
 * vectors, masked at the right edge) and broadcasts 8 elements of A.
 * B's rows are read in place (no packing: the im2col matrix is used once
 * and packing it would copy it again); a B whose rows are not contiguous
 * (linear's weight, used transposed) is packed one 32-column panel at a
 * time (16 x 16 register transposes).  K is blocked by KC so that a
 * panel (KC x 32 floats) stays in L1 while every row block of A passes
 * over it.  With few rows of A (a decode step's linears) and W's rows
 * contiguous, sgemm_dot reads W once in place instead (dot products of
 * 4 x 4 rows, W prefetched a few rows ahead). */
#include "lower/lower_internal.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define NR 32
#define KC 256
#define DOT_AHEAD 8
#define B_AHEAD 8

#define AVX512 __attribute__((target("avx512f")))

/* FULL: a whole 32-column panel, unmasked loads and stores (the masks
 * of a partial panel were reloaded from the stack on every k step) */
static inline __attribute__((always_inline)) AVX512 void
tile(const int MR, const int FULL, int64_t kc, const float *A, int64_t ar, int64_t ac,
     const float *B, int64_t br, float *C, int64_t ldc, __mmask16 m0, __mmask16 m1, int acc)
{
    __m512 c0[8], c1[8];
    if (FULL) {
        m0 = m1 = 0xFFFF;
    }
#pragma GCC unroll 8
    for (int i = 0; i < MR; i++) {
        c0[i] = !acc ? _mm512_setzero_ps()
                : FULL ? _mm512_loadu_ps(C + i * ldc) : _mm512_maskz_loadu_ps(m0, C + i * ldc);
        c1[i] = !acc ? _mm512_setzero_ps()
                : FULL ? _mm512_loadu_ps(C + i * ldc + 16)
                       : _mm512_maskz_loadu_ps(m1, C + i * ldc + 16);
    }
    for (int64_t p = 0; p < kc; p++) {
        if (FULL) {
            /* B's rows are a row stride apart (often a multiple of 4 KiB:
             * the im2col matrix of a whole image), which the hardware
             * prefetcher does not follow: the tiles waited on B's loads */
            _mm_prefetch((const char *)(B + (p + B_AHEAD) * br), _MM_HINT_T0);
            _mm_prefetch((const char *)(B + (p + B_AHEAD) * br + 16), _MM_HINT_T0);
        }
        __m512 b0 = FULL ? _mm512_loadu_ps(B + p * br) : _mm512_maskz_loadu_ps(m0, B + p * br);
        __m512 b1 = FULL ? _mm512_loadu_ps(B + p * br + 16)
                         : _mm512_maskz_loadu_ps(m1, B + p * br + 16);
        const float *a = A + p * ac;
#pragma GCC unroll 8
        for (int i = 0; i < MR; i++) {
            __m512 av = _mm512_set1_ps(a[i * ar]);
            c0[i] = _mm512_fmadd_ps(av, b0, c0[i]);
            c1[i] = _mm512_fmadd_ps(av, b1, c1[i]);
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < MR; i++) {
        if (FULL) {
            _mm512_storeu_ps(C + i * ldc, c0[i]);
            _mm512_storeu_ps(C + i * ldc + 16, c1[i]);
        }
        else {
            _mm512_mask_storeu_ps(C + i * ldc, m0, c0[i]);
            _mm512_mask_storeu_ps(C + i * ldc + 16, m1, c1[i]);
        }
    }
}

/* rows [0, m) of one panel: tiles of 8 rows, the rest as 4 + 2 + 1 */
static inline __attribute__((always_inline)) AVX512 void
panel_rows_t(const int FULL, int64_t m, int64_t kc, const float *A, int64_t ar, int64_t ac,
             const float *B, int64_t br, float *C, int64_t ldc, __mmask16 m0, __mmask16 m1,
             int acc)
{
    int64_t i = 0;
    for (; i + 8 <= m; i += 8) {
        tile(8, FULL, kc, A + i * ar, ar, ac, B, br, C + i * ldc, ldc, m0, m1, acc);
    }
    if (i + 4 <= m) {
        tile(4, FULL, kc, A + i * ar, ar, ac, B, br, C + i * ldc, ldc, m0, m1, acc);
        i += 4;
    }
    if (i + 2 <= m) {
        tile(2, FULL, kc, A + i * ar, ar, ac, B, br, C + i * ldc, ldc, m0, m1, acc);
        i += 2;
    }
    if (i < m) {
        tile(1, FULL, kc, A + i * ar, ar, ac, B, br, C + i * ldc, ldc, m0, m1, acc);
    }
}

static AVX512 void
panel_rows(int64_t m, int64_t kc, const float *A, int64_t ar, int64_t ac, const float *B,
           int64_t br, float *C, int64_t ldc, __mmask16 m0, __mmask16 m1, int acc)
{
    panel_rows_t(0, m, kc, A, ar, ac, B, br, C, ldc, m0, m1, acc);
}

static AVX512 void
panel_rows_full(int64_t m, int64_t kc, const float *A, int64_t ar, int64_t ac, const float *B,
                int64_t br, float *C, int64_t ldc, int acc)
{
    panel_rows_t(1, m, kc, A, ar, ac, B, br, C, ldc, 0xFFFF, 0xFFFF, acc);
}

/* r[j] = column j of the 16 x 16 block whose rows r[0..15] are (the
 * unpack/shuffle transpose: pairs of rows, then quads within each 128-bit
 * lane, then the lanes of four row groups) */
static inline __attribute__((always_inline)) AVX512 void
transpose16(__m512 r[16])
{
    __m512 a[16], b[16];
    for (int i = 0; i < 8; i++) {
        a[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        a[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    /* b[4g + c], lane l: rows 4g..4g+3 of column 4l + c */
    for (int g = 0; g < 4; g++) {
        b[4 * g + 0] = _mm512_shuffle_ps(a[4 * g], a[4 * g + 2], 0x44);
        b[4 * g + 1] = _mm512_shuffle_ps(a[4 * g], a[4 * g + 2], 0xEE);
        b[4 * g + 2] = _mm512_shuffle_ps(a[4 * g + 1], a[4 * g + 3], 0x44);
        b[4 * g + 3] = _mm512_shuffle_ps(a[4 * g + 1], a[4 * g + 3], 0xEE);
    }
    for (int c = 0; c < 4; c++) {
        __m512 c1 = _mm512_shuffle_f32x4(b[c], b[4 + c], 0x44);
        __m512 c2 = _mm512_shuffle_f32x4(b[c], b[4 + c], 0xEE);
        __m512 d1 = _mm512_shuffle_f32x4(b[8 + c], b[12 + c], 0x44);
        __m512 d2 = _mm512_shuffle_f32x4(b[8 + c], b[12 + c], 0xEE);
        r[c] = _mm512_shuffle_f32x4(c1, d1, 0x88);
        r[4 + c] = _mm512_shuffle_f32x4(c1, d1, 0xDD);
        r[8 + c] = _mm512_shuffle_f32x4(c2, d2, 0x88);
        r[12 + c] = _mm512_shuffle_f32x4(c2, d2, 0xDD);
    }
}

/* the panel of a B whose columns are contiguous (linear's weight used
 * transposed: element (q, t) at bp[q + t * bc]) as kc rows of NR, by
 * 16 x 16 register transposes: a scalar copy with NR-strided stores cost
 * about three times the products themselves when A has few rows (a
 * decode step's linears).  Columns t >= w of the pack are left unwritten
 * or zero; the tiles' masked loads never read them. */
static AVX512 void
pack_transposed(int64_t w, int64_t kc, const float *bp, int64_t bc, float *pack)
{
    __m512 r[16];
    for (int64_t t0 = 0; t0 < w; t0 += 16) {
        for (int64_t q0 = 0; q0 < kc; q0 += 16) {
            int64_t nq = kc - q0 < 16 ? kc - q0 : 16;
            __mmask16 qm = (__mmask16)(nq == 16 ? 0xFFFF : (1u << nq) - 1);
            for (int t = 0; t < 16; t++) {
                r[t] = t0 + t < w ? _mm512_maskz_loadu_ps(qm, bp + (t0 + t) * bc + q0)
                                  : _mm512_setzero_ps();
            }
            transpose16(r);
            for (int64_t q = 0; q < nq; q++) {
                _mm512_storeu_ps(pack + (q0 + q) * NR + t0, r[q]);
            }
        }
    }
}

/* v[4j + i] -> lane 4i + j of the result: the lane sums of 16
 * accumulators in one vector (halves, 128-bit lanes, pairs, elements) */
static inline __attribute__((always_inline)) AVX512 __m512
reduce16(const __m512 v[16])
{
    __m512 z[8], w[4], r[2];
#pragma GCC unroll 16
    for (int s = 0; s < 8; s++) {
        z[s] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * s], v[2 * s + 1], 0x44),
                             _mm512_shuffle_f32x4(v[2 * s], v[2 * s + 1], 0xEE));
    }
#pragma GCC unroll 16
    for (int t = 0; t < 4; t++) {
        w[t] = _mm512_add_ps(_mm512_shuffle_f32x4(z[2 * t], z[2 * t + 1], 0x88),
                             _mm512_shuffle_f32x4(z[2 * t], z[2 * t + 1], 0xDD));
    }
#pragma GCC unroll 16
    for (int u = 0; u < 2; u++) {
        r[u] = _mm512_add_ps(_mm512_unpacklo_ps(w[2 * u], w[2 * u + 1]),
                             _mm512_unpackhi_ps(w[2 * u], w[2 * u + 1]));
    }
    return _mm512_add_ps(_mm512_shuffle_ps(r[0], r[1], 0x44),
                         _mm512_shuffle_ps(r[0], r[1], 0xEE));
}

/* C[i][j] (i < MI, j < NJ, both at most 4) = row i of A . row j of W,
 * both read along k 16 at a time (the last chunk masked) */
static inline __attribute__((always_inline)) AVX512 void
dot_tile(const int MI, const int NJ, int64_t k, const float *A, int64_t ar, const float *W,
         int64_t wr, float *C, int64_t ldc, const float *pf)
{
    __m512 v[16];
#pragma GCC unroll 16
    for (int q = 0; q < 16; q++) {
        v[q] = _mm512_setzero_ps();
    }
    for (int64_t p = 0; p < k; p += 16) {
        __mmask16 km = (__mmask16)(k - p >= 16 ? 0xFFFF : (1u << (k - p)) - 1);
        if (pf != NULL) {
            for (int j = 0; j < 4; j++) {
                _mm_prefetch((const char *)(pf + j * wr + p), _MM_HINT_T0);
            }
        }
        __m512 a[4];
#pragma GCC unroll 4
        for (int i = 0; i < MI; i++) {
            a[i] = _mm512_maskz_loadu_ps(km, A + i * ar + p);
        }
#pragma GCC unroll 4
        for (int j = 0; j < NJ; j++) {
            __m512 w = _mm512_maskz_loadu_ps(km, W + j * wr + p);
#pragma GCC unroll 4
            for (int i = 0; i < MI; i++) {
                v[4 * j + i] = _mm512_fmadd_ps(a[i], w, v[4 * j + i]);
            }
        }
    }
    float out[16];
    _mm512_storeu_ps(out, reduce16(v));
    for (int i = 0; i < MI; i++) {
        for (int j = 0; j < NJ; j++) {
            C[i * ldc + j] = out[4 * i + j];
        }
    }
}

/* every row of A against NJ rows of W: tiles of 4 rows, then 3, 2 or 1.
 * The first tile prefetches the 4 rows of W at pf (NULL: none), which a
 * later call reads: W is read once per product, so unless it is
 * prefetched each of its lines arrives from memory while the tile waits. */
static inline __attribute__((always_inline)) AVX512 void
dot_rows(const int NJ, int64_t m, int64_t k, const float *A, int64_t ar, const float *W,
         int64_t wr, float *C, int64_t ldc, const float *pf)
{
    int64_t i = 0;
    for (; i + 4 <= m; i += 4) {
        dot_tile(4, NJ, k, A + i * ar, ar, W, wr, C + i * ldc, ldc, i == 0 ? pf : NULL);
    }
    pf = i == 0 ? pf : NULL;
    switch (m - i) {
    case 3: dot_tile(3, NJ, k, A + i * ar, ar, W, wr, C + i * ldc, ldc, pf); break;
    case 2: dot_tile(2, NJ, k, A + i * ar, ar, W, wr, C + i * ldc, ldc, pf); break;
    case 1: dot_tile(1, NJ, k, A + i * ar, ar, W, wr, C + i * ldc, ldc, pf); break;
    default: break;
    }
}

/* C = A W^T where the rows of A and of W are contiguous along k
 * (linear's weight) and A has few rows: W read once, in place, four rows
 * at a time, while A's rows (few, so cache resident) pass over them.
 * Packing W's panels for a handful of rows of A cost more than the
 * products (each element of W transposed for a few uses). */
static AVX512 void
sgemm_dot(int64_t m, int64_t n, int64_t k, const float *A, int64_t ar, const float *W,
          int64_t wr, float *C, int64_t ldc)
{
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) {
        /* the rows DOT_AHEAD further on, whole groups of 4 only */
        const float *pf = j + DOT_AHEAD + 4 <= n ? W + (j + DOT_AHEAD) * wr : NULL;
        dot_rows(4, m, k, A, ar, W + j * wr, wr, C + j, ldc, pf);
    }
    switch (n - j) {
    case 3: dot_rows(3, m, k, A, ar, W + j * wr, wr, C + j, ldc, NULL); break;
    case 2: dot_rows(2, m, k, A, ar, W + j * wr, wr, C + j, ldc, NULL); break;
    case 1: dot_rows(1, m, k, A, ar, W + j * wr, wr, C + j, ldc, NULL); break;
    default: break;
    }
}

static AVX512 void
sgemm_avx512(int64_t m, int64_t n, int64_t k, const float *A, int64_t ar, int64_t ac,
             const float *B, int64_t br, int64_t bc, float *C, int64_t ldc, float *pack)
{
    if (k == 0) {
        for (int64_t i = 0; i < m; i++) {
            memset(C + i * ldc, 0, sizeof(float) * (size_t)n);
        }
        return;
    }
    for (int64_t j = 0; j < n; j += NR) {
        int64_t w = n - j < NR ? n - j : NR;
        __mmask16 m0 = (__mmask16)(w >= 16 ? 0xFFFF : (1u << w) - 1);
        __mmask16 m1 = (__mmask16)(w >= 32 ? 0xFFFF : w > 16 ? (1u << (w - 16)) - 1 : 0);
        for (int64_t p = 0; p < k; p += KC) {
            int64_t kc = k - p < KC ? k - p : KC;
            const float *bp = B + p * br + j * bc;
            int64_t pbr = br;
            if (bc != 1 && br == 1) {
                pack_transposed(w, kc, bp, bc, pack);
                bp = pack;
                pbr = NR;
            } else if (bc != 1) {
                /* a column-strided B: this panel packed as kc rows of NR */
                for (int64_t t = 0; t < w; t++) {
                    for (int64_t q = 0; q < kc; q++) {
                        pack[q * NR + t] = bp[q * br + t * bc];
                    }
                }
                bp = pack;
                pbr = NR;
            }
            if (w == NR) {
                panel_rows_full(m, kc, A + p * ac, ar, ac, bp, pbr, C + j, ldc, p > 0);
            }
            else {
                panel_rows(m, kc, A + p * ac, ar, ac, bp, pbr, C + j, ldc, m0, m1, p > 0);
            }
        }
    }
}

/* the most rows of A for which sgemm_dot beats packing W (measured with
 * bench/gemm_small.py); STAX_SGEMM_DOT_ROWS overrides it */
static int64_t
dot_rows_max(void)
{
    static int64_t v = -1;
    if (v < 0) {
        const char *e = getenv("STAX_SGEMM_DOT_ROWS");
        v = e != NULL ? atoll(e) : 40;
        v = v < 0 ? 0 : v;
    }
    return v;
}

int
lw_sgemm_available(void)
{
    static int ok = -1;
    if (ok < 0) {
        __builtin_cpu_init();
        ok = __builtin_cpu_supports("avx512f") ? 1 : 0;
        if (getenv("STAX_NO_SGEMM") != NULL) {
            ok = 0;
        }
    }
    return ok;
}

int
lw_sgemm(int64_t m, int64_t n, int64_t k, const float *A, int64_t ar, int64_t ac,
         const float *B, int64_t br, int64_t bc, float *C, int64_t ldc)
{
    if (bc != 1 && br == 1 && ac == 1 && m <= dot_rows_max() && k > 0) {
        sgemm_dot(m, n, k, A, ar, B, bc, C, ldc);
        return 0;
    }
    float *pack = NULL;
    if (bc != 1 && (pack = malloc(sizeof(float) * KC * NR)) == NULL) {
        return -1;
    }
    sgemm_avx512(m, n, k, A, ar, ac, B, br, bc, C, ldc, pack);
    free(pack);
    return 0;
}

#else

int
lw_sgemm_available(void)
{
    return 0;
}

int
lw_sgemm(int64_t m, int64_t n, int64_t k, const float *A, int64_t ar, int64_t ac,
         const float *B, int64_t br, int64_t bc, float *C, int64_t ldc)
{
    (void)m, (void)n, (void)k, (void)A, (void)ar, (void)ac, (void)B, (void)br, (void)bc;
    (void)C, (void)ldc;
    return -1;
}

#endif
