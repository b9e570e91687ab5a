/* Private to csrc/trace: the tracer state shared by proxy.c, tracer.c and
 * the tracer's parts (trace_record.c, trace_gates.c, trace_replay.c). */
#ifndef STAX_TRACE_INTERNAL_H
#define STAX_TRACE_INTERNAL_H

#include "trace/trace.h"

struct StaxTracer {
    PyObject_HEAD
    StaxGraph *graph;        /* strong */
    PyObject *gates;         /* list of (node, kind, sample value) */
    PyObject *shape_reads;   /* list of (placeholder index, dim) */
    PyObject *shape_seen;    /* set of the same tuples */
    PyObject *ph_index;      /* dict placeholder node -> index */
    PyObject *const_nodes;   /* dict id(tensor) -> get_attr node */
    PyObject *constants;     /* dict attr name -> tensor (by reference) */
    PyObject *journal;       /* the write journal (isolation.c): snapshots
                                of the caller's storages taken just before
                                the trace first wrote them, restored when fn
                                returns; nothing the trace only reads is
                                copied */
    PyObject *journaled;     /* set: storage addresses in the journal */
    PyObject *unrecorded;    /* list: "what, where" of each of the caller's
                                tensors that fn wrote outside the graph (an
                                eager in-place op on a tensor it did not
                                lift: no node replays it) */
    PyObject *const_written; /* set: storage addresses of the caller's
                                tensors held as constants that recorded
                                in-place ops wrote (isolation.c) */
    PyObject *const_read;    /* dict: storage address of the caller's
                                tensors untraced ops read -> where first */
    PyObject *stale_reads;   /* list: "what, where" of each untraced read of
                                a tensor a recorded op writes (its value
                                would be the trace's, every call) */
    PyObject *graph_breaks;  /* list: "what at where" of each statement the
                                graph cannot replay (t.data = v of an input
                                or a tensor requiring grad): the version
                                runs eagerly, strict raises */
    PyObject *out_named;     /* the named tuples of fn's output (tracer.c
                                named_spec), or NULL */
    uint64_t serial0;        /* storages with a serial below it existed
                                before the trace: the caller's */
    int unrestorable;        /* a write of the caller's storage bypassed
                                the journal: it could not be undone */
    PyObject *mutations;     /* dict node -> frozenset of the addresses of
                                the storages its sample run wrote (version
                                moved): in-place methods, setitem, copy_,
                                out=, writes through views */
    PyObject *lazy;          /* deferred samples (trace_lazy.c), NULL when
                                every node runs on the sample at once:
                                storage address -> how to fill it */
    PyObject *lazy_args;     /* deferred nodes that read tensors held by
                                reference: node -> (args, kwargs) as sample
                                values, each tensor an alias of what it
                                viewed when the node was recorded */
    PyObject *lazy_reads;    /* set: storage addresses those nodes read; a
                                write to one first fills every deferred
                                sample (isolation.c's write hook) */
    PyObject *lazy_error;    /* a fill the write hook could not make (the
                                hook cannot raise): raised when fn returns */
    PyObject *eager_runs;    /* list: names of the nodes whose sample ran
                                when recorded (TraceResult.eager_samples) */
    PyObject *symenv;        /* dynamic shapes: the driver's ShapeEnv
                                (compiler/_symbolic.py), or NULL */
    int active;
    int entry_depth;         /* Python frames below fn's when tracing began */
    int grad_at_start;       /* grad mode when the trace began (rho) */
    PyObject *grad_inside;   /* trace begun with grad off: where the function
                                turned it on and computed a value that
                                requires grad (file:line), or NULL */
};

extern PyTypeObject *StaxTracer_Type;

/* Record a node (op, target, args, kwargs may hold proxies, real tensors,
 * containers), run it on the sample under no_grad, return a new Proxy. */
PyObject *stax_trace_record(StaxTracer *tr, stax_node_op_t op,
                            PyObject *target, PyObject *args,
                            PyObject *kwargs);
/* New Proxy for an existing node. */
PyObject *stax_trace_proxy_new(StaxTracer *tr, StaxNode *node);
/* Borrowed sample value of a proxy, or NULL + the deferred error naming
 * the node, its source line and the original exception. */
PyObject *stax_trace_need_val(StaxProxy *p);
/* Borrowed sample value of a proxy with its elements computed (a data or
 * value gate, printing, .numpy()): forces a deferred sample. */
PyObject *stax_trace_need_data(StaxProxy *p);
/* Number of Python frames on the current thread's stack. */
int stax_trace_frame_depth(void);
/* Raise node n's original sample error (same type and message as eager),
 * with a note naming the node and its source line; returns NULL. */
PyObject *stax_trace_raise_original(StaxNode *n);
/* the first node of g whose call failed on the sample (eager stops at it;
 * a failure inside a try block leaves no node), or NULL; borrowed */
StaxNode *stax_trace_first_failed(StaxGraph *g);
/* Set the deferred error of node n (meta['sample_error']); returns NULL. */
PyObject *stax_trace_raise_deferred(StaxNode *n);
/* Record a data gate. */
int stax_trace_add_gate(StaxTracer *tr, StaxNode *n, const char *kind,
                        PyObject *value);
/* Record a shape read of node n's dim (or all dims when dim < 0). */
int stax_trace_shape_read(StaxTracer *tr, StaxNode *n, int dim);
/* Dynamic shapes (tr->symenv set): dimension dim of proxy p's tensor as
 * an int (static) or a size proxy carrying meta['sym']; new reference. */
PyObject *stax_trace_sym_dim(StaxProxy *p, int dim);
/* Dynamic shapes: len(o) of a tensor proxy o as stax_trace_sym_dim(o,
 * 0) (builtins.len is hooked while such a trace runs); NULL without an
 * exception when o is not a proxy of a tensor traced with symbolic sizes. */
PyObject *stax_trace_sym_len(PyObject *o);
/* 1 when node n is a symbolic size (meta['sym']), 0 not */
int stax_trace_is_sym(StaxNode *n);
/* New reference: "file:line in func: code" of the first frame outside the
 * tensorplay package, or None. */
PyObject *stax_trace_user_stack(void);
/* Note a statement the compiled program cannot replay ("what" names it; the
 * user's line is added): TraceResult.graph_breaks, the version then runs
 * eagerly (strict_native: NativeCompileError). 0, or -1 with an error. */
int stax_trace_graph_break(StaxTracer *tr, const char *what);

/* New reference: the get_attr node holding tensor t by reference. */
PyObject *stax_trace_const_node(StaxTracer *tr, PyObject *t);
extern PyObject *stax_trace_pkg_dir;    /* ".../tensorplay/" */
/* 1 when the innermost Python frame is inside the tensorplay package */
int stax_trace_called_from_package(void);
/* 1 when eager's value of node n (or a list/tuple of nodes) requires grad */
int stax_trace_node_requires_grad(PyObject *o);

/* isolation.c: stand-ins, snapshots, RNG fork, creation hooks */
int stax_trace_collect_extents(PyObject *o, PyObject *extents);
/* lazy: the tracer's deferred samples or NULL; with it a new copied
 * storage is only allocated, and filled when a value is needed */
PyObject *stax_trace_stand_in(StaxTensor *t, PyObject *extents,
                              PyObject *bases, StaxTracer *lazy);
int stax_trace_snapshot_add(PyObject *snap, PyObject *o);
/* The write journal: while fn runs, every in-place write of a storage that
 * existed before the trace is announced by the tensor room
 * (stax_tensor_will_write); its bytes are kept first, and restored by
 * stax_trace_journal_end. A write announced while no recorded node runs
 * (tr->sampling == 0) is an eager write the graph does not hold. */
void stax_trace_journal_begin(StaxTracer *tr, StaxTracer **saved);
/* > 0 while a recorded node runs on sample values (its writes are the
 * graph's: journaled, not reported as eager writes) */
extern _Thread_local int stax_trace_sampling;
void stax_trace_journal_end(StaxTracer *tr, StaxTracer *saved);
/* bytes copied by stax_trace_snapshot_add in this process */
unsigned long long stax_trace_snapshot_bytes(void);
void stax_trace_snapshot_restore(PyObject *snap);
PyObject *stax_trace_rng_save(void);
void stax_trace_rng_restore(PyObject *st);
PyObject *stax_trace_hooks_install(StaxTracer *tr);
void stax_trace_hooks_remove(PyObject *saved);
int stax_trace_demote_constants(StaxTracer *tr);
int stax_trace_isolation_init(PyObject *m);

/* split of the tracer (tracer.c, trace_record.c, trace_replay.c) */
int stax_trace_is_tensor(PyObject *o);
/* mode 0: proxies -> nodes, tensors -> get_attr constants;
 * mode 1: proxies -> sample values (*missing set to the node lacking one);
 * mode 2: proxies -> shadow values (meta['val2'], dynamic shapes) */
PyObject *stax_trace_map_args(StaxTracer *tr, PyObject *o, int mode,
                              StaxNode **missing);
/* Add the address of the storage of every tensor leaf of o to `set`. */
int stax_trace_storage_keys(PyObject *o, PyObject *set);
/* Algorithm 3.1: the guard replay GraphModule (trace_replay.c) */
PyObject *stax_trace_extract_replay(StaxTracer *tr, PyObject *consts,
                                    int *copies_inputs);

/* trace_lazy.c: deferred samples. A sample value whose elements are not
 * computed yet lives in an allocated storage that tr->lazy maps to how to
 * fill it: a stand-in's copy of an input, or the node (and the leaf of
 * its result) to run once its operands are filled. Views share the
 * storage, so filling it fills them. */
/* The stand-in base `base` is the copy of real's storage from element lo
 * to hi (exclusive), still to be made. */
int stax_trace_lazy_input(StaxTracer *tr, StaxTensor *base, StaxTensor *real,
                          int64_t lo, int64_t hi);
/* Node n's sample (meta 'val' already set to val) was given without its
 * elements: every tensor leaf of val whose storage is not one of `inputs`
 * (a set of storage addresses, or NULL) is filled by running n. */
int stax_trace_lazy_result(StaxTracer *tr, StaxNode *n, PyObject *val,
                           PyObject *inputs);
/* 1 when some tensor leaf of o is not computed yet. */
int stax_trace_lazy_any(StaxTracer *tr, PyObject *o);
/* Compute every deferred storage under the tensor leaves of o (the
 * backward slice of what is asked: Algorithm 3.1's slice), or all. */
int stax_trace_force(StaxTracer *tr, PyObject *o);
int stax_trace_force_all(StaxTracer *tr);
/* Node n, deferred, reads tensors held by reference (constants) among its
 * sample arguments va/vk: keep aliases of every tensor leaf (a later
 * `.data =` cannot change what the fill reads) and note their storages
 * (a write to one fills every deferred sample first). */
int stax_trace_lazy_reads(StaxTracer *tr, StaxNode *n, PyObject *va,
                          PyObject *vk);
/* The write hook's part: t's storage is about to be written outside the
 * graph; when a deferred node reads it, fill every deferred sample now.
 * Never raises (a failure is kept in tr->lazy_error). */
void stax_trace_lazy_before_write(StaxTracer *tr, StaxTensor *t);
/* Run node n's call on `va`/`vk` (sample values) under no_grad: new
 * reference or NULL. */
PyObject *stax_trace_call_node(StaxNode *n, PyObject *va, PyObject *vk);

/* the method's name or the function's __name__ a call node calls (new
 * reference), or NULL with no exception (trace_record.c) */
PyObject *stax_trace_node_called_name(StaxNode *n);
int stax_trace_proxy_init(PyObject *m);
int stax_trace_tracer_init(PyObject *m);

PyObject *stax_trace_set_decomposition(PyObject *self, PyObject *args);

#endif
