"""Build of tensorplay._C: one C11 extension over the CPython and NumPy C APIs,
LLVM-C 19 (optional: without it the CPU back end raises a clear error) and xxHash."""
import glob
import os
import shutil
import subprocess

import numpy
from setuptools import Extension, setup


def llvm_flags():
    cfg = os.environ.get("LLVM_CONFIG") or shutil.which("llvm-config-19")
    if not cfg:
        print("setup.py: llvm-config-19 not found; building without the CPU JIT "
              "(install llvm-19-dev)")
        return None

    def q(*a):
        return subprocess.check_output([cfg, *a], text=True).split()
    inc = [f[2:] for f in q("--cflags") if f.startswith("-I")]
    libdir = q("--libdir")[0]
    libs = [f[2:] for f in q("--libs") if f.startswith("-l")]
    return dict(include_dirs=inc, library_dirs=[libdir], libraries=libs,
                runtime_library_dirs=[libdir], define_macros=[("STAX_HAVE_LLVM", "1")])


sources = sorted(glob.glob("stax_module/*.c") + glob.glob("csrc/*/*.c"))
kw = dict(include_dirs=["csrc", numpy.get_include()], library_dirs=[], libraries=["xxhash", "m", "dl", "pthread"],
          runtime_library_dirs=[], define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")])
lf = llvm_flags()
if lf:
    for k, v in lf.items():
        kw[k] = kw[k] + v
extra = ["-std=c11", "-O2", "-g", "-Wall", "-Wno-unused-function", "-Wno-missing-field-initializers",
         "-fvisibility=hidden", "-D_GNU_SOURCE"]
extra += os.environ.get("STAX_CFLAGS", "").split()
setup(
    ext_modules=[Extension("tensorplay._C", sources=sources, extra_compile_args=extra,
                           extra_link_args=os.environ.get("STAX_LDFLAGS", "").split(),
                           depends=sorted(glob.glob("csrc/*/*.h") + glob.glob("csrc/*/*.def")), **kw)],
)
