/* Streaming bandwidth reference for bench/: b[i] = a[i] * 1.5f over 2^25
 * floats on every core (OpenMP), best of 10; prints bytes read + written per
 * second in GB/s. The compiled kernels' GB/s are reported against it. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double
now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int
main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : (1L << 25);
    float *a = aligned_alloc(64, n * sizeof(float));
    float *b = aligned_alloc(64, n * sizeof(float));
    double best = 1e30;
    if (a == NULL || b == NULL) {
        return 1;
    }
#pragma omp parallel for
    for (long i = 0; i < n; i++) {
        a[i] = (float)(i % 13);
        b[i] = 0.0f;
    }
    for (int rep = 0; rep < 10; rep++) {
        double t = now();
#pragma omp parallel for
        for (long i = 0; i < n; i++) {
            b[i] = a[i] * 1.5f;
        }
        t = now() - t;
        if (t < best) {
            best = t;
        }
    }
    printf("%.3f\n", 2.0 * n * sizeof(float) / best / 1e9);
    free(a);
    free(b);
    return 0;
}
