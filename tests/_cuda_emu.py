"""Runs tensorplay.cuda._kernels' CUDA C on the host, for tests without a GPU.

Every kernel there is a grid-stride loop whose indices are independent
(no barriers, no shared memory; atomics only), so running the "threads"
one after another gives what the GPU gives. All kernel sources are compiled
once, together, by g++ behind a shim (threadIdx & co. as globals,
float16 through _Float16, atomics as plain reads and writes) into one shared
library, each in its own namespace; a generated driver per kernel loops
over blocks and threads and calls it with the 8-byte arguments
_C._cuda_launch would pass. Tensors must be host tensors here: the
kernels read and write their memory through data_ptr().

    with emulated():            # kernels of tensorplay.cuda._kernels on the host
        v, i = _native.sort(x, 0, False)
"""
import contextlib
import ctypes
import hashlib
import os
import re
import shutil
import subprocess
import tempfile

import pytest

import tensorplay as tp
from tensorplay.cuda import _kernels as K

SHIM = r"""
#include <stdint.h>
#include <string.h>
#include <math.h>
struct stax_dim3 { unsigned x, y, z; };
static stax_dim3 threadIdx, blockIdx, blockDim, gridDim;
#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__ __restrict
static inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
static inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
static inline float stax_h2f(unsigned short h) { _Float16 x; memcpy(&x, &h, 2); return (float)x; }
static inline unsigned short stax_f2h(float f)
{ _Float16 x = (_Float16)f; unsigned short h; memcpy(&h, &x, 2); return h; }
template <typename T> static inline T atomicAdd(T *p, T v) { T o = *p; *p = o + v; return o; }
template <typename T> static inline T atomicMax(T *p, T v) { T o = *p; if (v > o) *p = v; return o; }
static inline unsigned atomicCAS(unsigned *p, unsigned c, unsigned v)
{ unsigned o = *p; if (o == c) *p = v; return o; }
"""

_SIG = re.compile(r'extern "C" __global__ void (\w+)\(([^)]*)\)')
_lib = [None]
needs_gxx = shutil.which("g++") is not None


def _driver(name, params):
    types = []
    for p in params.split(","):
        p = " ".join(p.split())
        m = re.match(r"(.*?)(\w+)$", p)
        types.append(m.group(1).replace("__restrict__", "").strip())
    call = ", ".join(f"*({t} *)p[{i}]" for i, t in enumerate(types))
    return (f'extern "C" void emu_{name}(unsigned g, unsigned b, void **p)\n{{\n'
            "    gridDim.x = g; blockDim.x = b; gridDim.y = gridDim.z = 1;\n"
            "    blockDim.y = blockDim.z = 1; blockIdx.y = blockIdx.z = 0;\n"
            "    threadIdx.y = threadIdx.z = 0;\n"
            "    for (unsigned i = 0; i < g; i++) for (unsigned j = 0; j < b; j++) {\n"
            f"        blockIdx.x = i; threadIdx.x = j; {name}({call});\n    }}\n}}\n")


def program_text():
    """One C++ text: the shim, the prelude once, each distinct source (less
    its prelude) in a namespace, and a driver per kernel."""
    srcs = {}
    for name, src in K.all_sources().items():
        srcs.setdefault(src, []).append(name)
    parts = [SHIM, K.PRELUDE]
    for i, (src, names) in enumerate(srcs.items()):
        assert src.startswith(K.PRELUDE)
        body = src[len(K.PRELUDE):]
        parts.append(f"namespace k{i} {{\n{body}\n")
        for m in _SIG.finditer(body):
            parts.append(_driver(m.group(1), m.group(2)))
        parts.append("}\n")
    return "".join(parts)


def _library():
    if _lib[0] is None:
        text = program_text()
        h = hashlib.sha1(text.encode()).hexdigest()[:16]
        d = os.path.join(tempfile.gettempdir(), "tensorplay_cuda_emu")
        os.makedirs(d, exist_ok=True)
        so = os.path.join(d, f"emu_{h}.so")
        if not os.path.exists(so):
            cpp = os.path.join(d, f"emu_{h}_{os.getpid()}.cpp")
            with open(cpp, "w") as f:
                f.write(text)
            tmp = so + f".{os.getpid()}"
            subprocess.run(["g++", "-O1", "-std=c++17", "-shared", "-fPIC", "-w",
                            "-o", tmp, cpp], check=True)
            os.replace(tmp, so)
            os.unlink(cpp)
        _lib[0] = ctypes.CDLL(so)
    return _lib[0]


launched = []     # (name, grid) of every emulated launch, for tests


def launcher(name, src, grid, block, args):
    lib = _library()
    vals = []
    for a in args:
        if isinstance(a, tp.Tensor):
            assert not a.is_cuda
            vals.append(ctypes.c_uint64(a.data_ptr()))
        elif isinstance(a, bool) or not isinstance(a, (int, float)):
            raise TypeError(f"kernel argument {a!r}")
        elif isinstance(a, int):
            vals.append(ctypes.c_int64(a))
        else:
            vals.append(ctypes.c_double(a))
    ptrs = (ctypes.c_void_p * max(1, len(vals)))(
        *[ctypes.cast(ctypes.pointer(v), ctypes.c_void_p) for v in vals])
    launched.append((name, grid))
    getattr(lib, "emu_" + name)(ctypes.c_uint(grid), ctypes.c_uint(block), ptrs)


@contextlib.contextmanager
def emulated():
    prev = K.set_launcher(launcher)
    try:
        yield
    finally:
        K.set_launcher(prev)


@pytest.fixture
def emu():
    """a test's body runs with the kernels emulated on the host"""
    with emulated():
        yield
