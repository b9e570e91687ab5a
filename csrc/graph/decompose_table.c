/* The decomposition table: the "decomposition" column of ops.def, as the
 * ops room parses it once into S-expression trees, and its cycle check (seed Prop. 4.3),
 * run when the module loads.
 *
 *   (op arg ...)   an op-table name applied to arguments
 *   a b c d        the op's tensor operands, by position in its schema
 *   $name          a (scalar) argument of the op, by schema name
 *   1.5 0 -2 inf   numbers */
#include "graph/passes_internal.h"

#include <ctype.h>
#include <string.h>

#define p_rows stax_op_table
#define P_NROWS STAX_OP_COUNT

/* the row of op; -1 for an in-place twin's info (add_ has no rule) */
static int
p_row_index(const stax_op_info *op)
{
    int i = (int)op->id;
    if (i < 0 || i >= P_NROWS || op != &p_rows[i]) {
        return -1;
    }
    return i;
}

const p_sexp *
stax_graph_p_decomp(const stax_op_info *op)
{
    int i = op ? p_row_index(op) : -1;
    /* parsed once by the ops room; a bare atom ("a") is the identity */
    return i < 0 ? NULL : stax_op_decomp_tree(&p_rows[i]);
}

int
stax_graph_p_is_random(const stax_op_info *op)
{
    return op != NULL && ((op->flags & STAX_OPF_NONDETERMINISTIC)
                          || op->kind == STAX_OPK_RANDOM);
}

/* ---- Prop. 4.3: no cycles among the rules ---------------------------- */

/* add every head symbol of t to the list out */
static int
p_heads(const p_sexp *t, PyObject *out)
{
    if (!t->is_list || t->n == 0) {
        return 0;
    }
    if (!t->items[0]->is_list) {
        PyObject *s = PyUnicode_FromString(t->items[0]->atom);
        int e = s ? PyList_Append(out, s) : -1;
        Py_XDECREF(s);
        if (e < 0) {
            return -1;
        }
    }
    for (int i = 1; i < t->n; i++) {
        if (p_heads(t->items[i], out) < 0) {
            return -1;
        }
    }
    return 0;
}

/* state: name -> 1 (on the stack) / 2 (done); stack: list of names */
static int
p_visit(PyObject *edges, PyObject *name, PyObject *state, PyObject *stack)
{
    PyObject *st = PyDict_GetItemWithError(state, name);
    if (st != NULL) {
        if (PyLong_AsLong(st) == 2) {
            return 0;
        }
        /* a cycle: the part of the stack from name */
        Py_ssize_t k = PySequence_Index(stack, name);
        PyObject *cyc = k >= 0 ? PyList_GetSlice(stack, k, PyList_GET_SIZE(stack))
                               : NULL;
        PyObject *sep = PyUnicode_FromString(" -> ");
        if (cyc != NULL && PyList_Append(cyc, name) == 0 && sep != NULL) {
            PyObject *j = PyUnicode_Join(sep, cyc);
            if (j != NULL) {
                PyErr_Format(PyExc_RuntimeError, "the decomposition table has "
                             "a cycle: %U (seed Prop. 4.3)", j);
                Py_DECREF(j);
            }
        }
        Py_XDECREF(cyc);
        Py_XDECREF(sep);
        return -1;
    }
    if (PyErr_Occurred()) {
        return -1;
    }
    PyObject *outs = PyDict_GetItemWithError(edges, name);
    if (outs == NULL) {
        return PyErr_Occurred() ? -1 : 0;   /* no rule: depth 0 */
    }
    PyObject *one = PyLong_FromLong(1), *two = PyLong_FromLong(2);
    int rc = -1;
    if (one == NULL || two == NULL || PyDict_SetItem(state, name, one) < 0
        || PyList_Append(stack, name) < 0) {
        goto done;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(outs); i++) {
        if (p_visit(edges, PyList_GET_ITEM(outs, i), state, stack) < 0) {
            goto done;
        }
    }
    if (PyList_SetSlice(stack, PyList_GET_SIZE(stack) - 1,
                        PyList_GET_SIZE(stack), NULL) < 0
        || PyDict_SetItem(state, name, two) < 0) {
        goto done;
    }
    rc = 0;
done:
    Py_XDECREF(one);
    Py_XDECREF(two);
    return rc;
}

/* rules: dict name -> S-expression text. 0, or -1 + RuntimeError naming a
 * rule that does not parse or a cycle. */
static int
p_check_rules(PyObject *rules)
{
    PyObject *edges = PyDict_New(), *state = PyDict_New();
    PyObject *stack = PyList_New(0), *k, *v;
    Py_ssize_t pos = 0;
    int rc = -1;
    if (edges == NULL || state == NULL || stack == NULL) {
        goto done;
    }
    while (PyDict_Next(rules, &pos, &k, &v)) {
        const char *txt = PyUnicode_Check(v) ? PyUnicode_AsUTF8(v) : NULL;
        p_sexp *t = txt ? stax_sexp_parse(txt) : NULL;
        if (t == NULL) {
            PyErr_Format(PyExc_RuntimeError, "the decomposition of %S does "
                         "not parse: %R", k, v);
            goto done;
        }
        PyObject *outs = PyList_New(0);
        int e = outs ? p_heads(t, outs) : -1;
        stax_sexp_free(t);
        if (e < 0 || PyDict_SetItem(edges, k, outs) < 0) {
            Py_XDECREF(outs);
            goto done;
        }
        Py_DECREF(outs);
    }
    pos = 0;
    while (PyDict_Next(edges, &pos, &k, &v)) {
        if (p_visit(edges, k, state, stack) < 0) {
            goto done;
        }
    }
    rc = 0;
done:
    Py_XDECREF(edges);
    Py_XDECREF(state);
    Py_XDECREF(stack);
    return rc;
}

int
stax_graph_p_decomp_check_cycles(void)
{
    PyObject *rules = PyDict_New();
    int rc = -1;
    if (rules == NULL) {
        return -1;
    }
    for (int i = 0; i < P_NROWS; i++) {
        if (p_rows[i].decomp == NULL) {
            continue;
        }
        PyObject *t = PyUnicode_FromString(p_rows[i].decomp);
        if (t == NULL || PyDict_SetItemString(rules, p_rows[i].name, t) < 0) {
            Py_XDECREF(t);
            goto done;
        }
        Py_DECREF(t);
    }
    rc = p_check_rules(rules);
done:
    Py_DECREF(rules);
    return rc;
}

/* Python: _C._check_decompositions(rules=None) -> None; the module-load
 * check, on the op table's rules or on a given {name: rule} dict. */
PyObject *
stax_graph_p_check_decompositions_py(PyObject *self, PyObject *args)
{
    PyObject *rules = Py_None;
    (void)self;
    if (!PyArg_ParseTuple(args, "|O:_check_decompositions", &rules)) {
        return NULL;
    }
    if (rules == Py_None) {
        if (stax_graph_p_decomp_check_cycles() < 0) {
            return NULL;
        }
        Py_RETURN_NONE;
    }
    if (!PyDict_Check(rules)) {
        PyErr_SetString(PyExc_TypeError, "rules must be a dict");
        return NULL;
    }
    if (p_check_rules(rules) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
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
    int n = stax_graph_p_schema_len(op), nt = 0;
    for (int i = 0; i < n && i < PyTuple_GET_SIZE(bound); i++) {
        /* the first `arity` tensor parameters are the template's operands
         * (a, b, c); a later optional tensor (cross_entropy's weight=,
         * pos_weight=) the template does not name must be at its default,
         * or the expansion would drop it */
        if ((p_is_tensor_param(op, i) && nt++ < op->arity)
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
