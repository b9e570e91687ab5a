/* The op table (from ops.def), name lookup, in-place twins, schema parsing
 * and argument binding. */
#include <string.h>

#include "ops/ops.h"
#include "ops/ops_internal.h"

const stax_op_info stax_op_table[] = {
#define STAX_OP(ID, name, KIND, arity, schema, ovl, inpl, formula, decomp, flags) \
    {STAX_OP_##ID, #name, KIND, arity, schema, ovl, inpl, formula, decomp, flags},
#include "ops/ops.def"
};
_Static_assert(sizeof(stax_op_table) / sizeof(stax_op_table[0]) == STAX_OP_COUNT,
               "stax_op_table: one row per op id");

const char *const stax_op_derivative[] = {
#define STAX_OP_DERIV(ID, formula) [STAX_OP_##ID] = formula,
#include "ops/ops.def"
};
/* Every op has exactly one derivative row: an unknown ID fails the
 * designator above, a repeated one redeclares its enumerator here, and the
 * count catches a missing one. */
enum {
#define STAX_OP_DERIV(ID, formula) STAX_OP_DERIV_ROW_##ID,
#include "ops/ops.def"
    STAX_OP_DERIV_ROWS
};
_Static_assert((int)STAX_OP_DERIV_ROWS == (int)STAX_OP_COUNT,
               "ops.def: one STAX_OP_DERIV row per op");
_Static_assert(sizeof(stax_op_derivative) / sizeof(stax_op_derivative[0])
                   == STAX_OP_COUNT,
               "stax_op_derivative: one entry per op id");

int
stax_op_nondiff(const stax_op_info *op)
{
    return strcmp(stax_op_derivative[op->id], "nondiff") == 0;
}

const stax_lower_rule_t stax_op_lower[] = {
#define STAX_OP_LOWER(ID, RULE) [STAX_OP_##ID] = STAX_LOWER_##RULE,
#include "ops/ops.def"
};
enum {
#define STAX_OP_LOWER(ID, RULE) STAX_OP_LOWER_ROW_##ID,
#include "ops/ops.def"
    STAX_OP_LOWER_ROWS
};
_Static_assert((int)STAX_OP_LOWER_ROWS == (int)STAX_OP_COUNT,
               "ops.def: one STAX_OP_LOWER row per op");
_Static_assert(sizeof(stax_op_lower) / sizeof(stax_op_lower[0]) == STAX_OP_COUNT,
               "stax_op_lower: one entry per op id");

const stax_pyop_info stax_pyop_table[] = {
#define STAX_PYOP(KEY, fn, ifn, OP, sym, arity, flags) \
    {STAX_PYOP_##KEY, fn, ifn, STAX_OP_##OP, sym, arity, flags},
#include "ops/ops.def"
};
_Static_assert(sizeof(stax_pyop_table) / sizeof(stax_pyop_table[0])
               == STAX_PYOP_COUNT, "stax_pyop_table: one row per key");

const stax_call_info stax_call_table[] = {
#define STAX_CALL(KEY, name, OP, KIND) {STAX_CALL_##KEY, name, STAX_OP_##OP, KIND},
#include "ops/ops.def"
};
_Static_assert(sizeof(stax_call_table) / sizeof(stax_call_table[0])
               == STAX_CALL_COUNT, "stax_call_table: one row per key");

const stax_call_info *
stax_call_by_name(const char *name)
{
    size_t n = name != NULL ? strcspn(name, ".") : 0;
    for (int i = 0; n > 0 && i < STAX_CALL_COUNT; i++) {
        const char *r = stax_call_table[i].name;
        if (strncmp(r, name, n) == 0 && r[n] == 0) {
            return &stax_call_table[i];
        }
    }
    return NULL;
}

static PyObject *pyop_fns[STAX_PYOP_COUNT][2];   /* strong: operator.<fn>/<ifn> */

/* in-place twins: info copies of the out-of-place rows */
static stax_op_info inplace_infos[STAX_OP_COUNT];
static stax_op_schema schemas[STAX_OP_COUNT];
static stax_op_schema inplace_schemas[STAX_OP_COUNT];

/* name -> info: open addressing over 2 * (2 * COUNT) slots */
#define NAME_SLOTS 1024
_Static_assert(NAME_SLOTS > 4 * STAX_OP_COUNT, "grow NAME_SLOTS");
static const stax_op_info *name_slots[NAME_SLOTS];

static uint32_t
name_hash(const char *s)
{
    uint32_t h = 2166136261u;
    for (; *s; s++) {
        h = (h ^ (unsigned char)*s) * 16777619u;
    }
    return h;
}

static void
name_insert(const stax_op_info *op)
{
    uint32_t i = name_hash(op->name) & (NAME_SLOTS - 1);
    while (name_slots[i] != NULL) {
        if (strcmp(name_slots[i]->name, op->name) == 0) {
            return;   /* first row wins */
        }
        i = (i + 1) & (NAME_SLOTS - 1);
    }
    name_slots[i] = op;
}

const stax_op_info *
stax_op_by_name(const char *name)
{
    uint32_t i = name_hash(name) & (NAME_SLOTS - 1);
    while (name_slots[i] != NULL) {
        if (strcmp(name_slots[i]->name, name) == 0) {
            return name_slots[i];
        }
        i = (i + 1) & (NAME_SLOTS - 1);
    }
    return NULL;
}

int
stax_op_has_overload(const stax_op_info *op, const char *overload)
{
    const char *p = op->overloads;
    size_t n = strlen(overload);
    while (p && *p) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && strncmp(p, overload, n) == 0) {
            return 1;
        }
        p = e ? e + 1 : NULL;
    }
    return 0;
}

int
stax_ops_is_inplace_info(const stax_op_info *op)
{
    return op >= inplace_infos && op < inplace_infos + STAX_OP_COUNT;
}

const stax_op_info *
stax_ops_inplace_of(const stax_op_info *op)
{
    if (op->inplace == NULL || stax_ops_is_inplace_info(op)) {
        return NULL;
    }
    return &inplace_infos[op->id];
}

const stax_op_info *
stax_ops_outofplace_of(const stax_op_info *op)
{
    if (stax_ops_is_inplace_info(op)) {
        return &stax_op_table[op->id];
    }
    return NULL;
}

/* ---- schema parsing ---------------------------------------------------- */

static PyObject *
parse_default(const char *s, size_t n)
{
    char buf[128];
    if (n >= sizeof(buf)) {
        n = sizeof(buf) - 1;
    }
    memcpy(buf, s, n);
    buf[n] = '\0';
    if (strcmp(buf, "None") == 0) {
        Py_RETURN_NONE;
    }
    if (strcmp(buf, "True") == 0) {
        Py_RETURN_TRUE;
    }
    if (strcmp(buf, "False") == 0) {
        Py_RETURN_FALSE;
    }
    if (strcmp(buf, "[]") == 0) {
        return PyTuple_New(0);
    }
    if (buf[0] == '\'' || buf[0] == '"') {
        return PyUnicode_FromStringAndSize(buf + 1, (Py_ssize_t)n - 2);
    }
    if (strpbrk(buf, ".eE") != NULL && strcmp(buf, "-100") != 0) {
        return PyFloat_FromDouble(strtod(buf, NULL));
    }
    return PyLong_FromLongLong(strtoll(buf, NULL, 10));
}

static void
trim(const char **s, const char **e)
{
    while (*s < *e && (**s == ' ')) {
        (*s)++;
    }
    while (*e > *s && ((*e)[-1] == ' ')) {
        (*e)--;
    }
}

static int
parse_schema(const char *schema, stax_op_schema *out)
{
    const char *p = schema, *end;
    int kwonly = 0;
    memset(out, 0, sizeof(*out));
    if (schema == NULL || *p != '(') {
        return 0;
    }
    p++;
    end = strrchr(p, ')');
    if (end == NULL) {
        return 0;
    }
    while (p < end) {
        const char *q = p, *ce, *sp, *eq;
        stax_op_param *pa;
        while (q < end && *q != ',') {
            q++;
        }
        ce = q;
        trim(&p, &ce);
        if (ce - p == 1 && *p == '*') {
            kwonly = 1;
            p = q + 1;
            continue;
        }
        if (out->n >= STAX_OP_MAX_PARAMS) {
            break;
        }
        pa = &out->params[out->n];
        eq = memchr(p, '=', (size_t)(ce - p));
        {
            const char *decl_end = eq ? eq : ce;
            sp = decl_end;
            while (sp > p && sp[-1] == ' ') {
                sp--;
            }
            decl_end = sp;
            while (sp > p && sp[-1] != ' ') {
                sp--;
            }
            /* type = [p, sp), name = [sp, decl_end) */
            {
                size_t tl = (size_t)(sp - p), nl = (size_t)(decl_end - sp);
                while (tl > 0 && p[tl - 1] == ' ') {
                    tl--;
                }
                if (tl >= sizeof(pa->type)) {
                    tl = sizeof(pa->type) - 1;
                }
                if (nl >= sizeof(pa->name)) {
                    nl = sizeof(pa->name) - 1;
                }
                memcpy(pa->type, p, tl);
                pa->type[tl] = '\0';
                memcpy(pa->name, sp, nl);
                pa->name[nl] = '\0';
            }
        }
        pa->kwonly = kwonly;
        pa->is_tensor = strncmp(pa->type, "Tensor", 6) == 0
                        && pa->type[6] != '[';
        pa->is_tensor_list = strncmp(pa->type, "Tensor[]", 8) == 0;
        pa->is_list = strchr(pa->type, '[') != NULL && !pa->is_tensor_list;
        pa->optional = strchr(pa->type, '?') != NULL;
        if (eq) {
            const char *ds = eq + 1, *de = ce;
            trim(&ds, &de);
            pa->dflt = parse_default(ds, (size_t)(de - ds));
            snprintf(pa->dflt_text, sizeof(pa->dflt_text), "%.*s", (int)(de - ds), ds);
            if (pa->dflt == NULL) {
                return -1;
            }
        }
        else if (pa->optional && pa->is_tensor && out->n > 0) {
            /* "Tensor? weight" without default in native_layer_norm: required */
            pa->dflt = NULL;
        }
        if (!kwonly) {
            out->npos = out->n + 1;
        }
        out->n++;
        p = q + 1;
    }
    return 0;
}

const stax_op_schema *
stax_ops_schema(const stax_op_info *op)
{
    if (stax_ops_is_inplace_info(op)) {
        return &inplace_schemas[op->id];
    }
    return &schemas[op->id];
}

int
stax_op_param_index(const stax_op_info *op, const char *name)
{
    const stax_op_schema *s = stax_ops_schema(op);
    for (int i = 0; i < s->n; i++) {
        if (strcmp(s->params[i].name, name) == 0) {
            return i;
        }
    }
    return -1;
}

/* ---- binding ----------------------------------------------------------- */

static int
param_index(const stax_op_schema *s, PyObject *key)
{
    const char *k = PyUnicode_AsUTF8(key);
    if (k == NULL) {
        PyErr_Clear();
        return -1;
    }
    for (int i = 0; i < s->n; i++) {
        if (strcmp(s->params[i].name, k) == 0) {
            return i;
        }
    }
    /* NumPy's spellings torch accepts: axis= for dim, keepdims= for keepdim
     * (ops_func.c renames them for the eager kernels; a traced call keeps
     * the user's spelling) */
    const char *alias = strcmp(k, "axis") == 0 ? "dim"
                        : strcmp(k, "keepdims") == 0 ? "keepdim" : NULL;
    for (int i = 0; alias != NULL && i < s->n; i++) {
        if (strcmp(s->params[i].name, alias) == 0) {
            return i;
        }
    }
    /* torch accepts input= for self and self= nowhere; be lenient */
    if (s->n > 0 && (strcmp(k, "input") == 0 || strcmp(k, "self") == 0)
        && (strcmp(s->params[0].name, "self") == 0
            || strcmp(s->params[0].name, "input") == 0)) {
        return 0;
    }
    return -1;
}

PyObject *
stax_ops_bind_vector(const stax_op_info *op, PyObject *const *args,
                     Py_ssize_t nargs, PyObject *kwnames,
                     PyObject *const *kwvalues)
{
    const stax_op_schema *s = stax_ops_schema(op);
    PyObject *vals[STAX_OP_MAX_PARAMS] = {NULL};
    PyObject *res = NULL;
    Py_ssize_t i, nk = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    int packed = 0;

    if (nargs > s->npos) {
        /* view(2, 3) / permute(1, 0) / einsum(eq, a, b): pack the rest
         * into the list param */
        if (s->npos >= 1 && (s->params[s->npos - 1].is_list
                             || s->params[s->npos - 1].is_tensor_list)) {
            Py_ssize_t first = s->npos - 1;
            PyObject *t = PyTuple_New(nargs - first);
            if (t == NULL) {
                return NULL;
            }
            for (i = first; i < nargs; i++) {
                PyTuple_SET_ITEM(t, i - first, Py_NewRef(args[i]));
            }
            vals[first] = t;
            packed = 1;
            nargs = first;
        }
        else {
            PyErr_Format(PyExc_TypeError,
                         "%s() takes %d positional argument%s but %zd were "
                         "given", op->name, s->npos, s->npos == 1 ? "" : "s",
                         nargs);
            return NULL;
        }
    }
    for (i = 0; i < nargs; i++) {
        vals[i] = Py_NewRef(args[i]);
    }
    for (i = 0; i < nk; i++) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, i);
        int j = param_index(s, key);
        if (j < 0) {
            PyErr_Format(PyExc_TypeError,
                         "%s() got an unexpected keyword argument '%U'",
                         op->name, key);
            goto done;
        }
        if (vals[j] != NULL) {
            PyErr_Format(PyExc_TypeError,
                         "%s() got multiple values for argument '%s'",
                         op->name, s->params[j].name);
            goto done;
        }
        vals[j] = Py_NewRef(kwvalues[i]);
    }
    for (i = 0; i < s->n; i++) {
        if (vals[i] == NULL) {
            if (s->params[i].dflt == NULL) {
                PyErr_Format(PyExc_TypeError,
                             "%s() missing required argument '%s' "
                             "(position %zd)", op->name, s->params[i].name,
                             i + 1);
                goto done;
            }
            vals[i] = Py_NewRef(s->params[i].dflt);
        }
        else if (s->params[i].is_list && !packed
                 && PyLong_Check(vals[i]) && !PyBool_Check(vals[i])) {
            /* int[1] dim=1 stays an int (torch prints it as given) */
        }
    }
    res = PyTuple_New(s->n);
    if (res == NULL) {
        goto done;
    }
    for (i = 0; i < s->n; i++) {
        PyTuple_SET_ITEM(res, i, vals[i]);
        vals[i] = NULL;
    }
done:
    for (i = 0; i < STAX_OP_MAX_PARAMS; i++) {
        Py_XDECREF(vals[i]);
    }
    return res;
}

PyObject *
stax_op_bind(const stax_op_info *op, PyObject *args, PyObject *kwargs)
{
    PyObject *kwnames = NULL, *res = NULL;
    PyObject *kwv[STAX_OP_MAX_PARAMS] = {NULL};
    Py_ssize_t nk = 0;
    if (args == NULL || !PyTuple_Check(args)) {
        PyErr_Format(PyExc_TypeError, "%s(): args must be a tuple", op->name);
        return NULL;
    }
    if (kwargs != NULL && kwargs != Py_None && PyDict_GET_SIZE(kwargs) > 0) {
        PyObject *k, *v;
        Py_ssize_t pos = 0, j = 0;
        nk = PyDict_GET_SIZE(kwargs);
        if (nk > STAX_OP_MAX_PARAMS) {
            PyErr_Format(PyExc_TypeError, "%s(): too many keyword arguments",
                         op->name);
            return NULL;
        }
        kwnames = PyTuple_New(nk);
        if (kwnames == NULL) {
            return NULL;
        }
        while (PyDict_Next(kwargs, &pos, &k, &v)) {
            PyTuple_SET_ITEM(kwnames, j, Py_NewRef(k));
            kwv[j++] = v;
        }
    }
    res = stax_ops_bind_vector(op, &PyTuple_GET_ITEM(args, 0),
                               PyTuple_GET_SIZE(args), kwnames, kwv);
    Py_XDECREF(kwnames);
    return res;
}

/* ---- Python operators --------------------------------------------------- */

const stax_op_info *
stax_op_row(const char *name)
{
    const stax_op_info *op = stax_op_by_name(name);
    return op != NULL && !stax_ops_is_inplace_info(op) ? op : NULL;
}

const stax_op_info *
stax_op_by_overload(const char *tag, const char **overload)
{
    char name[64];
    size_t n = tag != NULL ? strcspn(tag, ".") : 0;
    if (overload != NULL) {
        *overload = tag != NULL ? tag + n + (tag[n] == '.') : "";
    }
    if (n == 0 || n >= sizeof(name)) {
        return NULL;
    }
    memcpy(name, tag, n);
    name[n] = 0;
    return stax_op_row(name);
}

const stax_op_info *
stax_op_inplace(const stax_op_info *op)
{
    return stax_ops_inplace_of(op);
}

const stax_pyop_info *
stax_pyop_by_fn(const char *name, int *inplace)
{
    for (int i = 0; i < STAX_PYOP_COUNT; i++) {
        const stax_pyop_info *p = &stax_pyop_table[i];
        int ip = p->ifn != NULL && strcmp(p->ifn, name) == 0;
        if (ip || strcmp(p->fn, name) == 0) {
            if (inplace != NULL) {
                *inplace = ip;
            }
            return p;
        }
    }
    return NULL;
}

const stax_pyop_info *
stax_pyop_for_target(PyObject *target, int *inplace)
{
    for (int i = 0; i < STAX_PYOP_COUNT; i++) {
        for (int ip = 0; ip < 2; ip++) {
            if (pyop_fns[i][ip] != NULL && pyop_fns[i][ip] == target) {
                if (inplace != NULL) {
                    *inplace = ip;
                }
                return &stax_pyop_table[i];
            }
        }
    }
    return NULL;
}

const stax_pyop_info *
stax_pyop_of_op(stax_op_id_t op)
{
    for (int i = 0; i < STAX_PYOP_COUNT; i++) {
        if (stax_pyop_table[i].op == op) {
            return &stax_pyop_table[i];
        }
    }
    return NULL;
}

PyObject *
stax_pyop_function(const stax_pyop_info *p, int inplace)
{
    return pyop_fns[p->key][inplace ? 1 : 0];
}

const stax_op_info *
stax_pyop_op(const stax_pyop_info *p, int inplace)
{
    if (p->op == STAX_OP_NONE) {
        return NULL;
    }
    return inplace ? stax_ops_inplace_of(&stax_op_table[p->op])
                   : &stax_op_table[p->op];
}

/* The operator functions, and the checks that keep the two halves of
 * ops.def in step: a row's STAX_OPF_OPERATOR flag says exactly that some
 * Python operator means it. */
static int
pyop_init(void)
{
    PyObject *opm = PyImport_ImportModule("operator");
    int rc = -1;
    if (opm == NULL) {
        return -1;
    }
    for (int i = 0; i < STAX_PYOP_COUNT; i++) {
        const stax_pyop_info *p = &stax_pyop_table[i];
        if ((int)p->key != i || p->op < STAX_OP_NONE
            || p->op >= STAX_OP_COUNT) {
            PyErr_SetString(PyExc_SystemError,
                            "ops.def: Python operator rows out of order");
            goto done;
        }
        for (int ip = 0; ip < 2; ip++) {
            const char *fn = ip ? p->ifn : p->fn;
            if (fn != NULL) {
                Py_XSETREF(pyop_fns[i][ip], PyObject_GetAttrString(opm, fn));
                if (pyop_fns[i][ip] == NULL) {
                    goto done;
                }
            }
        }
    }
    for (int i = 0; i < STAX_OP_COUNT; i++) {
        int flagged = (stax_op_table[i].flags & STAX_OPF_OPERATOR) != 0;
        if (flagged != (stax_pyop_of_op((stax_op_id_t)i) != NULL)) {
            PyErr_Format(PyExc_SystemError,
                         "ops.def: op %s %s STAX_OPF_OPERATOR but %s Python "
                         "operator row names it", stax_op_table[i].name,
                         flagged ? "has" : "lacks", flagged ? "no" : "a");
            goto done;
        }
    }
    rc = 0;
done:
    Py_DECREF(opm);
    return rc;
}

/* ---- init -------------------------------------------------------------- */

int
stax_ops_table_init(void)
{
    for (int i = 0; i < STAX_OP_COUNT; i++) {
        const stax_op_info *op = &stax_op_table[i];
        if ((int)op->id != i) {
            PyErr_SetString(PyExc_SystemError, "ops.def: id out of order");
            return -1;
        }
        name_insert(op);
        if (parse_schema(op->schema, &schemas[i]) < 0) {
            return -1;
        }
    }
    for (int i = 0; i < STAX_OP_COUNT; i++) {
        const stax_op_info *op = &stax_op_table[i];
        if (op->inplace == NULL) {
            continue;
        }
        inplace_infos[i] = *op;
        inplace_infos[i].name = op->inplace;
        inplace_infos[i].inplace = op->name;
        inplace_infos[i].flags = (op->flags | STAX_OPF_INPLACE | STAX_OPF_METHOD)
                                 & ~(STAX_OPF_FUNCTION | STAX_OPF_OPERATOR
                                     | STAX_OPF_COMMUTATIVE
                                     | STAX_OPF_IDENTITY_0
                                     | STAX_OPF_IDENTITY_1);
        inplace_schemas[i] = schemas[i];
        for (int j = 0; j < schemas[i].n; j++) {
            Py_XINCREF(schemas[i].params[j].dflt);
        }
        name_insert(&inplace_infos[i]);
    }
    return pyop_init();
}
