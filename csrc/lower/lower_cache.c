/* Compiling a kernel through the persistent compile cache (docs/cache.md).
 *
 * The key is XXH3-128 over: the cache's own format tag, the compiler's
 * build id, the back end's name and cache_tag (its version, target and
 * code-generation knobs), and a canonical serialization of the kernel's
 * loop IR -- loop extents, stages, accumulators, stores, the buffers'
 * dtypes and aliasing facts, and every index / value expression with its
 * constants, dtypes and size-argument numbers.  The kernel's name and its
 * program-level buffer ids are left out: two programs (two different
 * functions) whose lowering yields the same kernel share one entry.
 * Expressions are a DAG; each distinct node is written once, in post-order,
 * and referred to by number after that, so the serialization is linear in
 * the IR's size and shared subexpressions stay shared.
 *
 * The payload is the object code, its entry symbol (derived from the key),
 * the kernel ABI it was compiled for (buffer count, dtypes, loop nest) --
 * checked against the kernel on load -- and the generated source, so a
 * program built from the cache is as inspectable as a compiled one. */
#include "lower/lower_internal.h"
#include "cache/cache.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ bytes */
typedef struct {
    unsigned char *p;
    size_t n, cap;
    int oom;
} bbuf;

static void
bb_put(bbuf *b, const void *d, size_t n)
{
    if (b->oom) {
        return;
    }
    if (b->n + n > b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 1024;
        while (nc < b->n + n) {
            nc *= 2;
        }
        unsigned char *np = realloc(b->p, nc);
        if (np == NULL) {
            b->oom = 1;
            return;
        }
        b->p = np;
        b->cap = nc;
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}

static void
bb_i64(bbuf *b, int64_t v)
{
    bb_put(b, &v, sizeof v);
}

/* ------------------------------------------------- pointer -> node id */
typedef struct {
    const void **keys;
    int64_t *ids;
    size_t cap, n;
    int64_t next;
    int oom;
} idmap;

static size_t
ptr_hash(const void *p)
{
    uint64_t x = (uint64_t)(uintptr_t)p;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return (size_t)x;
}

static int64_t *
idmap_slot(idmap *m, const void *p, int *found)
{
    if ((m->n + 1) * 2 > m->cap) {
        size_t nc = m->cap ? m->cap * 2 : 256;
        const void **nk = calloc(nc, sizeof(void *));
        int64_t *ni = calloc(nc, sizeof(int64_t));
        if (nk == NULL || ni == NULL) {
            free(nk);
            free(ni);
            m->oom = 1;
            return NULL;
        }
        for (size_t i = 0; i < m->cap; i++) {
            if (m->keys[i] != NULL) {
                size_t j = ptr_hash(m->keys[i]) & (nc - 1);
                while (nk[j] != NULL) {
                    j = (j + 1) & (nc - 1);
                }
                nk[j] = m->keys[i];
                ni[j] = m->ids[i];
            }
        }
        free(m->keys);
        free(m->ids);
        m->keys = nk;
        m->ids = ni;
        m->cap = nc;
    }
    size_t j = ptr_hash(p) & (m->cap - 1);
    while (m->keys[j] != NULL && m->keys[j] != p) {
        j = (j + 1) & (m->cap - 1);
    }
    *found = m->keys[j] != NULL;
    if (!*found) {
        m->keys[j] = p;
        m->n++;
    }
    return &m->ids[j];
}

typedef struct {
    bbuf *b;
    idmap m;
} ser;

static int64_t ser_lval(ser *s, const stax_lval *v);

/* the memo of a node written once: 1 and its id when p was written before
 * (or is being written), 0 when p is new (now marked as being written; the
 * IR is acyclic, so the mark is never read back), -1 when the map failed */
static int
ser_seen(ser *s, const void *p, int64_t *id)
{
    int found;
    int64_t *slot = idmap_slot(&s->m, p, &found);
    if (slot == NULL) {
        *id = -1;
        return -1;
    }
    if (found) {
        *id = *slot;
        return 1;
    }
    *slot = -2;
    return 0;
}

/* p's id once its record is written (the slot may have moved when the map
 * grew: look it up again) */
static int64_t
ser_written(ser *s, const void *p)
{
    int found;
    int64_t id = s->m.next++;
    int64_t *slot = idmap_slot(&s->m, p, &found);
    if (slot != NULL) {
        *slot = id;
    }
    return id;
}

static int64_t
ser_ix(ser *s, const stax_ix *ix)
{
    int64_t id;
    if (ix == NULL) {
        return -1;
    }
    if (ser_seen(s, ix, &id) != 0) {
        return id;
    }
    int64_t a = ser_ix(s, ix->a), b = ser_ix(s, ix->b);
    int64_t val = ix->kind == STAX_IX_VALUE ? ser_lval(s, ix->val) : -1;
    bb_put(s->b, "I", 1);
    bb_i64(s->b, ix->kind);
    bb_i64(s->b, ix->v);
    bb_i64(s->b, a);
    bb_i64(s->b, b);
    bb_i64(s->b, val);
    return ser_written(s, ix);
}

static int64_t
ser_lval(ser *s, const stax_lval *v)
{
    int64_t id;
    if (v == NULL) {
        return -1;
    }
    if (ser_seen(s, v, &id) != 0) {
        return id;
    }
    int64_t args[3] = {-1, -1, -1};
    for (int i = 0; i < v->nargs && i < 3; i++) {
        args[i] = ser_lval(s, v->args[i]);
    }
    int64_t ix = (v->kind == STAX_LV_LOAD || v->kind == STAX_LV_INDEX) ? ser_ix(s, v->index) : -1;
    int64_t mask = v->kind == STAX_LV_LOAD ? ser_lval(s, v->mask) : -1;
    bb_put(s->b, "V", 1);
    bb_i64(s->b, v->kind);
    bb_i64(s->b, v->dtype);
    switch (v->kind) {
    case STAX_LV_LOAD:
        bb_i64(s->b, v->buf);
        bb_i64(s->b, ix);
        bb_i64(s->b, mask);
        break;
    case STAX_LV_CONST:
        /* both fields: the back end reads the one its dtype uses */
        bb_put(s->b, &v->f, sizeof v->f);
        bb_i64(s->b, v->i);
        break;
    case STAX_LV_INDEX:
        bb_i64(s->b, ix);
        break;
    case STAX_LV_ACC:
        bb_i64(s->b, v->acc);
        break;
    case STAX_LV_CAST:
    case STAX_LV_PRIM:
        bb_i64(s->b, v->prim);
        bb_i64(s->b, v->nargs);
        bb_put(s->b, args, sizeof args);
        break;
    }
    return ser_written(s, v);
}

/* the canonical bytes of k; 0 or -1 + MemoryError */
static int
ser_kernel(const stax_kernel *k, bbuf *b)
{
    ser s = {b, {0}};
    bb_put(b, "K", 1);
    bb_i64(b, k->nouter);
    bb_i64(b, k->ninner);
    bb_i64(b, k->nbufs);
    for (int i = 0; i < k->nbufs; i++) {
        bb_i64(b, k->bufs[i].dtype);
        bb_i64(b, k->bufs[i].is_output);
        bb_i64(b, k->bufs[i].noalias);
    }
    bb_put(b, "D", 1);
    for (int i = 0; i < k->nouter + k->ninner; i++) {
        bb_i64(b, ser_ix(&s, k->dims[i]));
    }
    bb_put(b, "G", 1);
    bb_i64(b, k->nstages);
    for (int i = 0; i < k->nstages; i++) {
        bb_i64(b, k->stages[i].kind);
        bb_i64(b, k->stages[i].first);
        bb_i64(b, k->stages[i].n);
        bb_i64(b, k->stages[i].tile_q);
        bb_i64(b, k->stages[i].tile_k);
        bb_i64(b, k->stages[i].zero_empty);
    }
    bb_put(b, "A", 1);
    bb_i64(b, k->naccs);
    for (int i = 0; i < k->naccs; i++) {
        int64_t val = ser_lval(&s, k->accs[i].value);
        int64_t ix = ser_ix(&s, k->accs[i].index);
        bb_put(b, "a", 1);
        bb_i64(b, k->accs[i].op);
        bb_i64(b, k->accs[i].dtype);
        bb_i64(b, val);
        bb_i64(b, ix);
    }
    bb_put(b, "S", 1);
    bb_i64(b, k->nstores);
    for (int i = 0; i < k->nstores; i++) {
        int64_t ix = ser_ix(&s, k->stores[i].index);
        int64_t val = ser_lval(&s, k->stores[i].value);
        bb_put(b, "s", 1);
        bb_i64(b, k->stores[i].buf);
        bb_i64(b, ix);
        bb_i64(b, val);
        if (k->stores[i].combine != STAX_COMBINE_NONE) {
            bb_put(b, "c", 1);
            bb_i64(b, k->stores[i].combine);
        }
    }
    free(s.m.keys);
    free(s.m.ids);
    if (b->oom || s.m.oom) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------ payload */
#define PAYLOAD_MAGIC "TPKO"
#define PAYLOAD_VERSION 1

static void
abi_bytes(const stax_kernel *k, bbuf *b)
{
    bb_i64(b, k->nouter);
    bb_i64(b, k->ninner);
    bb_i64(b, k->nbufs);
    for (int i = 0; i < k->nbufs; i++) {
        bb_i64(b, k->bufs[i].dtype);
        bb_i64(b, k->bufs[i].is_output);
    }
}

static void
bb_blob(bbuf *b, const void *d, size_t n)
{
    bb_i64(b, (int64_t)n);
    bb_put(b, d, n);
}

/* read one length-prefixed blob at *off; NULL if it does not fit */
static const char *
rd_blob(const char *p, size_t n, size_t *off, size_t *len)
{
    int64_t l;
    if (*off + sizeof l > n) {
        return NULL;
    }
    memcpy(&l, p + *off, sizeof l);
    *off += sizeof l;
    if (l < 0 || (size_t)l > n - *off) {
        return NULL;
    }
    const char *r = p + *off;
    *off += (size_t)l;
    *len = (size_t)l;
    return r;
}

static const char *
hexname(stax_cache_key key, char *hex)
{
    stax_cache_key_hex(key, hex);
    return hex;
}

/* the payload of a cache entry: the kernel's ABI, entry symbol, object
 * code and source */
static void
payload(bbuf *pl, const bbuf *abi, const char *sym, const char *obj, size_t nobj,
        const char *src, size_t nsrc)
{
    uint32_t ver = PAYLOAD_VERSION;
    bb_put(pl, PAYLOAD_MAGIC, 4);
    bb_put(pl, &ver, 4);
    bb_blob(pl, abi->p, abi->n);
    bb_blob(pl, sym, strlen(sym));
    bb_blob(pl, obj, nobj);
    bb_blob(pl, src ? src : "", nsrc);
}

/* A kernel's cache entry to be written when its back end has the final
 * object (stax_object_sink): what the payload needs besides it, copied */
typedef struct {
    stax_object_sink base;
    stax_cache_key key;
    bbuf abi;
    char sym[48];
    char *src;
    size_t nsrc;
} later_entry;

static void
later_put(stax_object_sink *s, const char *obj, size_t n)
{
    later_entry *e = (later_entry *)s;
    bbuf pl = {0};
    char hex[33];
    payload(&pl, &e->abi, e->sym, obj, n, e->src, e->nsrc);
    if (!pl.oom) {
        stax_cache_put(e->key, pl.p, pl.n);
        stax_cache_log("stored %s: the final object code (%zu bytes)", hexname(e->key, hex), n);
    }
    free(pl.p);
}

static void
later_release(stax_object_sink *s)
{
    later_entry *e = (later_entry *)s;
    free(e->abi.p);
    free(e->src);
    free(e);
}

static later_entry *
later_new(stax_cache_key key, const bbuf *abi, const char *sym, const char *src, size_t nsrc)
{
    later_entry *e = calloc(1, sizeof(*e));
    if (e == NULL) {
        return NULL;
    }
    e->base.put = later_put;
    e->base.release = later_release;
    e->key = key;
    snprintf(e->sym, sizeof e->sym, "%s", sym);
    bb_put(&e->abi, abi->p, abi->n);
    e->src = malloc(nsrc + 1);
    if (e->abi.oom || e->src == NULL) {
        later_release(&e->base);
        return NULL;
    }
    memcpy(e->src, src ? src : "", nsrc);
    e->nsrc = nsrc;
    return e;
}

void *
lw_compile_kernel(lw_ctx *c, const stax_kernel *k, PyObject **source)
{
    stax_backend *be = c->be;
    bbuf kb = {0}, pl = {0}, abi = {0};
    stax_cache_hasher *hs = NULL;
    char *data = NULL;
    PyObject *obj = NULL;
    void *h = NULL;
    if (!stax_cache_enabled() || be->cache_tag == NULL || be->compile_object == NULL
        || be->load_object == NULL) {
        h = be->compile_kernel(be, k, source);
        if (h != NULL) {
            stax_cache_count(0, 0, 1);
        }
        return h;
    }
    const char *tag = be->cache_tag(be);
    if (tag == NULL || ser_kernel(k, &kb) < 0 || (hs = stax_cache_hasher_new()) == NULL) {
        goto done;
    }
    static const char fmt_tag[] = "tensorplay kernel cache v1";
    const char *bid = stax_cache_build_id();
    stax_cache_hasher_update(hs, fmt_tag, sizeof fmt_tag);
    stax_cache_hasher_update(hs, bid, strlen(bid) + 1);
    stax_cache_hasher_update(hs, be->name, strlen(be->name) + 1);
    stax_cache_hasher_update(hs, tag, strlen(tag) + 1);
    stax_cache_hasher_update(hs, kb.p, kb.n);
    stax_cache_key key = stax_cache_hasher_digest(hs);
    char hex[33], sym[48];
    hexname(key, hex);
    snprintf(sym, sizeof sym, "stax_k_%s", hex);
    abi_bytes(k, &abi);
    if (abi.oom) {
        PyErr_NoMemory();
        goto done;
    }

    size_t n = 0;
    if (stax_cache_get(key, &data, &n)) {
        size_t off = 0, la = 0, ls = 0, lo = 0, lsrc = 0;
        const char *why = NULL;
        const char *pa = NULL, *ps = NULL, *po = NULL, *psrc = NULL;
        uint32_t ver = 0;
        if (n < 8 || memcmp(data, PAYLOAD_MAGIC, 4) != 0) {
            why = "not a kernel payload";
        }
        else {
            memcpy(&ver, data + 4, 4);
            off = 8;
            if (ver != PAYLOAD_VERSION) {
                why = "payload version differs";
            }
            else if ((pa = rd_blob(data, n, &off, &la)) == NULL
                     || (ps = rd_blob(data, n, &off, &ls)) == NULL
                     || (po = rd_blob(data, n, &off, &lo)) == NULL
                     || (psrc = rd_blob(data, n, &off, &lsrc)) == NULL || off != n) {
                why = "payload sections do not fit";
            }
            else if (la != abi.n || memcmp(pa, abi.p, la) != 0) {
                why = "kernel ABI differs (key collision?)";
            }
            else if (ls != strlen(sym) || memcmp(ps, sym, ls) != 0) {
                why = "entry symbol differs";
            }
        }
        if (why == NULL) {
            h = be->load_object(be, k, sym, po, lo);
            if (h == NULL) {
                PyObject *et, *ev, *etb;
                PyErr_Fetch(&et, &ev, &etb);
                PyObject *m = ev ? PyObject_Str(ev) : NULL;
                stax_cache_log("entry %s: the back end could not load it (%s); recompiling", hex,
                               m && PyUnicode_Check(m) ? PyUnicode_AsUTF8(m) : "?");
                PyErr_Clear();
                Py_XDECREF(m);
                Py_XDECREF(et);
                Py_XDECREF(ev);
                Py_XDECREF(etb);
            }
        }
        else {
            stax_cache_log("entry %s unusable: %s; recompiling", hex, why);
        }
        if (h != NULL) {
            if (source != NULL) {
                Py_XSETREF(*source, lsrc ? PyUnicode_DecodeUTF8(psrc, (Py_ssize_t)lsrc, "replace")
                                         : NULL);
                PyErr_Clear();
            }
            stax_cache_count(1, 0, 0);
            stax_cache_log("hit %s (%s, %zu bytes of object code)", hex, k->name, lo);
            goto done;
        }
        free(data);
        data = NULL;
    }
    stax_cache_count(0, 1, 0);
    h = be->compile_object(be, k, sym, source, &obj);
    if (h == NULL) {
        goto done;
    }
    if (obj == NULL) {
        /* already loaded in this process (an earlier store did not land) */
        stax_cache_log("miss %s (%s): shared with a kernel loaded earlier in this process", hex,
                       k->name);
        goto done;
    }
    stax_cache_count(0, 0, 1);
    Py_ssize_t slen = 0;
    const char *src = source && *source && PyUnicode_Check(*source)
                      ? PyUnicode_AsUTF8AndSize(*source, &slen) : NULL;
    if (src == NULL) {
        PyErr_Clear();
        slen = 0;
    }
    if (be->defer_object != NULL) {
        later_entry *e = later_new(key, &abi, sym, src, (size_t)slen);
        if (e != NULL && be->defer_object(be, h, &e->base)) {
            /* a first version: the entry is written with the final one */
            stax_cache_log("miss %s (%s): compiled a first version; the final one is "
                           "stored when it is ready", hex, k->name);
            goto done;
        }
        if (e != NULL) {
            later_release(&e->base);
        }
    }
    stax_cache_log("miss %s (%s): compiled", hex, k->name);
    payload(&pl, &abi, sym, PyBytes_AS_STRING(obj), (size_t)PyBytes_GET_SIZE(obj), src,
            (size_t)slen);
    if (!pl.oom) {
        stax_cache_put(key, pl.p, pl.n);
    }
done:
    free(data);
    free(kb.p);
    free(pl.p);
    free(abi.p);
    stax_cache_hasher_free(hs);
    Py_XDECREF(obj);
    return h;
}
