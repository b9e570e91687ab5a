/* Derivative formulas: the derivative column of ops.def (STAX_OP_DERIV
 * rows, stax_op_derivative[op id]) parsed once at load into Python tuples,
 * evaluated per backward call. An expression is
 *   (0, name)                  an atom (parameter, grad, result, ...)
 *   (1, value)                 a constant
 *   (2, head, args, kwnames)   a call: op, helper or special form
 *   (3, items)                 a list
 * Ops run through the op table's dispatcher (stax_op_call), so under
 * create_graph=True they record their own history (double backward). */
#include "autograd/autograd_internal.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

PyObject *stax_ag_helpers;

/* indexed by op id; filled from the op table by stax_ag_formulas_init */
static stax_deriv derivs[STAX_OP_COUNT];

/* ---- parsing --------------------------------------------------------------- */

typedef struct {
    const char *s;
    const char *name;    /* the row, for errors */
    stax_deriv *d;
} parser;

static void
skip_ws(parser *p)
{
    while (*p->s && isspace((unsigned char)*p->s)) {
        p->s++;
    }
}

static int
tok_end(char c)
{
    return c == 0 || isspace((unsigned char)c) || c == '(' || c == ')'
           || c == '[' || c == ']';
}

static PyObject *
parse_fail(parser *p, const char *why)
{
    PyErr_Format(PyExc_RuntimeError,
                 "ops.def: derivative of '%s': %s near '%.20s'",
                 p->name, why, p->s);
    return NULL;
}

static void
note_atom(parser *p, const char *a, size_t len)
{
    char buf[64];
    if (len >= sizeof(buf)) {
        return;
    }
    memcpy(buf, a, len);
    buf[len] = 0;
    if (strncmp(buf, "result", 6) == 0) {
        int k = buf[6] ? atoi(buf + 6) : 0;
        if (k >= 0 && k < 32) {
            p->d->results |= 1u << k;
        }
        return;
    }
    if (strcmp(buf, "node") == 0) {
        p->d->uses_node = 1;
        return;
    }
    {
        char *dot = strchr(buf, '.');
        PyObject *nm;
        if (dot != NULL) {
            return;       /* name.shape: metadata, kept separately */
        }
        nm = PyUnicode_FromString(buf);
        if (nm != NULL) {
            PySet_Add(p->d->names, nm);
            Py_DECREF(nm);
        }
        PyErr_Clear();
    }
}

static PyObject *parse_expr(parser *p);

static PyObject *
parse_atom(parser *p)
{
    const char *b = p->s;
    char buf[128];
    size_t len;
    char *end;
    while (!tok_end(*p->s)) {
        p->s++;
    }
    len = (size_t)(p->s - b);
    if (len == 0 || len >= sizeof(buf)) {
        return parse_fail(p, "bad token");
    }
    memcpy(buf, b, len);
    buf[len] = 0;
    if (buf[0] == '\'') {
        return Py_BuildValue("(is)", 1, buf + 1);
    }
    if (isdigit((unsigned char)buf[0])
        || ((buf[0] == '-' || buf[0] == '.') && isdigit((unsigned char)buf[1]))) {
        if (strchr(buf, '.') || strchr(buf, 'e')) {
            double v = strtod(buf, &end);
            return *end ? parse_fail(p, "bad number")
                        : Py_BuildValue("(id)", 1, v);
        }
        {
            long long v = strtoll(buf, &end, 10);
            return *end ? parse_fail(p, "bad number")
                        : Py_BuildValue("(iL)", 1, v);
        }
    }
    if (strcmp(buf, "None") == 0) {
        return Py_BuildValue("(iO)", 1, Py_None);
    }
    if (strcmp(buf, "True") == 0 || strcmp(buf, "False") == 0) {
        return Py_BuildValue("(iO)", 1, buf[0] == 'T' ? Py_True : Py_False);
    }
    note_atom(p, buf, len);
    return Py_BuildValue("(is)", 0, buf);
}

static PyObject *
parse_seq(parser *p, char close, PyObject **kwnames_out)
{
    PyObject *items = PyList_New(0), *kwn = PyList_New(0), *r = NULL;
    if (items == NULL || kwn == NULL) {
        goto done;
    }
    for (;;) {
        PyObject *e;
        skip_ws(p);
        if (*p->s == close) {
            p->s++;
            break;
        }
        if (*p->s == 0) {
            parse_fail(p, "unclosed");
            goto done;
        }
        if (*p->s == ':' && kwnames_out != NULL) {
            const char *b = ++p->s;
            PyObject *k;
            while (!tok_end(*p->s)) {
                p->s++;
            }
            k = PyUnicode_FromStringAndSize(b, p->s - b);
            if (k == NULL || PyList_Append(kwn, k) < 0) {
                Py_XDECREF(k);
                goto done;
            }
            Py_DECREF(k);
            continue;
        }
        if (PyList_GET_SIZE(kwn) > 0 && kwnames_out != NULL
            && PyList_GET_SIZE(items) < 0) {
            goto done;
        }
        e = parse_expr(p);
        if (e == NULL || PyList_Append(items, e) < 0) {
            Py_XDECREF(e);
            goto done;
        }
        Py_DECREF(e);
    }
    if (kwnames_out != NULL) {
        *kwnames_out = PyList_AsTuple(kwn);
        if (*kwnames_out == NULL) {
            goto done;
        }
    }
    r = PyList_AsTuple(items);
done:
    Py_XDECREF(items);
    Py_XDECREF(kwn);
    return r;
}

static PyObject *
parse_expr(parser *p)
{
    skip_ws(p);
    if (*p->s == '(') {
        const char *b;
        PyObject *head, *args, *kwn = NULL, *r;
        p->s++;
        skip_ws(p);
        b = p->s;
        while (!tok_end(*p->s)) {
            p->s++;
        }
        if (p->s == b) {
            return parse_fail(p, "missing head");
        }
        head = PyUnicode_FromStringAndSize(b, p->s - b);
        if (head == NULL) {
            return NULL;
        }
        args = parse_seq(p, ')', &kwn);
        if (args == NULL) {
            Py_DECREF(head);
            return NULL;
        }
        /* keyword values are the last len(kwnames) items */
        r = Py_BuildValue("(iNNN)", 2, head, args, kwn);
        return r;
    }
    if (*p->s == '[') {
        PyObject *items;
        p->s++;
        items = parse_seq(p, ']', NULL);
        return items ? Py_BuildValue("(iN)", 3, items) : NULL;
    }
    return parse_atom(p);
}

static int
parse_deriv(stax_deriv *d)
{
    parser p = {d->text, d->name, d};
    PyObject *targets = NULL;
    if (strcmp(d->text, "nondiff") == 0) {
        d->kind = STAX_DERIV_NONDIFF;
        return 0;
    }
    if (strcmp(d->text, "notimpl") == 0) {
        d->kind = STAX_DERIV_NOTIMPL;
        return 0;
    }
    d->names = PySet_New(NULL);
    targets = PyList_New(0);
    if (d->names == NULL || targets == NULL) {
        goto fail;
    }
    for (;;) {
        const char *b;
        PyObject *tn, *e, *pair;
        skip_ws(&p);
        if (*p.s == 0) {
            break;
        }
        b = p.s;
        while (*p.s && *p.s != ':' && !isspace((unsigned char)*p.s)) {
            p.s++;
        }
        if (*p.s != ':') {
            parse_fail(&p, "expected 'target:'");
            goto fail;
        }
        tn = PyUnicode_FromStringAndSize(b, p.s - b);
        p.s++;
        e = tn ? parse_expr(&p) : NULL;
        pair = e ? PyTuple_Pack(2, tn, e) : NULL;
        Py_XDECREF(tn);
        Py_XDECREF(e);
        if (pair == NULL || PyList_Append(targets, pair) < 0) {
            Py_XDECREF(pair);
            goto fail;
        }
        Py_DECREF(pair);
    }
    d->targets = PyList_AsTuple(targets);
    Py_DECREF(targets);
    return d->targets ? 0 : -1;
fail:
    Py_XDECREF(targets);
    return -1;
}

int
stax_ag_formulas_init(void)
{
    for (int i = 0; i < STAX_OP_COUNT; i++) {
        derivs[i].name = stax_op_table[i].name;
        derivs[i].text = stax_op_derivative[i];
        if (parse_deriv(&derivs[i]) < 0) {
            return -1;
        }
    }
    return 0;
}

PyObject *
stax_ag_derivatives_dict(void)
{
    static const char *kinds[] = {"formula", "nondiff", "notimpl"};
    PyObject *d = PyDict_New();
    if (d == NULL) {
        return NULL;
    }
    for (int i = 0; i < STAX_OP_COUNT; i++) {
        PyObject *v = Py_BuildValue("{ssss}", "kind", kinds[derivs[i].kind],
                                    "formula", derivs[i].text);
        if (v == NULL || PyDict_SetItemString(d, derivs[i].name, v) < 0) {
            Py_XDECREF(v);
            Py_DECREF(d);
            return NULL;
        }
        Py_DECREF(v);
    }
    return d;
}

const stax_deriv *
stax_ag_deriv_of(stax_op_id_t id)
{
    return id >= 0 && id < STAX_OP_COUNT ? &derivs[id] : NULL;
}

const stax_deriv *
stax_ag_deriv_for(const char *opname)
{
    const stax_op_info *op = stax_op_row(opname);
    return op != NULL ? &derivs[op->id] : NULL;
}

/* ---- evaluation ------------------------------------------------------------ */

typedef struct {
    StaxGradNode *node;
    PyObject *grads;     /* list per output: Tensor or None */
    PyObject *temps;     /* dict: %name -> value */
} env_t;

static PyObject *eval(env_t *env, PyObject *e);

static PyObject *
grad_of(env_t *env, int k)
{
    PyObject *g;
    if (k >= PyList_GET_SIZE(env->grads)) {
        PyErr_Format(PyExc_RuntimeError, "%s: formula reads grad of output "
                     "%d", env->node->name, k);
        return NULL;
    }
    g = PyList_GET_ITEM(env->grads, k);
    if (g == Py_None) {
        /* an output that got no gradient: zeros of its shape */
        PyObject *shape = PyTuple_GET_ITEM(env->node->out_shapes, k);
        PyObject *fn = PyDict_GetItemString(stax_ag_helpers, "_zeros");
        if (fn == NULL) {
            PyErr_SetString(PyExc_RuntimeError, "autograd helpers not loaded");
            return NULL;
        }
        g = PyObject_CallFunction(fn, "Os", shape,
                                  stax_dtype_name(env->node->out_dtypes[k]));
        if (g == NULL || PyList_SetItem(env->grads, k, Py_NewRef(g)) < 0) {
            Py_XDECREF(g);
            return NULL;
        }
        return g;
    }
    return Py_NewRef(g);
}

static int
param_index(StaxGradNode *n, PyObject *name)
{
    Py_ssize_t np = n->names ? PyTuple_GET_SIZE(n->names) : 0;
    for (Py_ssize_t i = 0; i < np; i++) {
        int c = PyUnicode_Compare(PyTuple_GET_ITEM(n->names, i), name);
        if (c == 0) {
            return (int)i;
        }
    }
    return -1;
}

static PyObject *
eval_atom(env_t *env, PyObject *name)
{
    const char *s = PyUnicode_AsUTF8(name);
    StaxGradNode *n = env->node;
    int ix;
    if (s == NULL) {
        return NULL;
    }
    if (s[0] == '%') {
        PyObject *v = PyDict_GetItemWithError(env->temps, name);
        PyObject *tg;
        if (v != NULL) {
            return Py_NewRef(v);
        }
        if (PyErr_Occurred()) {
            return NULL;
        }
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(n->deriv->targets); i++) {
            tg = PyTuple_GET_ITEM(n->deriv->targets, i);
            if (PyUnicode_Compare(PyTuple_GET_ITEM(tg, 0), name) == 0) {
                v = eval(env, PyTuple_GET_ITEM(tg, 1));
                if (v == NULL || PyDict_SetItem(env->temps, name, v) < 0) {
                    Py_XDECREF(v);
                    return NULL;
                }
                return v;
            }
        }
        PyErr_Format(PyExc_RuntimeError, "%s: no temporary %s", n->name, s);
        return NULL;
    }
    if (strncmp(s, "grad", 4) == 0 && (s[4] == 0 || isdigit((unsigned char)s[4]))) {
        if (strcmp(s, "grads") != 0) {
            return grad_of(env, s[4] ? atoi(s + 4) : 0);
        }
    }
    if (strcmp(s, "grads") == 0) {
        return PyList_AsTuple(env->grads);
    }
    if (strncmp(s, "result", 6) == 0 && (s[6] == 0 || isdigit((unsigned char)s[6]))) {
        return stax_ag_unpack_result(n, s[6] ? atoi(s + 6) : 0);
    }
    if (strcmp(s, "node") == 0) {
        return Py_NewRef(n);
    }
    {
        const char *dot = strchr(s, '.');
        if (dot != NULL && strcmp(dot, ".shape") == 0) {
            PyObject *base = PyUnicode_FromStringAndSize(s, dot - s);
            PyObject *shape;
            if (base == NULL) {
                return NULL;
            }
            ix = param_index(n, base);
            Py_DECREF(base);
            shape = ix >= 0 ? PyTuple_GET_ITEM(n->shapes, ix) : NULL;
            if (shape == NULL || shape == Py_None) {
                PyErr_Format(PyExc_RuntimeError, "%s: no tensor for %s",
                             n->name, s);
                return NULL;
            }
            return Py_NewRef(shape);
        }
    }
    ix = param_index(n, name);
    if (ix < 0) {
        PyErr_Format(PyExc_RuntimeError, "%s: formula names '%s', not a "
                     "parameter of the op", n->name, s);
        return NULL;
    }
    return stax_ag_unpack(n, ix);
}

static int
is_truthy(PyObject *v)
{
    return v == Py_None ? 0 : PyObject_IsTrue(v);
}

static PyObject *
eval_call(env_t *env, PyObject *e)
{
    PyObject *head = PyTuple_GET_ITEM(e, 1), *args = PyTuple_GET_ITEM(e, 2);
    PyObject *kwn = PyTuple_GET_ITEM(e, 3);
    const char *h = PyUnicode_AsUTF8(head);
    Py_ssize_t na = PyTuple_GET_SIZE(args), nk = PyTuple_GET_SIZE(kwn);
    PyObject *pos = NULL, *kw = NULL, *res = NULL;
    if (h == NULL) {
        return NULL;
    }
    /* lazy special forms */
    if (strcmp(h, "if") == 0 || strcmp(h, "ifnone") == 0
        || strcmp(h, "ifeq") == 0) {
        int which, base = strcmp(h, "ifeq") == 0 ? 2 : 1;
        PyObject *c;
        if (na != base + 2) {
            PyErr_Format(PyExc_RuntimeError, "%s: (%s ...) takes %d arguments",
                         env->node->name, h, (int)(base + 2));
            return NULL;
        }
        c = eval(env, PyTuple_GET_ITEM(args, 0));
        if (c == NULL) {
            return NULL;
        }
        if (h[2] == 'n') {
            which = c == Py_None;
        }
        else if (base == 2) {
            PyObject *o = eval(env, PyTuple_GET_ITEM(args, 1));
            which = o ? PyObject_RichCompareBool(c, o, Py_EQ) : -1;
            Py_XDECREF(o);
        }
        else {
            which = is_truthy(c);
        }
        Py_DECREF(c);
        if (which < 0) {
            return NULL;
        }
        return eval(env, PyTuple_GET_ITEM(args, which ? base : base + 1));
    }
    pos = PyTuple_New(na - nk);
    kw = nk ? PyDict_New() : NULL;
    if (pos == NULL || (nk && kw == NULL)) {
        goto done;
    }
    for (Py_ssize_t i = 0; i < na; i++) {
        PyObject *v = eval(env, PyTuple_GET_ITEM(args, i));
        if (v == NULL) {
            goto done;
        }
        if (i < na - nk) {
            PyTuple_SET_ITEM(pos, i, v);
        }
        else {
            int r = PyDict_SetItem(kw, PyTuple_GET_ITEM(kwn, i - (na - nk)), v);
            Py_DECREF(v);
            if (r < 0) {
                goto done;
            }
        }
    }
    if (h[0] == '_' && PyDict_GetItemString(stax_ag_helpers, h) != NULL) {
        res = PyObject_Call(PyDict_GetItemString(stax_ag_helpers, h), pos, kw);
    }
    else {
        const stax_op_info *op = stax_op_by_name(h);
        if (op == NULL) {
            PyErr_Format(PyExc_RuntimeError, "%s: formula calls '%s', neither "
                         "an op nor a helper", env->node->name, h);
            goto done;
        }
        res = stax_op_call(op, pos, kw);
    }
done:
    Py_XDECREF(pos);
    Py_XDECREF(kw);
    return res;
}

static PyObject *
eval(env_t *env, PyObject *e)
{
    long tag = PyLong_AsLong(PyTuple_GET_ITEM(e, 0));
    switch (tag) {
    case 0:
        return eval_atom(env, PyTuple_GET_ITEM(e, 1));
    case 1:
        return Py_NewRef(PyTuple_GET_ITEM(e, 1));
    case 2:
        return eval_call(env, e);
    case 3: {
        PyObject *items = PyTuple_GET_ITEM(e, 1);
        PyObject *l = PyList_New(PyTuple_GET_SIZE(items));
        if (l == NULL) {
            return NULL;
        }
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(items); i++) {
            PyObject *v = eval(env, PyTuple_GET_ITEM(items, i));
            if (v == NULL) {
                Py_DECREF(l);
                return NULL;
            }
            PyList_SET_ITEM(l, i, v);
        }
        return l;
    }
    default:
        PyErr_SetString(PyExc_RuntimeError, "autograd: bad formula node");
        return NULL;
    }
}

PyObject *
stax_ag_apply_formula(StaxGradNode *n, PyObject *grads)
{
    env_t env = {n, grads, NULL};
    PyObject *out = PyList_New(n->n_in), *bytarget = NULL;
    const stax_deriv *d = n->deriv;
    if (out == NULL) {
        return NULL;
    }
    for (int i = 0; i < n->n_in; i++) {
        PyList_SET_ITEM(out, i, Py_NewRef(Py_None));
    }
    if (d == NULL || d->kind != STAX_DERIV_FORMULA) {
        PyErr_Format(PyExc_NotImplementedError,
                     "tensorplay: the derivative for '%s' is not implemented",
                     d ? d->name : n->name);
        goto fail;
    }
    env.temps = PyDict_New();
    bytarget = PyDict_New();
    if (env.temps == NULL || bytarget == NULL) {
        goto fail;
    }
    for (int i = 0; i < n->n_in; i++) {
        PyObject *pname, *g = NULL, *tg = NULL;
        if (n->next[i].fn == NULL) {
            continue;
        }
        pname = PyTuple_GET_ITEM(n->names, n->in_param[i]);
        g = PyDict_GetItemWithError(bytarget, pname);
        if (g != NULL) {
            Py_INCREF(g);
        }
        else {
            if (PyErr_Occurred()) {
                goto fail;
            }
            for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(d->targets); k++) {
                PyObject *t = PyTuple_GET_ITEM(d->targets, k);
                if (PyUnicode_Compare(PyTuple_GET_ITEM(t, 0), pname) == 0) {
                    tg = t;
                    break;
                }
            }
            if (tg == NULL) {
                continue;   /* not differentiable w.r.t. this argument */
            }
            g = eval(&env, PyTuple_GET_ITEM(tg, 1));
            if (g == NULL || PyDict_SetItem(bytarget, pname, g) < 0) {
                Py_XDECREF(g);
                goto fail;
            }
        }
        if (n->in_elem[i] >= 0 && g != Py_None) {
            PyObject *el = PySequence_GetItem(g, n->in_elem[i]);
            Py_DECREF(g);
            if (el == NULL) {
                goto fail;
            }
            g = el;
        }
        PyList_SetItem(out, i, g);
    }
    Py_DECREF(env.temps);
    Py_DECREF(bytarget);
    return out;
fail:
    Py_XDECREF(env.temps);
    Py_XDECREF(bytarget);
    Py_DECREF(out);
    return NULL;
}
