/* Private to backend_nvrtc: the stand-in lowering's expression trees and
 * kernel specs (nvrtc_spec.c builds and lowers them; nvrtc_graph.c fills
 * them from a GraphModule, an S-expression or a list of stages). */
#ifndef STAX_NVRTC_SPEC_H
#define STAX_NVRTC_SPEC_H

#include "backend_nvrtc/nvrtc_internal.h"

/* the op table, read directly from ops.def (names, kinds, formulas) */
typedef struct {
    const char *name;
    int kind;
    int arity;
    const char *schema;
    const char *formula;
} op_row;

/* reductions this stand-in lowers */
typedef struct {
    const char *name;
    stax_red_t op;
    int mean;
} red_row;

#define MAX_INPUTS 16
#define MAX_NODES 1024
#define NAME_LEN 64

typedef enum { X_LOAD = 0, X_CONST, X_PRIM, X_ACC } xkind_t;

typedef struct xnode {
    xkind_t kind;
    stax_prim_t prim;
    int nargs;
    struct xnode *args[3];
    int input;                  /* LOAD; ACC: the accumulator */
    double value;               /* CONST */
    int weak;                   /* dtype follows the other operand */
    stax_dtype_t dtype;         /* result dtype */
    const stax_lval *lv;        /* lowering memo */
} xnode;

typedef struct {
    stax_dtype_t dtype;
    int ndim;
    int64_t shape[STAX_MAX_DIMS];
    int64_t layout[STAX_MAX_DIMS];    /* its strides, in elements */
    int64_t strides[STAX_MAX_DIMS];   /* per iteration dim */
    char label[NAME_LEN];
} xinput;

#define MAX_STAGES 8

typedef struct {
    stax_stage_kind_t kind;
    int op;                           /* REDUCE: stax_red_t */
    xnode *body;
    stax_dtype_t dtype;               /* accumulator / stored dtype */
} xstage;

typedef struct {
    char name[NAME_LEN];
    int nstages;                      /* 0: one pointwise or reduce below */
    xstage st[MAX_STAGES];
    int naccs;
    int order[STAX_MAX_DIMS];         /* iteration dim -> broadcast dim */
    int bndim;
    int64_t bshape[STAX_MAX_DIMS];    /* broadcast shape */
    int ninputs;
    xinput in[MAX_INPUTS];
    int ndim, nred;          /* iteration dims; the trailing nred reduced */
    int64_t sizes[STAX_MAX_DIMS];
    xnode *body;
    int reduce;                       /* stax_red_t, or -1 */
    int mean;
    stax_dtype_t out_dtype;
    int out_ndim;
    int64_t out_shape[STAX_MAX_DIMS];
    int npool;
    xnode pool[MAX_NODES];
} spec_t;

typedef PyObject *(*scalar_fn)(void *ctx, const char *name);

const op_row *stax_nvrtc_find_op(const char *name);           /* or NULL */
const red_row *stax_nvrtc_find_reduction(const char *name);   /* or NULL */
xnode *stax_nvrtc_new_load(spec_t *k, int input);
xnode *stax_nvrtc_new_const(spec_t *k, double v, stax_dtype_t dt);
/* formula S-expression; a .. h bound to ops[], $name through scalar() */
xnode *stax_nvrtc_parse_formula(spec_t *k, const char *formula, xnode **ops,
                                int nops, scalar_fn scalar, void *ctx);
/* example input (tensor, array or (dtype, shape)) -> shape/strides/dtype */
int stax_nvrtc_read_layout(PyObject *x, xinput *in);
int stax_nvrtc_read_dims(PyObject *dims, int ndim, int *red);
/* iteration space: broadcast shape, kept dims then reduced dims */
int stax_nvrtc_layout_kernel(spec_t *k, const int *red_in, int keepdim);
stax_dtype_t stax_nvrtc_reduction_dtype(const red_row *r, stax_dtype_t dt);
int stax_nvrtc_set_reduction(spec_t *k, const char *name);
void stax_nvrtc_set_name(char *dst, PyObject *name, const char *dflt);
/* lower + render + wrap as a kernel record (new reference) */
PyObject *stax_nvrtc_kernel_record(spec_t *k, int compile);

#endif
