/* Back ends chosen by device: the program's inputs name a device type, the
 * table below names the back end that compiles kernels for it.  Lowering
 * itself is the same for every device; only the back end (the vtable of
 * lower.h) differs. */
#include "lower/lower.h"
#include "tensor/stax_numpy.h"

#include <string.h>

/* One row per device type. */
static const struct {
    const char *device;
    const char *backend;
    const char *missing;     /* why none is registered, what to do */
} device_backends[] = {
    {"cpu", "llvm",
     "the Stax CPU back end needs LLVM: tensorplay was built without it; "
     "install llvm-19-dev (apt-get install llvm-19-dev) and rebuild with "
     "`make build`"},
    {"cuda", "nvrtc",
     "the Stax CUDA back end (NVRTC) is not registered in this build"},
};

#define N_DEVICE_BACKENDS \
    ((int)(sizeof(device_backends) / sizeof(device_backends[0])))

stax_backend *
stax_lower_backend_for_device(const char *device)
{
    for (int i = 0; i < N_DEVICE_BACKENDS; i++) {
        if (strcmp(device_backends[i].device, device) == 0) {
            stax_backend *be = stax_lower_get_backend(
                device_backends[i].backend);
            if (be == NULL) {
                PyErr_SetString(PyExc_RuntimeError,
                                device_backends[i].missing);
            }
            return be;
        }
    }
    PyErr_Format(PyExc_RuntimeError, "Stax has no back end for device type "
                 "'%s'", device);
    return NULL;
}

static const char *
value_device(PyObject *o)
{
    if (StaxTensor_Check(o)) {
        return stax_tensor_device_type((StaxTensor *)o);
    }
    if (PyArray_Check(o)) {
        return "cpu";
    }
    return NULL;             /* not a tensor: no device */
}

/* 1 for a 0-d host tensor: torch lets it join any device's op as a
 * scalar; the program copies it to its device per call (program.c) */
static int
host_scalar(PyObject *o)
{
    return StaxTensor_Check(o) && ((StaxTensor *)o)->ndim == 0
           && strcmp(stax_tensor_device_type((StaxTensor *)o), "cpu") == 0;
}

const char *
stax_lower_inputs_device(PyObject *examples)
{
    PyObject *seq = PySequence_Fast(examples, "example inputs must be a "
                                              "sequence");
    const char *dev = NULL;
    if (seq == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
        PyObject *o = PySequence_Fast_GET_ITEM(seq, i);
        const char *d = value_device(o);
        if (d == NULL) {
            continue;
        }
        if (host_scalar(o)) {
            continue;          /* "cpu" when nothing else votes */
        }
        if (dev != NULL && strcmp(dev, d) != 0) {
            /* PyTorch's words for the same mistake */
            PyErr_Format(PyExc_RuntimeError, "Expected all tensors to be on "
                         "the same device, but found at least two devices, "
                         "%s and %s!", dev, d);
            Py_DECREF(seq);
            return NULL;
        }
        dev = d;
    }
    Py_DECREF(seq);
    return dev != NULL ? dev : "cpu";
}
