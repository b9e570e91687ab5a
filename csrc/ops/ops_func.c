/* The public function objects (tensorplay.functional.<name>, Tensor
 * methods), __tensor_function__ dispatch, the installer of Tensor methods
 * and number slots, stax_op_for_target, and the _C helpers of _ops.py. */
#include <string.h>

#include "stax_numpy.h"
#include "structmember.h"
#include "ops/ops.h"
#include "ops/ops_internal.h"

typedef struct {
    PyObject_HEAD
    const stax_op_info *op;
    PyObject *name;       /* "relu" */
    PyObject *qualname;   /* "relu" / "Tensor.relu" */
    PyObject *module;     /* "tensorplay.functional" */
    PyObject *doc;
    PyObject *dict;
    int is_method;
    vectorcallfunc vectorcall;
} StaxOpFunc;

static PyTypeObject *OpFunc_Type;
static PyObject *py_impls[STAX_OP_COUNT];          /* strong: out-of-place */
static PyObject *py_inplace_impls[STAX_OP_COUNT];  /* strong: in-place */
static PyObject *functions[STAX_OP_COUNT];         /* strong: public objects */
static PyObject *methods[STAX_OP_COUNT];           /* strong */
static PyObject *inplace_methods[STAX_OP_COUNT];   /* strong */
static PyObject *tensor_function_str;              /* "__tensor_function__" */
static PyObject *base_tensor_function;             /* borrowed from Tensor */
static PyObject *op_name_str;                      /* "_stax_op" */

/* operator module functions mapped to ops */
typedef struct {
    const char *opname;   /* operator.<opname> */
    const char *target;   /* op name */
    PyObject *obj;
} oper_map_t;

static oper_map_t oper_map[] = {
    {"add", "add", NULL}, {"sub", "sub", NULL}, {"mul", "mul", NULL},
    {"truediv", "div", NULL}, {"floordiv", "floor_divide", NULL},
    {"mod", "remainder", NULL}, {"pow", "pow", NULL},
    {"matmul", "matmul", NULL}, {"neg", "neg", NULL}, {"abs", "abs", NULL},
    {"invert", "bitwise_not", NULL}, {"and_", "bitwise_and", NULL},
    {"or_", "bitwise_or", NULL}, {"xor", "bitwise_xor", NULL},
    {"eq", "eq", NULL}, {"ne", "ne", NULL}, {"lt", "lt", NULL},
    {"le", "le", NULL}, {"gt", "gt", NULL}, {"ge", "ge", NULL},
    {"getitem", "getitem", NULL}, {"setitem", "setitem", NULL},
    {"iadd", "add_", NULL}, {"isub", "sub_", NULL}, {"imul", "mul_", NULL},
    {"itruediv", "div_", NULL}, {"ifloordiv", "floor_divide_", NULL},
    {"imod", "remainder_", NULL}, {"ipow", "pow_", NULL},
    {"iand", "bitwise_and_", NULL}, {"ior", "bitwise_or_", NULL},
    {"ixor", "bitwise_xor_", NULL},
};
#define N_OPER ((int)(sizeof(oper_map) / sizeof(oper_map[0])))
static PyObject *builtin_abs;

/* ---- __tensor_function__ ------------------------------------------------ */

static int
overrides(PyObject *o)
{
    PyTypeObject *tp = Py_TYPE(o);
    PyObject *attr;
    if (tp == StaxTensor_Type || tp == &PyFloat_Type || tp == &PyLong_Type
        || tp == &PyBool_Type || o == Py_None || tp == &PyUnicode_Type
        || tp == &PySlice_Type) {
        return 0;
    }
    attr = _PyType_Lookup(tp, tensor_function_str);
    if (attr == NULL) {
        return 0;
    }
    /* Tensor's own (if it ever gets one) is not an override */
    return attr != _PyType_Lookup(StaxTensor_Type, tensor_function_str);
}

/* collect overriding objects' types (unique, in order) from o */
static int
collect(PyObject *o, PyObject **types, int depth)
{
    if (PyTuple_CheckExact(o) || PyList_CheckExact(o)) {
        Py_ssize_t n = PySequence_Fast_GET_SIZE(o);
        PyObject **items = PySequence_Fast_ITEMS(o);
        if (depth > 2) {
            return 0;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            if (collect(items[i], types, depth + 1) < 0) {
                return -1;
            }
        }
        return 0;
    }
    if (!overrides(o)) {
        return 0;
    }
    if (*types == NULL) {
        *types = PyList_New(0);
        if (*types == NULL) {
            return -1;
        }
    }
    if (!PySequence_Contains(*types, (PyObject *)Py_TYPE(o))) {
        /* subclasses before superclasses */
        Py_ssize_t n = PyList_GET_SIZE(*types), at = n;
        for (Py_ssize_t i = 0; i < n; i++) {
            if (PyType_IsSubtype(Py_TYPE(o),
                                 (PyTypeObject *)PyList_GET_ITEM(*types, i))) {
                at = i;
                break;
            }
        }
        return PyList_Insert(*types, at, (PyObject *)Py_TYPE(o));
    }
    return 0;
}

/* borrowed list or NULL; -1 on error */
static int
find_overrides(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
               PyObject **types)
{
    Py_ssize_t nk = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    *types = NULL;
    for (Py_ssize_t i = 0; i < nargs + nk; i++) {
        PyObject *o = args[i];
        PyTypeObject *tp = Py_TYPE(o);
        if (tp == StaxTensor_Type || tp == &PyFloat_Type
            || tp == &PyLong_Type || o == Py_None) {
            continue;
        }
        if (collect(o, types, 0) < 0) {
            Py_CLEAR(*types);
            return -1;
        }
    }
    return 0;
}

static PyObject *
dispatch_override(PyObject *func, PyObject *types, PyObject *const *args,
                  Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *targs = NULL, *kw = NULL, *ttypes = NULL, *res = NULL;
    Py_ssize_t nk = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    targs = PyTuple_New(nargs);
    kw = PyDict_New();
    ttypes = PyList_AsTuple(types);
    if (targs == NULL || kw == NULL || ttypes == NULL) {
        goto done;
    }
    for (Py_ssize_t i = 0; i < nargs; i++) {
        PyTuple_SET_ITEM(targs, i, Py_NewRef(args[i]));
    }
    for (Py_ssize_t i = 0; i < nk; i++) {
        if (PyDict_SetItem(kw, PyTuple_GET_ITEM(kwnames, i),
                           args[nargs + i]) < 0) {
            goto done;
        }
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(ttypes); i++) {
        PyObject *tp = PyTuple_GET_ITEM(ttypes, i);
        PyObject *meth = PyObject_GetAttr(tp, tensor_function_str);
        if (meth == NULL) {
            goto done;
        }
        res = PyObject_CallFunctionObjArgs(meth, func, ttypes, targs, kw,
                                           NULL);
        Py_DECREF(meth);
        if (res == NULL || res != Py_NotImplemented) {
            goto done;
        }
        Py_CLEAR(res);
    }
    PyErr_Format(PyExc_TypeError,
                 "no implementation found for '%R' on types that implement "
                 "__tensor_function__: %R", func, ttypes);
done:
    Py_XDECREF(targs);
    Py_XDECREF(kw);
    Py_XDECREF(ttypes);
    return res;
}

/* ---- calling an op ------------------------------------------------------ */

/* In-place ops follow PyTorch: with grad mode on, a target that does not
 * require grad and is written from an operand that does (positional or
 * keyword) requires grad afterwards (and is no longer a leaf). A target that
 * already requires grad keeps its flags. One place for every in-place op. */
static void
inplace_requires_grad(PyObject *const *args, Py_ssize_t nargs,
                      PyObject *kwnames)
{
    Py_ssize_t nkw = kwnames != NULL ? PyTuple_GET_SIZE(kwnames) : 0;
    StaxTensor *self;
    if (nargs < 1 || !StaxTensor_Check(args[0])) {
        return;
    }
    self = (StaxTensor *)args[0];
    if (self->requires_grad || !stax_dtype_is_floating(self->dtype)) {
        return;
    }
    if (stax_result_requires_grad(args + 1, nargs - 1 + nkw)) {
        stax_tensor_set_result_requires_grad(self, 1);
    }
}

static PyObject *
run_op(const stax_op_info *op, PyObject *func, PyObject *const *args,
       size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *types = NULL, *res, *impl;
    int inplace = stax_ops_is_inplace_info(op);

    if (find_overrides(args, nargs, kwnames, &types) < 0) {
        return NULL;
    }
    if (types != NULL) {
        res = dispatch_override(func, types, args, nargs, kwnames);
        Py_DECREF(types);
        return res;
    }
    res = stax_ops_eager_c(op, args, nargs, kwnames);
    if (res == Py_NotImplemented) {
        Py_DECREF(res);
        res = NULL;
        impl = inplace ? py_inplace_impls[op->id] : py_impls[op->id];
        if (impl != NULL) {
            res = PyObject_Vectorcall(impl, args, nargsf, kwnames);
        }
        else if (nargs >= 1 && StaxTensor_Check(args[0])) {
            /* a method the tensor room implements (views, to, copy_ ...) */
            PyObject *m = PyObject_GetAttrString(
                (PyObject *)Py_TYPE(args[0]), op->name);
            if (m != NULL && Py_TYPE(m) != OpFunc_Type) {
                res = PyObject_Vectorcall(m, args, nargsf, kwnames);
                Py_DECREF(m);
            }
            else {
                Py_XDECREF(m);
                PyErr_Clear();
                PyErr_Format(PyExc_NotImplementedError,
                             "tensorplay: op '%s' has no eager implementation "
                             "for these arguments", op->name);
                return NULL;
            }
        }
        else {
            PyErr_Format(PyExc_NotImplementedError,
                         "tensorplay: op '%s' has no eager implementation for "
                         "these arguments", op->name);
            return NULL;
        }
    }
    if (res != NULL && (inplace || op->name[strlen(op->name) - 1] == '_')) {
        inplace_requires_grad(args, nargs, kwnames);
    }
    return res;
}

static PyObject *
opfunc_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf,
                  PyObject *kwnames)
{
    StaxOpFunc *f = (StaxOpFunc *)self;
    PyObject *pub = self;
    if (f->is_method && !stax_ops_is_inplace_info(f->op)
        && functions[f->op->id] != NULL) {
        pub = functions[f->op->id];   /* x.add(p) -> tensorplay.functional.add */
    }
    return run_op(f->op, pub, args, nargsf, kwnames);
}

PyObject *
stax_op_call(const stax_op_info *op, PyObject *args, PyObject *kwargs)
{
    PyObject *func = stax_op_function(op);
    PyObject *res = NULL, *kwnames = NULL;
    PyObject *stack[32];
    Py_ssize_t n = PyTuple_GET_SIZE(args), nk = 0, i = 0;
    if (kwargs != NULL && kwargs != Py_None) {
        nk = PyDict_GET_SIZE(kwargs);
    }
    if (n + nk > 32) {
        PyErr_SetString(PyExc_TypeError, "too many arguments");
        return NULL;
    }
    for (i = 0; i < n; i++) {
        stack[i] = PyTuple_GET_ITEM(args, i);
    }
    if (nk > 0) {
        PyObject *k, *v;
        Py_ssize_t pos = 0, j = 0;
        kwnames = PyTuple_New(nk);
        if (kwnames == NULL) {
            return NULL;
        }
        while (PyDict_Next(kwargs, &pos, &k, &v)) {
            PyTuple_SET_ITEM(kwnames, j, Py_NewRef(k));
            stack[n + j++] = v;
        }
    }
    res = run_op(op, func ? func : Py_None, stack, (size_t)n, kwnames);
    Py_XDECREF(kwnames);
    return res;
}

PyObject *
stax_op_function(const stax_op_info *op)
{
    if (stax_ops_is_inplace_info(op)) {
        return inplace_methods[op->id];
    }
    return functions[op->id] ? functions[op->id] : methods[op->id];
}

/* ---- the function object type ------------------------------------------- */

static PyObject *
opfunc_descr_get(PyObject *self, PyObject *obj, PyObject *type)
{
    (void)type;
    if (obj == NULL || obj == Py_None) {
        return Py_NewRef(self);
    }
    return PyMethod_New(self, obj);
}

static PyObject *
opfunc_repr(PyObject *self)
{
    StaxOpFunc *f = (StaxOpFunc *)self;
    if (f->is_method) {
        return PyUnicode_FromFormat("<method '%U' of 'Tensor' objects>",
                                    f->name);
    }
    return PyUnicode_FromFormat("<built-in function %U>", f->name);
}

static int
opfunc_traverse(PyObject *self, visitproc visit, void *arg)
{
    StaxOpFunc *f = (StaxOpFunc *)self;
    Py_VISIT(f->dict);
    Py_VISIT(Py_TYPE(self));
    return 0;
}

static int
opfunc_clear(PyObject *self)
{
    StaxOpFunc *f = (StaxOpFunc *)self;
    Py_CLEAR(f->dict);
    return 0;
}

static void
opfunc_dealloc(PyObject *self)
{
    StaxOpFunc *f = (StaxOpFunc *)self;
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    opfunc_clear(self);
    Py_XDECREF(f->name);
    Py_XDECREF(f->qualname);
    Py_XDECREF(f->module);
    Py_XDECREF(f->doc);
    tp->tp_free(self);
    Py_DECREF(tp);
}

static PyObject *
opfunc_get_op_name(PyObject *self, void *c)
{
    (void)c;
    return PyUnicode_FromString(((StaxOpFunc *)self)->op->name);
}

static PyObject *
opfunc_get_schema(PyObject *self, void *c)
{
    (void)c;
    return PyUnicode_FromString(((StaxOpFunc *)self)->op->schema);
}

static PyMemberDef opfunc_members[] = {
    {"__name__", T_OBJECT, offsetof(StaxOpFunc, name), 0, NULL},
    {"__qualname__", T_OBJECT, offsetof(StaxOpFunc, qualname), 0, NULL},
    {"__module__", T_OBJECT, offsetof(StaxOpFunc, module), 0, NULL},
    {"__doc__", T_OBJECT, offsetof(StaxOpFunc, doc), 0, NULL},
    {"__dictoffset__", T_PYSSIZET, offsetof(StaxOpFunc, dict), READONLY, NULL},
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(StaxOpFunc, vectorcall),
     READONLY, NULL},
    {NULL},
};

static PyGetSetDef opfunc_getset[] = {
    {"op_name", opfunc_get_op_name, NULL, NULL, NULL},
    {"_stax_op", opfunc_get_op_name, NULL, NULL, NULL},
    {"schema", opfunc_get_schema, NULL, NULL, NULL},
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL},
};

static PyObject *
opfunc_reduce(PyObject *self, PyObject *unused)
{
    (void)unused;
    return Py_NewRef(((StaxOpFunc *)self)->qualname);
}

static PyMethodDef opfunc_methods[] = {
    {"__reduce__", opfunc_reduce, METH_NOARGS, NULL},
    {NULL},
};

static PyType_Slot opfunc_slots[] = {
    {Py_tp_call, PyVectorcall_Call},
    {Py_tp_descr_get, opfunc_descr_get},
    {Py_tp_repr, opfunc_repr},
    {Py_tp_traverse, opfunc_traverse},
    {Py_tp_clear, opfunc_clear},
    {Py_tp_dealloc, opfunc_dealloc},
    {Py_tp_members, opfunc_members},
    {Py_tp_getset, opfunc_getset},
    {Py_tp_methods, opfunc_methods},
    {0, NULL},
};

static PyType_Spec opfunc_spec = {
    .name = "tensorplay._C.OpFunction",
    .basicsize = sizeof(StaxOpFunc),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC
             | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .slots = opfunc_slots,
};

static PyObject *
make_func(const stax_op_info *op, int is_method)
{
    StaxOpFunc *f = PyObject_GC_New(StaxOpFunc, OpFunc_Type);
    if (f == NULL) {
        return NULL;
    }
    f->op = op;
    f->is_method = is_method;
    f->dict = NULL;
    f->vectorcall = opfunc_vectorcall;
    f->name = PyUnicode_FromString(op->name);
    f->qualname = is_method ? PyUnicode_FromFormat("Tensor.%s", op->name)
                            : Py_NewRef(f->name);
    f->module = PyUnicode_FromString(is_method ? "tensorplay"
                                               : "tensorplay.functional");
    f->doc = PyUnicode_FromFormat("%s%s\n\nop kind %d; formula %s; "
                                  "decomposition %s", op->name,
                                  op->schema ? op->schema : "()", op->kind,
                                  op->formula ? op->formula : "-",
                                  op->decomp ? op->decomp : "-");
    PyObject_GC_Track((PyObject *)f);
    if (f->name == NULL || f->qualname == NULL || f->module == NULL
        || f->doc == NULL) {
        Py_DECREF(f);
        return NULL;
    }
    return (PyObject *)f;
}

/* ---- stax_op_for_target ------------------------------------------------- */

const stax_op_info *
stax_op_for_target(const char *opcode, PyObject *target)
{
    if (opcode == NULL || target == NULL) {
        return NULL;
    }
    if (strcmp(opcode, "call_method") == 0) {
        const char *s;
        if (!PyUnicode_Check(target)) {
            return NULL;
        }
        s = PyUnicode_AsUTF8(target);
        if (s == NULL) {
            PyErr_Clear();
            return NULL;
        }
        return stax_op_by_name(s);
    }
    if (strcmp(opcode, "call_function") != 0) {
        return NULL;
    }
    if (Py_TYPE(target) == OpFunc_Type) {
        return ((StaxOpFunc *)target)->op;
    }
    for (int i = 0; i < N_OPER; i++) {
        if (oper_map[i].obj == target) {
            return stax_op_by_name(oper_map[i].target);
        }
    }
    if (target == builtin_abs) {
        return stax_op_by_name("abs");
    }
    {
        /* tp.ops.<name>.<overload> objects and Python functions */
        PyObject *n = PyObject_GetAttr(target, op_name_str);
        const stax_op_info *op = NULL;
        if (n != NULL && PyUnicode_Check(n)) {
            const char *s = PyUnicode_AsUTF8(n);
            op = s ? stax_op_by_name(s) : NULL;
        }
        Py_XDECREF(n);
        PyErr_Clear();
        return op;
    }
}

/* ---- number slots -------------------------------------------------------- */

static const stax_op_info *slot_ops[STAX_OP_COUNT];

#define BIN_SLOT(fname, ID)                                                  \
    static PyObject *fname(PyObject *a, PyObject *b)                         \
    {                                                                        \
        PyObject *args[2] = {a, b};                                          \
        const stax_op_info *op = &stax_op_table[STAX_OP_##ID];              \
        if ((!StaxTensor_Check(a) && !PyFloat_Check(a) && !PyLong_Check(a) \
             && !stax_ops_is_numpy_scalar(a))                                \
            || (!StaxTensor_Check(b) && !PyFloat_Check(b)                   \
                && !PyLong_Check(b) && !stax_ops_is_numpy_scalar(b))) {      \
            Py_RETURN_NOTIMPLEMENTED;                                        \
        }                                                                    \
        if (Py_TYPE(a) != StaxTensor_Type || Py_TYPE(b) != StaxTensor_Type) {\
            PyObject *types = NULL;                                          \
            if (find_overrides(args, 2, NULL, &types) < 0) {                 \
                return NULL;                                                 \
            }                                                                \
            if (types != NULL) {                                             \
                PyObject *r = dispatch_override(oper_obj_##ID(), types,     \
                                                args, 2, NULL);              \
                Py_DECREF(types);                                            \
                return r;                                                    \
            }                                                                \
        }                                                                    \
        {                                                                    \
            PyObject *r_;                                                    \
            int saved_ = stax_ops_reflected;                                 \
            stax_ops_reflected = !StaxTensor_Check(a);                       \
            r_ = run_op(op, functions[STAX_OP_##ID], args, 2, NULL);        \
            stax_ops_reflected = saved_;                                     \
            return r_;                                                       \
        }                                                                    \
    }

#define INPL_SLOT(fname, ID)                                                 \
    static PyObject *fname(PyObject *a, PyObject *b)                         \
    {                                                                        \
        PyObject *args[2] = {a, b};                                          \
        const stax_op_info *op = stax_ops_inplace_of(                       \
            &stax_op_table[STAX_OP_##ID]);                                   \
        if (!StaxTensor_Check(b) && !PyFloat_Check(b) && !PyLong_Check(b) \
            && !stax_ops_is_numpy_scalar(b)) {                               \
            Py_RETURN_NOTIMPLEMENTED;                                        \
        }                                                                    \
        return run_op(op, inplace_methods[STAX_OP_##ID], args, 2, NULL);    \
    }

static PyObject *oper_objs[STAX_OP_COUNT];
#define OPER_OBJ(ID)                                                         \
    static PyObject *oper_obj_##ID(void) { return oper_objs[STAX_OP_##ID]; }
OPER_OBJ(ADD) OPER_OBJ(SUB) OPER_OBJ(MUL) OPER_OBJ(DIV) OPER_OBJ(FLOOR_DIVIDE)
OPER_OBJ(REMAINDER) OPER_OBJ(POW) OPER_OBJ(MATMUL) OPER_OBJ(BITWISE_AND)
OPER_OBJ(BITWISE_OR) OPER_OBJ(BITWISE_XOR)

BIN_SLOT(nb_add, ADD)
BIN_SLOT(nb_sub, SUB)
BIN_SLOT(nb_mul, MUL)
BIN_SLOT(nb_div, DIV)
BIN_SLOT(nb_floordiv, FLOOR_DIVIDE)
BIN_SLOT(nb_rem, REMAINDER)
BIN_SLOT(nb_matmul, MATMUL)
BIN_SLOT(nb_and, BITWISE_AND)
BIN_SLOT(nb_or, BITWISE_OR)
BIN_SLOT(nb_xor, BITWISE_XOR)
BIN_SLOT(nb_pow2, POW)
INPL_SLOT(nb_iadd, ADD)
INPL_SLOT(nb_isub, SUB)
INPL_SLOT(nb_imul, MUL)
INPL_SLOT(nb_idiv, DIV)
INPL_SLOT(nb_ifloordiv, FLOOR_DIVIDE)
INPL_SLOT(nb_irem, REMAINDER)
INPL_SLOT(nb_iand, BITWISE_AND)
INPL_SLOT(nb_ior, BITWISE_OR)
INPL_SLOT(nb_ixor, BITWISE_XOR)
INPL_SLOT(nb_ipow2, POW)

static PyObject *
nb_pow(PyObject *a, PyObject *b, PyObject *mod)
{
    if (mod != Py_None) {
        Py_RETURN_NOTIMPLEMENTED;
    }
    return nb_pow2(a, b);
}

static PyObject *
nb_ipow(PyObject *a, PyObject *b, PyObject *mod)
{
    if (mod != Py_None) {
        Py_RETURN_NOTIMPLEMENTED;
    }
    return nb_ipow2(a, b);
}

static PyObject *
unary_slot(PyObject *a, stax_op_id_t id)
{
    PyObject *args[1] = {a};
    return run_op(&stax_op_table[id], functions[id] ? functions[id]
                                                     : methods[id],
                  args, 1, NULL);
}

static PyObject *nb_neg(PyObject *a) { return unary_slot(a, STAX_OP_NEG); }
static PyObject *nb_abs(PyObject *a) { return unary_slot(a, STAX_OP_ABS); }
static PyObject *nb_inv(PyObject *a)
{
    return unary_slot(a, STAX_OP_BITWISE_NOT);
}

static PyObject *
tensor_richcompare(PyObject *a, PyObject *b, int cmp)
{
    static const stax_op_id_t ids[6] = {STAX_OP_LT, STAX_OP_LE, STAX_OP_EQ,
                                        STAX_OP_NE, STAX_OP_GT, STAX_OP_GE};
    PyObject *args[2] = {a, b};
    stax_op_id_t id = ids[cmp];
    if (!StaxTensor_Check(b) && !PyFloat_Check(b) && !PyLong_Check(b)
        && !stax_ops_is_numpy_scalar(b)) {
        Py_RETURN_NOTIMPLEMENTED;
    }
    return run_op(&stax_op_table[id], functions[id], args, 2, NULL);
}

static int
install_slots(void)
{
    PyNumberMethods *nm = StaxTensor_Type->tp_as_number;
    if (nm == NULL) {
        PyErr_SetString(PyExc_SystemError, "Tensor has no tp_as_number");
        return -1;
    }
    nm->nb_add = nb_add;
    nm->nb_subtract = nb_sub;
    nm->nb_multiply = nb_mul;
    nm->nb_true_divide = nb_div;
    nm->nb_floor_divide = nb_floordiv;
    nm->nb_remainder = nb_rem;
    nm->nb_power = nb_pow;
    nm->nb_matrix_multiply = nb_matmul;
    nm->nb_and = nb_and;
    nm->nb_or = nb_or;
    nm->nb_xor = nb_xor;
    nm->nb_negative = nb_neg;
    nm->nb_absolute = nb_abs;
    nm->nb_invert = nb_inv;
    nm->nb_inplace_add = nb_iadd;
    nm->nb_inplace_subtract = nb_isub;
    nm->nb_inplace_multiply = nb_imul;
    nm->nb_inplace_true_divide = nb_idiv;
    nm->nb_inplace_floor_divide = nb_ifloordiv;
    nm->nb_inplace_remainder = nb_irem;
    nm->nb_inplace_power = nb_ipow;
    nm->nb_inplace_and = nb_iand;
    nm->nb_inplace_or = nb_ior;
    nm->nb_inplace_xor = nb_ixor;
    StaxTensor_Type->tp_richcompare = tensor_richcompare;
    PyType_Modified(StaxTensor_Type);
    return 0;
}

/* ---- module functions ------------------------------------------------------ */

static const stax_op_info *
op_arg(PyObject *name)
{
    const char *s = PyUnicode_AsUTF8(name);
    const stax_op_info *op;
    if (s == NULL) {
        return NULL;
    }
    op = stax_op_by_name(s);
    if (op == NULL) {
        PyErr_Format(PyExc_KeyError, "no op named '%s'", s);
    }
    return op;
}

static PyObject *
py_set_impl(PyObject *m, PyObject *args)
{
    PyObject *name, *fn;
    const stax_op_info *op;
    PyObject **slot;
    (void)m;
    if (!PyArg_ParseTuple(args, "UO:_ops_set_impl", &name, &fn)) {
        return NULL;
    }
    op = op_arg(name);
    if (op == NULL) {
        return NULL;
    }
    slot = stax_ops_is_inplace_info(op) ? &py_inplace_impls[op->id]
                                        : &py_impls[op->id];
    Py_XSETREF(*slot, Py_NewRef(fn));
    Py_RETURN_NONE;
}

static PyObject *
info_tuple(const stax_op_info *op)
{
    static const char *kinds[] = {"pointwise", "reduction", "view",
                                  "composite", "random", "extern", "other"};
    return Py_BuildValue("{s:s,s:i,s:s,s:i,s:z,s:z,s:z,s:z,s:z,s:I}",
                         "name", op->name, "id", (int)op->id,
                         "kind", kinds[op->kind], "arity", op->arity,
                         "schema", op->schema, "overloads", op->overloads,
                         "inplace", op->inplace, "formula", op->formula,
                         "decomposition", op->decomp, "flags", op->flags);
}

static PyObject *
py_op_table(PyObject *m, PyObject *unused)
{
    PyObject *res = PyList_New(0);
    (void)m;
    (void)unused;
    if (res == NULL) {
        return NULL;
    }
    for (int i = 0; i < STAX_OP_COUNT; i++) {
        const stax_op_info *ops2[2] = {&stax_op_table[i],
                                       stax_ops_inplace_of(&stax_op_table[i])};
        for (int k = 0; k < 2; k++) {
            PyObject *d;
            if (ops2[k] == NULL) {
                continue;
            }
            d = info_tuple(ops2[k]);
            if (d == NULL || PyList_Append(res, d) < 0) {
                Py_XDECREF(d);
                Py_DECREF(res);
                return NULL;
            }
            Py_DECREF(d);
        }
    }
    return res;
}

static PyObject *
py_op_info(PyObject *m, PyObject *name)
{
    const stax_op_info *op = op_arg(name);
    (void)m;
    return op ? info_tuple(op) : NULL;
}

static PyObject *
py_op_bind(PyObject *m, PyObject *args)
{
    PyObject *name, *a, *kw = NULL;
    const stax_op_info *op;
    (void)m;
    if (!PyArg_ParseTuple(args, "UO!|O:_op_bind", &name, &PyTuple_Type, &a,
                          &kw)) {
        return NULL;
    }
    op = op_arg(name);
    return op ? stax_op_bind(op, a, kw) : NULL;
}

static PyObject *
py_op_call(PyObject *m, PyObject *args)
{
    PyObject *name, *a, *kw = NULL;
    const stax_op_info *op;
    (void)m;
    if (!PyArg_ParseTuple(args, "UO!|O:_op_call", &name, &PyTuple_Type, &a,
                          &kw)) {
        return NULL;
    }
    op = op_arg(name);
    return op ? stax_op_call(op, a, kw) : NULL;
}

static PyObject *
py_op_for_target(PyObject *m, PyObject *args)
{
    const char *opcode;
    PyObject *target;
    const stax_op_info *op;
    (void)m;
    if (!PyArg_ParseTuple(args, "sO:_op_for_target", &opcode, &target)) {
        return NULL;
    }
    op = stax_op_for_target(opcode, target);
    if (op == NULL) {
        Py_RETURN_NONE;
    }
    return PyUnicode_FromString(op->name);
}

static PyObject *
py_wrap(PyObject *m, PyObject *arr)
{
    PyObject *a;
    StaxTensor *t;
    (void)m;
    /* a fresh result array: C-contiguous copy unless it already is one */
    a = PyArray_FromAny(arr, NULL, 0, 0, NPY_ARRAY_C_CONTIGUOUS
                        | NPY_ARRAY_ALIGNED, NULL);
    if (a == NULL) {
        return NULL;
    }
    t = stax_tensor_from_array(a);
    Py_DECREF(a);
    return (PyObject *)t;
}

static PyObject *
py_array(PyObject *m, PyObject *t)
{
    (void)m;
    if (!StaxTensor_Check(t)) {
        PyErr_Format(PyExc_TypeError, "expected a Tensor, got %.100s",
                     Py_TYPE(t)->tp_name);
        return NULL;
    }
    return stax_tensor_as_array((StaxTensor *)t);
}

static PyObject *
py_bump(PyObject *m, PyObject *t)
{
    (void)m;
    if (!StaxTensor_Check(t)) {
        PyErr_SetString(PyExc_TypeError, "expected a Tensor");
        return NULL;
    }
    stax_tensor_bump_version((StaxTensor *)t);
    Py_RETURN_NONE;
}

static PyObject *
py_functions(PyObject *m, PyObject *unused)
{
    PyObject *d = PyDict_New();
    (void)m;
    (void)unused;
    if (d == NULL) {
        return NULL;
    }
    for (int i = 0; i < STAX_OP_COUNT; i++) {
        if (functions[i] != NULL
            && PyDict_SetItemString(d, stax_op_table[i].name,
                                    functions[i]) < 0) {
            Py_DECREF(d);
            return NULL;
        }
    }
    return d;
}

static PyMethodDef ops_methods[] = {
    {"_ops_set_impl", py_set_impl, METH_VARARGS, "register an eager impl"},
    {"_op_table", py_op_table, METH_NOARGS, "the op table as dicts"},
    {"_op_info", py_op_info, METH_O, "one op's row as a dict"},
    {"_op_bind", py_op_bind, METH_VARARGS, "stax_op_bind(name, args, kw)"},
    {"_op_call", py_op_call, METH_VARARGS, "run op eagerly"},
    {"_op_for_target", py_op_for_target, METH_VARARGS,
     "stax_op_for_target(opcode, target) -> op name or None"},
    {"_ops_wrap", py_wrap, METH_O, "ndarray -> Tensor (no copy if contiguous)"},
    {"_ops_array", py_array, METH_O, "Tensor -> ndarray view"},
    {"_ops_bump_version", py_bump, METH_O, "bump a tensor's version"},
    {"_op_functions", py_functions, METH_NOARGS,
     "name -> public function object"},
    {NULL},
};

/* ---- init ------------------------------------------------------------------ */

static int
install_method(PyObject *tdict, const char *name, PyObject *obj)
{
    PyObject *old = PyDict_GetItemString(tdict, name);   /* borrowed */
    if (old != NULL) {
        return 0;   /* the tensor room's own method wins */
    }
    return PyDict_SetItemString(tdict, name, obj);
}

int
stax_ops_func_init(PyObject *m)
{
    PyObject *oper = NULL, *bi = NULL, *tdict;
    int rc = -1;

    OpFunc_Type = (PyTypeObject *)PyType_FromSpec(&opfunc_spec);
    if (OpFunc_Type == NULL) {
        return -1;
    }
    OpFunc_Type->tp_dictoffset = offsetof(StaxOpFunc, dict);
    OpFunc_Type->tp_vectorcall_offset = offsetof(StaxOpFunc, vectorcall);
    if (PyModule_AddObjectRef(m, "OpFunction", (PyObject *)OpFunc_Type) < 0) {
        return -1;
    }
    tensor_function_str = PyUnicode_InternFromString("__tensor_function__");
    op_name_str = PyUnicode_InternFromString("_stax_op");
    if (tensor_function_str == NULL || op_name_str == NULL) {
        return -1;
    }
    base_tensor_function = _PyType_Lookup(StaxTensor_Type,
                                          tensor_function_str);
    oper = PyImport_ImportModule("operator");
    bi = PyImport_ImportModule("builtins");
    if (oper == NULL || bi == NULL) {
        goto done;
    }
    for (int i = 0; i < N_OPER; i++) {
        oper_map[i].obj = PyObject_GetAttrString(oper, oper_map[i].opname);
        if (oper_map[i].obj == NULL) {
            goto done;
        }
        {
            const stax_op_info *op = stax_op_by_name(oper_map[i].target);
            if (op && !stax_ops_is_inplace_info(op) && !oper_objs[op->id]) {
                oper_objs[op->id] = oper_map[i].obj;
            }
        }
    }
    builtin_abs = PyObject_GetAttrString(bi, "abs");
    if (builtin_abs == NULL) {
        goto done;
    }
    tdict = StaxTensor_Type->tp_dict;
    for (int i = 0; i < STAX_OP_COUNT; i++) {
        const stax_op_info *op = &stax_op_table[i];
        const stax_op_info *ip = stax_ops_inplace_of(op);
        if (op->flags & STAX_OPF_FUNCTION) {
            functions[i] = make_func(op, 0);
            if (functions[i] == NULL) {
                goto done;
            }
        }
        if (op->flags & STAX_OPF_METHOD) {
            methods[i] = make_func(op, 1);
            if (methods[i] == NULL
                || install_method(tdict, op->name, methods[i]) < 0) {
                goto done;
            }
        }
        if (ip != NULL) {
            inplace_methods[i] = make_func(ip, 1);
            if (inplace_methods[i] == NULL
                || install_method(tdict, ip->name, inplace_methods[i]) < 0) {
                goto done;
            }
        }
        slot_ops[i] = op;
    }
    PyType_Modified(StaxTensor_Type);
    if (install_slots() < 0) {
        goto done;
    }
    if (PyModule_AddFunctions(m, ops_methods) < 0) {
        goto done;
    }
    rc = 0;
done:
    Py_XDECREF(oper);
    Py_XDECREF(bi);
    return rc;
}
