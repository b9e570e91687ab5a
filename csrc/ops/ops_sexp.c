/* The one parser of the op table's S-expression columns (the scalar
 * formula and the decomposition; language: ops.h): text -> stax_sexp tree.
 * Each op's trees are parsed once, on first use, and kept for the life of
 * the process (the table is static): the graph room's DecomposePass and the
 * lower room's pointwise rule walk the same trees. */
#include <ctype.h>
#include <string.h>

#include "ops/ops.h"
#include "ops/ops_internal.h"

static stax_sexp *
parse(const char **pp)
{
    const char *p = *pp;
    stax_sexp *s;
    while (isspace((unsigned char)*p)) {
        p++;
    }
    s = PyMem_Calloc(1, sizeof(stax_sexp));
    if (s == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    if (*p == '(') {
        p++;
        s->is_list = 1;
        for (;;) {
            stax_sexp *it, **ni;
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
            it = parse(&p);
            if (it == NULL) {
                goto bad;
            }
            ni = PyMem_Realloc(s->items, (size_t)(s->n + 1) * sizeof(*ni));
            if (ni == NULL) {
                stax_sexp_free(it);
                PyErr_NoMemory();
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
        s->atom = PyMem_Malloc((size_t)(p - b) + 1);
        if (s->atom == NULL) {
            PyErr_NoMemory();
            goto bad;
        }
        memcpy(s->atom, b, (size_t)(p - b));
        s->atom[p - b] = '\0';
    }
    *pp = p;
    return s;
bad:
    stax_sexp_free(s);
    return NULL;
}

stax_sexp *
stax_sexp_parse(const char *text)
{
    const char *p = text;
    return text != NULL ? parse(&p) : NULL;
}

void
stax_sexp_free(stax_sexp *s)
{
    if (s == NULL) {
        return;
    }
    for (int i = 0; i < s->n; i++) {
        stax_sexp_free(s->items[i]);
    }
    PyMem_Free(s->items);
    PyMem_Free(s->atom);
    PyMem_Free(s);
}

/* [op id][0: formula, 1: decomposition]; parsed[] 1 once tried */
static stax_sexp *trees[STAX_OP_COUNT][2];
static char parsed[STAX_OP_COUNT][2];

static const stax_sexp *
column_tree(const stax_op_info *op, int which)
{
    const stax_op_info *row;
    const char *text;
    if (op == NULL || op->id < 0 || op->id >= STAX_OP_COUNT) {
        return NULL;
    }
    row = &stax_op_table[op->id];
    text = which ? row->decomp : row->formula;
    if (text == NULL) {
        return NULL;
    }
    if (!parsed[op->id][which]) {
        parsed[op->id][which] = 1;
        trees[op->id][which] = stax_sexp_parse(text);
        PyErr_Clear();   /* a malformed row is no tree; the table is static */
    }
    return trees[op->id][which];
}

const stax_sexp *
stax_op_formula_tree(const stax_op_info *op)
{
    return column_tree(op, 0);
}

const stax_sexp *
stax_op_decomp_tree(const stax_op_info *op)
{
    return column_tree(op, 1);
}
