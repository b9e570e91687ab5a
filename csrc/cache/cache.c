/* The persistent compile cache: XXH3 keys, the entry file format, atomic
 * stores, validation on load, LRU eviction, and its Python surface
 * (_cache_configure, _cache_counters, _cache_info, _cache_export,
 * _cache_import, _cache_set_log).  See cache.h for the contract. */
#include "cache/cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#if defined(__has_include)
#if __has_include("cache/build_id.h")
#include "cache/build_id.h"
#endif
#endif
#ifndef STAX_BUILD_ID
#define STAX_BUILD_ID "unknown-build"
#endif

/* ------------------------------------------------------------- hashing */
struct stax_cache_hasher {
    XXH3_state_t *st;
};

stax_cache_hasher *
stax_cache_hasher_new(void)
{
    stax_cache_hasher *h = malloc(sizeof(*h));
    if (h == NULL || (h->st = XXH3_createState()) == NULL) {
        free(h);
        PyErr_NoMemory();
        return NULL;
    }
    XXH3_128bits_reset(h->st);
    return h;
}

void
stax_cache_hasher_update(stax_cache_hasher *h, const void *p, size_t n)
{
    XXH3_128bits_update(h->st, p, n);
}

stax_cache_key
stax_cache_hasher_digest(stax_cache_hasher *h)
{
    XXH128_hash_t d = XXH3_128bits_digest(h->st);
    stax_cache_key k = {d.low64, d.high64};
    return k;
}

void
stax_cache_hasher_free(stax_cache_hasher *h)
{
    if (h != NULL) {
        XXH3_freeState(h->st);
        free(h);
    }
}

void
stax_cache_key_hex(stax_cache_key k, char out[33])
{
    snprintf(out, 33, "%016llx%016llx", (unsigned long long)k.hi, (unsigned long long)k.lo);
}

const char *
stax_cache_build_id(void)
{
    return STAX_BUILD_ID;
}

/* ---------------------------------------------------------- the format */
/* header, little-endian as the host writes it (a cache directory is not
 * shared across byte orders: the target triple is in every key anyway) */
#define HDR_MAGIC "TPKCACHE"
#define HDR_FORMAT 1u
#define HDR_BUILD 48
enum {
    OFF_MAGIC = 0,            /* 8 bytes */
    OFF_FORMAT = 8,           /* u32 */
    OFF_HDRSIZE = 12,         /* u32 */
    OFF_KEY = 16,             /* u64 lo, u64 hi */
    OFF_BUILD = 32,           /* HDR_BUILD bytes, NUL-padded */
    OFF_LEN = 32 + HDR_BUILD, /* u64 payload length */
    OFF_SUM = OFF_LEN + 8,    /* u64 XXH3-64 of header[0:OFF_SUM] + payload */
    HDR_SIZE = OFF_SUM + 8
};

static uint64_t
entry_sum(const unsigned char *hdr, const void *payload, size_t n)
{
    XXH3_state_t *st = XXH3_createState();
    if (st == NULL) {
        return 0;
    }
    XXH3_64bits_reset(st);
    XXH3_64bits_update(st, hdr, OFF_SUM);
    XXH3_64bits_update(st, payload, n);
    uint64_t s = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return s;
}

static void
make_header(unsigned char *hdr, stax_cache_key key, const void *payload, size_t n)
{
    memset(hdr, 0, HDR_SIZE);
    memcpy(hdr + OFF_MAGIC, HDR_MAGIC, 8);
    uint32_t fmt = HDR_FORMAT, hs = HDR_SIZE;
    memcpy(hdr + OFF_FORMAT, &fmt, 4);
    memcpy(hdr + OFF_HDRSIZE, &hs, 4);
    memcpy(hdr + OFF_KEY, &key.lo, 8);
    memcpy(hdr + OFF_KEY + 8, &key.hi, 8);
    strncpy((char *)hdr + OFF_BUILD, STAX_BUILD_ID, HDR_BUILD - 1);
    uint64_t len = n;
    memcpy(hdr + OFF_LEN, &len, 8);
    uint64_t s = entry_sum(hdr, payload, n);
    memcpy(hdr + OFF_SUM, &s, 8);
}

/* NULL if the whole file `buf` (n bytes) is a valid entry for key (key
 * NULL: any key, *keyout receives it), else why not (static text). */
static const char *
check_entry(const unsigned char *buf, size_t n, const stax_cache_key *key,
            stax_cache_key *keyout)
{
    static char why[160];
    if (n < 8 || memcmp(buf + OFF_MAGIC, HDR_MAGIC, 8) != 0) {
        return n < 8 ? "truncated (shorter than the header)"
                     : "foreign file (not a tensorplay cache entry)";
    }
    if (n < HDR_SIZE) {
        return "truncated (shorter than the header)";
    }
    uint32_t fmt, hs;
    memcpy(&fmt, buf + OFF_FORMAT, 4);
    memcpy(&hs, buf + OFF_HDRSIZE, 4);
    if (fmt != HDR_FORMAT || hs != HDR_SIZE) {
        snprintf(why, sizeof why, "entry format %u, this build reads format %u", fmt, HDR_FORMAT);
        return why;
    }
    char build[HDR_BUILD + 1];
    memcpy(build, buf + OFF_BUILD, HDR_BUILD);
    build[HDR_BUILD] = 0;
    if (strncmp(build, STAX_BUILD_ID, HDR_BUILD - 1) != 0) {
        snprintf(why, sizeof why, "written by compiler build %.48s, this is %.48s", build,
                 STAX_BUILD_ID);
        return why;
    }
    stax_cache_key k;
    memcpy(&k.lo, buf + OFF_KEY, 8);
    memcpy(&k.hi, buf + OFF_KEY + 8, 8);
    if (key != NULL && (k.lo != key->lo || k.hi != key->hi)) {
        return "entry holds another key";
    }
    if (keyout != NULL) {
        *keyout = k;
    }
    uint64_t len;
    memcpy(&len, buf + OFF_LEN, 8);
    if (len != n - HDR_SIZE) {
        snprintf(why, sizeof why, "truncated or padded (payload %llu bytes, header says %llu)",
                 (unsigned long long)(n - HDR_SIZE), (unsigned long long)len);
        return why;
    }
    uint64_t s;
    memcpy(&s, buf + OFF_SUM, 8);
    if (s != entry_sum(buf, buf + HDR_SIZE, (size_t)len)) {
        return "checksum mismatch (corrupt)";
    }
    return NULL;
}

/* ------------------------------------------------------- configuration */
static int cfg_enabled;          /* off until the Python layer configures */
static char *cfg_dir;            /* absolute; the entries live in cfg_dir/kernels */
static int64_t cfg_cap = 1024LL << 20;
static int64_t approx_bytes = -1;   /* this process's view of the total, -1 unknown */
static int warned_write;         /* one warning per process and directory */
static PyObject *log_hook;       /* callable(str) or NULL */
static unsigned long long n_hits, n_misses, n_compiles;

int
stax_cache_enabled(void)
{
    return cfg_enabled && cfg_dir != NULL;
}

void
stax_cache_count(int hit, int miss, int compile)
{
    n_hits += hit;
    n_misses += miss;
    n_compiles += compile;
}

void
stax_cache_log(const char *fmt, ...)
{
    if (log_hook == NULL) {
        return;
    }
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    PyObject *et, *ev, *etb;
    PyErr_Fetch(&et, &ev, &etb);
    PyObject *r = PyObject_CallFunction(log_hook, "s", line);
    if (r == NULL) {
        PyErr_Clear();
    }
    Py_XDECREF(r);
    PyErr_Restore(et, ev, etb);
}

/* the store failed for a reason that will not go away: say so once */
static void
warn_unwritable(const char *what, const char *path, int err)
{
    stax_cache_log("cannot write the cache: %s %s: %s; compiling without storing", what, path,
                   strerror(err));
    if (warned_write) {
        return;
    }
    warned_write = 1;
    char msg[1200];
    snprintf(msg, sizeof msg,
             "tensorplay: the compile cache directory %s cannot be written (%s %s: %s); "
             "compiled kernels are not stored (set TENSORPLAY_CACHE_DIR or "
             "tp.compiler.config.cache_dir, or TENSORPLAY_CACHE=0)",
             cfg_dir, what, path, strerror(err));
    PyObject *et, *ev, *etb;
    PyErr_Fetch(&et, &ev, &etb);
    if (PyErr_WarnEx(PyExc_RuntimeWarning, msg, 1) < 0) {
        PyErr_Clear();   /* warnings as errors must not turn a compile into a failure */
    }
    PyErr_Restore(et, ev, etb);
}

static int
entry_path(char *out, size_t cap, stax_cache_key key)
{
    char hex[33];
    stax_cache_key_hex(key, hex);
    return snprintf(out, cap, "%s/kernels/%s.tpk", cfg_dir, hex) >= (int)cap ? -1 : 0;
}

/* mkdir -p of dir/kernels; 0 or -1 with errno, what and where set */
static int
ensure_dirs(const char **what, char *where, size_t cap)
{
    char p[4096];
    if (snprintf(p, sizeof p, "%s/kernels", cfg_dir) >= (int)sizeof p) {
        errno = ENAMETOOLONG;
        *what = "path";
        snprintf(where, cap, "%s", cfg_dir);
        return -1;
    }
    struct stat st;
    if (stat(p, &st) == 0 && S_ISDIR(st.st_mode)) {
        return 0;
    }
    for (char *s = p + 1; ; s++) {
        if (*s == '/' || *s == 0) {
            char c = *s;
            *s = 0;
            if (mkdir(p, 0777) < 0 && errno != EEXIST) {
                *what = "mkdir";
                snprintf(where, cap, "%s", p);
                return -1;
            }
            if (stat(p, &st) < 0 || !S_ISDIR(st.st_mode)) {
                errno = ENOTDIR;
                *what = "directory";
                snprintf(where, cap, "%s", p);
                return -1;
            }
            *s = c;
            if (c == 0) {
                break;
            }
        }
    }
    return 0;
}

/* ------------------------------------------------------------ reading */
/* the whole file, malloc'd; NULL + errno */
static unsigned char *
read_file(const char *path, size_t *n)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return NULL;
    }
    struct stat st;
    unsigned char *buf = NULL;
    if (fstat(fd, &st) < 0) {
        int e = errno;
        close(fd);
        errno = e;
        return NULL;
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        errno = EISDIR;
        return NULL;
    }
    size_t want = (size_t)st.st_size, got = 0;
    buf = malloc(want ? want : 1);
    if (buf == NULL) {
        close(fd);
        errno = ENOMEM;
        return NULL;
    }
    while (got < want) {
        ssize_t r = read(fd, buf + got, want - got);
        if (r < 0 && errno == EINTR) {
            continue;
        }
        if (r <= 0) {
            break;
        }
        got += (size_t)r;
    }
    close(fd);
    *n = got;
    return buf;
}

int
stax_cache_get(stax_cache_key key, char **data, size_t *n)
{
    char path[4200];
    if (!stax_cache_enabled() || entry_path(path, sizeof path, key) < 0) {
        return 0;
    }
    size_t len = 0;
    unsigned char *buf = read_file(path, &len);
    if (buf == NULL) {
        if (errno != ENOENT && errno != ENOTDIR) {
            stax_cache_log("cannot read %s: %s; recompiling", path, strerror(errno));
        }
        return 0;
    }
    const char *why = check_entry(buf, len, &key, NULL);
    if (why != NULL) {
        stax_cache_log("bad entry %s: %s; recompiling (the new entry replaces it)", path, why);
        free(buf);
        return 0;
    }
    /* least-recently-used: a hit makes the entry young again */
    (void)utimensat(AT_FDCWD, path, NULL, 0);
    size_t pl = len - HDR_SIZE;
    memmove(buf, buf + HDR_SIZE, pl);
    *data = (char *)buf;
    *n = pl;
    return 1;
}

/* ------------------------------------------------------------ writing */
typedef struct {
    char *name;
    int64_t size;
    struct timespec mtime;
} dent;

static int
dent_cmp(const void *a, const void *b)
{
    const dent *x = a, *y = b;
    if (x->mtime.tv_sec != y->mtime.tv_sec) {
        return x->mtime.tv_sec < y->mtime.tv_sec ? -1 : 1;
    }
    if (x->mtime.tv_nsec != y->mtime.tv_nsec) {
        return x->mtime.tv_nsec < y->mtime.tv_nsec ? -1 : 1;
    }
    return strcmp(x->name, y->name);
}

static int
is_entry_name(const char *s)
{
    size_t l = strlen(s);
    return l == 36 && strcmp(s + 32, ".tpk") == 0 && strspn(s, "0123456789abcdef") == 32;
}

/* the entries of dir/kernels (malloc'd array, caller frees names and it);
 * stale temporary files (an hour old: their writer died) are removed */
static dent *
scan(const char *dir, int *count, int64_t *total)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/kernels", dir);
    *count = 0;
    *total = 0;
    DIR *d = opendir(p);
    if (d == NULL) {
        return NULL;
    }
    int cap = 64, n = 0;
    dent *v = malloc(sizeof(dent) * (size_t)cap);
    struct dirent *e;
    time_t now = time(NULL);
    while (v != NULL && (e = readdir(d)) != NULL) {
        char fp[4500];
        struct stat st;
        snprintf(fp, sizeof fp, "%s/%s", p, e->d_name);
        if (e->d_name[0] == '.' && strstr(e->d_name, ".tmp") != NULL) {
            if (stat(fp, &st) == 0 && now - st.st_mtime > 3600) {
                unlink(fp);
            }
            continue;
        }
        if (!is_entry_name(e->d_name) || stat(fp, &st) < 0 || !S_ISREG(st.st_mode)) {
            continue;
        }
        if (n == cap) {
            dent *nv = realloc(v, sizeof(dent) * (size_t)(cap *= 2));
            if (nv == NULL) {
                break;
            }
            v = nv;
        }
        v[n].name = strdup(e->d_name);
        v[n].size = st.st_size;
        v[n].mtime = st.st_mtim;
        if (v[n].name == NULL) {
            break;
        }
        *total += st.st_size;
        n++;
    }
    closedir(d);
    *count = n;
    return v;
}

static void
free_scan(dent *v, int n)
{
    for (int i = 0; v != NULL && i < n; i++) {
        free(v[i].name);
    }
    free(v);
}

/* The size index: dir/kernels.bytes holds the directory's total as the
 * last store saw it, so that a store adds its bytes to it instead of
 * scanning the directory (a stat per entry) to learn whether the cap is
 * passed. Processes storing at once may lose each other's additions: the
 * index is a hint, and every eviction rescans and rewrites it exactly. */
static unsigned long long n_store_scans;   /* scans made by stores */

static int64_t
read_size_index(void)
{
    char p[4200], buf[32];
    snprintf(p, sizeof p, "%s/kernels.bytes", cfg_dir);
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return -1;
    }
    ssize_t r = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (r <= 0) {
        return -1;
    }
    buf[r] = 0;
    char *end = NULL;
    long long v = strtoll(buf, &end, 10);
    return (end == buf || (*end != 0 && *end != '\n') || v < 0) ? -1 : (int64_t)v;
}

static int atomic_write(const char *path, const char *dir, const char *name, const void *a,
                        size_t na, const void *b, size_t nb, const char **what);

static void
write_size_index(int64_t total)
{
    char p[4200], buf[32];
    const char *what = NULL;
    int len = snprintf(buf, sizeof buf, "%lld\n", (long long)total);
    snprintf(p, sizeof p, "%s/kernels.bytes", cfg_dir);
    (void)atomic_write(p, cfg_dir, "size", buf, (size_t)len, NULL, 0, &what);
}

/* remove the least recently used entries until the total is 90 % of the
 * cap; `keep` (the entry just written) stays */
static void
evict(const char *keep)
{
    int n;
    int64_t total;
    dent *v = scan(cfg_dir, &n, &total);
    n_store_scans++;
    approx_bytes = total;
    if (v == NULL || total <= cfg_cap) {
        if (v != NULL) {
            write_size_index(total);
        }
        free_scan(v, n);
        return;
    }
    qsort(v, (size_t)n, sizeof(dent), dent_cmp);
    int64_t goal = cfg_cap - cfg_cap / 10;
    int removed = 0;
    for (int i = 0; i < n && total > goal; i++) {
        if (keep != NULL && strcmp(v[i].name, keep) == 0) {
            continue;
        }
        char fp[4500];
        snprintf(fp, sizeof fp, "%s/kernels/%s", cfg_dir, v[i].name);
        if (unlink(fp) == 0 || errno == ENOENT) {
            total -= v[i].size;
            removed++;
        }
    }
    approx_bytes = total;
    write_size_index(total);
    stax_cache_log("evicted %d least recently used entries: %lld bytes left (cap %lld bytes)",
                   removed, (long long)total, (long long)cfg_cap);
    free_scan(v, n);
}

/* write a complete file at path through a temporary + rename; 0 or -1 with
 * errno and *what set */
static int
atomic_write(const char *path, const char *dir, const char *name, const void *a, size_t na,
             const void *b, size_t nb, const char **what)
{
    static unsigned long seq;
    char tmp[4500];
    snprintf(tmp, sizeof tmp, "%s/kernels/.%s.%ld.%lu.tmp", dir, name, (long)getpid(), ++seq);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        *what = "create";
        return -1;
    }
    const void *parts[2] = {a, b};
    size_t lens[2] = {na, nb};
    for (int i = 0; i < 2; i++) {
        size_t off = 0;
        while (off < lens[i]) {
            ssize_t w = write(fd, (const char *)parts[i] + off, lens[i] - off);
            if (w < 0 && errno == EINTR) {
                continue;
            }
            if (w <= 0) {
                int e = w == 0 ? ENOSPC : errno;
                close(fd);
                unlink(tmp);
                errno = e;
                *what = "write";
                return -1;
            }
            off += (size_t)w;
        }
    }
    if (close(fd) < 0) {
        int e = errno;
        unlink(tmp);
        errno = e;
        *what = "write";
        return -1;
    }
    if (rename(tmp, path) < 0) {
        int e = errno;
        unlink(tmp);
        errno = e;
        *what = "rename";
        return -1;
    }
    return 0;
}

/* store a complete entry file (header already in buf) */
static int
put_raw(stax_cache_key key, const unsigned char *hdr, const void *payload, size_t n)
{
    const char *what = NULL;
    char where[4200];
    if (ensure_dirs(&what, where, sizeof where) < 0) {
        warn_unwritable(what, where, errno);
        return 1;
    }
    char path[4200], hex[33], name[40];
    stax_cache_key_hex(key, hex);
    snprintf(name, sizeof name, "%s.tpk", hex);
    if (entry_path(path, sizeof path, key) < 0) {
        return 1;
    }
    if (atomic_write(path, cfg_dir, hex, hdr, HDR_SIZE, payload, n, &what) < 0) {
        warn_unwritable(what, path, errno);
        return 1;
    }
    /* the total as the size index has it (other processes store too),
     * else this process's view; no index: one scan learns it */
    int64_t seen = read_size_index();
    if (seen >= 0) {
        approx_bytes = seen;
    }
    if (approx_bytes < 0) {
        evict(name);
    }
    else {
        approx_bytes += (int64_t)(HDR_SIZE + n);
        if (approx_bytes > cfg_cap) {
            evict(name);
        }
        else {
            write_size_index(approx_bytes);
        }
    }
    return 0;
}

int
stax_cache_put(stax_cache_key key, const void *data, size_t n)
{
    if (!stax_cache_enabled()) {
        return 1;
    }
    unsigned char hdr[HDR_SIZE];
    make_header(hdr, key, data, n);
    int rc = put_raw(key, hdr, data, n);
    if (rc == 0) {
        char hex[33];
        stax_cache_key_hex(key, hex);
        stax_cache_log("stored %s (%zu bytes)", hex, n + HDR_SIZE);
    }
    return rc;
}

/* ------------------------------------------------------- Python surface */
static PyObject *
py_configure(PyObject *mod, PyObject *args)
{
    (void)mod;
    const char *dir = NULL;
    int enabled = 0;
    long long cap = 1024LL << 20;
    if (!PyArg_ParseTuple(args, "zpL", &dir, &enabled, &cap)) {
        return NULL;
    }
    if (dir != NULL && dir[0] != '/') {
        PyErr_Format(PyExc_ValueError, "cache directory must be an absolute path, got %s", dir);
        return NULL;
    }
    if (cap < 0) {
        PyErr_SetString(PyExc_ValueError, "cache_size_mb must be >= 0");
        return NULL;
    }
    if (dir == NULL || cfg_dir == NULL || strcmp(dir, cfg_dir) != 0) {
        char *nd = NULL;
        if (dir != NULL && (nd = strdup(dir)) == NULL) {
            return PyErr_NoMemory();
        }
        free(cfg_dir);
        cfg_dir = nd;
        /* strip trailing slashes so entry paths are canonical */
        for (size_t l = cfg_dir ? strlen(cfg_dir) : 0; l > 1 && cfg_dir[l - 1] == '/'; l--) {
            cfg_dir[l - 1] = 0;
        }
        approx_bytes = -1;
        warned_write = 0;
    }
    cfg_enabled = enabled;
    cfg_cap = (int64_t)cap;
    Py_RETURN_NONE;
}

void
stax_cache_counters(unsigned long long out[3])
{
    out[0] = n_hits;
    out[1] = n_misses;
    out[2] = n_compiles;
}

static PyObject *
py_counters(PyObject *mod, PyObject *unused)
{
    (void)mod;
    (void)unused;
    return Py_BuildValue("(KKK)", n_hits, n_misses, n_compiles);
}

static PyObject *
py_set_log(PyObject *mod, PyObject *fn)
{
    (void)mod;
    if (fn != Py_None && !PyCallable_Check(fn)) {
        PyErr_SetString(PyExc_TypeError, "_cache_set_log: a callable or None");
        return NULL;
    }
    Py_XSETREF(log_hook, fn == Py_None ? NULL : Py_NewRef(fn));
    Py_RETURN_NONE;
}

static PyObject *
py_info(PyObject *mod, PyObject *unused)
{
    (void)mod;
    (void)unused;
    int n = 0;
    int64_t total = 0;
    if (cfg_dir != NULL) {
        free_scan(scan(cfg_dir, &n, &total), n);
    }
    return Py_BuildValue("{s:z,s:O,s:i,s:L,s:L,s:s,s:K}", "dir", cfg_dir, "enabled",
                         stax_cache_enabled() ? Py_True : Py_False, "entries", n, "bytes",
                         (long long)total, "size_limit_bytes", (long long)cfg_cap, "build_id",
                         STAX_BUILD_ID, "store_scans", n_store_scans);
}

/* every valid entry of the directory: a list of (name, bytes of the whole
 * file); bad entries are left out (logged) */
static PyObject *
py_export(PyObject *mod, PyObject *unused)
{
    (void)mod;
    (void)unused;
    PyObject *out = PyList_New(0);
    int n = 0;
    int64_t total = 0;
    dent *v = cfg_dir != NULL ? scan(cfg_dir, &n, &total) : NULL;
    for (int i = 0; out != NULL && i < n; i++) {
        char fp[4500];
        size_t len = 0;
        snprintf(fp, sizeof fp, "%s/kernels/%s", cfg_dir, v[i].name);
        unsigned char *buf = read_file(fp, &len);
        if (buf == NULL) {
            continue;
        }
        const char *why = check_entry(buf, len, NULL, NULL);
        if (why != NULL) {
            stax_cache_log("save_cache_artifacts: skipping bad entry %s: %s", fp, why);
            free(buf);
            continue;
        }
        PyObject *t = Py_BuildValue("(sy#)", v[i].name, (const char *)buf, (Py_ssize_t)len);
        free(buf);
        if (t == NULL || PyList_Append(out, t) < 0) {
            Py_XDECREF(t);
            Py_CLEAR(out);
        }
        Py_XDECREF(t);
    }
    free_scan(v, n);
    return out;
}

/* one exported entry file: validate (its name must be its key) and store
 * it atomically.  True stored, False rejected (logged). */
static PyObject *
py_import(PyObject *mod, PyObject *args)
{
    (void)mod;
    const char *name;
    Py_buffer b;
    if (!PyArg_ParseTuple(args, "sy*", &name, &b)) {
        return NULL;
    }
    stax_cache_key k;
    const char *why = is_entry_name(name) ? NULL : "bad entry name";
    if (why == NULL) {
        why = check_entry(b.buf, (size_t)b.len, NULL, &k);
    }
    if (why == NULL) {
        char hex[33];
        stax_cache_key_hex(k, hex);
        if (strncmp(hex, name, 32) != 0) {
            why = "entry name is not its key";
        }
    }
    int ok = 0;
    if (why != NULL) {
        stax_cache_log("load_cache_artifacts: rejecting %s: %s", name, why);
    }
    else if (stax_cache_enabled()) {
        const unsigned char *p = b.buf;
        ok = put_raw(k, p, p + HDR_SIZE, (size_t)b.len - HDR_SIZE) == 0;
    }
    PyBuffer_Release(&b);
    return PyBool_FromLong(ok);
}

static PyMethodDef cache_methods[] = {
    {"_cache_configure", py_configure, METH_VARARGS,
     "_cache_configure(dir or None, enabled, size_limit_bytes): the persistent cache's settings"},
    {"_cache_counters", py_counters, METH_NOARGS,
     "(cache_hits, cache_misses, backend_compiles) of this process"},
    {"_cache_set_log", py_set_log, METH_O, "callable(line) for the `cache` log topic, or None"},
    {"_cache_info", py_info, METH_NOARGS, "the cache directory's entries and bytes"},
    {"_cache_export", py_export, METH_NOARGS, "[(name, entry bytes)] of every valid entry"},
    {"_cache_import", py_import, METH_VARARGS, "store one exported entry (validated)"},
    {NULL, NULL, 0, NULL},
};

int
stax_cache_module_init(PyObject *m)
{
    return PyModule_AddFunctions(m, cache_methods);
}
