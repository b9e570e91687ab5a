/* Extern call lowering: matmul / mm / bmm / linear become a library call
 * step (ST_MATMUL) on materialized, possibly strided operands; linear's bias
 * stays a pointwise epilogue body, fused into the consumer. */
#include "lower/lower_internal.h"
#include "graph/graph.h"
#include "tensor/stax_numpy.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* --------------------------------------------------------------- matmul */
int
lw_lower_matmul(lw_ctx *c, struct lw_node_in *in, PyObject *bound, vbuf *out,
                const char **why)
{
    stax_op_id_t id = in->op->id;
    vbuf *a = lw_arg_vb(in, PyTuple_GET_ITEM(bound, 0));
    vbuf *b = lw_arg_vb(in, PyTuple_GET_ITEM(bound, 1));
    if (!a || !b || a->kind != VB_TENSOR || b->kind != VB_TENSOR) {
        UNSUPPORTED("matmul operands");
    }
    if (!lw_is_float(a->dtype) || a->dtype != b->dtype) {
        UNSUPPORTED("matmul of non-float or mixed dtypes");
    }
    /* bfloat16: the step multiplies NumPy arrays and NumPy has no
     * bfloat16; the operands are widened to float32 buffers, multiplied
     * (float32 accumulation, as eager and torch's CPU kernels), and the
     * result, bias added in float32, is rounded once by its consumer */
    vbuf a32, b32;
    int bf = a->dtype == STAX_BFLOAT16;
    if (bf) {
        a32 = *a;
        b32 = *b;
        a32.dtype = b32.dtype = STAX_FLOAT32;
        a32.pbuf = b32.pbuf = -1;
        a32.body = lw_cast(c, a->body, STAX_FLOAT32);
        b32.body = lw_cast(c, b->body, STAX_FLOAT32);
        if (a32.body == NULL || b32.body == NULL) {
            return -1;
        }
        a = &a32;
        b = &b32;
    }
    stax_dtype_t rdt = out->dtype, odt = bf ? STAX_FLOAT32 : rdt;
    int lin = (id == STAX_OP_LINEAR);
    vbuf *bias = NULL;
    if (lin) {
        PyObject *bo = lw_bound_arg(bound, in->op, "bias");
        if (bo && bo != Py_None) {
            bias = lw_arg_vb(in, bo);
            if (bias == NULL) {
                UNSUPPORTED("linear bias");
            }
        }
    }
    /* an operand that is a strided view of a buffer (x.t(), a slice) is
     * handed to the library as such, not copied */
    int64_t coef[2][STAX_MAX_DIMS], cst[2];
    int isview[2] = {0, 0};
    vbuf *ops2[2] = {a, b};
    for (int j = 0; j < 2; j++) {
        const stax_lval *bd = ops2[j]->body;
        if (ops2[j]->pbuf < 0 && bd != NULL && bd->kind == STAX_LV_LOAD && bd->mask == NULL
            && lw_ix_affine(bd->index, ops2[j]->ndim, coef[j], &cst[j]) && cst[j] >= 0) {
            isview[j] = 1;
            for (int d = 0; d < ops2[j]->ndim; d++) {
                isview[j] &= coef[j][d] >= 0;
            }
        }
    }
    int pa = isview[0] ? a->body->buf : lw_materialize(c, a);
    int pb = pa < 0 ? -1 : (isview[1] ? b->body->buf : lw_materialize(c, b));
    if (pb < 0) {
        return -1;
    }
    step_t *s = lw_new_step(c, ST_MATMUL);
    if (s == NULL) {
        return -1;
    }
    s->a = pa;
    s->b = pb;
    for (int j = 0; j < 2; j++) {
        if (isview[j]) {
            s->view[j].on = 1;
            s->view[j].ndim = ops2[j]->ndim;
            s->view[j].offset = cst[j];
            for (int d = 0; d < ops2[j]->ndim; d++) {
                s->view[j].sizes[d] = ops2[j]->sizes[d];
                s->view[j].strides[d] = coef[j][d];
            }
        }
    }
    s->transpose_b = lin;
    int po = lw_new_pbuf(c, PB_EXTERN, out->ndim, out->sizes, odt);
    if (po < 0) {
        return -1;
    }
    s->out = po;
    if (lw_vb_over_pbuf(c, out, po) < 0) {
        return -1;
    }
    out->dtype = rdt;
    if (bias == NULL && !bf) {
        return 1;
    }
    if (bias == NULL) {
        /* the float32 product, rounded where it is consumed */
        out->pbuf = -1;
        out->body = lw_cast(c, out->body, rdt);
        return out->body ? 1 : -1;
    }
    /* the bias epilogue stays a pointwise body: fused into the consumer */
    out->pbuf = -1;
    const stax_ix *ov[STAX_MAX_DIMS];
    lw_ident_vars(c, out->ndim, ov);
    const stax_lval *bb = lw_bcast(c, bias, out->ndim, out->sizes, ov);
    out->body = lw_cast(c, lw_prim(c, STAX_PRIM_ADD, odt, out->body,
                                   lw_cast(c, bb, odt), NULL), rdt);
    return out->body ? 1 : -1;
}
