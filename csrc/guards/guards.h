/* Public header of the guards room: signatures, specialization keys, guards,
 * replay, fingerprints, three-level dispatch, free-variable lifting,
 * recompile log, the compile entry.
 *
 * The C part of the room is small on purpose: the per-call hot path
 * (dispatch level 1, the fingerprint of level 2 and the signature sigma of
 * level 3) lives here; the compile driver, the guards' texts and the
 * free-variable lifting live in python/tensorplay/compiler/. */
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

int stax_guard_dispatch_init(PyObject *m);
int stax_guard_signature_init(PyObject *m);
int stax_guards_module_init(PyObject *m);

#endif
