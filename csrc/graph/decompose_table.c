/* The decomposition table: the "decomposition" column of ops.def, parsed
 * once into S-expression trees, and its cycle check (seed Prop. 4.3),
 * run when the module loads.
 *
 *   (op arg ...)   an op-table name applied to arguments
 *   a b c d        the op's tensor operands, by position in its schema
 *   $name          a (scalar) argument of the op, by schema name
 *   1.5 0 -2 inf   numbers */
#include "graph/passes_internal.h"

#include <ctype.h>
#include <string.h>

static const stax_op_info p_rows[] = {
#define STAX_OP(ID, nm, KIND, arity, schema, ovl, inpl, formula, decomp, flags) \
    {STAX_OP_##ID, #nm, KIND, arity, schema, ovl, inpl, formula, decomp, flags},
#include "ops/ops.def"
};
#define P_NROWS ((int)(sizeof(p_rows) / sizeof(p_rows[0])))

static p_sexp *p_trees[P_NROWS > 0 ? P_NROWS : 1];
static int p_parsed[P_NROWS > 0 ? P_NROWS : 1];

static p_sexp *
p_parse(const char **pp)
{
    const char *p = *pp;
    while (isspace((unsigned char)*p)) {
        p++;
    }
    p_sexp *s = PyMem_Calloc(1, sizeof(p_sexp));
    if (s == NULL) {
        return NULL;
    }
    if (*p == '(') {
        p++;
        s->is_list = 1;
        for (;;) {
            while (isspace((unsigned char)*p)) {
                p++;
            }
            if (*p == ')') {
                p++;
                break;
            }
            if (*p == '\0') {
                goto bad;
            }
            p_sexp *it = p_parse(&p);
            if (it == NULL) {
                goto bad;
            }
            p_sexp **ni = PyMem_Realloc(s->items, (s->n + 1) * sizeof(*ni));
            if (ni == NULL) {
                goto bad;
            }
            s->items = ni;
            s->items[s->n++] = it;
        }
    }
    else {
        const char *b = p;
        while (*p && !isspace((unsigned char)*p) && *p != '(' && *p != ')') {
            p++;
        }
        if (p == b) {
            goto bad;
        }
        s->atom = PyMem_Malloc(p - b + 1);
        if (s->atom == NULL) {
            goto bad;
        }
        memcpy(s->atom, b, p - b);
        s->atom[p - b] = '\0';
    }
    *pp = p;
    return s;
bad:
    /* leaked on malformed input only; the table is static */
    return NULL;
}

static int
p_row_index(const stax_op_info *op)
{
    for (int i = 0; i < P_NROWS; i++) {
        if (strcmp(p_rows[i].name, op->name) == 0) {
            return i;
        }
    }
    return -1;
}

const p_sexp *
stax_graph_p_decomp(const stax_op_info *op)
{
    int i = op ? p_row_index(op) : -1;
    if (i < 0 || p_rows[i].decomp == NULL) {
        return NULL;
    }
    if (!p_parsed[i]) {
        const char *p = p_rows[i].decomp;
        p_parsed[i] = 1;
        p_trees[i] = p_parse(&p);
        if (p_trees[i] != NULL && !p_trees[i]->is_list) {
            /* a bare atom (e.g. "a"): the op is the identity */
        }
    }
    return p_trees[i];
}

int
stax_graph_p_is_random(const stax_op_info *op)
{
    return op != NULL && ((op->flags & STAX_OPF_NONDETERMINISTIC)
                          || op->kind == STAX_OPK_RANDOM);
}

/* ---- Prop. 4.3: no cycles among the rules ---------------------------- */

static int
p_visit(int i, int *state, int *stack, int depth)
{
    if (state[i] == 2) {
        return 0;
    }
    if (state[i] == 1) {
        /* a cycle: report the path from i */
        PyObject *path = PyUnicode_FromString(p_rows[i].name);
        int k = depth - 1;
        while (k >= 0 && stack[k] != i) {
            k--;
        }
        for (int j = k + 1; path && j < depth; j++) {
            PyObject *np = PyUnicode_FromFormat("%U -> %s", path,
                                                p_rows[stack[j]].name);
            Py_SETREF(path, np);
        }
        if (path != NULL) {
            PyErr_Format(PyExc_RuntimeError, "the decomposition table has a "
                         "cycle: %U -> %s (seed Prop. 4.3)", path,
                         p_rows[i].name);
            Py_DECREF(path);
        }
        return -1;
    }
    const p_sexp *t = stax_graph_p_decomp(&p_rows[i]);
    if (t == NULL) {
        state[i] = 2;
        return 0;
    }
    state[i] = 1;
    stack[depth] = i;
    /* every head symbol in the tree */
    const p_sexp *work[256];
    int nw = 0;
    work[nw++] = t;
    while (nw > 0) {
        const p_sexp *s = work[--nw];
        if (!s->is_list || s->n == 0) {
            continue;
        }
        if (!s->items[0]->is_list) {
            const stax_op_info *o = stax_graph_p_op_by_name(s->items[0]->atom);
            int j = o ? p_row_index(o) : -1;
            if (j >= 0 && p_visit(j, state, stack, depth + 1) < 0) {
                return -1;
            }
        }
        for (int k = 1; k < s->n && nw < 256; k++) {
            work[nw++] = s->items[k];
        }
    }
    state[i] = 2;
    return 0;
}

int
stax_graph_p_decomp_check_cycles(void)
{
    int state[P_NROWS > 0 ? P_NROWS : 1];
    int stack[P_NROWS + 1];
    memset(state, 0, sizeof(state));
    for (int i = 0; i < P_NROWS; i++) {
        if (p_rows[i].decomp != NULL && stax_graph_p_decomp(&p_rows[i]) == NULL) {
            PyErr_Format(PyExc_RuntimeError, "ops.def: the decomposition of "
                         "%s does not parse: %s", p_rows[i].name,
                         p_rows[i].decomp);
            return -1;
        }
    }
    for (int i = 0; i < P_NROWS; i++) {
        if (p_visit(i, state, stack, 0) < 0) {
            return -1;
        }
    }
    return 0;
}

/* ---- evaluation ------------------------------------------------------ */

static int
p_is_tensor_param(const stax_op_info *op, int i)
{
    return strncmp(stax_graph_p_schema_type(op, i), "Tensor", 6) == 0;
}

static int
p_refs_name(const p_sexp *t, const char *name)
{
    if (!t->is_list) {
        return t->atom[0] == '$' && strcmp(t->atom + 1, name) == 0;
    }
    for (int i = 0; i < t->n; i++) {
        if (p_refs_name(t->items[i], name)) {
            return 1;
        }
    }
    return 0;
}

int
stax_graph_p_decomp_applicable(const stax_op_info *op, const p_sexp *t,
                               PyObject *bound)
{
    int n = stax_graph_p_schema_len(op);
    for (int i = 0; i < n && i < PyTuple_GET_SIZE(bound); i++) {
        if (p_is_tensor_param(op, i)
            || p_refs_name(t, stax_graph_p_schema_name(op, i))) {
            continue;
        }
        PyObject *d = stax_graph_p_schema_default(op, i);
        if (d == NULL) {
            return 0;
        }
        int eq = PyObject_RichCompareBool(PyTuple_GET_ITEM(bound, i), d, Py_EQ);
        if (eq <= 0) {
            PyErr_Clear();
            return 0;
        }
    }
    return 1;
}

static PyObject *
p_number(const char *s)
{
    if (strcmp(s, "inf") == 0) {
        return PyFloat_FromDouble(Py_HUGE_VAL);
    }
    if (strcmp(s, "-inf") == 0) {
        return PyFloat_FromDouble(-Py_HUGE_VAL);
    }
    if (strcmp(s, "nan") == 0) {
        return PyFloat_FromDouble(Py_NAN);
    }
    if (strpbrk(s, ".eE") != NULL) {
        char *end = NULL;
        double d = PyOS_string_to_double(s, &end, NULL);
        if (d == -1.0 && PyErr_Occurred()) {
            return NULL;
        }
        return PyFloat_FromDouble(d);
    }
    return PyLong_FromString(s, NULL, 10);
}

PyObject *
stax_graph_p_eval_decomp(const p_sexp *t, const stax_op_info *op,
                         PyObject *bound, p_emit_fn emit, void *ctx)
{
    if (!t->is_list) {
        const char *a = t->atom;
        int n = stax_graph_p_schema_len(op);
        if (a[0] >= 'a' && a[0] <= 'd' && a[1] == '\0') {
            int want = a[0] - 'a', k = 0;
            for (int i = 0; i < n; i++) {
                if (p_is_tensor_param(op, i)) {
                    if (k == want) {
                        return Py_NewRef(PyTuple_GET_ITEM(bound, i));
                    }
                    k++;
                }
            }
            PyErr_Format(PyExc_ValueError, "decomposition of %s: no tensor "
                         "operand %s", op->name, a);
            return NULL;
        }
        if (a[0] == '$') {
            for (int i = 0; i < n; i++) {
                if (strcmp(stax_graph_p_schema_name(op, i), a + 1) == 0) {
                    return Py_NewRef(PyTuple_GET_ITEM(bound, i));
                }
            }
            PyErr_Format(PyExc_ValueError, "decomposition of %s: no "
                         "argument %s", op->name, a);
            return NULL;
        }
        return p_number(a);
    }
    if (t->n == 0 || t->items[0]->is_list) {
        PyErr_Format(PyExc_ValueError, "decomposition of %s: bad form",
                     op->name);
        return NULL;
    }
    PyObject *args = PyTuple_New(t->n - 1);
    if (args == NULL) {
        return NULL;
    }
    for (int i = 1; i < t->n; i++) {
        PyObject *v = stax_graph_p_eval_decomp(t->items[i], op, bound, emit,
                                               ctx);
        if (v == NULL) {
            Py_DECREF(args);
            return NULL;
        }
        PyTuple_SET_ITEM(args, i - 1, v);
    }
    PyObject *r = emit(t->items[0]->atom, args, ctx);
    Py_DECREF(args);
    return r;
}
