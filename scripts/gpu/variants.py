"""Time the bandwidth cases of bench --device cuda under several settings of
the NVRTC back end's knobs, each in its own process (the knobs are read
once): python3 scripts/gpu/variants.py 'ENV=V ...' ...  (on a GPU machine,
after scripts/gpu/build.sh). Prints ms and fraction of a device copy."""
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
for name, fn, shape, nin in [
        ("ex11 16384", lambda x, w: (tp.relu(x + w) * 2).sum(-1), (16384, 16384), 2),
        ("ex11 1Mx128", lambda x, w: (tp.relu(x + w) * 2).sum(-1), (1048576, 128), 2),
        ("softmax", lambda x: tp.softmax(x, -1), (16384, 16384), 1),
        ("layer_norm", lambda x: F.layer_norm(x, (x.shape[-1],)), (16384, 16384), 1)]:
    xs = [tp.from_numpy(rng.standard_normal(shape, dtype=np.float32)).cuda() for _ in range(nin)]
    cf = tp.compile(fn)
    r = cf(*xs)
    ms = events_ms(lambda: cf(*xs), tp.cuda.synchronize, tp.cuda.Event)
    moved = sum(4 * x.numel() for x in xs) + 4 * r.numel()
    out.append(f"{name} {ms:.3f} ms {moved / ms / 1e6 / roof:.3f}")
    del xs, r
    tp.cuda.empty_cache()
print(" | ".join(out))
'''


def main(argv):
    for spec in argv or [""]:
        env = dict(os.environ)
        for kv in spec.split():
            k, v = kv.split("=", 1)
            env[k] = v
        r = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True,
                           text=True, timeout=300)
        line = r.stdout.strip().splitlines()[-1:] or [r.stderr.strip()[-300:]]
        print(f"[{spec or 'default'}] {line[0]}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
