"""Per-call wall time of compiled CUDA programs with CUDA graphs off and on
(and what "auto" chooses), on a GPU machine:

    python3 scripts/gpu/graphs_bench.py [calls=1000]

For each program: 'async' is the median over blocks of 100 calls of the
time per call when calls are queued back to back (one synchronization per
block; each result held until the next call's, as `y = f(x)` in a loop
does, so the output's node is updated every call), 'sync' the median time of one call followed by
tp.cuda.synchronize() (launch + run + wait); both in microseconds, the two
modes measured in alternating blocks so drift hits both alike.
"""
import statistics
import sys
import time

import tensorplay as tp

F = tp.nn.functional


def chain3(x, w):
    y = F.softmax(x, -1) * w
    z = F.gelu(y - y.mean(-1, keepdim=True))
    return z, z.sum(0)


def chain5(x, w):
    a = F.softmax(x, -1)
    b = F.layer_norm(a * w, (x.shape[-1],))
    c = b.amax(-1, keepdim=True)
    d = F.gelu(b - c).sum(0)
    return d, (a * b).sum(-1)


_W = {}


def mlp(x, w):
    # two cuBLAS products with kernels around them (child-graph nodes);
    # the weights are free tensors of the function, lifted into arguments
    h = F.gelu(x @ _W["1"] + w[:256])
    return F.layer_norm(h @ _W["2"], (64,))


def one(x, w):
    return x * w + 1


def plus1(x, w):
    return x + 1


def measure(cf, args, calls):
    for _ in range(50):
        cf(*args)
    tp.cuda.synchronize()
    blocks, lat = [], []
    for b in range(calls // 100):
        t0 = time.perf_counter()
        out = None
        for _ in range(100):
            out = cf(*args)        # held until the next call's result: a new block
        tp.cuda.synchronize()
        del out
        blocks.append((time.perf_counter() - t0) / 100 * 1e6)
    for _ in range(calls // 4):
        t0 = time.perf_counter()
        cf(*args)
        tp.cuda.synchronize()
        lat.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(blocks), statistics.median(lat)


def main():
    calls = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    _W["1"] = tp.randn(512, 256, device="cuda") * 0.05     # made before any trace
    _W["2"] = tp.randn(256, 64, device="cuda") * 0.05
    rows = []
    for name, fn, shape in [("chain3 64x96", chain3, (64, 96)),
                            ("chain5 64x96", chain5, (64, 96)),
                            ("chain5 4096x1024", chain5, (4096, 1024)),
                            ("mlp 64x512 (cuBLAS)", mlp, (64, 512)),
                            ("one kernel 64x96", one, (64, 96)),
                            ("x + 1, 1 element", plus1, (1,))]:
        x = tp.randn(*shape, device="cuda")
        w = tp.randn(shape[-1], device="cuda")
        res = {}
        progs = {}
        for mode in (False, True, "auto"):
            cf = tp.compile(fn)
            cf(x, w)
            tp.cuda.finish_compiles()      # the kernels' final versions
            p = cf.versions[0].artifact
            p.cuda_graphs = mode
            progs[mode] = (cf, p)
        # alternate: off, on, off, on (two rounds each)
        for rnd in range(2):
            for mode in (False, True):
                a, s = measure(progs[mode][0], (x, w), calls)
                res.setdefault(mode, []).append((a, s))
        cf, p = progs["auto"]
        for _ in range(30):
            cf(x, w)
        info = p.cuda_graph
        off = [min(r[0] for r in res[False]), min(r[1] for r in res[False])]
        on = [min(r[0] for r in res[True]), min(r[1] for r in res[True])]
        rows.append((name, len(p.kernels), off, on, info["state"], info["direct_us"],
                     info["graph_us"], progs[True][1].cuda_graph))
    print(f"{'program':20} {'kern':>4} {'off async':>10} {'on async':>9} {'off sync':>9} "
          f"{'on sync':>8}  auto (direct_us / graph_us)")
    for name, nk, off, on, st, du, gu, info in rows:
        print(f"{name:20} {nk:4d} {off[0]:10.2f} {on[0]:9.2f} {off[1]:9.2f} {on[1]:8.2f}  "
              f"{st} ({du and round(du, 1)} / {gu and round(gu, 1)})")
        print(f"{'':25} on: replays {info['graph_replays']}, updates {info['node_updates']}, "
              f"state {info['state']} {info['reason'] or ''}")


if __name__ == "__main__":
    main()
