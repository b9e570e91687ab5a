/* Public header of the guards room: signatures, specialization keys, guards,
 * replay, fingerprints, three-level dispatch, free-variable lifting,
 * recompile log, the compile entry.
 *
 * The per-call path is C: dispatch level 1, and on a level-1 miss the
 * reading of the lifted free variables, the level-2 fingerprint, the
 * level-3 key (sigma, aliasing, grad mode, default dtype) as bytes, the
 * version cache and the guards of each version (shape guards; gate
 * outcomes through the version's replay, which stays Python). Only a true
 * miss enters the Python driver (python/tensorplay/compiler/), which
 * compiles, writes the guards' texts and the recompile log, and registers
 * the new version here. Lifting's bytecode analysis (once per code object)
 * is Python too. */
#ifndef STAX_GUARDS_H
#define STAX_GUARDS_H

#include "trace/trace.h"
#include "lower/lower.h"
#include "tensor/tensor.h"

/* tensorplay._C.CompiledFunction: the object tp.compile returns. */
extern PyTypeObject StaxCompiledFunction_Type;

/* Signature sigma of one value (section 2.2), new reference. dynamic != 0
 * keeps only the rank of tensors and writes strides as size expressions. */
PyObject *stax_guard_signature(PyObject *obj, int dynamic);

/* 128-bit XXH3 fingerprint of a value tree (tensors by identity and
 * version, scalars by value, other objects by identity), new bytes object. */
PyObject *stax_guard_fingerprint(PyObject *obj);

/* A growable byte buffer for keys and fingerprints. */
typedef struct {
    unsigned char *p;
    size_t n;
    size_t cap;
    unsigned char inl[1024];
} stax_keybuf;

void stax_kb_init(stax_keybuf *b);
void stax_kb_free(stax_keybuf *b);
int stax_kb_grow(stax_keybuf *b, size_t n);

static inline int
stax_kb_put(stax_keybuf *b, const void *d, size_t n)
{
    if (b->n + n > b->cap && stax_kb_grow(b, n) < 0) {
        return -1;
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
    return 0;
}
/* 128-bit XXH3 of the buffer */
void stax_guard_hash(const stax_keybuf *kb, unsigned char out[16]);

/* Fingerprint encoding: one value (0, or -1 with an exception), a
 * container header (tag 6 tuple/list, 7 dict; n items follow), a str. */
int stax_guard_fp_feed(stax_keybuf *kb, PyObject *o);
int stax_guard_fp_header(stax_keybuf *kb, PyTypeObject *type, int tag,
                         uint64_t n);
int stax_guard_fp_cstr(stax_keybuf *kb, const char *s);

/* Signature encoding: bytes equal only when the signatures are equal.
 * 0, 1 when the value cannot be encoded exactly (take the Python path),
 * -1 with an exception. _identity: the value by type and identity. */
int stax_guard_sig_feed(stax_keybuf *kb, PyObject *o, int dynamic);
int stax_guard_sig_identity(stax_keybuf *kb, PyObject *o);

/* The tuple components of a call's key, (sig_args, sig_kwargs, sig_free,
 * aliasing): sigma of each argument, keyword argument (by name) and free
 * variable (effect[j] != 0: free variable j by type and identity; effect
 * may be NULL), and which of the call's tensors flat[0..nflat) share a
 * storage (None, or per tensor the index of the first sharing it). */
PyObject *stax_guard_call_key(PyObject *args, PyObject *kwargs, PyObject *free,
                              const unsigned char *effect, int dynamic,
                              PyObject *const *flat, Py_ssize_t nflat);

/* The same from Python objects: effect_only a tuple of the indices of
 * the free values keyed by identity, flat a sequence of the call's
 * tensors (what _guard_call_key and stax_compile's rekey take). */
PyObject *stax_guard_call_key_of(PyObject *args, PyObject *kwargs, PyObject *free,
                                 PyObject *effect_only, int dynamic, PyObject *flat);

/* The guard text of gamma_g (the data gates' outcomes). */
#define STAX_GATE_TEXT "control-flow gate outcomes match the traced branch"

/* Take the exception set now as a value (traceback attached) when it is an
 * Exception: 0 and *out; -1 with it still set otherwise (KeyboardInterrupt,
 * ...). Shared by the driver and the version key's replay check. */
int stax_guard_take_exception(PyObject **out);

/* A new version's key from its trace (version.c). call: the call's key
 * components (sig_args, sig_kwargs, sig_free, aliasing, grad_mode,
 * default_dtype, paths, free_paths, dynamic); flat: the call's tensors (a
 * list). Runs the guard replay slice once on flat (the generator left as
 * found). New dict: key (sigma, gamma_s, gamma_g, rho), gate_kinds, gates,
 * replay, replay_copies, replay_random, replay_got (None, or the outcomes
 * the slice gave instead of gates), shape_reads [(flat index, dim, size,
 * path)]; NULL + exception. */
PyObject *stax_guard_version_key(PyObject *tr, PyObject *call, PyObject *flat);
/* ver["guards"] = the key's projection, [(path, condition, expected)]
 * (symenv: the dynamic shapes' ShapeEnv or None, its relations' texts). */
int stax_guard_version_guards(PyObject *ver, PyObject *call, PyObject *symenv);
/* The gate outcomes (bool(), int(), float(), tolist(), item() by kind) of
 * a replay's outputs, a tuple (zip of the two sequences). */
PyObject *stax_guard_gate_values(PyObject *kinds, PyObject *outs);
/* Per output leaf of gm (the pytree of the output node), the mask of the
 * inputs (placeholders, in order) whose requires_grad reaches it in eager:
 * cut by a detach (the op table's DETACH, also the detach nodes the tracer
 * adds for no_grad blocks), 0 for non-floating values; an in-place write
 * (the graph room's stax_graph_node_writes: in-place ops, setitem) adds
 * its operands' mask to its target. None when the graph has no detach:
 * the program's own requires_grad is then eager's. NULL + exception. */
PyObject *stax_guard_detach_masks(PyObject *gm);
/* The default generator's state as Generator.get_state().tolist() gives it. */
PyObject *stax_guard_rng_state_list(void);

int stax_guard_dispatch_init(PyObject *m);
int stax_guard_driver_init(PyObject *m);   /* _C.stax_compile */
int stax_guard_signature_init(PyObject *m);
int stax_guards_module_init(PyObject *m);

#endif
