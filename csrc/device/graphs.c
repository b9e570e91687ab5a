/* CUDA graphs (device.h): a program's kernel launches, recorded on the host
 * during one call and replayed as one graph launch.
 *
 * Why record instead of stream capture: the runtime already knows every
 * launch's function, grid, block, shared memory and argument bytes when it
 * would launch, so the graph is built from those (a linear chain of kernel
 * nodes, cuGraphAddKernelNode) with no capture mode on the stream, and a
 * later call whose arguments differ (new tensors: other device addresses,
 * a random draw's new Philox offset) updates only the nodes that changed
 * (cuGraphExecKernelNodeSetParams) instead of capturing and instantiating
 * again. The addresses are the caching allocator's blocks, taken and
 * released by the program around each step exactly as without a graph:
 * the chain runs in the stream's order, so a block released after one
 * recorded launch and handed to a later one is ordered as before.
 *
 * A cuBLAS product of the program's own matmul steps joins the chain as a
 * child-graph node: the product captured from cuBLAS on a capture stream
 * of its own (stax_cuda_gemm_capture), captured again only when its
 * operands or shapes change (cuGraphExecChildGraphNodeSetParams; a
 * capture of another shape builds the graph anew).
 *
 * While a recording is open, any other stream operation of this room (a
 * copy, a fill, a synchronization, other cuBLAS work, an event, memory
 * going back to the driver) first launches what was recorded, one kernel at a time, and
 * closes the recording ("broken"): the order of the work never changes,
 * and a program that synchronizes or copies inside a call runs without a
 * graph. Everything runs under the GIL. */
#include "device/device_internal.h"

#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphExec_st *CUgraphExec;
typedef struct CUgraphNode_st *CUgraphNode;

/* CUDA_KERNEL_NODE_PARAMS_v2 (cuda.h, CUDA 12+); its first 56 bytes are
 * the v1 struct, so one value serves both entry points */
typedef struct {
    void *func;
    unsigned gridDimX, gridDimY, gridDimZ;
    unsigned blockDimX, blockDimY, blockDimZ;
    unsigned sharedMemBytes;
    void **kernelParams;
    void **extra;
    void *kern;                /* CUkernel: NULL, func is used */
    void *ctx;                 /* CUcontext: NULL, the current one */
} kernel_node_params;

#define CUDA_ERROR_NOT_SUPPORTED 801

static struct {
    int tried, ok;
    const char *why;
    CUresult (*Create)(CUgraph *, unsigned);
    CUresult (*AddKernelNode)(CUgraphNode *, CUgraph, const CUgraphNode *,
                              size_t, const kernel_node_params *);
    CUresult (*Instantiate)(CUgraphExec *, CUgraph, unsigned long long);
    CUresult (*ExecSetParams)(CUgraphExec, CUgraphNode,
                              const kernel_node_params *);
    CUresult (*Launch)(CUgraphExec, void *);
    CUresult (*ExecDestroy)(CUgraphExec);
    CUresult (*Destroy)(CUgraph);
    CUresult (*LaunchKernel)(void *, unsigned, unsigned, unsigned, unsigned,
                             unsigned, unsigned, unsigned, void *, void **,
                             void **);
    /* cuBLAS products as child-graph nodes (optional: without them a
     * recording that meets a product breaks, as before) */
    CUresult (*AddChildNode)(CUgraphNode *, CUgraph, const CUgraphNode *,
                             size_t, CUgraph);
    CUresult (*ExecChildSetParams)(CUgraphExec, CUgraphNode, CUgraph);
} gx;

/* tests: "missing" hides the graph entry points; a driver call's name
 * makes its next call fail with CUDA_ERROR_NOT_SUPPORTED */
static char inject[64];

static int
injected(const char *what)
{
    if (inject[0] && strcmp(inject, what) == 0) {
        inject[0] = '\0';
        return 1;
    }
    return 0;
}

void
stax_cuda_graph_inject(const char *what)
{
    snprintf(inject, sizeof(inject), "%s", what != NULL ? what : "");
    if (strcmp(inject, "missing") == 0 || (!inject[0] && !gx.ok)) {
        gx.tried = 0;          /* resolve again (or pretend not to find) */
    }
}

#define GX_SYM(field, name)                                              \
    do {                                                                 \
        *(void **)&gx.field = stax_cuda_symbol(name);                    \
        if (gx.field == NULL) {                                          \
            gx.why = "libcuda lacks " name;                              \
            return 0;                                                    \
        }                                                                \
    } while (0)

static int
resolve(void)
{
    gx.ok = 0;
    if (!stax_cuda_is_available()) {
        gx.why = "CUDA is not available";
        return 0;
    }
    if (strcmp(inject, "missing") == 0) {
        gx.why = "libcuda lacks cuGraphCreate (test: hidden)";
        return 0;
    }
    GX_SYM(Create, "cuGraphCreate");
    *(void **)&gx.AddKernelNode = stax_cuda_symbol("cuGraphAddKernelNode_v2");
    if (gx.AddKernelNode == NULL) {
        GX_SYM(AddKernelNode, "cuGraphAddKernelNode");
    }
    GX_SYM(Instantiate, "cuGraphInstantiateWithFlags");
    *(void **)&gx.ExecSetParams =
        stax_cuda_symbol("cuGraphExecKernelNodeSetParams_v2");
    if (gx.ExecSetParams == NULL) {
        GX_SYM(ExecSetParams, "cuGraphExecKernelNodeSetParams");
    }
    GX_SYM(Launch, "cuGraphLaunch");
    GX_SYM(ExecDestroy, "cuGraphExecDestroy");
    GX_SYM(Destroy, "cuGraphDestroy");
    GX_SYM(LaunchKernel, "cuLaunchKernel");
    *(void **)&gx.AddChildNode = stax_cuda_symbol("cuGraphAddChildGraphNode");
    *(void **)&gx.ExecChildSetParams =
        stax_cuda_symbol("cuGraphExecChildGraphNodeSetParams");
    gx.why = NULL;
    return 1;
}

int
stax_cuda_graphs_available(const char **why)
{
    if (!gx.tried) {
        gx.tried = 1;
        gx.ok = resolve();
    }
    if (why != NULL) {
        *why = gx.ok ? NULL : gx.why;
    }
    return gx.ok;
}

/* ------------------------------------------------------------ recording */

typedef struct {
    void *fn;                  /* NULL: a cuBLAS product (its
                                  stax_gemm_args are the argument bytes) */
    unsigned grid[3], block[3], smem;
    int nparams;
    size_t p0;                 /* its first entry of poff */
    size_t a0, nbytes;         /* its argument bytes: args[a0, a0 + nbytes) */
} rec_kernel;

/* one call's launches: what a recording collects, and (swapped in after a
 * successful replay) what the graph's nodes hold */
typedef struct {
    rec_kernel *k;
    int nk;
    size_t capk;
    unsigned char *args;
    size_t nargs, capargs;
    size_t *poff;              /* each argument's offset into args */
    size_t npoff, cappoff;
} launches;

struct stax_cuda_graph {
    launches rec, node;
    int broken;
    unsigned long owner;       /* the recording thread */
    CUgraph graph;
    CUgraphExec exec;
    CUgraphNode *nodes;
    int nnodes;
    stax_cuda_graph_stats st;
};

static stax_cuda_graph *recording;
static int record_products;    /* stax_cuda_record_products */
static long long live_graphs;  /* instantiated and not yet destroyed */

static void
launches_clear(launches *l)
{
    l->nk = 0;
    l->nargs = 0;
    l->npoff = 0;
}

static void
launches_free(launches *l)
{
    free(l->k);
    free(l->args);
    free(l->poff);
    memset(l, 0, sizeof(*l));
}

static int
grow(void **p, size_t *cap, size_t need, size_t elem)
{
    size_t nc;
    void *q;
    if (need <= *cap) {
        return 0;
    }
    nc = *cap ? *cap : 16;
    while (nc < need) {
        nc *= 2;
    }
    q = realloc(*p, nc * elem);
    if (q == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    *p = q;
    *cap = nc;
    return 0;
}

/* the kernelParams array of kernel i of l: pointers into l->args */
static void
param_ptrs(const launches *l, int i, void **out)
{
    const rec_kernel *r = &l->k[i];
    for (int j = 0; j < r->nparams; j++) {
        out[j] = l->args + l->poff[r->p0 + (size_t)j];
    }
}

#define MAX_PARAMS 512

static int
launch_direct(const launches *l)
{
    void *kp[MAX_PARAMS];
    for (int i = 0; i < l->nk; i++) {
        const rec_kernel *r = &l->k[i];
        if (r->fn == NULL) {
            if (stax_cuda_gemm_issue((const stax_gemm_args *)(l->args + r->a0))
                < 0) {
                return -1;
            }
            continue;
        }
        param_ptrs(l, i, kp);
        if (stax_cuda_check(gx.LaunchKernel(r->fn, r->grid[0], r->grid[1],
                                            r->grid[2], r->block[0],
                                            r->block[1], r->block[2],
                                            r->smem, stax_cuda_stream(), kp,
                                            NULL),
                            "cuLaunchKernel") < 0) {
            return -1;
        }
    }
    return 0;
}

void
stax_cuda_graph_begin(stax_cuda_graph *g)
{
    if (recording != NULL && recording != g && stax_cuda_record_break() < 0) {
        /* one recording at a time: an open one (there is none when a
         * program starts, but a nested call must not lose launches) ran
         * its launches; an error of theirs surfaces at the next check */
        PyErr_WriteUnraisable(NULL);
    }
    launches_clear(&g->rec);
    g->broken = 0;
    g->owner = PyThread_get_thread_ident();
    recording = g;
}

int
stax_cuda_recording(void)
{
    return recording != NULL;
}

int
stax_cuda_record_break(void)
{
    stax_cuda_graph *g = recording;
    int rc;
    if (g == NULL) {
        return 0;
    }
    recording = NULL;
    g->broken = 1;
    rc = launch_direct(&g->rec);
    g->st.direct_launches += g->rec.nk;
    launches_clear(&g->rec);
    return rc;
}

int
stax_cuda_record_launch(void *fn, const int64_t grid[3],
                        const int64_t block[3], int64_t smem, void **params,
                        int nparams, const size_t *psize)
{
    stax_cuda_graph *g = recording;
    launches *l;
    rec_kernel *r;
    size_t need = 0, a;
    if (g == NULL) {
        return 0;
    }
    if (g->owner != PyThread_get_thread_ident() || nparams > MAX_PARAMS) {
        /* another thread's launch, or one too wide to keep: ordered after
         * what was recorded, launched by the caller */
        return stax_cuda_record_break() < 0 ? -1 : 0;
    }
    l = &g->rec;
    for (int j = 0; j < nparams; j++) {
        need += (psize[j] + 7) & ~(size_t)7;
    }
    if (grow((void **)&l->k, &l->capk, (size_t)l->nk + 1, sizeof(*l->k)) < 0
        || grow((void **)&l->args, &l->capargs, l->nargs + need, 1) < 0
        || grow((void **)&l->poff, &l->cappoff, l->npoff + (size_t)nparams,
                sizeof(*l->poff)) < 0) {
        return -1;
    }
    r = &l->k[l->nk++];
    r->fn = fn;
    for (int d = 0; d < 3; d++) {
        r->grid[d] = (unsigned)grid[d];
        r->block[d] = (unsigned)block[d];
    }
    r->smem = (unsigned)smem;
    r->nparams = nparams;
    r->p0 = l->npoff;
    r->a0 = l->nargs;
    r->nbytes = need;
    a = l->nargs;
    for (int j = 0; j < nparams; j++) {
        size_t w = (psize[j] + 7) & ~(size_t)7;
        memset(l->args + a, 0, w);   /* padding compares equal */
        memcpy(l->args + a, params[j], psize[j]);
        l->poff[l->npoff++] = a;
        a += w;
    }
    l->nargs = a;
    return 1;
}

void
stax_cuda_record_products(int on)
{
    record_products = on;
}

int
stax_cuda_products_available(void)
{
    return stax_cuda_graphs_available(NULL) && gx.AddChildNode != NULL
           && gx.ExecChildSetParams != NULL && stax_cuda_products_capturable();
}

int
stax_cuda_record_gemm(const stax_gemm_args *gm)
{
    stax_cuda_graph *g = recording;
    launches *l;
    rec_kernel *r;
    size_t need = (sizeof(*gm) + 7) & ~(size_t)7;
    if (g == NULL) {
        return 0;
    }
    if (!record_products || g->owner != PyThread_get_thread_ident()
        || !stax_cuda_products_available()) {
        return stax_cuda_record_break() < 0 ? -1 : 0;
    }
    /* what the capture at the graph's build needs, made while the
     * recording is open (an OOM empties the cache, which launches what
     * was recorded first); failing, the product runs outside the graph */
    if (stax_cuda_capture_ready() < 0) {
        PyErr_Clear();
        return stax_cuda_record_break() < 0 ? -1 : 0;
    }
    if (recording != g) {
        return 0;              /* its OOM retry broke the recording (what
                                  was recorded ran): the caller issues it */
    }
    l = &g->rec;
    if (grow((void **)&l->k, &l->capk, (size_t)l->nk + 1, sizeof(*l->k)) < 0
        || grow((void **)&l->args, &l->capargs, l->nargs + need, 1) < 0) {
        return -1;
    }
    r = &l->k[l->nk++];
    memset(r, 0, sizeof(*r));
    r->p0 = l->npoff;
    r->a0 = l->nargs;
    r->nbytes = need;
    memset(l->args + l->nargs, 0, need);
    memcpy(l->args + l->nargs, gm, sizeof(*gm));
    l->nargs += need;
    return 1;
}

/* ------------------------------------------------------------ the graph */

stax_cuda_graph *
stax_cuda_graph_new(void)
{
    stax_cuda_graph *g = calloc(1, sizeof(*g));
    if (g == NULL) {
        PyErr_NoMemory();
    }
    return g;
}

static void
graph_drop(stax_cuda_graph *g)
{
    /* an executable graph still running is freed when it completes */
    if (g->exec != NULL) {
        live_graphs--;
        if (gx.ExecDestroy != NULL && stax_cuda_is_available()) {
            gx.ExecDestroy(g->exec);
        }
    }
    if (g->graph != NULL && gx.Destroy != NULL && stax_cuda_is_available()) {
        gx.Destroy(g->graph);
    }
    g->exec = NULL;
    g->graph = NULL;
    free(g->nodes);
    g->nodes = NULL;
    g->nnodes = 0;
    launches_clear(&g->node);
}

void
stax_cuda_graph_free(stax_cuda_graph *g)
{
    if (g == NULL) {
        return;
    }
    if (recording == g) {
        recording = NULL;
    }
    graph_drop(g);
    launches_free(&g->rec);
    launches_free(&g->node);
    free(g);
}

static void
node_params(const launches *l, int i, void **kp, kernel_node_params *np)
{
    const rec_kernel *r = &l->k[i];
    memset(np, 0, sizeof(*np));
    param_ptrs(l, i, kp);
    np->func = r->fn;
    np->gridDimX = r->grid[0];
    np->gridDimY = r->grid[1];
    np->gridDimZ = r->grid[2];
    np->blockDimX = r->block[0];
    np->blockDimY = r->block[1];
    np->blockDimZ = r->block[2];
    np->sharedMemBytes = r->smem;
    np->kernelParams = kp;
}

static int
gcheck(CUresult r, const char *what)
{
    if (injected(what)) {
        r = CUDA_ERROR_NOT_SUPPORTED;
    }
    return stax_cuda_check(r, what);
}

/* node i of g: a kernel node, or a cuBLAS product captured as a child
 * graph (the node holds a copy of it) */
static int
add_node(stax_cuda_graph *g, int i, void **kp)
{
    kernel_node_params np;
    const launches *l = &g->rec;
    const CUgraphNode *dep = i > 0 ? &g->nodes[i - 1] : NULL;
    size_t ndep = i > 0 ? 1 : 0;
    if (l->k[i].fn == NULL) {
        void *child = NULL;
        int rc;
        if (stax_cuda_gemm_capture((const stax_gemm_args *)(l->args + l->k[i].a0),
                                   &child) < 0) {
            return -1;
        }
        rc = gcheck(gx.AddChildNode(&g->nodes[i], g->graph, dep, ndep,
                                    (CUgraph)child),
                    "cuGraphAddChildGraphNode");
        gx.Destroy((CUgraph)child);
        return rc;
    }
    node_params(l, i, kp, &np);
    return gcheck(gx.AddKernelNode(&g->nodes[i], g->graph, dep, ndep, &np),
                  "cuGraphAddKernelNode");
}

/* a new graph of the recorded launches, each node after the previous one */
static int
graph_build(stax_cuda_graph *g)
{
    void *kp[MAX_PARAMS];
    const launches *l = &g->rec;
    graph_drop(g);
    g->nodes = calloc((size_t)l->nk, sizeof(*g->nodes));
    if (g->nodes == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    if (gcheck(gx.Create(&g->graph, 0), "cuGraphCreate") < 0) {
        g->graph = NULL;
        return -1;
    }
    for (int i = 0; i < l->nk; i++) {
        if (add_node(g, i, kp) < 0) {
            return -1;
        }
        g->nnodes = i + 1;
    }
    if (gcheck(gx.Instantiate(&g->exec, g->graph, 0),
               "cuGraphInstantiateWithFlags") < 0) {
        g->exec = NULL;
        return -1;
    }
    live_graphs++;
    g->st.builds++;
    return 0;
}

/* the arguments of a and b lie at the same offsets from their first */
static int
same_layout(const launches *l, const rec_kernel *a, const launches *o,
            const rec_kernel *b)
{
    for (int j = 0; j < a->nparams; j++) {
        if (l->poff[a->p0 + (size_t)j] - a->a0
            != o->poff[b->p0 + (size_t)j] - b->a0) {
            return 0;
        }
    }
    return 1;
}

/* the nodes whose launch differs from the recording get its parameters;
 * 1 when a node cannot take them (another kind of launch there, or a
 * product whose capture has another shape): the caller builds anew */
static int
graph_update(stax_cuda_graph *g)
{
    void *kp[MAX_PARAMS];
    kernel_node_params np;
    const launches *l = &g->rec, *o = &g->node;
    for (int i = 0; i < l->nk; i++) {
        const rec_kernel *a = &l->k[i], *b = &o->k[i];
        if (a->fn == b->fn && a->smem == b->smem && a->nbytes == b->nbytes
            && a->nparams == b->nparams
            && memcmp(a->grid, b->grid, sizeof(a->grid)) == 0
            && memcmp(a->block, b->block, sizeof(a->block)) == 0
            && memcmp(l->args + a->a0, o->args + b->a0, a->nbytes) == 0
            && same_layout(l, a, o, b)) {
            continue;
        }
        if ((a->fn == NULL) != (b->fn == NULL)) {
            return 1;
        }
        if (a->fn == NULL) {
            void *child = NULL;
            CUresult r;
            if (stax_cuda_gemm_capture((const stax_gemm_args *)(l->args + a->a0),
                                       &child) < 0) {
                return -1;
            }
            r = injected("cuGraphExecChildGraphNodeSetParams")
                    ? CUDA_ERROR_NOT_SUPPORTED
                    : gx.ExecChildSetParams(g->exec, g->nodes[i], (CUgraph)child);
            gx.Destroy((CUgraph)child);
            if (r != 0) {
                return 1;      /* cuBLAS chose other kernels: rebuild */
            }
            g->st.updates++;
            continue;
        }
        node_params(l, i, kp, &np);
        if (a->fn != b->fn) {
            /* another function there (a kernel's final version replaced
             * its first): a driver that cannot swap it gets a new graph */
            if (gx.ExecSetParams(g->exec, g->nodes[i], &np) != 0) {
                return 1;
            }
        }
        else if (gcheck(gx.ExecSetParams(g->exec, g->nodes[i], &np),
                        "cuGraphExecKernelNodeSetParams") < 0) {
            return -1;
        }
        g->st.updates++;
    }
    return 0;
}

int
stax_cuda_graph_end(stax_cuda_graph *g, int replay)
{
    launches t;
    int rc = 0;
    if (recording == g) {
        recording = NULL;
    }
    if (g->broken) {
        g->broken = 0;
        return 1;              /* its launches ran one by one */
    }
    if (g->rec.nk == 0) {
        return 0;
    }
    if (!replay || !stax_cuda_graphs_available(NULL)) {
        rc = launch_direct(&g->rec);
        g->st.direct_launches += g->rec.nk;
        launches_clear(&g->rec);
        return rc;
    }
    if (g->exec == NULL || g->nnodes != g->rec.nk) {
        rc = graph_build(g);
    }
    else if ((rc = graph_update(g)) == 1) {
        rc = graph_build(g);
    }
    if (rc == 0) {
        rc = gcheck(gx.Launch(g->exec, stax_cuda_stream()), "cuGraphLaunch");
    }
    if (rc < 0) {
        /* the graph may be half made or half updated: dropped, and this
         * call's kernels launched one by one (the error stays set) */
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        graph_drop(g);
        if (launch_direct(&g->rec) == 0) {
            g->st.direct_launches += g->rec.nk;
            PyErr_Restore(et, ev, tb);
        }
        else {
            Py_XDECREF(et);
            Py_XDECREF(ev);
            Py_XDECREF(tb);
        }
        launches_clear(&g->rec);
        return -1;
    }
    g->st.replays++;
    g->st.nodes = g->nnodes;
    /* the nodes now hold this call's launches: keep them for the next
     * comparison, and reuse the old arrays for the next recording */
    t = g->node;
    g->node = g->rec;
    g->rec = t;
    launches_clear(&g->rec);
    return 0;
}

void
stax_cuda_graph_stats_get(const stax_cuda_graph *g, stax_cuda_graph_stats *s)
{
    if (g == NULL) {
        memset(s, 0, sizeof(*s));
        return;
    }
    *s = g->st;
}

long long
stax_cuda_graphs_live(void)
{
    return live_graphs;
}
