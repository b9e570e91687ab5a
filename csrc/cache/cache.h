/* Public header of the cache room: the persistent, content-addressed compile
 * cache (docs/cache.md).
 *
 * An ENTRY is one file `<dir>/kernels/<32 hex digits>.tpk` named by its
 * key, an XXH3-128 digest that the caller computes over everything that
 * determines the artifact (stax_cache_hasher).  The file is a fixed header
 * (magic, format version, the compiler's build id, the key, the payload's
 * length, an XXH3-64 checksum over header and payload) followed by an
 * opaque payload; what the payload holds is the caller's business.
 *
 * Writes go to a temporary file in the same directory and are renamed over
 * the entry, so readers see either no entry or a whole one, and several
 * processes writing one key at once each rename a complete file.  A read
 * that finds a truncated, corrupt or foreign entry logs why and reports a
 * miss; the caller recompiles and its store replaces the bad file.  A
 * directory that cannot be created or written (a file, read-only, full)
 * degrades to compiling: one RuntimeWarning per process and directory.
 * Least-recently-used eviction keeps the directory under the size cap
 * (a hit refreshes the entry's mtime; eviction removes the oldest).
 *
 * The room knows nothing else of the project: XXH3, files, and a log hook
 * that the Python layer registers (tensorplay.compiler._cache).
 * All functions need the GIL. */
#ifndef STAX_CACHE_H
#define STAX_CACHE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint64_t lo, hi;
} stax_cache_key;

/* Streaming XXH3-128.  new: NULL + MemoryError. */
typedef struct stax_cache_hasher stax_cache_hasher;
stax_cache_hasher *stax_cache_hasher_new(void);
void stax_cache_hasher_update(stax_cache_hasher *h, const void *p, size_t n);
stax_cache_key stax_cache_hasher_digest(stax_cache_hasher *h);
void stax_cache_hasher_free(stax_cache_hasher *h);
/* 32 lowercase hex digits and a NUL */
void stax_cache_key_hex(stax_cache_key k, char out[33]);

/* The compiler's own version: the package version and a digest of the C
 * sources this extension was built from (setup.py writes it).  Callers
 * hash it into every key; the entry header carries it too. */
const char *stax_cache_build_id(void);

/* Whether lookups and stores are on (TENSORPLAY_CACHE, config). */
int stax_cache_enabled(void);

/* Look a key up.  1: hit, *data (malloc'd, caller frees) and *n hold the
 * payload and the entry's mtime is refreshed; 0: miss (absent, or a bad
 * entry, logged).  Never sets an exception. */
int stax_cache_get(stax_cache_key key, char **data, size_t *n);

/* Store a payload under key (atomic).  0 stored, 1 not stored (cache off,
 * or the directory cannot be written: warned once, logged).  Never sets an
 * exception. */
int stax_cache_put(stax_cache_key key, const void *data, size_t n);

/* Process-wide counters read by tensorplay._C._cache_counters(). */
void stax_cache_count(int hit, int miss, int compile);
/* The counters: (hits, misses, backend compiles) into out[0..2]. */
void stax_cache_counters(unsigned long long out[3]);

/* Log one line under the `cache` topic (no-op when no hook is set). */
void stax_cache_log(const char *fmt, ...);

int stax_cache_module_init(PyObject *m);

#endif
