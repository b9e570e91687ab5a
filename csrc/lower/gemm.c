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
 * time.  K is blocked by KC so that a panel (KC x 32 floats) stays in L1
 * while every row block of A passes over it. */
#include "lower/lower_internal.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define NR 32
#define KC 256

#define AVX512 __attribute__((target("avx512f")))

static inline __attribute__((always_inline)) AVX512 void
tile(const int MR, int64_t kc, const float *A, int64_t ar, int64_t ac, const float *B,
     int64_t br, float *C, int64_t ldc, __mmask16 m0, __mmask16 m1, int acc)
{
    __m512 c0[8], c1[8];
#pragma GCC unroll 8
    for (int i = 0; i < MR; i++) {
        c0[i] = acc ? _mm512_maskz_loadu_ps(m0, C + i * ldc) : _mm512_setzero_ps();
        c1[i] = acc ? _mm512_maskz_loadu_ps(m1, C + i * ldc + 16) : _mm512_setzero_ps();
    }
    for (int64_t p = 0; p < kc; p++) {
        __m512 b0 = _mm512_maskz_loadu_ps(m0, B + p * br);
        __m512 b1 = _mm512_maskz_loadu_ps(m1, B + p * br + 16);
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
        _mm512_mask_storeu_ps(C + i * ldc, m0, c0[i]);
        _mm512_mask_storeu_ps(C + i * ldc + 16, m1, c1[i]);
    }
}

/* rows [0, m) of one panel: tiles of 8 rows, the rest as 4 + 2 + 1 */
static AVX512 void
panel_rows(int64_t m, int64_t kc, const float *A, int64_t ar, int64_t ac, const float *B,
           int64_t br, float *C, int64_t ldc, __mmask16 m0, __mmask16 m1, int acc)
{
    int64_t i = 0;
    for (; i + 8 <= m; i += 8) {
        tile(8, kc, A + i * ar, ar, ac, B, br, C + i * ldc, ldc, m0, m1, acc);
    }
    if (i + 4 <= m) {
        tile(4, kc, A + i * ar, ar, ac, B, br, C + i * ldc, ldc, m0, m1, acc);
        i += 4;
    }
    if (i + 2 <= m) {
        tile(2, kc, A + i * ar, ar, ac, B, br, C + i * ldc, ldc, m0, m1, acc);
        i += 2;
    }
    if (i < m) {
        tile(1, kc, A + i * ar, ar, ac, B, br, C + i * ldc, ldc, m0, m1, acc);
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
            if (bc != 1) {
                /* a column-strided B: this panel packed as kc rows of NR */
                for (int64_t t = 0; t < w; t++) {     /* along B's rows when br == 1 */
                    for (int64_t q = 0; q < kc; q++) {
                        pack[q * NR + t] = bp[q * br + t * bc];
                    }
                }
                bp = pack;
                pbr = NR;
            }
            panel_rows(m, kc, A + p * ac, ar, ac, bp, pbr, C + j, ldc, m0, m1, p > 0);
        }
    }
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
