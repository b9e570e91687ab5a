/* The thread pool: pthreads splitting the outermost parallel dimension of a
 * kernel.  Size TENSORPLAY_NUM_THREADS (default: the core count); workers
 * start lazily on the first big job; tiny jobs run on the calling thread. */
#include "lower/lower.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#define STAX_PAR_MIN_WORK 32768   /* elements; below this: calling thread */

static int pool_size = -1;        /* threads including the caller */
static int pool_started;
static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pool_cv = PTHREAD_COND_INITIALIZER;
static pthread_cond_t pool_done_cv = PTHREAD_COND_INITIALIZER;
static pthread_mutex_t pool_busy = PTHREAD_MUTEX_INITIALIZER;

static struct {
    stax_parallel_fn fn;
    void *ctx;
    int64_t n, chunk, nchunks;
    atomic_llong next;
    int active;                   /* workers still running this job */
    unsigned long gen;
} job;

int
stax_lower_num_threads(void)
{
    if (pool_size < 0) {
        const char *e = getenv("TENSORPLAY_NUM_THREADS");
        long n = e ? strtol(e, NULL, 10) : 0;
        if (n <= 0) {
            n = sysconf(_SC_NPROCESSORS_ONLN);
        }
        pool_size = n < 1 ? 1 : (n > 64 ? 64 : (int)n);
    }
    return pool_size;
}

static void
run_chunks(void)
{
    for (;;) {
        int64_t c = atomic_fetch_add(&job.next, 1);
        if (c >= job.nchunks) {
            return;
        }
        int64_t s = c * job.chunk;
        int64_t e = s + job.chunk < job.n ? s + job.chunk : job.n;
        job.fn(job.ctx, s, e);
    }
}

static void *
worker(void *arg)
{
    (void)arg;
    unsigned long seen = 0;
    pthread_mutex_lock(&pool_mu);
    for (;;) {
        while (job.gen == seen) {
            pthread_cond_wait(&pool_cv, &pool_mu);
        }
        seen = job.gen;
        pthread_mutex_unlock(&pool_mu);
        run_chunks();
        pthread_mutex_lock(&pool_mu);
        if (--job.active == 0) {
            pthread_cond_signal(&pool_done_cv);
        }
    }
    return NULL;
}

/* a forked child has none of the parent's workers: start afresh */
static void
pool_atfork_child(void)
{
    pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
    pool_mu = m;
    pool_busy = m;
    pool_cv = cv;
    pool_done_cv = cv;
    pool_started = 0;
    job.active = 0;
}

static int
start_pool(void)
{
    static int atfork_done;
    if (!atfork_done) {
        atfork_done = 1;
        pthread_atfork(NULL, NULL, pool_atfork_child);
    }
    if (pool_started) {
        return pool_started > 0;
    }
    pool_started = -1;
    for (int i = 1; i < stax_lower_num_threads(); i++) {
        pthread_t t;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&t, &at, worker, NULL) != 0) {
            pthread_attr_destroy(&at);
            if (i == 1) {
                return 0;
            }
            pool_size = i;
            break;
        }
        pthread_attr_destroy(&at);
    }
    pool_started = 1;
    return 1;
}

void
stax_lower_parallel_for(int64_t n, int64_t work, stax_parallel_fn fn,
                        void *ctx)
{
    if (n <= 0) {
        return;
    }
    int nt = stax_lower_num_threads();
    if (nt <= 1 || n < 2 || work < STAX_PAR_MIN_WORK
        || pthread_mutex_trylock(&pool_busy) != 0) {
        fn(ctx, 0, n);
        return;
    }
    if (!start_pool()) {
        pthread_mutex_unlock(&pool_busy);
        fn(ctx, 0, n);
        return;
    }
    nt = pool_size;
    /* a few chunks per thread balances uneven cores */
    int64_t nchunks = n < (int64_t)nt * 4 ? n : (int64_t)nt * 4;
    pthread_mutex_lock(&pool_mu);
    job.fn = fn;
    job.ctx = ctx;
    job.n = n;
    job.chunk = (n + nchunks - 1) / nchunks;
    job.nchunks = (n + job.chunk - 1) / job.chunk;
    atomic_store(&job.next, 0);
    job.active = nt - 1;
    job.gen++;
    pthread_cond_broadcast(&pool_cv);
    pthread_mutex_unlock(&pool_mu);
    run_chunks();
    pthread_mutex_lock(&pool_mu);
    while (job.active > 0) {
        pthread_cond_wait(&pool_done_cv, &pool_mu);
    }
    pthread_mutex_unlock(&pool_mu);
    pthread_mutex_unlock(&pool_busy);
}
