/* ops room init: the op table, eager kernels, public function objects and
 * the Tensor methods / number slots installed from the table. */
#include "ops/ops.h"
#include "ops/ops_internal.h"

int
stax_ops_module_init(PyObject *m)
{
    if (stax_ops_table_init() < 0 || stax_ops_eager_init(m) < 0
        || stax_ops_func_init(m) < 0
        || stax_ops_cuda_init(m) < 0) {
        return -1;
    }
    return 0;
}
