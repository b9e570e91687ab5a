/* CUDA graphs of compiled CUDA programs (torch's "reduce-overhead"): the
 * kernel launches of one call recorded and replayed as one graph launch
 * (device.h; the recording is made by the NVRTC back end's launch while
 * the device room has one open).
 *
 * Which programs: every step an NVRTC kernel or a cuBLAS matmul (a child
 * graph captured from cuBLAS; an eager fallback step or a host step runs
 * outside any graph, so such a program takes none), and no runtime check
 * read back per call (that read waits
 * for the stream). A call whose recording broke (something inside copied
 * or synchronized) ran its kernels one by one; three such calls and the
 * program stops trying.
 *
 * When: tp.compiler.config.cuda_graphs (TENSORPLAY_CUDA_GRAPHS), or the
 * program's own cuda_graphs: False never, True from the second call (the
 * first loads the kernels and tunes their launches: timed launches
 * synchronize), "auto" (default) -- LW_CG_SAMPLES calls each way timed
 * on the host clock (the whole call), the faster way kept.
 *
 * The graph's lifetime is the program's: freed with it. */
#include "lower/lower_internal.h"
#include "device/device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int lw_cuda_graphs_mode = LW_CG_AUTO;

static double
median(const double *v, int n)
{
    double s[LW_CG_SAMPLES + 1];
    if (n <= 0) {
        return -1.0;
    }
    memcpy(s, v, sizeof(double) * (size_t)n);
    for (int i = 1; i < n; i++) {        /* insertion sort: a few values */
        double x = s[i];
        int j = i - 1;
        while (j >= 0 && s[j] > x) {
            s[j + 1] = s[j];
            j--;
        }
        s[j + 1] = x;
    }
    return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

int
lw_cgraph_plan(int mode, int nkernels, long long calls, int nd,
               const double *td, int ng, const double *tg, char *why_buf,
               size_t why_cap, const char **why)
{
    double d, g;
    *why = NULL;
    if (mode == LW_CG_OFF) {
        *why = "tp.compiler.config.cuda_graphs is False";
        return LW_CG_DIRECT;
    }
    if (calls == 0) {
        /* the first call loads the kernels and tunes their launch
         * configurations with timed (synchronizing) launches */
        *why = "warm-up: the first call launches kernel by kernel";
        return LW_CG_DIRECT;
    }
    if (mode == LW_CG_ON) {
        return LW_CG_GRAPH;
    }
    (void)nkernels;            /* one launch may gain too: measured (H200:
                                  a one-node graph's launch cost 3.0 us per
                                  call, the launch 5.2) */
    if (nd < LW_CG_SAMPLES) {
        return LW_CG_MEASURE_DIRECT;
    }
    if (ng < LW_CG_SAMPLES + 1) {
        return LW_CG_MEASURE_GRAPH;
    }
    d = median(td, nd);
    g = median(tg + 1, ng - 1);        /* the first built the graph */
    if (g <= d) {
        return LW_CG_GRAPH;
    }
    /* PyOS_snprintf has no %f limits here; plain snprintf */
    snprintf(why_buf, why_cap, "auto: measured %.1f us per call with a "
             "graph, %.1f us without", g, d);
    *why = why_buf;
    return LW_CG_DIRECT;
}

static int
program_mode(Program *p)
{
    return p->cg_mode ? p->cg_mode - 1 : lw_cuda_graphs_mode;
}

static int
is_cuda(Program *p)
{
    return p->c.be != NULL && p->c.be->device != NULL;
}

/* the dtypes the device room's products go straight to cuBLAS with
 * (others take another way, which breaks a recording) */
static int
cublas_dtype(stax_dtype_t dt)
{
    return dt == STAX_FLOAT32 || dt == STAX_FLOAT64 || dt == STAX_FLOAT16
           || dt == STAX_BFLOAT16;
}

/* p's graph state, made and its structure looked at on first use */
static lw_cgraph *
cg_get(Program *p)
{
    lw_cgraph *cg = p->cg;
    const lw_ctx *c = &p->c;
    const char *why = NULL;
    if (cg != NULL) {
        return cg;
    }
    cg = p->cg = calloc(1, sizeof(*cg));
    if (cg == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    cg->checked = 1;
    for (int i = 0; i < c->nsteps && cg->why[0] == '\0'; i++) {
        const step_t *s = &c->steps[i];
        static const char *what[] = {
            "a kernel launched another way",
            "a library call (matmul through cuBLAS)",
            "an eager (fallback) op",
            "a host step (tuple item)",
            "a scatter step",
        };
        if (s->kind == ST_MATMUL && cublas_dtype(c->pbufs[s->out].dtype)
            && stax_cuda_products_available()) {
            continue;          /* a child-graph node (device/graphs.c) */
        }
        if (s->kind != ST_KERNEL || s->fn != NULL) {
            snprintf(cg->why, sizeof(cg->why), "step %d is %s, which runs "
                     "outside a graph", i,
                     what[s->kind == ST_KERNEL ? 0 : (int)s->kind]);
        }
    }
    if (cg->why[0] == '\0' && c->nzchecks > 0) {
        snprintf(cg->why, sizeof(cg->why), "the program reads a runtime "
                 "check back on every call (a synchronization)");
    }
    if (cg->why[0] == '\0' && c->nsteps == 0) {
        snprintf(cg->why, sizeof(cg->why), "the program launches no kernel");
    }
    if (cg->why[0] == '\0' && !stax_cuda_graphs_available(&why)) {
        snprintf(cg->why, sizeof(cg->why), "CUDA graphs are not available: "
                 "%s", why != NULL ? why : "?");
    }
    cg->nkernels = c->nsteps;
    if (cg->why[0] == '\0') {
        cg->g = stax_cuda_graph_new();
        if (cg->g == NULL) {
            return NULL;
        }
        cg->eligible = 1;
    }
    return cg;
}

int
lw_cgraph_begin(Program *p)
{
    lw_cgraph *cg;
    const char *why = NULL;
    char buf[160];
    int mode, act;
    if (!is_cuda(p)) {
        return LW_CG_DIRECT;
    }
    mode = program_mode(p);
    if ((cg = cg_get(p)) == NULL) {
        return -1;
    }
    if (!cg->eligible) {
        act = LW_CG_DIRECT;
    }
    else if (mode == LW_CG_AUTO && cg->decided) {
        act = cg->decided;
    }
    else {
        act = lw_cgraph_plan(mode, cg->nkernels, cg->calls, cg->nd, cg->td,
                             cg->ng, cg->tg, buf, sizeof(buf), &why);
        if (mode == LW_CG_AUTO && cg->calls > 0
            && (act == LW_CG_GRAPH || act == LW_CG_DIRECT)) {
            cg->decided = act;
            snprintf(cg->auto_why, sizeof(cg->auto_why), "%s",
                     why != NULL ? why : "");
        }
    }
    cg->calls++;
    if (act == LW_CG_GRAPH || act == LW_CG_MEASURE_GRAPH) {
        stax_cuda_graph_begin(cg->g);
    }
    else {
        cg->direct_calls++;
    }
    return act;
}

int
lw_cgraph_end(Program *p, int act, int ok)
{
    lw_cgraph *cg = p->cg;
    int r;
    if (act != LW_CG_GRAPH && act != LW_CG_MEASURE_GRAPH) {
        return 0;
    }
    if (!ok) {
        /* the call failed: what was recorded is launched as it would
         * have been (the call's error stays the one raised) */
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        if (stax_cuda_graph_end(cg->g, 0) < 0) {
            PyErr_Clear();
        }
        PyErr_Restore(et, ev, tb);
        cg->direct_calls++;
        return -1;
    }
    r = stax_cuda_graph_end(cg->g, 1);
    if (r == 0) {
        cg->graph_calls++;
        return 0;
    }
    cg->direct_calls++;
    cg->skip_sample = 1;       /* it ran one by one: no graph sample */
    if (r == 1) {
        if (++cg->breaks >= 3) {
            cg->eligible = 0;
            snprintf(cg->why, sizeof(cg->why), "a launch inside the program "
                     "could not be recorded (it copies, synchronizes or is "
                     "timed) on %d calls", cg->breaks);
        }
        return 0;
    }
    /* a driver error: the kernels ran one by one; no graph from now on */
    {
        PyObject *et, *ev, *tb, *msg = NULL;
        PyErr_Fetch(&et, &ev, &tb);
        PyErr_NormalizeException(&et, &ev, &tb);
        msg = ev != NULL ? PyObject_Str(ev) : NULL;
        snprintf(cg->why, sizeof(cg->why), "a CUDA graph call failed: %s",
                 msg != NULL && PyUnicode_Check(msg) ? PyUnicode_AsUTF8(msg) : "?");
        PyErr_Clear();
        cg->eligible = 0;
        if (program_mode(p) == LW_CG_ON) {
            Py_XDECREF(msg);
            PyErr_Restore(et, ev, tb);
            return -1;
        }
        Py_XDECREF(et);
        Py_XDECREF(ev);
        Py_XDECREF(tb);
        r = PyErr_WarnFormat(PyExc_RuntimeWarning, 1, "tensorplay: CUDA graphs "
                             "turned off for this compiled program: %S",
                             msg != NULL ? msg : Py_None);
        Py_XDECREF(msg);
        return r < 0 ? -1 : 0;
    }
}

void
lw_cgraph_done(Program *p, int act, double us)
{
    lw_cgraph *cg = p->cg;
    if (cg == NULL) {
        return;
    }
    if (cg->skip_sample) {
        cg->skip_sample = 0;
        return;
    }
    if (act == LW_CG_MEASURE_DIRECT && cg->nd < LW_CG_SAMPLES) {
        cg->td[cg->nd++] = us;
    }
    else if (act == LW_CG_MEASURE_GRAPH && cg->ng < LW_CG_SAMPLES + 1) {
        cg->tg[cg->ng++] = us;
    }
}

void
lw_cgraph_free(Program *p)
{
    if (p->cg != NULL) {
        stax_cuda_graph_free(p->cg->g);
        free(p->cg);
        p->cg = NULL;
    }
}

static const char *
mode_name(int mode)
{
    return mode == LW_CG_OFF ? "off" : mode == LW_CG_ON ? "on" : "auto";
}

/* prog.cuda_graph: what the graph machinery did for this program */
PyObject *
lw_cgraph_info(Program *p)
{
    lw_cgraph *cg = p->cg;
    stax_cuda_graph_stats st;
    int mode = program_mode(p);
    const char *state, *why = NULL;
    PyObject *dus = NULL, *gus = NULL, *r;
    stax_cuda_graph_stats_get(cg != NULL ? cg->g : NULL, &st);
    if (!is_cuda(p)) {
        state = "off";
        why = "not a CUDA program";
    }
    else if (cg != NULL && !cg->eligible) {
        state = "off";
        why = cg->why;
    }
    else if (mode == LW_CG_OFF) {
        state = "off";
        why = "tp.compiler.config.cuda_graphs is False";
    }
    else if (cg == NULL || cg->calls == 0) {
        state = "warm-up";
    }
    else if (mode == LW_CG_ON || cg->decided == LW_CG_GRAPH) {
        state = "graph";
    }
    else if (cg->decided == LW_CG_DIRECT) {
        state = "direct";
        why = cg->auto_why;
    }
    else {
        state = "measuring";
    }
    if (cg != NULL && cg->nd > 0) {
        dus = PyFloat_FromDouble(median(cg->td, cg->nd));
    }
    if (cg != NULL && cg->ng > 1) {
        gus = PyFloat_FromDouble(median(cg->tg + 1, cg->ng - 1));
    }
    r = Py_BuildValue("{sssssssisLsLsLsLsLsLsOsO}",
                      "mode", mode_name(mode), "state", state,
                      "reason", why, "kernels", cg != NULL ? cg->nkernels : 0,
                      "calls", cg != NULL ? cg->calls : 0LL,
                      "direct_calls", cg != NULL ? cg->direct_calls : 0LL,
                      "graph_replays", st.replays, "builds", st.builds,
                      "node_updates", st.updates, "nodes", st.nodes,
                      "direct_us", dus != NULL ? dus : Py_None,
                      "graph_us", gus != NULL ? gus : Py_None);
    Py_XDECREF(dus);
    Py_XDECREF(gus);
    return r;
}

/* True / False / "auto" -> LW_CG_*; -1 + exception naming the setting */
static int
mode_from(PyObject *v, const char *who)
{
    if (v == Py_True) {
        return LW_CG_ON;
    }
    if (v == Py_False) {
        return LW_CG_OFF;
    }
    if (PyUnicode_Check(v) && PyUnicode_CompareWithASCIIString(v, "auto") == 0) {
        return LW_CG_AUTO;
    }
    PyErr_Format(PyUnicode_Check(v) ? PyExc_ValueError : PyExc_TypeError,
                 "%s must be True, False or \"auto\", got %R", who, v);
    return -1;
}

static PyObject *
mode_object(int mode)
{
    return mode == LW_CG_AUTO ? PyUnicode_FromString("auto")
                              : PyBool_FromLong(mode == LW_CG_ON);
}

int
lw_cgraph_set_mode(Program *p, PyObject *v)
{
    int m = 0;
    if (v == NULL) {
        PyErr_SetString(PyExc_AttributeError, "cuda_graphs cannot be deleted "
                        "(set None to follow tp.compiler.config.cuda_graphs)");
        return -1;
    }
    if (v != Py_None) {
        m = mode_from(v, "CompiledProgram.cuda_graphs");
        if (m < 0) {
            return -1;
        }
        m++;
    }
    p->cg_mode = m;
    for (Py_ssize_t i = 0; p->variants != NULL && i < PyList_GET_SIZE(p->variants); i++) {
        ((Program *)PyList_GET_ITEM(p->variants, i))->cg_mode = m;
    }
    return 0;
}

PyObject *
lw_cgraph_get_mode(Program *p)
{
    if (p->cg_mode == 0) {
        Py_RETURN_NONE;
    }
    return mode_object(p->cg_mode - 1);
}

/* ------------------------------------------------------------ Python */

static PyObject *
py_mode(PyObject *mod, PyObject *args)
{
    PyObject *v = NULL;
    (void)mod;
    if (!PyArg_ParseTuple(args, "|O:_cuda_graphs_mode", &v)) {
        return NULL;
    }
    if (v != NULL) {
        int m = mode_from(v, "tp.compiler.config.cuda_graphs");
        if (m < 0) {
            return NULL;
        }
        lw_cuda_graphs_mode = m;
    }
    return mode_object(lw_cuda_graphs_mode);
}

static PyObject *
py_plan(PyObject *mod, PyObject *args)
{
    static const char *names[] = {"direct", "graph", "measure direct",
                                  "measure graph"};
    PyObject *mo, *dl, *gl, *dseq = NULL, *gseq = NULL, *r = NULL;
    int nk, mode, nd, ng;
    long long calls;
    double td[LW_CG_SAMPLES + 1], tg[LW_CG_SAMPLES + 1];
    char buf[160];
    const char *why = NULL;
    (void)mod;
    if (!PyArg_ParseTuple(args, "OiLOO:_cuda_graph_plan", &mo, &nk, &calls,
                          &dl, &gl)
        || (mode = mode_from(mo, "mode")) < 0) {
        return NULL;
    }
    dseq = PySequence_Fast(dl, "direct samples: a sequence of floats");
    gseq = dseq ? PySequence_Fast(gl, "graph samples: a sequence of floats") : NULL;
    if (gseq == NULL) {
        goto done;
    }
    nd = (int)PySequence_Fast_GET_SIZE(dseq);
    ng = (int)PySequence_Fast_GET_SIZE(gseq);
    if (nd > LW_CG_SAMPLES || ng > LW_CG_SAMPLES + 1) {
        PyErr_Format(PyExc_ValueError, "at most %d direct and %d graph samples",
                     LW_CG_SAMPLES, LW_CG_SAMPLES + 1);
        goto done;
    }
    for (int i = 0; i < nd + ng; i++) {
        PyObject *o = i < nd ? PySequence_Fast_GET_ITEM(dseq, i)
                             : PySequence_Fast_GET_ITEM(gseq, i - nd);
        double x = PyFloat_AsDouble(o);
        if (x == -1.0 && PyErr_Occurred()) {
            goto done;
        }
        if (i < nd) {
            td[i] = x;
        }
        else {
            tg[i - nd] = x;
        }
    }
    {
        int a = lw_cgraph_plan(mode, nk, calls, nd, td, ng, tg, buf,
                               sizeof(buf), &why);
        r = Py_BuildValue("(sz)", names[a], why);
    }
done:
    Py_XDECREF(dseq);
    Py_XDECREF(gseq);
    return r;
}

static PyObject *
py_inject(PyObject *mod, PyObject *arg)
{
    const char *s = PyUnicode_AsUTF8(arg);
    (void)mod;
    if (s == NULL) {
        return NULL;
    }
    stax_cuda_graph_inject(s);
    Py_RETURN_NONE;
}

static PyObject *
py_available(PyObject *mod, PyObject *unused)
{
    const char *why = NULL;
    (void)mod;
    (void)unused;
    if (stax_cuda_graphs_available(&why)) {
        Py_RETURN_TRUE;
    }
    return PyUnicode_FromString(why != NULL ? why : "unavailable");
}

static PyObject *
py_live(PyObject *mod, PyObject *unused)
{
    (void)mod;
    (void)unused;
    return PyLong_FromLongLong(stax_cuda_graphs_live());
}

static PyMethodDef cgraph_methods[] = {
    {"_cuda_graphs_live", py_live, METH_NOARGS,
     "_cuda_graphs_live() -> int: executable CUDA graphs alive (each "
     "program's is freed with it)."},
    {"_cuda_graphs_mode", py_mode, METH_VARARGS,
     "_cuda_graphs_mode([mode]) -> True, False or 'auto': the mode of CUDA "
     "graphs for compiled CUDA programs (tp.compiler.config.cuda_graphs "
     "sets it); TypeError/ValueError naming the setting for another value."},
    {"_cuda_graph_plan", py_plan, METH_VARARGS,
     "_cuda_graph_plan(mode, nkernels, calls, direct_us, graph_us) -> "
     "(action, reason): what a call of a program of nkernels launches does "
     "after `calls` calls, given auto's samples so far (the first graph "
     "sample builds the graph and is not compared): action 'direct', "
     "'graph', 'measure direct' or 'measure graph'; reason None or why not "
     "a graph."},
    {"_cuda_graph_inject", py_inject, METH_O,
     "_cuda_graph_inject(what): tests. 'missing' hides libcuda's graph "
     "entry points (programs looked at afterwards take no graph), '' "
     "restores them; a driver call's name (cuGraphInstantiateWithFlags, "
     "cuGraphLaunch, cuGraphExecKernelNodeSetParams, ...) makes its next "
     "call fail with CUDA_ERROR_NOT_SUPPORTED."},
    {"_cuda_graphs_available", py_available, METH_NOARGS,
     "_cuda_graphs_available() -> True, or a str naming what is missing "
     "(no CUDA, or libcuda lacks a graph entry point)."},
    {NULL, NULL, 0, NULL},
};

int
lw_cgraph_module_init(PyObject *m)
{
    return PyModule_AddFunctions(m, cgraph_methods);
}
