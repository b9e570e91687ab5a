/* View lowering: views (view / reshape / flatten, t / transpose / permute,
 * expand, select / narrow / slice, getitem, split / chunk / unbind) are
 * index maps: the output's loop vars are rewritten into the input's and the
 * input body is reused; nothing is copied. */
#include "lower/lower_internal.h"
#include "graph/graph.h"
#include "tensor/stax_numpy.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ----------------------------------------------------------------- views */
/* out dims -> input var map, then rewrite x's body */
int
lw_view_map(lw_ctx *c, vbuf *x, vbuf *out, const stax_ix *const *map)
{
    lw_rw rw = {0};
    rw.vars = map;
    rw.nvars = x->ndim;
    out->body = lw_rewrite(c, &rw, x->body);
    lw_rw_done(&rw);
    return out->body ? 1 : -1;
}

/* torch's computeStride: strides of a view of (shape, stride) as newshape */
static int
view_strides(int on, const int64_t *os, const int64_t *ost, int nn,
             const int64_t *ns, int64_t *nst)
{
    if (on == 0) {
        for (int d = 0; d < nn; d++) {
            nst[d] = 1;
        }
        return 1;
    }
    int view_d = nn - 1;
    int64_t chunk = ost[on - 1], tn = 1, vn = 1;
    for (int td = on - 1; td >= 0; td--) {
        tn *= os[td];
        if (td == 0 || (os[td - 1] != 1 && ost[td - 1] != tn * chunk)) {
            while (view_d >= 0 && (vn < tn || ns[view_d] == 1)) {
                nst[view_d] = vn * chunk;
                vn *= ns[view_d];
                view_d--;
            }
            if (vn != tn) {
                return 0;
            }
            if (td > 0) {
                chunk = ost[td - 1];
                tn = 1;
                vn = 1;
            }
        }
    }
    return view_d == -1;
}

static int
lower_reshape(lw_ctx *c, vbuf *x, vbuf *out)
{
    int64_t coef[STAX_MAX_DIMS], cst, nst[STAX_MAX_DIMS];
    const stax_lval *b = x->body;
    if (b->kind == STAX_LV_LOAD && b->mask == NULL
        && lw_ix_affine(b->index, x->ndim, coef, &cst)) {
        int64_t numel = 1;
        for (int d = 0; d < x->ndim; d++) {
            numel *= x->sizes[d];
        }
        if (numel > 0 && view_strides(x->ndim, x->sizes, coef, out->ndim, out->sizes, nst)) {
            const stax_ix *ix = lw_ix_const(c, cst);
            for (int d = out->ndim - 1; d >= 0; d--) {
                if (out->sizes[d] != 1) {
                    ix = lw_ix_bin(c, STAX_IX_ADD,
                                   lw_ix_bin(c, STAX_IX_MUL, lw_ix_var(c, d),
                                             lw_ix_const(c, nst[d])), ix);
                }
            }
            out->body = lw_load(c, b->buf, ix, NULL);
            return out->body ? 1 : -1;
        }
    }
    /* general: through the linear index (div / mod) */
    const stax_ix *ov[STAX_MAX_DIMS], *map[STAX_MAX_DIMS];
    lw_ident_vars(c, out->ndim, ov);
    const stax_ix *lin = lw_contig_index(c, out->ndim, out->sizes, ov);
    int64_t st = 1;
    for (int d = x->ndim - 1; d >= 0; d--) {
        map[d] = x->sizes[d] == 1 ? lw_ix_const(c, 0)
                 : lw_ix_bin(c, STAX_IX_MOD, lw_ix_bin(c, STAX_IX_DIV, lin, lw_ix_const(c, st)),
                             lw_ix_const(c, x->sizes[d]));
        st *= x->sizes[d];
    }
    return lw_view_map(c, x, out, map);
}

int
lw_int_list(PyObject *o, int64_t *v, int max)
{
    if (PyLong_Check(o)) {
        v[0] = PyLong_AsLongLong(o);
        return 1;
    }
    if (!PyList_Check(o) && !PyTuple_Check(o)) {
        return -1;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(o);
    if (n > max) {
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *e = PySequence_Fast_GET_ITEM(o, i);
        if (!PyLong_Check(e)) {
            return -1;
        }
        v[i] = PyLong_AsLongLong(e);
    }
    return (int)n;
}

/* a list of Python ints (not bools): x[:, [-1], :] */
static int
int_list_index(PyObject *o)
{
    if (!PyList_Check(o) || PyList_GET_SIZE(o) == 0) {
        return 0;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(o); i++) {
        PyObject *e = PyList_GET_ITEM(o, i);
        if (!PyLong_Check(e) || PyBool_Check(e)) {
            return 0;
        }
    }
    return 1;
}

/* x[idx] with integer index tensors (gather-style advanced indexing), as
 * torch indexes: ints select first; slices, None and Ellipsis make the
 * dims of a view y; the index tensors broadcast to B and pick along their
 * dims of y, B standing in their place when those dims are adjacent, else
 * first. An index counts from the end when negative; the runtime check
 * flags one outside [-n, n) (the call then reruns eagerly for eager's
 * IndexError) and the load is clamped meanwhile. Bool masks give a
 * data-dependent shape: refused (a fallback kernel). */
/* A slice of a dim of `size`: its start and step, as Python resolves them;
 * 1, or 0 with *why for a non-positive step, or -1 with an exception. */
static int
slice_bounds(PyObject *sl, int64_t size, Py_ssize_t *start, Py_ssize_t *step,
             const char **why)
{
    Py_ssize_t stop;
    if (PySlice_Unpack(sl, start, &stop, step) < 0) {
        return -1;
    }
    PySlice_AdjustIndices((Py_ssize_t)size, start, &stop, *step);
    if (*step <= 0) {
        UNSUPPORTED("non-positive slice step");
    }
    return 1;
}

static int
lower_getitem_adv(lw_ctx *c, struct lw_node_in *in, vbuf *x, PyObject *const *items,
                  Py_ssize_t n, vbuf *out, const char **why)
{
    enum { S_SLICE, S_NONE, S_ADV };
    int skind[STAX_MAX_DIMS], sxd[STAX_MAX_DIMS];
    int64_t sstart[STAX_MAX_DIMS], sstep[STAX_MAX_DIMS];
    vbuf *sadv[STAX_MAX_DIMS];
    const stax_ix *map[STAX_MAX_DIMS];
    int ns = 0, xd = 0, consumed = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *it = items[i];
        consumed += it != Py_None && it != Py_Ellipsis;
    }
    for (int d = 0; d < x->ndim; d++) {
        map[d] = NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *it = items[i];
        if (ns >= STAX_MAX_DIMS - 1) {
            UNSUPPORTED("index too long");
        }
        if (it == Py_Ellipsis) {
            int skip = x->ndim - consumed;
            for (int j = 0; j < skip; j++) {
                skind[ns] = S_SLICE;
                sxd[ns] = xd++;
                sstart[ns] = 0;
                sstep[ns++] = 1;
            }
            consumed = x->ndim;
            continue;
        }
        if (it == Py_None) {
            skind[ns++] = S_NONE;
            continue;
        }
        if (xd >= x->ndim) {
            UNSUPPORTED("too many indices");
        }
        if (PyLong_Check(it)) {
            int64_t k = PyLong_AsLongLong(it);
            if (k < -x->sizes[xd] || k >= x->sizes[xd]) {
                PyErr_Clear();
                UNSUPPORTED("int index out of range (eager raises IndexError)");
            }
            map[xd] = lw_ix_const(c, k < 0 ? k + x->sizes[xd] : k);
            xd++;
            continue;
        }
        if (PySlice_Check(it)) {
            Py_ssize_t start, step;
            int rs = slice_bounds(it, x->sizes[xd], &start, &step, why);
            if (rs <= 0) {
                return rs;
            }
            skind[ns] = S_SLICE;
            sxd[ns] = xd++;
            sstart[ns] = start;
            sstep[ns++] = step;
            continue;
        }
        vbuf *t = lw_arg_vb(in, it);
        if (t == NULL || t->kind != VB_TENSOR) {
            UNSUPPORTED("advanced index that is not a tensor");
        }
        if (t->dtype == STAX_BOOL || t->dtype == STAX_UINT8) {
            UNSUPPORTED("boolean mask index (its result's shape depends on the data)");
        }
        if (lw_is_float(t->dtype)) {
            UNSUPPORTED("float index tensor (eager raises IndexError)");
        }
        skind[ns] = S_ADV;
        sxd[ns] = xd++;
        sadv[ns++] = t;
    }
    while (xd < x->ndim && ns < STAX_MAX_DIMS) {
        skind[ns] = S_SLICE;
        sxd[ns] = xd++;
        sstart[ns] = 0;
        sstep[ns++] = 1;
    }
    /* B: the index tensors broadcast */
    int64_t B[STAX_MAX_DIMS];
    int nb = 0, first = -1, last = -1, nadv = 0;
    for (int k = 0; k < ns; k++) {
        if (skind[k] == S_ADV) {
            nb = sadv[k]->ndim > nb ? sadv[k]->ndim : nb;
            nadv++;
            first = first < 0 ? k : first;
            last = k;
        }
    }
    for (int q = 0; q < nb; q++) {
        B[q] = 1;
    }
    for (int k = 0; k < ns; k++) {
        if (skind[k] != S_ADV) {
            continue;
        }
        vbuf *t = sadv[k];
        for (int q = 0; q < t->ndim; q++) {
            int bq = nb - t->ndim + q;
            if (B[bq] == 1) {
                B[bq] = t->sizes[q];
            }
            else if (t->sizes[q] != 1 && t->sizes[q] != B[bq]) {
                UNSUPPORTED("index tensors do not broadcast (eager raises)");
            }
        }
    }
    int adjacent = last - first + 1 == nadv;
    /* output vars: B at the first index slot (adjacent) or first */
    int od = 0, pb = adjacent ? -1 : 0;
    if (!adjacent) {
        od = nb;
    }
    const stax_ix *svar[STAX_MAX_DIMS];
    for (int k = 0; k < ns; k++) {
        if (skind[k] == S_ADV) {
            if (pb < 0) {
                pb = od;
                od += nb;
            }
            continue;
        }
        svar[k] = lw_ix_var(c, od++);
    }
    if (od != out->ndim || od > STAX_MAX_DIMS) {
        UNSUPPORTED("index result rank mismatch");
    }
    for (int q = 0; q < nb; q++) {
        if (out->sizes[pb + q] != B[q]) {
            UNSUPPORTED("index result shape mismatch");
        }
    }
    for (int k = 0; k < ns; k++) {
        if (skind[k] == S_SLICE) {
            map[sxd[k]] = lw_ix_bin(c, STAX_IX_ADD, lw_ix_const(c, sstart[k]),
                                    lw_ix_bin(c, STAX_IX_MUL, svar[k], lw_ix_const(c, sstep[k])));
        }
        else if (skind[k] == S_ADV) {
            vbuf *t = sadv[k];
            int64_t size = x->sizes[sxd[k]];
            const stax_ix *tv[STAX_MAX_DIMS];
            for (int q = 0; q < t->ndim; q++) {
                int bq = nb - t->ndim + q;
                tv[q] = t->sizes[q] == 1 ? lw_ix_const(c, 0) : lw_ix_var(c, pb + bq);
            }
            lw_rw rw = {0};
            rw.vars = tv;
            rw.nvars = t->ndim;
            const stax_lval *iv = lw_rewrite(c, &rw, t->body);
            lw_rw_done(&rw);
            if (iv == NULL || lw_index_check_wrap(c, t, size, LW_CHECK_INDEX) < 0) {
                return -1;
            }
            const stax_dtype_t I64 = STAX_INT64;
            iv = lw_cast(c, iv, I64);
            const stax_lval *nn = lw_size_const(c, I64, size);
            const stax_lval *z = lw_const(c, I64, 0);
            const stax_lval *w = lw_prim(c, STAX_PRIM_WHERE, I64,
                                         lw_prim(c, STAX_PRIM_LT, STAX_BOOL, iv, z, NULL),
                                         lw_prim(c, STAX_PRIM_ADD, I64, iv, nn, NULL), iv);
            w = lw_prim(c, STAX_PRIM_MIN, I64, lw_prim(c, STAX_PRIM_MAX, I64, w, z, NULL),
                        lw_prim(c, STAX_PRIM_SUB, I64, nn, lw_const(c, I64, 1), NULL), NULL);
            if (w == NULL) {
                return -1;
            }
            map[sxd[k]] = lw_ix_value(c, w);
        }
    }
    for (int d = 0; d < x->ndim; d++) {
        if (map[d] == NULL) {
            UNSUPPORTED("index left a dim unmapped");
        }
    }
    return lw_view_map(c, x, out, map);
}

/* getitem with ints, slices, None, Ellipsis and one list of ints */
static int
lower_getitem(lw_ctx *c, struct lw_node_in *in, vbuf *x, PyObject *idx, vbuf *out,
              const char **why)
{
    PyObject *items[2 * STAX_MAX_DIMS];
    Py_ssize_t n;
    if (PyTuple_Check(idx)) {
        n = PyTuple_GET_SIZE(idx);
        if (n > 2 * STAX_MAX_DIMS) {
            UNSUPPORTED("index too long");
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            items[i] = PyTuple_GET_ITEM(idx, i);
        }
    }
    else {
        n = 1;
        items[0] = idx;
    }
    int consumed = 0, nlists = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (lw_arg_vb(in, items[i]) != NULL) {
            return lower_getitem_adv(c, in, x, items, n, out, why);
        }
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (PyLong_Check(items[i]) || PySlice_Check(items[i])) {
            consumed++;
        }
        else if (int_list_index(items[i])) {
            consumed++;
            nlists++;
        }
        else if (items[i] != Py_None && items[i] != Py_Ellipsis) {
            UNSUPPORTED("advanced (tensor) indexing");
        }
    }
    if (nlists > 1) {
        UNSUPPORTED("more than one advanced (list) index");
    }
    const stax_ix *map[STAX_MAX_DIMS];
    int xd = 0, od = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *it = items[i];
        if (it == Py_Ellipsis) {
            int skip = x->ndim - consumed;
            for (int j = 0; j < skip; j++) {
                map[xd++] = lw_ix_var(c, od++);
            }
            consumed = x->ndim;   /* only one ellipsis */
        }
        else if (it == Py_None) {
            od++;
        }
        else if (PyList_Check(it)) {
            /* one list of ints: that dim gathers the listed entries and stays
             * in place (torch's rule for a single advanced index) */
            if (xd >= x->ndim) {
                UNSUPPORTED("too many indices");
            }
            Py_ssize_t m = PyList_GET_SIZE(it);
            int64_t sz = x->sizes[xd], a[64];
            if (m > 64) {
                UNSUPPORTED("list index longer than 64");
            }
            for (Py_ssize_t q = 0; q < m; q++) {
                int64_t k = PyLong_AsLongLong(PyList_GET_ITEM(it, q));
                if (k < -sz || k >= sz) {
                    PyErr_Clear();
                    UNSUPPORTED("list index out of range (eager raises IndexError)");
                }
                a[q] = k < 0 ? k + sz : k;
            }
            const stax_ix *v = lw_ix_var(c, od++);
            int ap = 1;
            for (Py_ssize_t q = 2; q < m; q++) {
                ap &= a[q] - a[q - 1] == a[1] - a[0];
            }
            if (ap) {
                int64_t step = m > 1 ? a[1] - a[0] : 0;
                map[xd++] = lw_ix_bin(c, STAX_IX_ADD, lw_ix_const(c, m ? a[0] : 0),
                                      lw_ix_bin(c, STAX_IX_MUL, v, lw_ix_const(c, step)));
            }
            else {
                const stax_lval *pos = lw_index(c, v, STAX_INT64);
                const stax_lval *e = lw_const(c, STAX_INT64, (double)a[m - 1]);
                for (Py_ssize_t q = m - 2; q >= 0 && e != NULL; q--) {
                    const stax_lval *hit = lw_prim(c, STAX_PRIM_EQ, STAX_BOOL, pos,
                                                   lw_const(c, STAX_INT64, (double)q), NULL);
                    e = lw_prim(c, STAX_PRIM_WHERE, STAX_INT64, hit,
                                lw_const(c, STAX_INT64, (double)a[q]), e);
                }
                if (e == NULL) {
                    return -1;
                }
                map[xd++] = lw_ix_value(c, e);
            }
        }
        else if (PyLong_Check(it)) {
            if (xd >= x->ndim) {
                UNSUPPORTED("too many indices");
            }
            int64_t k = PyLong_AsLongLong(it);
            if (k < 0) {
                k += x->sizes[xd];
            }
            map[xd++] = lw_ix_const(c, k);
        }
        else {
            if (xd >= x->ndim) {
                UNSUPPORTED("too many indices");
            }
            Py_ssize_t start, step;
            int rs = slice_bounds(it, x->sizes[xd], &start, &step, why);
            if (rs <= 0) {
                return rs;
            }
            map[xd++] = lw_ix_bin(c, STAX_IX_ADD, lw_ix_const(c, start),
                                  lw_ix_bin(c, STAX_IX_MUL, lw_ix_var(c, od++),
                                            lw_ix_const(c, step)));
        }
    }
    while (xd < x->ndim) {
        map[xd++] = lw_ix_var(c, od++);
    }
    if (od != out->ndim) {
        UNSUPPORTED("index result rank mismatch");
    }
    return lw_view_map(c, x, out, map);
}

/* t, transpose, permute: out dim k reads input dim perm[k] */
static int
view_permute(lw_ctx *c, struct lw_node_in *in, PyObject *bound, vbuf *x, vbuf *out,
             const char **why)
{
    stax_op_id_t id = in->op->id;
    const stax_ix *map[STAX_MAX_DIMS];
    int perm[STAX_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++) {
        perm[d] = d;
    }
    if ((id == STAX_OP_T)) {
        if (x->ndim == 2) {
            perm[0] = 1;
            perm[1] = 0;
        }
    }
    else if ((id == STAX_OP_TRANSPOSE)) {
        PyObject *d0 = lw_bound_arg(bound, in->op, "dim0"), *d1 = lw_bound_arg(bound, in->op, "dim1");
        if (!d0 || !d1 || !PyLong_Check(d0) || !PyLong_Check(d1)) {
            UNSUPPORTED("transpose dims");
        }
        int a = lw_norm_dim(PyLong_AsLongLong(d0), x->ndim);
        int b = lw_norm_dim(PyLong_AsLongLong(d1), x->ndim);
        if (a < 0 || b < 0) {
            UNSUPPORTED("transpose dims");
        }
        perm[a] = b;
        perm[b] = a;
    }
    else {
        int64_t p[STAX_MAX_DIMS];
        PyObject *dims = lw_bound_arg(bound, in->op, "dims");
        if (dims == NULL || lw_int_list(dims, p, STAX_MAX_DIMS) != x->ndim) {
            UNSUPPORTED("permute dims");
        }
        for (int d = 0; d < x->ndim; d++) {
            perm[d] = lw_norm_dim(p[d], x->ndim);
            if (perm[d] < 0) {
                UNSUPPORTED("permute dims");
            }
        }
    }
    /* out dim k reads input dim perm[k] */
    for (int k = 0; k < x->ndim; k++) {
        map[perm[k]] = lw_ix_var(c, k);
    }
    return lw_view_map(c, x, out, map);
}

/* as_strided(x, size, stride, offset) over x's values laid out row-major
 * (the op graph takes a view outside the table as as_strided of its
 * contiguous argument, functionalize.c): output element i reads flat
 * element L = offset + sum_k i_k * stride_k of x, i.e. x's index
 * (L / P_j) % sizes_j, P_j the product of x's later sizes. */
static int
view_as_strided(lw_ctx *c, struct lw_node_in *in, PyObject *bound, vbuf *x, vbuf *out,
                const char **why)
{
    int64_t size[STAX_MAX_DIMS], stride[STAX_MAX_DIMS];
    const stax_ix *map[STAX_MAX_DIMS];
    PyObject *so = lw_bound_arg(bound, in->op, "size");
    PyObject *sto = lw_bound_arg(bound, in->op, "stride");
    PyObject *oo = lw_bound_arg(bound, in->op, "storage_offset");
    if (out->kind != VB_TENSOR || out->dtype != x->dtype) {
        UNSUPPORTED("as_strided of another dtype");
    }
    int n = so != NULL ? lw_int_list(so, size, STAX_MAX_DIMS) : -1;
    int ns = sto != NULL ? lw_int_list(sto, stride, STAX_MAX_DIMS) : -1;
    int64_t off = oo != NULL && PyLong_Check(oo) ? PyLong_AsLongLong(oo) : 0;
    PyErr_Clear();
    if (n < 0 || ns != n || n != out->ndim || (oo != NULL && oo != Py_None && !PyLong_Check(oo))
        ) {
        UNSUPPORTED("as_strided sizes/strides not understood");
    }
    if (off < 0) {
        /* the op graph's mark (oplevel.c): x is not contiguous, so its
         * C-order values are not its storage, or the offset lies before
         * x's first element */
        UNSUPPORTED("as_strided of a non-contiguous view, or before its input's start (reads storage)");
    }
    int64_t numel = 1, last = off, empty = 0;
    for (int d = 0; d < x->ndim; d++) {
        numel *= x->sizes[d];
    }
    for (int k = 0; k < n; k++) {
        if (size[k] != out->sizes[k] || stride[k] < 0) {
            UNSUPPORTED("as_strided sizes/strides not understood");
        }
        empty |= size[k] == 0;
        last += size[k] > 0 ? (size[k] - 1) * stride[k] : 0;
    }
    if (!empty && last >= numel) {
        UNSUPPORTED("as_strided beyond its input's elements (eager raises)");
    }
    const stax_ix *flat = lw_ix_const(c, off);
    for (int k = 0; k < n; k++) {
        if (size[k] != 1 && stride[k] != 0) {
            flat = lw_ix_bin(c, STAX_IX_ADD, flat,
                             lw_ix_bin(c, STAX_IX_MUL, lw_ix_var(c, k), lw_ix_const(c, stride[k])));
        }
    }
    int64_t inner = 1;
    for (int j = x->ndim - 1; j >= 0; j--) {
        const stax_ix *ix = inner == 1 ? flat : lw_ix_bin(c, STAX_IX_DIV, flat, lw_ix_const(c, inner));
        if (x->sizes[j] <= 1 || empty) {
            ix = lw_ix_const(c, 0);
        }
        else if (j > 0) {
            ix = lw_ix_bin(c, STAX_IX_MOD, ix, lw_ix_const(c, x->sizes[j]));
        }
        map[j] = ix;
        inner *= x->sizes[j] > 0 ? x->sizes[j] : 1;
    }
    return lw_view_map(c, x, out, map);
}

/* split, chunk, unbind: a tuple of index maps into x */
static int
view_split(lw_ctx *c, struct lw_node_in *in, PyObject *bound, vbuf *x, vbuf *out,
           const char **why)
{
    stax_op_id_t id = in->op->id;
    const stax_ix *map[STAX_MAX_DIMS];
    if (!PyTuple_Check(in->val) && !PyList_Check(in->val)) {
        UNSUPPORTED("split without a tuple value");
    }
    PyObject *dobj = lw_bound_arg(bound, in->op, "dim");
    int d = dobj && PyLong_Check(dobj) ? lw_norm_dim(PyLong_AsLongLong(dobj), x->ndim) : 0;
    if (d < 0) {
        UNSUPPORTED("split dim");
    }
    PyObject *seq = PySequence_Tuple(in->val);
    if (seq == NULL) {
        return -1;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(seq);
    out->kind = VB_TUPLE;
    out->nitems = (int)n;
    out->items = stax_arena_alloc(c->arena, sizeof(vbuf *) * (size_t)(n ? n : 1));
    int64_t off = 0;
    int unbind = (id == STAX_OP_UNBIND);
    for (Py_ssize_t i = 0; i < n; i++) {
        vbuf *it = lw_vb_new(c);
        int64_t st[STAX_MAX_DIMS];
        if (it == NULL || out->items == NULL
            || !lw_val_info(PyTuple_GET_ITEM(seq, i), &it->ndim, it->sizes, st, &it->dtype)) {
            Py_DECREF(seq);
            if (!PyErr_Occurred()) {
                UNSUPPORTED("split item");
            }
            return -1;
        }
        it->kind = VB_TENSOR;
        int od = 0;
        for (int j = 0; j < x->ndim; j++) {
            if (j == d) {
                map[j] = unbind ? lw_ix_const(c, off)
                                : lw_ix_bin(c, STAX_IX_ADD, lw_ix_const(c, off),
                                            lw_ix_var(c, od++));
            }
            else {
                map[j] = lw_ix_var(c, od++);
            }
        }
        off += unbind ? 1 : it->sizes[d];
        if (lw_view_map(c, x, it, map) < 0) {
            Py_DECREF(seq);
            return -1;
        }
        out->items[i] = it;
    }
    Py_DECREF(seq);
    return 1;
}

int
lw_lower_view(lw_ctx *c, struct lw_node_in *in, PyObject *bound, vbuf *x,
              vbuf *out, const char **why)
{
    stax_op_id_t id = in->op->id;
    const stax_ix *map[STAX_MAX_DIMS];
    if ((id == STAX_OP_VIEW) || (id == STAX_OP_RESHAPE) || (id == STAX_OP_FLATTEN)
        || (id == STAX_OP_UNFLATTEN) || (id == STAX_OP_SQUEEZE) || (id == STAX_OP_UNSQUEEZE)) {
        if (out->kind != VB_TENSOR || ((id == STAX_OP_VIEW) && out->dtype != x->dtype)) {
            UNSUPPORTED("view as another dtype");
        }
        return lower_reshape(c, x, out);
    }
    if ((id == STAX_OP_DETACH) || (id == STAX_OP_ALIAS)
        || (id == STAX_OP_POSITIVE)) {
        out->body = x->body;
        return 1;
    }
    if ((id == STAX_OP_T) || (id == STAX_OP_TRANSPOSE) || (id == STAX_OP_PERMUTE)) {
        return view_permute(c, in, bound, x, out, why);
    }
    if ((id == STAX_OP_EXPAND) || (id == STAX_OP_EXPAND_AS)) {
        int off = out->ndim - x->ndim;
        for (int d = 0; d < x->ndim; d++) {
            map[d] = (x->sizes[d] == 1) ? lw_ix_const(c, 0) : lw_ix_var(c, off + d);
        }
        return lw_view_map(c, x, out, map);
    }
    if ((id == STAX_OP_SELECT) || (id == STAX_OP_NARROW) || (id == STAX_OP_SLICE)) {
        PyObject *dobj = lw_bound_arg(bound, in->op, "dim");
        int d = dobj && PyLong_Check(dobj) ? lw_norm_dim(PyLong_AsLongLong(dobj), x->ndim) : -1;
        if (d < 0) {
            UNSUPPORTED("select/narrow dim");
        }
        int od = 0;
        for (int j = 0; j < x->ndim; j++) {
            if (j != d) {
                map[j] = lw_ix_var(c, od++);
            }
            else if (id == STAX_OP_SELECT) {
                int64_t i = PyLong_AsLongLong(lw_bound_arg(bound, in->op, "index"));
                map[j] = lw_ix_const(c, i < 0 ? i + x->sizes[d] : i);
            }
            else if (id == STAX_OP_NARROW) {
                int64_t s = PyLong_AsLongLong(lw_bound_arg(bound, in->op, "start"));
                map[j] = lw_ix_bin(c, STAX_IX_ADD, lw_ix_const(c, s < 0 ? s + x->sizes[d] : s),
                                   lw_ix_var(c, od++));
            }
            else {
                PyObject *so = lw_bound_arg(bound, in->op, "start");
                PyObject *eo = lw_bound_arg(bound, in->op, "end");
                PyObject *sto = lw_bound_arg(bound, in->op, "step");
                PyObject *sl = PySlice_New(so, eo, sto);
                if (sl == NULL) {
                    return -1;
                }
                Py_ssize_t s, e, st;
                int rc = PySlice_Unpack(sl, &s, &e, &st);
                Py_DECREF(sl);
                if (rc < 0) {
                    return -1;
                }
                PySlice_AdjustIndices((Py_ssize_t)x->sizes[d], &s, &e, st);
                map[j] = lw_ix_bin(c, STAX_IX_ADD, lw_ix_const(c, s),
                                   lw_ix_bin(c, STAX_IX_MUL, lw_ix_var(c, od++),
                                             lw_ix_const(c, st)));
            }
        }
        if (PyErr_Occurred()) {
            return -1;
        }
        return lw_view_map(c, x, out, map);
    }
    if ((id == STAX_OP_GETITEM)) {
        PyObject *idx = lw_bound_arg(bound, in->op, "index");
        if (idx == NULL) {
            UNSUPPORTED("getitem index");
        }
        return lower_getitem(c, in, x, idx, out, why);
    }
    if ((id == STAX_OP_SPLIT) || (id == STAX_OP_CHUNK) || (id == STAX_OP_UNBIND)) {
        return view_split(c, in, bound, x, out, why);
    }
    if (id == STAX_OP_AS_STRIDED) {
        return view_as_strided(c, in, bound, x, out, why);
    }
    UNSUPPORTED("view without a lowering rule");
}

/* ------------------------------------------ views without an op-table row */
/* positional argument i or keyword `kw` of a node, or dflt (borrowed) */
static PyObject *
node_arg(PyObject *args, PyObject *kwargs, int i, const char *kw, PyObject *dflt)
{
    if (args != NULL && PyTuple_Check(args) && i < PyTuple_GET_SIZE(args)) {
        return PyTuple_GET_ITEM(args, i);
    }
    PyObject *v = kwargs != NULL && PyDict_Check(kwargs) ? PyDict_GetItemString(kwargs, kw) : NULL;
    return v != NULL ? v : dflt;
}

/* movedim(x, source, destination) and diagonal(x, offset, dim1, dim2): index
 * maps (views); every keyword is one of the schema's or the node is refused */
int
lw_lower_extra_view(lw_ctx *c, const stax_call_info *call, struct lw_node_in *in,
                    vbuf **outp, const char **why)
{
    int mv = call->key != STAX_CALL_DIAGONAL;
    static const char *const mv_kw[] = {"source", "destination", NULL};
    static const char *const dg_kw[] = {"offset", "dim1", "dim2", NULL};
    const char *const *allowed = mv ? mv_kw : dg_kw;
    if (in->kwargs != NULL && PyDict_Check(in->kwargs)) {
        PyObject *k, *v;
        Py_ssize_t pos = 0;
        while (PyDict_Next(in->kwargs, &pos, &k, &v)) {
            const char *kn = PyUnicode_Check(k) ? PyUnicode_AsUTF8(k) : NULL;
            int ok = 0;
            for (int i = 0; kn != NULL && allowed[i]; i++) {
                ok |= !strcmp(kn, allowed[i]);
            }
            if (!ok) {
                PyErr_Clear();
                UNSUPPORTED("keyword argument the op does not have");
            }
        }
    }
    PyObject *xo = node_arg(in->args, NULL, 0, "", NULL);
    vbuf *x = xo != NULL ? lw_arg_vb(in, xo) : NULL;
    vbuf *out = lw_vb_new(c);
    int64_t st[STAX_MAX_DIMS];
    const stax_ix *map[STAX_MAX_DIMS];
    if (out == NULL) {
        return -1;
    }
    if (x == NULL || x->kind != VB_TENSOR) {
        UNSUPPORTED("view of a non-tensor");
    }
    out->kind = VB_TENSOR;
    if (!lw_val_info(in->val, &out->ndim, out->sizes, st, &out->dtype) || out->dtype != x->dtype) {
        UNSUPPORTED("view whose value is not a tensor of its input's dtype");
    }
    int n = x->ndim;
    if (mv) {
        int64_t src[STAX_MAX_DIMS], dst[STAX_MAX_DIMS];
        PyObject *so = node_arg(in->args, in->kwargs, 1, "source", NULL);
        PyObject *dobj = node_arg(in->args, in->kwargs, 2, "destination", NULL);
        int ns, ndd;
        if (so != NULL && PyLong_Check(so)) {
            src[0] = PyLong_AsLongLong(so);
            ns = 1;
        }
        else {
            ns = so != NULL ? lw_int_list(so, src, STAX_MAX_DIMS) : -1;
        }
        if (dobj != NULL && PyLong_Check(dobj)) {
            dst[0] = PyLong_AsLongLong(dobj);
            ndd = 1;
        }
        else {
            ndd = dobj != NULL ? lw_int_list(dobj, dst, STAX_MAX_DIMS) : -1;
        }
        PyErr_Clear();
        if (ns < 0 || ns != ndd || out->ndim != n) {
            UNSUPPORTED("movedim source/destination not understood");
        }
        int perm[STAX_MAX_DIMS], used[STAX_MAX_DIMS] = {0}, taken[STAX_MAX_DIMS] = {0};
        for (int i = 0; i < ns; i++) {
            int s_ = lw_norm_dim(src[i], n), d_ = lw_norm_dim(dst[i], n);
            if (s_ < 0 || d_ < 0 || used[s_] || taken[d_]) {
                UNSUPPORTED("movedim dims out of range or repeated (eager raises)");
            }
            perm[d_] = s_;
            used[s_] = taken[d_] = 1;
        }
        /* the other dims keep their order in the remaining places */
        int nx = 0;
        for (int k = 0; k < n; k++) {
            if (taken[k]) {
                continue;
            }
            while (used[nx]) {
                nx++;
            }
            perm[k] = nx++;
        }
        for (int k = 0; k < n; k++) {
            map[perm[k]] = lw_ix_var(c, k);
        }
    }
    else {
        PyObject *oo = node_arg(in->args, in->kwargs, 1, "offset", NULL);
        PyObject *o1 = node_arg(in->args, in->kwargs, 2, "dim1", NULL);
        PyObject *o2 = node_arg(in->args, in->kwargs, 3, "dim2", NULL);
        if ((oo && !PyLong_Check(oo)) || (o1 && !PyLong_Check(o1)) || (o2 && !PyLong_Check(o2))) {
            UNSUPPORTED("diagonal arguments that are not ints");
        }
        int64_t off = oo ? PyLong_AsLongLong(oo) : 0;
        int d1 = lw_norm_dim(o1 ? PyLong_AsLongLong(o1) : 0, n);
        int d2 = lw_norm_dim(o2 ? PyLong_AsLongLong(o2) : 1, n);
        PyErr_Clear();
        if (n < 2 || d1 < 0 || d2 < 0 || d1 == d2 || out->ndim != n - 1) {
            UNSUPPORTED("diagonal dims out of range (eager raises)");
        }
        const stax_ix *i = lw_ix_var(c, n - 2);
        int od = 0;
        for (int j = 0; j < n; j++) {
            if (j == d1) {
                map[j] = lw_ix_bin(c, STAX_IX_ADD, i, lw_ix_const(c, off < 0 ? -off : 0));
            }
            else if (j == d2) {
                map[j] = lw_ix_bin(c, STAX_IX_ADD, i, lw_ix_const(c, off > 0 ? off : 0));
            }
            else {
                map[j] = lw_ix_var(c, od++);
            }
        }
    }
    int rc = lw_view_map(c, x, out, map);
    if (rc > 0) {
        *outp = out;
    }
    return rc;
}
