/* The min-cut partition of a joint forward+backward graph (seed Key Point 4;
 * the rematerialization idea of torch's min-cut partitioner, written here
 * from its description).
 *
 * Which forward values does the forward save for the backward, and which
 * does the backward recompute? Every graph node v becomes two flow-network
 * vertices v_in -> v_out joined by an edge whose capacity is what saving v
 * costs: the bytes of its value (0 for the function's inputs: they exist
 * anyway). Data flows v_out -> u_in for every user u, at infinite capacity.
 * The source feeds the inputs and every node of the forward that must not
 * be recomputed (reductions, matmul and library calls, composites, random
 * ops: costly, or not reproducible); every node that depends on the
 * incoming gradients (the tangents) drains into the sink. A finite cut
 * separates what the forward computes from what the backward needs; the
 * cut edges v_in -> v_out are the values to save, and a minimum cut saves
 * the fewest bytes: cheap pointwise and view chains between saved values
 * fall on the sink side and are recomputed in the backward.
 *
 * Maximum flow: Dinic's algorithm (BFS levels, DFS blocking flows with
 * per-vertex edge cursors) on 64-bit capacities; the cut is the set of
 * vertices the source still reaches in the residual network.
 *
 * tensorplay._C.min_cut_partition(graph, primals, tangents, fwd_outputs,
 * bwd_outputs) -> dict (see py_min_cut). */
#include "graph/graph.h"
#include "graph/passes_internal.h"

#include <string.h>

#define CAP_INF ((int64_t)1 << 52)

/* ---- Dinic ------------------------------------------------------------- */

typedef struct {
    int to, next;
    int64_t cap;
} fedge;

typedef struct {
    int nv, ne, cap_e;
    int *head, *level, *iter, *queue;
    fedge *e;
} flownet;

static int
fn_init(flownet *f, int nv)
{
    memset(f, 0, sizeof(*f));
    f->nv = nv;
    f->head = PyMem_Malloc(sizeof(int) * (size_t)nv);
    f->level = PyMem_Malloc(sizeof(int) * (size_t)nv);
    f->iter = PyMem_Malloc(sizeof(int) * (size_t)nv);
    f->queue = PyMem_Malloc(sizeof(int) * (size_t)nv);
    if (!f->head || !f->level || !f->iter || !f->queue) {
        PyErr_NoMemory();
        return -1;
    }
    for (int i = 0; i < nv; i++) {
        f->head[i] = -1;
    }
    return 0;
}

static void
fn_free(flownet *f)
{
    PyMem_Free(f->head);
    PyMem_Free(f->level);
    PyMem_Free(f->iter);
    PyMem_Free(f->queue);
    PyMem_Free(f->e);
}

/* edge a -> b of capacity c and its residual twin b -> a (index ^ 1) */
static int
fn_add(flownet *f, int a, int b, int64_t c)
{
    if (f->ne + 2 > f->cap_e) {
        int nc = f->cap_e ? f->cap_e * 2 : 256;
        fedge *ne = PyMem_Realloc(f->e, sizeof(fedge) * (size_t)nc);
        if (ne == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        f->e = ne;
        f->cap_e = nc;
    }
    f->e[f->ne] = (fedge){b, f->head[a], c};
    f->head[a] = f->ne++;
    f->e[f->ne] = (fedge){a, f->head[b], 0};
    f->head[b] = f->ne++;
    return 0;
}

/* levels from s in the residual network; 1 if t is reached */
static int
fn_bfs(flownet *f, int s, int t)
{
    int qh = 0, qt = 0;
    for (int i = 0; i < f->nv; i++) {
        f->level[i] = -1;
    }
    f->level[s] = 0;
    f->queue[qt++] = s;
    while (qh < qt) {
        int v = f->queue[qh++];
        for (int k = f->head[v]; k >= 0; k = f->e[k].next) {
            if (f->e[k].cap > 0 && f->level[f->e[k].to] < 0) {
                f->level[f->e[k].to] = f->level[v] + 1;
                f->queue[qt++] = f->e[k].to;
            }
        }
    }
    return f->level[t] >= 0;
}

/* one augmenting path along increasing levels (iterative DFS with the
 * per-vertex cursors iter[], so each edge is tried once per phase) */
static int64_t
fn_augment(flownet *f, int s, int t, int *path_e)
{
    int depth = 0, v = s;
    for (;;) {
        if (v == t) {
            int64_t push = CAP_INF;
            for (int i = 0; i < depth; i++) {
                if (f->e[path_e[i]].cap < push) {
                    push = f->e[path_e[i]].cap;
                }
            }
            for (int i = 0; i < depth; i++) {
                f->e[path_e[i]].cap -= push;
                f->e[path_e[i] ^ 1].cap += push;
            }
            return push;
        }
        int k = f->iter[v];
        while (k >= 0 && !(f->e[k].cap > 0
                           && f->level[f->e[k].to] == f->level[v] + 1)) {
            k = f->e[k].next;
        }
        f->iter[v] = k;
        if (k >= 0) {
            path_e[depth++] = k;
            v = f->e[k].to;
            continue;
        }
        /* dead end: retreat, never to come back here this phase */
        f->level[v] = -1;
        if (depth == 0) {
            return 0;
        }
        depth--;
        v = f->e[path_e[depth] ^ 1].to;
        f->iter[v] = f->e[f->iter[v]].next;
    }
}

static int64_t
fn_maxflow(flownet *f, int s, int t)
{
    int64_t flow = 0;
    int *path_e = PyMem_Malloc(sizeof(int) * (size_t)(f->nv + 1));
    if (path_e == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    while (fn_bfs(f, s, t)) {
        int64_t p;
        memcpy(f->iter, f->head, sizeof(int) * (size_t)f->nv);
        while ((p = fn_augment(f, s, t, path_e)) > 0) {
            flow += p;
            if (flow >= CAP_INF) {
                break;
            }
        }
        if (flow >= CAP_INF) {
            break;
        }
    }
    PyMem_Free(path_e);
    return flow;
}

/* ---- the joint graph --------------------------------------------------- */

enum { P_BW = 1, P_FWREQ = 2, P_BWREQ = 4, P_PRIMAL = 8, P_TANGENT = 16,
       P_BANNED = 32 };

typedef struct {
    PyObject *nodes;     /* list */
    PyObject *index;     /* dict node -> int */
    int n;
    int *flags;
    int64_t *bytes;
    PyObject **ins;      /* per node: list of input node indices (PyList of int) */
} jgraph;

static int
ix_of(jgraph *g, PyObject *node)
{
    PyObject *v = PyDict_GetItemWithError(g->index, node);
    return v ? (int)PyLong_AsLong(v) : -1;
}

/* bytes of a node's value: a tensor's elements; -1 for a non-tensor value
 * (a tuple of outputs: never saved as a whole) */
static int64_t
value_bytes(PyObject *node)
{
    PyObject *val = stax_graph_p_val(node);
    if (val != NULL && StaxTensor_Check(val)) {
        StaxTensor *t = (StaxTensor *)val;
        int64_t n = 1;
        for (int i = 0; i < t->ndim; i++) {
            n *= t->sizes[i];
        }
        return n * (int64_t)stax_dtype_itemsize(t->dtype);
    }
    if (val != NULL && (PyLong_Check(val) || PyFloat_Check(val))) {
        return 8;
    }
    return -1;
}

/* 1: the node may be recomputed in the backward (cheap: pointwise, views,
 * the tuple getitem of a multi-output op, constant-like creation) */
static int
recomputable(PyObject *node)
{
    StaxNode *n = (StaxNode *)node;
    const stax_op_info *op;
    if (n->op != STAX_NODE_CALL_FUNCTION && n->op != STAX_NODE_CALL_METHOD) {
        return 0;
    }
    op = stax_op_for_target(stax_node_op_name(n->op), n->target);
    if (op == NULL) {
        PyErr_Clear();
        /* operator.getitem on a tuple of outputs */
        const stax_pyop_info *po = n->op == STAX_NODE_CALL_FUNCTION
                                   ? stax_pyop_for_target(n->target, NULL) : NULL;
        return po != NULL && po->key == STAX_PYOP_GETITEM;
    }
    if (op->flags & STAX_OPF_NONDETERMINISTIC) {
        return 0;
    }
    switch (op->kind) {
    case STAX_OPK_POINTWISE:
    case STAX_OPK_VIEW:
        return 1;
    case STAX_OPK_OTHER:
        return op->id == STAX_OP_ZEROS_LIKE || op->id == STAX_OP_ONES_LIKE
               || op->id == STAX_OP_FULL_LIKE;
    default:
        return 0;
    }
}

static int
mark_list(jgraph *g, PyObject *lst, int flag)
{
    PyObject *seq = PySequence_Fast(lst, "min_cut_partition: expected a list of Nodes");
    if (seq == NULL) {
        return -1;
    }
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
        PyObject *o = PySequence_Fast_GET_ITEM(seq, i);
        int k;
        if (!StaxNode_Check(o)) {
            continue;       /* a constant output */
        }
        k = ix_of(g, o);
        if (k < 0) {
            Py_DECREF(seq);
            if (!PyErr_Occurred()) {
                PyErr_SetString(PyExc_ValueError,
                                "min_cut_partition: a Node of another graph");
            }
            return -1;
        }
        g->flags[k] |= flag;
    }
    Py_DECREF(seq);
    return 0;
}

/* flag |= `flag` on every ancestor of a node carrying `seed` */
static void
mark_ancestors(jgraph *g, int seed, int flag)
{
    for (int i = g->n - 1; i >= 0; i--) {
        if (!(g->flags[i] & (seed | flag))) {
            continue;
        }
        g->flags[i] |= flag;
        for (Py_ssize_t k = 0; k < PyList_GET_SIZE(g->ins[i]); k++) {
            g->flags[PyLong_AsLong(PyList_GET_ITEM(g->ins[i], k))] |= flag;
        }
    }
}

static void
jg_free(jgraph *g)
{
    if (g->ins != NULL) {
        for (int i = 0; i < g->n; i++) {
            Py_XDECREF(g->ins[i]);
        }
    }
    PyMem_Free(g->ins);
    PyMem_Free(g->flags);
    PyMem_Free(g->bytes);
    Py_XDECREF(g->nodes);
    Py_XDECREF(g->index);
}

static int
jg_build(jgraph *g, PyObject *graph)
{
    memset(g, 0, sizeof(*g));
    g->nodes = stax_graph_node_list(graph);
    g->index = PyDict_New();
    if (g->nodes == NULL || g->index == NULL) {
        return -1;
    }
    g->n = (int)PyList_GET_SIZE(g->nodes);
    g->flags = PyMem_Calloc((size_t)g->n + 1, sizeof(int));
    g->bytes = PyMem_Calloc((size_t)g->n + 1, sizeof(int64_t));
    g->ins = PyMem_Calloc((size_t)g->n + 1, sizeof(PyObject *));
    if (!g->flags || !g->bytes || !g->ins) {
        PyErr_NoMemory();
        return -1;
    }
    for (int i = 0; i < g->n; i++) {
        PyObject *node = PyList_GET_ITEM(g->nodes, i), *k = PyLong_FromLong(i);
        StaxNode *sn = (StaxNode *)node;
        PyObject *set;
        if (k == NULL || PyDict_SetItem(g->index, node, k) < 0) {
            Py_XDECREF(k);
            return -1;
        }
        Py_DECREF(k);
        g->ins[i] = PyList_New(0);
        set = PyDict_New();
        if (g->ins[i] == NULL || set == NULL
            || stax_graph_collect_nodes(sn->args, set) < 0
            || stax_graph_collect_nodes(sn->kwargs, set) < 0) {
            Py_XDECREF(set);
            return -1;
        }
        {
            PyObject *key, *val;
            Py_ssize_t pos = 0;
            while (PyDict_Next(set, &pos, &key, &val)) {
                int j = ix_of(g, key);
                PyObject *jj;
                if (j < 0) {
                    continue;   /* not before i: only an output refers ahead */
                }
                jj = PyLong_FromLong(j);
                if (jj == NULL || PyList_Append(g->ins[i], jj) < 0) {
                    Py_XDECREF(jj);
                    Py_DECREF(set);
                    return -1;
                }
                Py_DECREF(jj);
            }
        }
        Py_DECREF(set);
        g->bytes[i] = value_bytes(node);
    }
    PyErr_Clear();
    return 0;
}

static PyObject *
names_where(jgraph *g, const char *sel)
{
    PyObject *l = PyList_New(0);
    if (l == NULL) {
        return NULL;
    }
    for (int i = 0; i < g->n; i++) {
        if (sel[i] && PyList_Append(l, PyList_GET_ITEM(g->nodes, i)) < 0) {
            Py_DECREF(l);
            return NULL;
        }
    }
    return l;
}

/* min_cut_partition(graph, primals, tangents, fwd_outputs, bwd_outputs)
 * graph: the joint Graph (nodes carry meta['val'] samples); primals,
 * tangents: its placeholders for the function's inputs and for the
 * gradients of its outputs; fwd_outputs, bwd_outputs: the Nodes the
 * forward returns and the gradients the backward returns. Returns
 *   {"saved": [Node], "saved_bytes": int,      the min cut (inputs cost 0)
 *    "save_all": [Node], "save_all_bytes": int, every forward value the
 *                                     backward reads, nothing recomputed
 *    "recomputed": [Node],            forward nodes the backward recomputes
 *    "banned": [Node]}                forward nodes never recomputed */
static PyObject *
py_min_cut(PyObject *m, PyObject *args)
{
    PyObject *graph, *primals, *tangents, *fo, *bo, *g0;
    PyObject *res = NULL;
    jgraph g;
    flownet f;
    int src, snk, nv;
    int64_t flow, saved_bytes = 0, all_bytes = 0;
    char *sel_saved = NULL, *sel_all = NULL, *sel_rec = NULL, *sel_ban = NULL;
    (void)m;
    memset(&f, 0, sizeof(f));
    if (!PyArg_ParseTuple(args, "OOOOO:min_cut_partition", &g0, &primals,
                          &tangents, &fo, &bo)) {
        return NULL;
    }
    graph = StaxGraphModule_Check(g0) ? ((StaxGraphModule *)g0)->graph : g0;
    if (!StaxGraph_Check(graph)) {
        PyErr_SetString(PyExc_TypeError, "min_cut_partition: expected a Graph "
                        "or GraphModule");
        return NULL;
    }
    if (jg_build(&g, graph) < 0 || mark_list(&g, primals, P_PRIMAL) < 0
        || mark_list(&g, tangents, P_TANGENT) < 0
        || mark_list(&g, fo, P_FWREQ) < 0 || mark_list(&g, bo, P_BWREQ) < 0) {
        goto done;
    }
    /* tangent-dependent nodes: the backward proper */
    for (int i = 0; i < g.n; i++) {
        if (g.flags[i] & P_TANGENT) {
            g.flags[i] |= P_BW;
            continue;
        }
        for (Py_ssize_t k = 0; k < PyList_GET_SIZE(g.ins[i]); k++) {
            if (g.flags[PyLong_AsLong(PyList_GET_ITEM(g.ins[i], k))] & P_BW) {
                g.flags[i] |= P_BW;
                break;
            }
        }
    }
    mark_ancestors(&g, P_FWREQ, P_FWREQ);
    mark_ancestors(&g, P_BWREQ, P_BWREQ);
    nv = 2 * g.n + 2;
    src = 2 * g.n;
    snk = src + 1;
    if (fn_init(&f, nv) < 0) {
        goto done;
    }
    for (int i = 0; i < g.n; i++) {
        PyObject *node = PyList_GET_ITEM(g.nodes, i);
        int fl = g.flags[i], vin = 2 * i, vout = 2 * i + 1;
        int64_t w;
        if (!(fl & (P_FWREQ | P_BWREQ)) || ((StaxNode *)node)->op == STAX_NODE_OUTPUT) {
            continue;
        }
        if (fl & P_BW) {
            if (fn_add(&f, vin, snk, CAP_INF) < 0) {
                goto done;
            }
            continue;
        }
        if (fl & P_PRIMAL) {
            if (fn_add(&f, src, vin, CAP_INF) < 0) {
                goto done;
            }
        }
        else if (!recomputable(node)) {
            /* the forward computes it (the backward would recompute it only
             * if the forward does not need it) */
            g.flags[i] |= P_BANNED;
            if ((fl & P_FWREQ) && fn_add(&f, src, vin, CAP_INF) < 0) {
                goto done;
            }
        }
        w = (fl & P_PRIMAL) ? 0 : g.bytes[i] < 0 ? CAP_INF : g.bytes[i];
        if (fn_add(&f, vin, vout, w) < 0) {
            goto done;
        }
    }
    for (int i = 0; i < g.n; i++) {
        for (Py_ssize_t k = 0; k < PyList_GET_SIZE(g.ins[i]); k++) {
            int j = (int)PyLong_AsLong(PyList_GET_ITEM(g.ins[i], k));
            if (!(g.flags[i] & (P_FWREQ | P_BWREQ)) || (g.flags[j] & P_BW)) {
                continue;
            }
            if (fn_add(&f, 2 * j + 1, 2 * i, CAP_INF) < 0) {
                goto done;
            }
        }
    }
    flow = fn_maxflow(&f, src, snk);
    if (flow < 0) {
        goto done;
    }
    if (flow >= CAP_INF) {
        PyErr_SetString(PyExc_RuntimeError, "min_cut_partition: no finite cut "
                        "(a value the backward needs cannot be saved)");
        goto done;
    }
    fn_bfs(&f, src, snk);     /* level >= 0: the source side of the cut */
    sel_saved = PyMem_Calloc((size_t)g.n + 1, 1);
    sel_all = PyMem_Calloc((size_t)g.n + 1, 1);
    sel_rec = PyMem_Calloc((size_t)g.n + 1, 1);
    sel_ban = PyMem_Calloc((size_t)g.n + 1, 1);
    if (!sel_saved || !sel_all || !sel_rec || !sel_ban) {
        PyErr_NoMemory();
        goto done;
    }
    for (int i = 0; i < g.n; i++) {
        int fl = g.flags[i];
        int live = (fl & (P_FWREQ | P_BWREQ))
                   && ((StaxNode *)PyList_GET_ITEM(g.nodes, i))->op != STAX_NODE_OUTPUT;
        if (!live || (fl & P_BW)) {
            continue;
        }
        sel_ban[i] = (fl & P_BANNED) != 0;
        if (f.level[2 * i] < 0 && (fl & P_BWREQ) && !(fl & P_PRIMAL)) {
            sel_rec[i] = 1;
        }
    }
    /* saved: a cut node some sink-side (backward) node reads (a 0-byte
     * input edge is "cut" whether or not the backward uses the input) */
    for (int i = 0; i < g.n; i++) {
        if (!(g.flags[i] & (P_FWREQ | P_BWREQ)) || f.level[2 * i] >= 0
            || ((StaxNode *)PyList_GET_ITEM(g.nodes, i))->op == STAX_NODE_OUTPUT) {
            continue;
        }
        for (Py_ssize_t k = 0; k < PyList_GET_SIZE(g.ins[i]); k++) {
            int j = (int)PyLong_AsLong(PyList_GET_ITEM(g.ins[i], k));
            if (!sel_saved[j] && !(g.flags[j] & P_BW) && f.level[2 * j] >= 0
                && f.level[2 * j + 1] < 0) {
                sel_saved[j] = 1;
                saved_bytes += (g.flags[j] & P_PRIMAL) ? 0 : g.bytes[j];
            }
        }
    }
    /* save-all: the forward computes every non-backward node and saves each
     * one a backward node reads */
    for (int i = 0; i < g.n; i++) {
        if (!(g.flags[i] & P_BW) || !(g.flags[i] & P_BWREQ)) {
            continue;
        }
        for (Py_ssize_t k = 0; k < PyList_GET_SIZE(g.ins[i]); k++) {
            int j = (int)PyLong_AsLong(PyList_GET_ITEM(g.ins[i], k));
            if (!(g.flags[j] & P_BW) && !sel_all[j]) {
                sel_all[j] = 1;
                all_bytes += (g.flags[j] & P_PRIMAL) || g.bytes[j] < 0 ? 0 : g.bytes[j];
            }
        }
    }
    {
        PyObject *ls = names_where(&g, sel_saved), *la = names_where(&g, sel_all);
        PyObject *lr = names_where(&g, sel_rec), *lb = names_where(&g, sel_ban);
        if (ls && la && lr && lb) {
            res = Py_BuildValue("{sOsLsOsLsOsOsL}", "saved", ls, "saved_bytes",
                                (long long)saved_bytes, "save_all", la,
                                "save_all_bytes", (long long)all_bytes,
                                "recomputed", lr, "banned", lb,
                                "flow", (long long)flow);
        }
        Py_XDECREF(ls);
        Py_XDECREF(la);
        Py_XDECREF(lr);
        Py_XDECREF(lb);
    }
done:
    PyMem_Free(sel_saved);
    PyMem_Free(sel_all);
    PyMem_Free(sel_rec);
    PyMem_Free(sel_ban);
    fn_free(&f);
    jg_free(&g);
    return res;
}

/* maxflow(n, edges, s, t) -> (flow, source_side): Dinic on an explicit
 * network (edges: (a, b, capacity) ints), for tests of the solver itself */
static PyObject *
py_maxflow(PyObject *m, PyObject *args)
{
    int n, s, t;
    PyObject *edges, *seq = NULL, *side = NULL, *res = NULL;
    flownet f;
    int64_t flow;
    (void)m;
    memset(&f, 0, sizeof(f));
    if (!PyArg_ParseTuple(args, "iOii:maxflow", &n, &edges, &s, &t)) {
        return NULL;
    }
    if (n <= 0 || s < 0 || t < 0 || s >= n || t >= n || s == t) {
        PyErr_SetString(PyExc_ValueError, "maxflow: need 0 <= s != t < n");
        return NULL;
    }
    seq = PySequence_Fast(edges, "maxflow: edges must be a sequence");
    if (seq == NULL || fn_init(&f, n) < 0) {
        goto done;
    }
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
        int a, b;
        long long c;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "iiL", &a, &b, &c)) {
            goto done;
        }
        if (a < 0 || b < 0 || a >= n || b >= n || c < 0) {
            PyErr_SetString(PyExc_ValueError, "maxflow: bad edge");
            goto done;
        }
        if (fn_add(&f, a, b, c >= CAP_INF ? CAP_INF : c) < 0) {
            goto done;
        }
    }
    flow = fn_maxflow(&f, s, t);
    if (flow < 0) {
        goto done;
    }
    fn_bfs(&f, s, t);
    side = PyList_New(0);
    if (side == NULL) {
        goto done;
    }
    for (int i = 0; i < n; i++) {
        if (f.level[i] >= 0) {
            PyObject *k = PyLong_FromLong(i);
            if (k == NULL || PyList_Append(side, k) < 0) {
                Py_XDECREF(k);
                goto done;
            }
            Py_DECREF(k);
        }
    }
    res = Py_BuildValue("(LO)", (long long)flow, side);
done:
    Py_XDECREF(seq);
    Py_XDECREF(side);
    fn_free(&f);
    return res;
}

static PyMethodDef partition_methods[] = {
    {"min_cut_partition", py_min_cut, METH_VARARGS,
     "min_cut_partition(graph, primals, tangents, fwd_outputs, bwd_outputs) "
     "-> dict: the values a joint forward+backward graph's forward saves "
     "(a minimum cut of bytes; pointwise/view nodes recomputed)"},
    {"_maxflow", py_maxflow, METH_VARARGS,
     "_maxflow(n, edges, s, t) -> (flow, source side): the partitioner's "
     "max-flow solver (Dinic) on an explicit network"},
    {NULL},
};

int
stax_graph_partition_init(PyObject *m)
{
    return PyModule_AddFunctions(m, partition_methods);
}
