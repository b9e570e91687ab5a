/* Data movement lowering: cat / stack and pad (masked loads of each arm),
 * index_select / gather / embedding (loads at a data-dependent, clamped
 * index) and the functionalized writes into views (slice_scatter /
 * select_scatter). */
#include "lower/lower_internal.h"
#include "graph/graph.h"
#include "tensor/stax_numpy.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* mask every load of body (cat / pad arms) */
typedef struct {
    lw_ctx *c;
    const stax_lval *mask;
} mask_ctx;

static int
mask_hook(lw_rw *rw, const stax_lval *load, const stax_lval **out)
{
    mask_ctx *m = rw->hook_ctx;
    lw_rw inner = {0};
    const stax_ix *ix = lw_rewrite_ix(m->c, &inner, load->index);
    lw_rw_done(&inner);
    const stax_lval *mk = m->mask;
    if (load->mask != NULL) {
        mk = lw_prim(m->c, STAX_PRIM_AND, STAX_BOOL, mk, load->mask, NULL);
    }
    *out = lw_load(m->c, load->buf, ix, mk);
    return *out ? 1 : -1;
}

static const stax_lval *
masked(lw_ctx *c, const stax_lval *body, const stax_lval *mask)
{
    mask_ctx m = {c, mask};
    lw_rw rw = {0};
    rw.load_hook = mask_hook;
    rw.hook_ctx = &m;
    const stax_lval *r = lw_rewrite(c, &rw, body);
    lw_rw_done(&rw);
    return r;
}

static const stax_lval *
in_range(lw_ctx *c, const stax_ix *v, int64_t lo, int64_t hi)
{
    const stax_lval *iv = lw_index(c, v, STAX_INT64);
    return lw_prim(c, STAX_PRIM_AND, STAX_BOOL,
                   lw_prim(c, STAX_PRIM_GE, STAX_BOOL, iv, lw_const(c, STAX_INT64, (double)lo), NULL),
                   lw_prim(c, STAX_PRIM_LT, STAX_BOOL, iv, lw_const(c, STAX_INT64, (double)hi), NULL),
                   NULL);
}

int
lw_lower_cat(lw_ctx *c, struct lw_node_in *in, PyObject *bound, vbuf *out,
             int stack, const char **why)
{
    PyObject *ts = PyTuple_GET_ITEM(bound, 0);
    PyObject *dobj = lw_bound_arg(bound, in->op, "dim");
    if (!PyList_Check(ts) && !PyTuple_Check(ts)) {
        UNSUPPORTED("cat of a non-list");
    }
    int d = dobj && PyLong_Check(dobj) ? lw_norm_dim(PyLong_AsLongLong(dobj), out->ndim) : -1;
    if (d < 0) {
        UNSUPPORTED("cat dim");
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(ts);
    const stax_lval *acc = NULL;
    int64_t off = 0;
    const stax_ix *ov[STAX_MAX_DIMS];
    lw_ident_vars(c, out->ndim, ov);
    int nonempty = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        vbuf *v = lw_arg_vb(in, PySequence_Fast_GET_ITEM(ts, i));
        if (v == NULL || v->kind != VB_TENSOR) {
            UNSUPPORTED("cat of a non-tensor");
        }
        nonempty += (stack || v->ndim != 1 || v->sizes[0] != 0 || out->ndim == 1)
                    && (stack ? 1 : v->sizes[d]) != 0;
    }
    if (nonempty >= 2) {
        /* one kernel per input, each writing its segment of the output
         * (its producer fused in): a consumer then reads one buffer,
         * instead of evaluating a select over every input per element */
        int pb = lw_new_pbuf(c, PB_TEMP, out->ndim, out->sizes, out->dtype);
        if (pb < 0) {
            return -1;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            vbuf *v = lw_arg_vb(in, PySequence_Fast_GET_ITEM(ts, i));
            if (!stack && v->ndim == 1 && v->sizes[0] == 0 && out->ndim != 1) {
                continue;
            }
            int64_t len = stack ? 1 : v->sizes[d];
            if (len == 0) {
                continue;
            }
            const stax_ix *iv[STAX_MAX_DIMS], *sv[STAX_MAX_DIMS];
            kdraft *k = lw_new_pointwise_kernel(c, stack ? "stack" : "cat", v->ndim, v->sizes, iv);
            if (k == NULL) {
                return -1;
            }
            for (int q = 0, j = 0; q < out->ndim; q++) {
                if (q == d) {
                    sv[q] = stack ? lw_ix_const(c, off)
                                  : lw_ix_bin(c, STAX_IX_ADD, iv[j++], lw_ix_const(c, off));
                }
                else {
                    sv[q] = iv[j++];
                }
            }
            k->stores[0].buf = pb;
            k->stores[0].index = lw_contig_index(c, out->ndim, out->sizes, sv);
            k->stores[0].value = lw_cast(c, v->body, out->dtype);
            if (k->stores[0].index == NULL || k->stores[0].value == NULL) {
                return -1;
            }
            off += len;
        }
        return lw_vb_over_pbuf(c, out, pb) < 0 ? -1 : 1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        vbuf *v = lw_arg_vb(in, PySequence_Fast_GET_ITEM(ts, i));
        if (v == NULL || v->kind != VB_TENSOR) {
            UNSUPPORTED("cat of a non-tensor");
        }
        if (!stack && v->ndim == 1 && v->sizes[0] == 0 && out->ndim != 1) {
            continue;   /* legacy empty tensors */
        }
        int64_t len = stack ? 1 : v->sizes[d];
        if (len == 0) {
            continue;
        }
        const stax_ix *map[STAX_MAX_DIMS];
        int j = 0;
        for (int k = 0; k < out->ndim; k++) {
            if (k == d) {
                if (!stack) {
                    map[j++] = lw_ix_bin(c, STAX_IX_ADD, ov[k], lw_ix_const(c, -off));
                }
            }
            else {
                map[j++] = ov[k];
            }
        }
        lw_rw rw = {0};
        rw.vars = map;
        rw.nvars = v->ndim;
        const stax_lval *b = lw_cast(c, lw_rewrite(c, &rw, v->body), out->dtype);
        lw_rw_done(&rw);
        if (b == NULL) {
            return -1;
        }
        const stax_lval *m = in_range(c, ov[d], off, off + len);
        b = masked(c, b, m);
        acc = acc == NULL ? b : lw_prim(c, STAX_PRIM_WHERE, out->dtype, m, b, acc);
        off += len;
    }
    out->body = acc ? acc : lw_const(c, out->dtype, 0);
    return out->body ? 1 : -1;
}

int
lw_lower_pad(lw_ctx *c, struct lw_node_in *in, PyObject *bound, vbuf *x,
             vbuf *out, const char **why)
{
    PyObject *mode = lw_bound_arg(bound, in->op, "mode");
    if (mode && PyUnicode_Check(mode) && PyUnicode_CompareWithASCIIString(mode, "constant")) {
        UNSUPPORTED("pad mode other than constant");
    }
    int64_t p[2 * STAX_MAX_DIMS];
    PyObject *po = lw_bound_arg(bound, in->op, "pad");
    int np = po ? lw_int_list(po, p, 2 * STAX_MAX_DIMS) : -1;
    if (np < 0 || np % 2 || np / 2 > x->ndim) {
        UNSUPPORTED("pad widths");
    }
    PyObject *valo = lw_bound_arg(bound, in->op, "value");
    int64_t numel = 1;
    for (int d = 0; d < x->ndim; d++) {
        numel *= x->sizes[d];
    }
    if (numel == 0) {
        /* nothing to read: all padding (a masked load still needs a
         * readable element 0) */
        out->body = lw_num_const(c, out->dtype, valo, 0.0);
        return out->body ? 1 : -1;
    }
    const stax_ix *map[STAX_MAX_DIMS];
    const stax_lval *m = NULL;
    for (int d = 0; d < x->ndim; d++) {
        int k = x->ndim - 1 - d;     /* pad pairs start at the last dim */
        const stax_ix *v = lw_ix_var(c, d);
        if (2 * k + 1 < np) {
            int64_t left = p[2 * k];
            map[d] = lw_ix_bin(c, STAX_IX_ADD, v, lw_ix_const(c, -left));
            const stax_lval *r = in_range(c, v, left, left + x->sizes[d]);
            m = m ? lw_prim(c, STAX_PRIM_AND, STAX_BOOL, m, r, NULL) : r;
        }
        else {
            map[d] = v;
        }
    }
    lw_rw rw = {0};
    rw.vars = map;
    rw.nvars = x->ndim;
    const stax_lval *b = lw_rewrite(c, &rw, x->body);
    lw_rw_done(&rw);
    if (b == NULL) {
        return -1;
    }
    if (m != NULL) {
        b = lw_prim(c, STAX_PRIM_WHERE, out->dtype, m, masked(c, b, m), lw_num_const(c, out->dtype, valo, 0.0));
    }
    out->body = lw_cast(c, b, out->dtype);
    return out->body ? 1 : -1;
}

/* an index value, clamped into [0, n): the loads stay in bounds; an index
 * outside [0, n) is eager's error, flagged by lw_index_check (torch's
 * gather, index_select and embedding do not wrap negative indices) */
static const stax_ix *
safe_index(lw_ctx *c, const stax_lval *iv, int64_t n)
{
    iv = lw_cast(c, iv, STAX_INT64);
    const stax_lval *z = lw_const(c, STAX_INT64, 0);
    iv = lw_prim(c, STAX_PRIM_MIN, STAX_INT64,
                 lw_prim(c, STAX_PRIM_MAX, STAX_INT64, iv, z, NULL),
                 lw_const(c, STAX_INT64, (double)(n > 0 ? n - 1 : 0)), NULL);
    return iv ? lw_ix_value(c, iv) : NULL;
}

int
lw_lower_gather(lw_ctx *c, struct lw_node_in *in, PyObject *bound, vbuf *out,
                const char **why)
{
    stax_op_id_t id = in->op->id;
    const stax_ix *map[STAX_MAX_DIMS], *ov[STAX_MAX_DIMS];
    lw_ident_vars(c, out->ndim, ov);
    if ((id == STAX_OP_EMBEDDING)) {
        vbuf *idx = lw_arg_vb(in, PyTuple_GET_ITEM(bound, 0));
        vbuf *w = lw_arg_vb(in, PyTuple_GET_ITEM(bound, 1));
        if (!idx || !w || w->ndim != 2 || out->ndim != idx->ndim + 1) {
            UNSUPPORTED("embedding shapes");
        }
        lw_rw rw = {0};
        rw.vars = ov;
        rw.nvars = idx->ndim;
        const stax_lval *iv = lw_rewrite(c, &rw, idx->body);
        lw_rw_done(&rw);
        if (lw_index_check(c, idx, w->sizes[0], LW_CHECK_INDEX) < 0) {
            return -1;
        }
        map[0] = safe_index(c, iv, w->sizes[0]);
        map[1] = ov[idx->ndim];
        return lw_view_map(c, w, out, map);
    }
    vbuf *x = lw_arg_vb(in, PyTuple_GET_ITEM(bound, 0));
    PyObject *dobj = lw_bound_arg(bound, in->op, "dim");
    vbuf *idx = lw_arg_vb(in, lw_bound_arg(bound, in->op, "index"));
    if (!x || !idx || !dobj || !PyLong_Check(dobj)) {
        UNSUPPORTED("index_select/gather operands");
    }
    int d = lw_norm_dim(PyLong_AsLongLong(dobj), x->ndim);
    if (d < 0) {
        UNSUPPORTED("index dim");
    }
    const stax_lval *iv;
    lw_rw rw = {0};
    if ((id == STAX_OP_INDEX_SELECT)) {
        const stax_ix *m1[1] = {ov[d]};
        rw.vars = m1;
        rw.nvars = 1;
        iv = lw_rewrite(c, &rw, idx->body);
    }
    else {
        rw.vars = ov;
        rw.nvars = idx->ndim;
        iv = lw_rewrite(c, &rw, idx->body);
    }
    lw_rw_done(&rw);
    if (lw_index_check(c, idx, x->sizes[d],
                       id == STAX_OP_INDEX_SELECT ? LW_CHECK_INDEX : LW_CHECK_GATHER) < 0) {
        return -1;
    }
    for (int j = 0; j < x->ndim; j++) {
        map[j] = j == d ? safe_index(c, iv, x->sizes[d]) : ov[j];
    }
    return lw_view_map(c, x, out, map);
}

/* out = x with src written where mask holds: src read through the index
 * map (its nvars dims in terms of out's loop variables), its loads masked */
static int
scatter_into(lw_ctx *c, vbuf *x, vbuf *out, vbuf *src, const stax_ix **map,
             int nvars, const stax_lval *mask)
{
    lw_rw rw = {0};
    rw.vars = map;
    rw.nvars = nvars;
    const stax_lval *sb = lw_rewrite(c, &rw, src->body);
    lw_rw_done(&rw);
    if (sb == NULL || mask == NULL) {
        return -1;
    }
    sb = masked(c, lw_cast(c, sb, out->dtype), mask);
    out->body = lw_prim(c, STAX_PRIM_WHERE, out->dtype, mask, sb, lw_cast(c, x->body, out->dtype));
    return out->body ? 1 : -1;
}

/* as_strided_scatter(x, src, size, stride, offset): x's values laid out
 * row-major (the op graph's as_strided of a contiguous base, as
 * view_as_strided reads it) with the view's elements replaced by src. The
 * write through diagonal, unfold, movedim ... of an intermediate. Output
 * element at flat position p takes src[i] when p = offset + sum_k i_k s_k
 * for some i inside size: with the view's dims ordered by stride, largest
 * first, and each stride above the span of the smaller ones (the view does
 * not overlap itself), i is found greedily: i_0 = (p - offset) / s_0, the
 * rest from the remainder, and p is in the view when the last remainder is
 * 0 and every i_k < size_k. */
static int
lower_as_strided_scatter(lw_ctx *c, struct lw_node_in *in, PyObject *bound,
                         vbuf *x, vbuf *out, const char **why)
{
    int64_t size[STAX_MAX_DIMS], stride[STAX_MAX_DIMS], span = 0, numel = 1;
    int ord[STAX_MAX_DIMS], m = 0, empty = 0;
    const stax_ix *ov[STAX_MAX_DIMS], *map[STAX_MAX_DIMS];
    vbuf *src = lw_arg_vb(in, PyTuple_GET_ITEM(bound, 1));
    PyObject *so = lw_bound_arg(bound, in->op, "size");
    PyObject *sto = lw_bound_arg(bound, in->op, "stride");
    PyObject *oo = lw_bound_arg(bound, in->op, "storage_offset");
    int n = so != NULL ? lw_int_list(so, size, STAX_MAX_DIMS) : -1;
    int ns = sto != NULL ? lw_int_list(sto, stride, STAX_MAX_DIMS) : -1;
    int64_t off = oo != NULL && PyLong_Check(oo) ? PyLong_AsLongLong(oo) : 0;
    PyErr_Clear();
    if (src == NULL || src->kind != VB_TENSOR || n < 0 || ns != n
        || src->ndim != n || out->ndim != x->ndim
        || (oo != NULL && oo != Py_None && !PyLong_Check(oo))) {
        UNSUPPORTED("as_strided_scatter operands");
    }
    if (off < 0) {
        UNSUPPORTED("as_strided_scatter into a non-contiguous view (writes storage)");
    }
    for (int d = 0; d < out->ndim; d++) {
        numel *= out->sizes[d];
    }
    for (int k = 0; k < n; k++) {
        if (size[k] != src->sizes[k] || stride[k] < 0) {
            UNSUPPORTED("as_strided_scatter sizes/strides not understood");
        }
        empty |= size[k] == 0;
        if (size[k] > 1) {
            if (stride[k] == 0) {
                UNSUPPORTED("as_strided_scatter through an overlapping view");
            }
            int i = m++;
            while (i > 0 && stride[ord[i - 1]] < stride[k]) {
                ord[i] = ord[i - 1];
                i--;
            }
            ord[i] = k;
        }
    }
    lw_ident_vars(c, out->ndim, ov);
    if (empty) {
        out->body = lw_cast(c, x->body, out->dtype);
        return out->body ? 1 : -1;
    }
    for (int i = m - 1; i >= 0; i--) {
        if (stride[ord[i]] <= span) {
            UNSUPPORTED("as_strided_scatter through an overlapping view");
        }
        span += (size[ord[i]] - 1) * stride[ord[i]];
    }
    if (off + span >= numel) {
        UNSUPPORTED("as_strided_scatter beyond its input's elements (eager raises)");
    }
    const stax_ix *flat = lw_ix_const(c, 0);
    int64_t inner = 1;
    for (int d = out->ndim - 1; d >= 0; d--) {
        if (out->sizes[d] != 1) {
            flat = lw_ix_bin(c, STAX_IX_ADD, flat,
                             inner == 1 ? ov[d] : lw_ix_bin(c, STAX_IX_MUL, ov[d], lw_ix_const(c, inner)));
        }
        inner *= out->sizes[d];
    }
    /* shift p - offset up by a multiple of s_0 so the index arithmetic
     * divides non-negative numbers (floor division, as the IR defines it) */
    int64_t s0 = m > 0 ? stride[ord[0]] : 1, t0 = (off + s0 - 1) / s0;
    const stax_ix *rem = lw_ix_bin(c, STAX_IX_ADD, flat, lw_ix_const(c, t0 * s0 - off));
    const stax_lval *mask = NULL;
    for (int k = 0; k < n; k++) {
        map[k] = lw_ix_const(c, 0);
    }
    for (int i = 0; i < m; i++) {
        int k = ord[i];
        const stax_ix *q = lw_ix_bin(c, STAX_IX_DIV, rem, lw_ix_const(c, stride[k]));
        int64_t lo = i == 0 ? t0 : 0;
        const stax_lval *ok = in_range(c, q, lo, lo + size[k]);
        mask = mask ? lw_prim(c, STAX_PRIM_AND, STAX_BOOL, mask, ok, NULL) : ok;
        map[k] = lo ? lw_ix_bin(c, STAX_IX_ADD, q, lw_ix_const(c, -lo)) : q;
        rem = lw_ix_bin(c, STAX_IX_MOD, rem, lw_ix_const(c, stride[k]));
    }
    const stax_lval *hit = lw_prim(c, STAX_PRIM_EQ, STAX_BOOL, lw_index(c, rem, STAX_INT64),
                                   lw_const(c, STAX_INT64, m > 0 ? 0.0 : (double)t0), NULL);
    mask = mask ? lw_prim(c, STAX_PRIM_AND, STAX_BOOL, mask, hit, NULL) : hit;
    return scatter_into(c, x, out, src, map, n, mask);
}

/* functionalized writes into views: slice_scatter / select_scatter /
 * as_strided_scatter */
int
lw_lower_scatter(lw_ctx *c, struct lw_node_in *in, PyObject *bound, vbuf *x,
                 vbuf *out, const char **why)
{
    stax_op_id_t id = in->op->id;
    if (id == STAX_OP_AS_STRIDED_SCATTER) {
        return lower_as_strided_scatter(c, in, bound, x, out, why);
    }
    if (id != STAX_OP_SELECT_SCATTER && id != STAX_OP_SLICE_SCATTER) {
        return lw_lower_scatter_seq(c, in, bound, x, out, why);
    }
    vbuf *src = lw_arg_vb(in, PyTuple_GET_ITEM(bound, 1));
    PyObject *dobj = lw_bound_arg(bound, in->op, "dim");
    if (src == NULL || src->kind != VB_TENSOR || x->ndim != out->ndim) {
        UNSUPPORTED("scatter operands");
    }
    int d = dobj && PyLong_Check(dobj) ? lw_norm_dim(PyLong_AsLongLong(dobj), out->ndim) : -1;
    if (d < 0 || out->ndim == 0) {
        UNSUPPORTED("scatter dim");
    }
    const stax_ix *ov[STAX_MAX_DIMS], *map[STAX_MAX_DIMS];
    lw_ident_vars(c, out->ndim, ov);
    const stax_lval *v = lw_index(c, ov[d], STAX_INT64);
    const stax_lval *mask;
    int j = 0;
    if (id == STAX_OP_SLICE_SCATTER) {
        PyObject *sl = PySlice_New(lw_bound_arg(bound, in->op, "start"),
                                   lw_bound_arg(bound, in->op, "end"),
                                   lw_bound_arg(bound, in->op, "step"));
        if (sl == NULL) {
            return -1;
        }
        Py_ssize_t st, en, stp;
        int rc = PySlice_Unpack(sl, &st, &en, &stp);
        Py_DECREF(sl);
        if (rc < 0) {
            return -1;
        }
        Py_ssize_t len = PySlice_AdjustIndices((Py_ssize_t)out->sizes[d], &st, &en, stp);
        if (stp <= 0) {
            UNSUPPORTED("scatter step");
        }
        int64_t last = len > 0 ? st + (len - 1) * stp : st - 1;
        mask = lw_prim(c, STAX_PRIM_AND, STAX_BOOL,
                       lw_prim(c, STAX_PRIM_GE, STAX_BOOL, v, lw_const(c, STAX_INT64, (double)st), NULL),
                       lw_prim(c, STAX_PRIM_LE, STAX_BOOL, v, lw_const(c, STAX_INT64, (double)last), NULL),
                       NULL);
        if (stp > 1) {
            const stax_lval *rel = lw_prim(c, STAX_PRIM_SUB, STAX_INT64, v,
                                           lw_const(c, STAX_INT64, (double)st), NULL);
            mask = lw_prim(c, STAX_PRIM_AND, STAX_BOOL, mask,
                           lw_prim(c, STAX_PRIM_EQ, STAX_BOOL,
                                   lw_prim(c, STAX_PRIM_REMAINDER, STAX_INT64, rel,
                                           lw_const(c, STAX_INT64, (double)stp), NULL),
                                   lw_const(c, STAX_INT64, 0), NULL), NULL);
        }
        for (int k = 0; k < out->ndim; k++) {
            map[k] = k != d ? ov[k]
                     : lw_ix_bin(c, STAX_IX_DIV,
                                 lw_ix_bin(c, STAX_IX_ADD, ov[k], lw_ix_const(c, -st)),
                                 lw_ix_const(c, stp));
        }
        j = out->ndim;
        if (src->ndim != out->ndim) {
            UNSUPPORTED("slice_scatter source rank");
        }
    }
    else {                     /* select_scatter */
        int64_t idx = PyLong_AsLongLong(lw_bound_arg(bound, in->op, "index"));
        if (PyErr_Occurred()) {
            return -1;
        }
        if (idx < 0) {
            idx += out->sizes[d];
        }
        mask = lw_prim(c, STAX_PRIM_EQ, STAX_BOOL, v, lw_const(c, STAX_INT64, (double)idx), NULL);
        for (int k = 0; k < out->ndim; k++) {
            if (k != d) {
                map[j++] = ov[k];
            }
        }
        if (src->ndim != j) {
            UNSUPPORTED("select_scatter source rank");
        }
    }
    /* broadcast-free: the source has the slice's shape */
    return scatter_into(c, x, out, src, map, j, mask);
}

/* one_hot: out[..., j] = (x[...] == j), int64; the class count must be
 * given (num_classes=-1 reads the data: a fallback kernel) */
int
lw_lower_one_hot(lw_ctx *c, struct lw_node_in *in, PyObject *bound, vbuf *x,
                 vbuf *out, const char **why)
{
    PyObject *nc = lw_bound_arg(bound, in->op, "num_classes");
    if (nc == NULL || !PyLong_Check(nc) || PyLong_AsLongLong(nc) < 0) {
        PyErr_Clear();
        UNSUPPORTED("one_hot without num_classes (the class count is read from the data)");
    }
    if (out->ndim != x->ndim + 1 || out->dtype != STAX_INT64) {
        UNSUPPORTED("one_hot shapes");
    }
    const stax_lval *v = lw_cast(c, x->body, STAX_INT64);
    const stax_lval *j = lw_index(c, lw_ix_var(c, x->ndim), STAX_INT64);
    const stax_lval *eq = lw_prim(c, STAX_PRIM_EQ, STAX_BOOL, v, j, NULL);
    out->body = eq ? lw_cast(c, eq, STAX_INT64) : NULL;
    return out->body ? 1 : -1;
}

/* unfold (im2col): out[n, (ci*kh + i)*kw + j, oh*OW + ow] =
 * x[n, ci, oh*sh + i*dh - ph, ow*sw + j*dw - pw], 0 in the padding: a
 * masked index map, so the producer of x fuses into it and the matmul of a
 * convolution reads it as one materialized operand. */
int
lw_lower_unfold(lw_ctx *c, struct lw_node_in *in, PyObject *bound, vbuf *x,
                vbuf *out, const char **why)
{
    int64_t k[2], dl[2], p[2], st[2];
    const char *names[4] = {"kernel_size", "dilation", "padding", "stride"};
    int64_t *dst[4] = {k, dl, p, st};
    for (int i = 0; i < 4; i++) {
        PyObject *o = lw_bound_arg(bound, in->op, names[i]);
        if (o != NULL && PyLong_Check(o)) {
            dst[i][0] = dst[i][1] = PyLong_AsLongLong(o);
        }
        else if (o == NULL || lw_int_list(o, dst[i], 2) != 2) {
            PyErr_Clear();
            UNSUPPORTED("unfold arguments");
        }
    }
    if (x->ndim != 4 || out->ndim != 3) {
        UNSUPPORTED("unfold of a tensor that is not 4-d");
    }
    int64_t H = x->sizes[2], W = x->sizes[3];
    int64_t OW = (W + 2 * p[1] - dl[1] * (k[1] - 1) - 1) / st[1] + 1;
    int64_t numel = x->sizes[0] * x->sizes[1] * H * W;
    if (OW < 1 || k[0] < 1 || k[1] < 1) {
        UNSUPPORTED("unfold geometry");
    }
    if (numel == 0) {
        out->body = lw_const(c, out->dtype, 0.0);
        return out->body ? 1 : -1;
    }
    /* overlapping windows read each input element up to kh*kw times: an
     * input that is computed (batch norm + relu before a 3x3 convolution)
     * is materialized once rather than recomputed per window position;
     * measured on the ResNet of bench/models.py (docs/lowering.md) */
    int overlap = st[0] < dl[0] * (k[0] - 1) + 1 || st[1] < dl[1] * (k[1] - 1) + 1;
    if (overlap && x->pbuf < 0 && x->body != NULL && x->body->kind != STAX_LV_LOAD) {
        if (lw_materialize(c, x) < 0) {
            return -1;
        }
    }
    const stax_ix *v1 = lw_ix_var(c, 1), *v2 = lw_ix_var(c, 2);
    const stax_ix *kk = lw_ix_const(c, k[0] * k[1]);
    const stax_ix *ci = lw_ix_bin(c, STAX_IX_DIV, v1, kk);
    const stax_ix *ki = lw_ix_bin(c, STAX_IX_MOD, lw_ix_bin(c, STAX_IX_DIV, v1, lw_ix_const(c, k[1])),
                                  lw_ix_const(c, k[0]));
    const stax_ix *kj = lw_ix_bin(c, STAX_IX_MOD, v1, lw_ix_const(c, k[1]));
    const stax_ix *oh = lw_ix_bin(c, STAX_IX_DIV, v2, lw_ix_const(c, OW));
    const stax_ix *ow = lw_ix_bin(c, STAX_IX_MOD, v2, lw_ix_const(c, OW));
    const stax_ix *ih = lw_ix_bin(c, STAX_IX_ADD,
                                  lw_ix_bin(c, STAX_IX_ADD, lw_ix_bin(c, STAX_IX_MUL, oh, lw_ix_const(c, st[0])),
                                            lw_ix_bin(c, STAX_IX_MUL, ki, lw_ix_const(c, dl[0]))),
                                  lw_ix_const(c, -p[0]));
    const stax_ix *iw = lw_ix_bin(c, STAX_IX_ADD,
                                  lw_ix_bin(c, STAX_IX_ADD, lw_ix_bin(c, STAX_IX_MUL, ow, lw_ix_const(c, st[1])),
                                            lw_ix_bin(c, STAX_IX_MUL, kj, lw_ix_const(c, dl[1]))),
                                  lw_ix_const(c, -p[1]));
    const stax_ix *map[4] = {lw_ix_var(c, 0), ci, ih, iw};
    lw_rw rw = {0};
    rw.vars = map;
    rw.nvars = 4;
    const stax_lval *b = lw_rewrite(c, &rw, x->body);
    lw_rw_done(&rw);
    if (b == NULL) {
        return -1;
    }
    if (p[0] > 0 || p[1] > 0) {
        const stax_lval *m = lw_prim(c, STAX_PRIM_AND, STAX_BOOL, in_range(c, ih, 0, H),
                                     in_range(c, iw, 0, W), NULL);
        b = lw_prim(c, STAX_PRIM_WHERE, out->dtype, m, masked(c, b, m),
                    lw_const(c, out->dtype, 0.0));
    }
    out->body = lw_cast(c, b, out->dtype);
    return out->body ? 1 : -1;
}

/* ------------------------------------------------ scatter family: O(n)
 * scatter / scatter_add / scatter_reduce / index_add / index_copy /
 * index_fill, static sizes, float32/64 and int32/64, an int64 index,
 * instead of a fused O(n * m) hit-mask reduction.  An index out of range
 * flags the program's runtime check (lw_index_check), whose rerun raises
 * eager's error.
 * CPU: one ST_SCATTER step: out = self, then one pass over the visited
 * elements in C order combining each into out at its index (the last
 * writer wins for a plain scatter, as torch's CPU loop; an out-of-range
 * element is skipped).
 * Back ends with combining stores (STAX_BE_ATOMIC_STORES: CUDA): kernels,
 * scatter_atomic below. */
static int
scatter_operand(lw_ctx *c, vbuf *v)
{
    return v != NULL && v->kind == VB_TENSOR ? lw_materialize(c, v) : -2;
}

/* how a kernel store combines a visited element of each ST_SCATTER mode */
static stax_combine_t
scatter_combine(int mode)
{
    switch (mode) {
    case LW_SC_ADD:
    case LW_SC_MEAN:
        return STAX_COMBINE_ADD;
    case LW_SC_MUL:
        return STAX_COMBINE_MUL;
    case LW_SC_AMAX:
        return STAX_COMBINE_MAX;
    case LW_SC_AMIN:
        return STAX_COMBINE_MIN;
    default:
        return STAX_COMBINE_NONE;
    }
}

/* what a position reached with include_self=False starts from: the
 * combine's identity (-0.0 for float sums: x + -0.0 is x for every x,
 * -0.0 included, as the CPU step's first writer gives) */
static const stax_lval *
scatter_identity(lw_ctx *c, int mode, stax_dtype_t dt)
{
    int fl = lw_is_float(dt);
    int64_t lo = dt == STAX_INT32 ? INT32_MIN : INT64_MIN;
    int64_t hi = dt == STAX_INT32 ? INT32_MAX : INT64_MAX;
    switch (mode) {
    case LW_SC_MUL:
        return lw_const(c, dt, 1.0);
    case LW_SC_AMAX:
        return fl ? lw_const(c, dt, -INFINITY) : lw_const_int(c, dt, lo, (double)lo);
    case LW_SC_AMIN:
        return fl ? lw_const(c, dt, INFINITY) : lw_const_int(c, dt, hi, (double)hi);
    default:
        return lw_const(c, dt, fl ? -0.0 : 0.0);
    }
}

/* The scatter family as kernels (a back end with combining stores): the
 * first copies self into out (for mean also starting the counts at
 * include_self); without include_self a kernel over the visited elements
 * sets each position they reach to the combine's identity; then one thread
 * per visited element combines its value into out at its index: an atomic
 * add / mul / max / min (float sums then add in an unspecified order), a
 * plain store for scatter / index_copy / index_fill (which of two
 * duplicates of an index wins is unspecified, as in torch's CUDA kernels).
 * mean divides by the counts where out is read (by max(count, 1), as
 * torch).  out's buffer is written by these kernels in turn (ordered: they
 * keep their place).  The index is clamped into range, so every store
 * stays in bounds; the check before them flags an index out of range.
 * isz: the visited elements' shape. 1, or -1 + exception. */
static int
scatter_atomic(lw_ctx *c, vbuf *x, vbuf *out, vbuf *ix, vbuf *src, int d, int mode,
               int include_self, int index1d, double value, double alpha,
               const int64_t *isz)
{
    static const char *const labels[] = {"scatter_set", "scatter_add", "scatter_mul",
                                         "scatter_amax", "scatter_amin", "scatter_mean"};
    int n = x->ndim, mean = mode == LW_SC_MEAN;
    stax_dtype_t dt = x->dtype;
    if (lw_index_check_store(c, ix, x->sizes[d], LW_CHECK_INDEX) < 0) {
        return -1;
    }
    int po = lw_new_pbuf(c, PB_TEMP, n, x->sizes, dt);
    int pc = po >= 0 && mean ? lw_new_pbuf(c, PB_TEMP, n, x->sizes, STAX_INT64) : -1;
    if (po < 0 || (mean && pc < 0)) {
        return -1;
    }
    c->pbufs[po].ordered = 1;
    if (mean) {
        c->pbufs[pc].ordered = 1;
    }
    const stax_ix *vars[STAX_MAX_DIMS], *at[STAX_MAX_DIMS];
    kdraft *k = lw_new_pointwise_kernel(c, "scatter_self", n, x->sizes, vars);
    const stax_ix *oix = k ? lw_contig_index(c, n, x->sizes, vars) : NULL;
    if (oix == NULL) {
        return -1;
    }
    k->stores[0] = (stax_lstore){po, oix, lw_cast(c, x->body, dt), STAX_COMBINE_NONE};
    if (mean) {
        k->stores[1] = (stax_lstore){pc, oix, lw_const(c, STAX_INT64, include_self ? 1.0 : 0.0),
                                     STAX_COMBINE_NONE};
        k->nstores = k->stages[0].n = 2;
    }
    /* a visited element: its index and value (kernels over isz have the
     * same loop variables) */
    lw_ident_vars(c, n, vars);
    const stax_lval *iv = ix->body;
    if (index1d) {
        lw_rw rw = {0};
        rw.vars = &vars[d];
        rw.nvars = 1;
        iv = lw_rewrite(c, &rw, ix->body);
        lw_rw_done(&rw);
    }
    const stax_ix *tix = iv ? safe_index(c, iv, x->sizes[d]) : NULL;
    for (int q = 0; q < n; q++) {
        at[q] = q == d ? tix : vars[q];
    }
    const stax_ix *pos = tix ? lw_contig_index(c, n, x->sizes, at) : NULL;
    const stax_lval *v = src != NULL ? lw_cast(c, src->body, dt) : lw_const(c, dt, value);
    if (alpha != 1.0) {
        v = lw_prim(c, STAX_PRIM_MUL, dt, v, lw_const(c, dt, alpha), NULL);
    }
    if (pos == NULL || v == NULL) {
        return -1;
    }
    if (!include_self) {
        kdraft *k2 = lw_new_pointwise_kernel(c, "scatter_init", n, isz, vars);
        if (k2 == NULL) {
            return -1;
        }
        k2->stores[0] = (stax_lstore){po, pos, scatter_identity(c, mode, dt), STAX_COMBINE_NONE};
    }
    kdraft *k3 = lw_new_pointwise_kernel(c, labels[mode], n, isz, vars);
    if (k3 == NULL) {
        return -1;
    }
    k3->stores[0] = (stax_lstore){po, pos, v, scatter_combine(mode)};
    if (mean) {
        k3->stores[1] = (stax_lstore){pc, pos, lw_const(c, STAX_INT64, 1.0), STAX_COMBINE_ADD};
        k3->nstores = k3->stages[0].n = 2;
    }
    if (lw_vb_over_pbuf(c, out, po) < 0) {
        return -1;
    }
    if (mean) {
        const stax_lval *cnt = lw_prim(c, STAX_PRIM_MAX, STAX_INT64, lw_contig_load(c, pc),
                                       lw_const(c, STAX_INT64, 1.0), NULL);
        out->body = lw_prim(c, lw_is_float(dt) ? STAX_PRIM_DIV : STAX_PRIM_FLOORDIV, dt,
                            out->body, lw_cast(c, cnt, dt), NULL);
        out->pbuf = -1;     /* a value over the sums, not their buffer */
        if (out->body == NULL) {
            return -1;
        }
    }
    return 1;
}

int
lw_lower_scatter_seq(lw_ctx *c, struct lw_node_in *in, PyObject *bound, vbuf *x,
                     vbuf *out, const char **why)
{
    stax_op_id_t id = in->op->id;
    int index1d = id == STAX_OP_INDEX_ADD || id == STAX_OP_INDEX_COPY || id == STAX_OP_INDEX_FILL;
    int atomic = (c->be->caps & STAX_BE_ATOMIC_STORES) != 0;
    if ((c->be->device != NULL && !atomic) || c->symbolic) {
        UNSUPPORTED("scatter step off the CPU or with symbolic sizes");
    }
    stax_dtype_t dt = x->dtype;
    if (dt != STAX_FLOAT32 && dt != STAX_FLOAT64 && dt != STAX_INT64 && dt != STAX_INT32) {
        UNSUPPORTED("scatter step of this dtype");
    }
    if (out->dtype != dt || out->ndim != x->ndim || x->ndim < 1) {
        UNSUPPORTED("scatter operands");
    }
    PyObject *dobj = lw_bound_arg(bound, in->op, "dim");
    int d = dobj && PyLong_Check(dobj) ? lw_norm_dim(PyLong_AsLongLong(dobj), x->ndim) : -1;
    PyErr_Clear();
    if (d < 0) {
        UNSUPPORTED("scatter dim");
    }
    vbuf *ix = lw_arg_vb(in, lw_bound_arg(bound, in->op, "index"));
    if (ix == NULL || ix->kind != VB_TENSOR || ix->dtype != STAX_INT64
        || (index1d ? ix->ndim != 1 : ix->ndim != x->ndim)) {
        UNSUPPORTED("scatter index");
    }
    int mode = LW_SC_SET, include_self = 1;
    double value = 0.0, alpha = 1.0;
    vbuf *src = NULL;
    PyObject *so = lw_bound_arg(bound, in->op, id == STAX_OP_INDEX_FILL ? "value"
                                : index1d ? "source" : "src");
    if (so != NULL && (PyFloat_Check(so) || PyLong_Check(so))) {
        if (PyLong_Check(so) && !PyBool_Check(so)) {
            int ovf = 0;
            long long iv = PyLong_AsLongLongAndOverflow(so, &ovf);
            if (ovf || iv > (1LL << 53) || iv < -(1LL << 53)) {
                PyErr_Clear();
                UNSUPPORTED("scatter value beyond 2**53");
            }
            value = (double)iv;
        }
        else {
            value = PyFloat_Check(so) ? PyFloat_AsDouble(so) : (so == Py_True ? 1.0 : 0.0);
        }
        if (!lw_is_float(dt) && value != (double)(int64_t)value) {
            UNSUPPORTED("scatter of a float value into integers");
        }
    }
    else {
        src = so != NULL ? lw_arg_vb(in, so) : NULL;
        if (src == NULL || src->kind != VB_TENSOR || src->dtype != dt || src->ndim != x->ndim) {
            UNSUPPORTED("scatter source");
        }
    }
    if (id == STAX_OP_SCATTER) {
        PyObject *r = lw_bound_arg(bound, in->op, "reduce");
        if (r != NULL && r != Py_None) {
            if (!PyUnicode_Check(r)) {
                UNSUPPORTED("scatter reduce");
            }
            mode = !PyUnicode_CompareWithASCIIString(r, "add") ? LW_SC_ADD
                   : !PyUnicode_CompareWithASCIIString(r, "multiply") ? LW_SC_MUL : -1;
        }
    }
    else if (id == STAX_OP_SCATTER_ADD) {
        mode = LW_SC_ADD;
    }
    else if (id == STAX_OP_SCATTER_REDUCE) {
        PyObject *r = lw_bound_arg(bound, in->op, "reduce");
        PyObject *is = lw_bound_arg(bound, in->op, "include_self");
        mode = -1;
        if (r != NULL && PyUnicode_Check(r)) {
            mode = !PyUnicode_CompareWithASCIIString(r, "sum") ? LW_SC_ADD
                   : !PyUnicode_CompareWithASCIIString(r, "prod") ? LW_SC_MUL
                   : !PyUnicode_CompareWithASCIIString(r, "amax") ? LW_SC_AMAX
                   : !PyUnicode_CompareWithASCIIString(r, "amin") ? LW_SC_AMIN
                   : !PyUnicode_CompareWithASCIIString(r, "mean") ? LW_SC_MEAN : -1;
        }
        include_self = is == NULL || PyObject_IsTrue(is) == 1;
        PyErr_Clear();
    }
    else if (id == STAX_OP_INDEX_ADD) {
        mode = LW_SC_ADD;
        PyObject *a = lw_bound_arg(bound, in->op, "alpha");
        if (a != NULL && !PyBool_Check(a) && (PyLong_Check(a) || PyFloat_Check(a))) {
            alpha = PyFloat_Check(a) ? PyFloat_AsDouble(a) : (double)PyLong_AsLongLong(a);
        }
        else if (a != NULL && a != Py_None) {
            UNSUPPORTED("index_add alpha");
        }
        if (!lw_is_float(dt) && alpha != (double)(int64_t)alpha) {
            UNSUPPORTED("index_add of integers with a float alpha");
        }
    }
    if (mode < 0) {
        UNSUPPORTED("scatter reduce mode");
    }
    int n = x->ndim;
    const int64_t *vis = index1d ? (src != NULL ? src->sizes : x->sizes) : ix->sizes;
    for (int k = 0; k < n; k++) {
        int64_t want = index1d && k == d ? ix->sizes[0] : vis[k];
        if ((index1d && k == d && src != NULL && src->sizes[k] != want)
            || (!index1d && k != d && want > x->sizes[k])
            || (src != NULL && !index1d && want > src->sizes[k])
            || (index1d && k != d && src != NULL && src->sizes[k] != x->sizes[k])) {
            UNSUPPORTED("scatter shapes");
        }
    }
    if (atomic) {
        int64_t isz[STAX_MAX_DIMS];
        for (int k = 0; k < n; k++) {
            isz[k] = index1d && k == d ? ix->sizes[0] : vis[k];
        }
        return scatter_atomic(c, x, out, ix, src, d, mode, include_self, index1d, value,
                              alpha, isz);
    }
    if (lw_index_check(c, ix, x->sizes[d], LW_CHECK_INDEX) < 0) {
        return -1;
    }
    int ps = lw_materialize(c, x);
    int pi = ps < 0 ? -1 : scatter_operand(c, ix);
    int pr = pi < 0 ? -1 : src != NULL ? scatter_operand(c, src) : -1;
    if (ps < 0 || pi < 0 || (src != NULL && pr < 0)) {
        if (PyErr_Occurred()) {
            return -1;
        }
        UNSUPPORTED("scatter operands");
    }
    step_t *s = lw_new_step(c, ST_SCATTER);
    int po = s == NULL ? -1 : lw_new_pbuf(c, PB_EXTERN, out->ndim, out->sizes, dt);
    if (po < 0) {
        return -1;
    }
    s->a = ps;
    s->out = po;
    s->scat.index = pi;
    s->scat.src = src != NULL ? pr : -1;
    s->scat.dim = d;
    s->scat.mode = mode;
    s->scat.include_self = include_self;
    s->scat.index1d = index1d;
    s->scat.ndim = n;
    s->scat.value = value;
    s->scat.alpha = alpha;
    for (int k = 0; k < n; k++) {
        s->scat.ssizes[k] = x->sizes[k];
        s->scat.isizes[k] = index1d && k == d ? ix->sizes[0] : vis[k];
        s->scat.srcsizes[k] = src != NULL ? src->sizes[k] : 1;
    }
    return lw_vb_over_pbuf(c, out, po) < 0 ? -1 : 1;
}
