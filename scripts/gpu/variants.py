"""Time the bandwidth cases of bench --device cuda under several settings of
the NVRTC back end's knobs, each in its own process (TENSORPLAY_NVRTC_UNROLL
is read once per process): python3 scripts/gpu/variants.py 'ENV=V ...' ...
(on a GPU machine, after scripts/gpu/build.sh). '' is the default setting.
Prints ms, fraction of a device copy, and the largest difference from
torch's result on the same GPU ("err", relative to the result's largest
magnitude; NaN if the results differ in where they are NaN), so a knob
that is fast but wrong shows. For example

    sh scripts/gpu/build.sh .gpu python3 scripts/gpu/variants.py "" \
        TENSORPLAY_NVRTC_VEC=1 TENSORPLAY_NVRTC_ONEPASS=1 \
        "TENSORPLAY_NVRTC_VEC=1 TENSORPLAY_NVRTC_ONEPASS=1" \
        "TENSORPLAY_NVRTC_VEC=1 TENSORPLAY_NVRTC_ONEPASS=1 TENSORPLAY_NVRTC_UNROLL=8,4" \
        "TENSORPLAY_NVRTC_VEC=1 TENSORPLAY_NVRTC_ONEPASS=1 TENSORPLAY_NVRTC_WARP_ROW=1024"
"""
import os
import subprocess
import sys

CHILD = r'''
import sys, numpy as np, tensorplay as tp, torch
import tensorplay.nn.functional as F
sys.path.insert(0, "bench")
from gpu import events_ms, copy_roof
tp.compiler.config.cache = False
roof = copy_roof()[0]
rng = np.random.default_rng(0)
out = []
TF = torch.nn.functional


def err(r, ref):
    a = r.cpu().numpy().astype(np.float64)
    b = ref.float().cpu().numpy().astype(np.float64)
    if not np.array_equal(np.isnan(a), np.isnan(b)):
        return float("nan")
    fin = ~np.isnan(a)
    return float(np.abs(a[fin] - b[fin]).max() / max(np.abs(b[fin]).max(), 1e-30))


for name, fn, tfn, shape, nin in [
        ("ex11 16384", lambda x, w: (tp.relu(x + w) * 2).sum(-1),
         lambda x, w: (torch.relu(x + w) * 2).sum(-1), (16384, 16384), 2),
        ("ex11 1Mx128", lambda x, w: (tp.relu(x + w) * 2).sum(-1),
         lambda x, w: (torch.relu(x + w) * 2).sum(-1), (1048576, 128), 2),
        ("softmax", lambda x: tp.softmax(x, -1), lambda x: torch.softmax(x, -1),
         (16384, 16384), 1),
        ("layer_norm", lambda x: F.layer_norm(x, (x.shape[-1],)),
         lambda x: TF.layer_norm(x, (x.shape[-1],)), (16384, 16384), 1),
        ("softmax 4096x1000", lambda x: tp.softmax(x, -1), lambda x: torch.softmax(x, -1),
         (4096, 1000), 1)]:
    hs = [rng.standard_normal(shape, dtype=np.float32) for _ in range(nin)]
    xs = [tp.from_numpy(h).cuda() for h in hs]
    cf = tp.compile(fn)
    cf(*xs)
    tp.cuda.finish_compiles()      # the kernels' final versions
    r = cf(*xs)
    ms = events_ms(lambda: cf(*xs), tp.cuda.synchronize, tp.cuda.Event)
    moved = sum(4 * x.numel() for x in xs) + 4 * r.numel()
    e = err(r, tfn(*[torch.from_numpy(h).cuda() for h in hs]))
    out.append(f"{name} {ms:.3f} ms {moved / ms / 1e6 / roof:.3f} err {e:.1e}")
    del xs, r, hs
    tp.cuda.empty_cache()
    torch.cuda.empty_cache()
print(" | ".join(out))
'''


def main(argv):
    for spec in argv or [""]:
        env = dict(os.environ)
        for kv in spec.split():
            k, v = kv.split("=", 1)
            env[k] = v
        r = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True,
                           text=True, timeout=600)
        line = r.stdout.strip().splitlines()[-1:] or [r.stderr.strip()[-300:]]
        print(f"[{spec or 'default'}] {line[0]}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
