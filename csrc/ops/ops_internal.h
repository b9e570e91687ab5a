/* Private to csrc/ops/: the table's init, in-place twins, the function object type, eager
 * kernels. Not a public header. */
#ifndef STAX_OPS_INTERNAL_H
#define STAX_OPS_INTERNAL_H

#include "ops/ops.h"

int stax_ops_table_init(void);
int stax_ops_is_inplace_info(const stax_op_info *op);
const stax_op_info *stax_ops_inplace_of(const stax_op_info *op);
const stax_op_info *stax_ops_outofplace_of(const stax_op_info *op);
PyObject *stax_ops_bind_vector(const stax_op_info *op, PyObject *const *args,
                               Py_ssize_t nargs, PyObject *kwnames,
                               PyObject *const *kwvalues);

/* eager kernels (ops_eager.c); NULL + exception, or Py_NotImplemented
 * (new ref) when the C path does not cover the call */
int stax_ops_eager_init(PyObject *m);
PyObject *stax_ops_eager_c(const stax_op_info *op, PyObject *const *args,
                           Py_ssize_t nargs, PyObject *kwnames);
PyObject *stax_ops_binary(const stax_op_info *op, PyObject *a, PyObject *b,
                          StaxTensor *inplace_out);

extern int stax_ops_reflected;
/* 1 while stax_ops_meta_call runs a kernel: results are allocated, not
 * computed; a kernel that needs its operands' values calls
 * stax_ops_meta_unsupported() (NULL with the private marker exception) */
extern int stax_ops_meta_mode;
PyObject *stax_ops_meta_unsupported(void);
int stax_ops_is_numpy_scalar(PyObject *o);

/* function objects and installer (ops_func.c) */
int stax_ops_func_init(PyObject *m);
int stax_ops_cuda_init(PyObject *m);     /* ops_cuda.c: cuBLAS matmul */

#endif
