/* Private to csrc/autograd/. */
#ifndef STAX_AUTOGRAD_INTERNAL_H
#define STAX_AUTOGRAD_INTERNAL_H

#include "autograd/autograd.h"

enum { STAX_DERIV_FORMULA = 0, STAX_DERIV_NONDIFF, STAX_DERIV_NOTIMPL };

typedef struct {
    const char *name;     /* op name (ops.def) */
    const char *text;     /* the formula as written */
    int kind;
    PyObject *targets;    /* tuple of (target name, parsed expr) */
    unsigned results;     /* bit k: uses output k (result, result1 ...) */
    int uses_node;        /* a helper replays the op: keep every argument */
    PyObject *names;      /* frozenset of parameter names it reads */
} stax_deriv;

typedef struct {
    PyObject *fn;         /* strong Node, NULL = no gradient flows there */
    int nr;
} stax_edge;

typedef struct {
    PyObject_HEAD
    PyObject *weakreflist;
    char name[64];                /* "MulBackward0" */
    int64_t seq;                  /* creation order: later runs first */
    const stax_deriv *deriv;      /* NULL: AccumulateGrad */
    int is_acc;
    PyObject *variable;           /* AccumulateGrad: the leaf (strong) */
    PyObject *replay;             /* re-runs the forward (helpers' _pick) */
    PyObject *names;              /* tuple: parameter names, as args */
    PyObject *args;               /* tuple: saved arguments (NULL: freed) */
    PyObject *kwargs;             /* dict or NULL: extra replay kwargs */
    int kwonly_from;              /* args[i >= it] are passed by keyword */
    PyObject *shapes;             /* tuple: tensor args' shapes (or None) */
    uint64_t *versions;           /* per argument, at save time */
    PyObject *results;            /* tuple: saved outputs (or NULL) */
    uint64_t *res_versions;
    int n_in;                     /* input edges (tensor operands) */
    stax_edge *next;
    int *in_param;                /* edge -> argument index */
    int *in_elem;                 /* edge -> element of a list argument, -1 */
    PyObject *in_shapes;          /* tuple of tensorplay.Size per edge */
    stax_dtype_t *in_dtypes;
    int n_out;
    PyObject *out_shapes;         /* tuple per output (None: not a tensor) */
    stax_dtype_t *out_dtypes;
    int had_saved, freed;
    PyObject *pre_hooks;          /* list of (nr, fn, is_retain) */
    PyObject *post_hooks;         /* list of fn(grad_inputs, grad_outputs) */
    PyObject *pyfn;               /* a Python backward (no formula):
                                     pyfn(*grads) -> grads of the inputs */
    PyObject *view_base;          /* a view op's node (and the node of an
                                     in-place write into a view): the base
                                     tensor its outputs view (strong) */
} StaxGradNode;

#define StaxGradNode_Check(o) PyObject_TypeCheck((o), StaxGradNode_Type)

/* node.c */
int stax_ag_node_init(PyObject *m);
StaxGradNode *stax_ag_node_new(const char *opname, const stax_deriv *d);
PyObject *stax_ag_accumulator(StaxTensor *leaf);  /* new ref */
/* (grad_fn, output_nr) or (accumulator, 0); fn NULL when no grad flows */
int stax_ag_grad_edge(StaxTensor *t, stax_edge *e);
PyObject *stax_ag_unpack(StaxGradNode *n, int arg);       /* new ref */
PyObject *stax_ag_unpack_result(StaxGradNode *n, int k);  /* new ref */
void stax_ag_release(StaxGradNode *n);
PyObject *stax_ag_replay(StaxGradNode *n, PyObject *self_value);

/* formula.c */
int stax_ag_formulas_init(void);
/* The parsed derivative of an op id (ops.def's STAX_OP_DERIV row); NULL
 * for an id out of range. */
const stax_deriv *stax_ag_deriv_of(stax_op_id_t id);
/* The same by the name of a row ("add", "copy_"); NULL when the name is no
 * row of the op table (an in-place twin such as "add_" is none). */
const stax_deriv *stax_ag_deriv_for(const char *opname);
/* {op name: {"kind": "formula"|"nondiff"|"notimpl", "formula": text}} */
PyObject *stax_ag_derivatives_dict(void);
/* gradient of every input edge (list, None where none) */
PyObject *stax_ag_apply_formula(StaxGradNode *n, PyObject *grads);
extern PyObject *stax_ag_helpers;   /* dict: _name -> callable */

/* engine.c */
int stax_ag_engine_init(PyObject *m);
PyObject *stax_ag_call_method(PyObject *obj, const char *name, PyObject *arg);
PyObject *stax_ag_sum_to(PyObject *g, PyObject *shape);

/* node.c: the saved tensors of a node with a Python backward
 * (_autograd_attach(..., saved)), version-checked; new ref or NULL + the
 * freed / version error */
PyObject *stax_ag_saved_tuple(StaxGradNode *n);

/* joint.c: _C._autograd_formula (the compiled joint graph's formulas) */
int stax_ag_joint_init(PyObject *m);

/* record.c */
int stax_ag_record_init(PyObject *m);
/* the op's schema parameter names (borrowed tuple) and the index of the
 * first keyword-only one; NULL + exception */
PyObject *stax_ag_schema_names(const stax_op_info *op, int *kwonly_from);
/* run fn(*args, **kw) with grad mode off */
PyObject *stax_ag_call_nograd(PyObject *fn, PyObject *args, PyObject *kw);

#endif
