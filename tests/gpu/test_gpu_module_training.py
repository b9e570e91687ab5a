"""Optimizers on CUDA parameters: a few training steps of a small MLP and a
small CNN (forward, backward, SGD-momentum / Adam / fused Adam / AdamW step,
an lr scheduler) on CUDA, eager and tp.compile, equal the same steps on the
CPU, with the optimizer's state on the parameters' device (before, the fused
and SGD steps built their scalars on the CPU). Optimizer.load_state_dict
moves state to the parameters' device (a non-fused "step" stays where it
was, as torch); CUDA tensors pickle (plain pickle, copy.deepcopy, tp.save)
as host values and their device, and map_location applies.

Tolerance: float32, rtol 1e-4 / atol 1e-5 on parameters and losses after 3
steps (the GPU's reduction order and fused multiply-adds differ from the
CPU's by a few ulp per op; 3 optimizer steps keep that well under 1e-4).

    python3 -m pytest tests/gpu/test_gpu_module_training.py    # on a GPU machine
    TP_GPU_TEST_DEVICE=cpu python3 -m pytest tests/gpu/test_gpu_module_training.py
        # the same code paths with the "device" being the CPU (a dry run)
"""
import copy
import io
import os
import pickle

import numpy as np
import pytest

import tensorplay as tp
from tensorplay import nn
import tensorplay.nn.functional as F

DEV = os.environ.get("TP_GPU_TEST_DEVICE", "cuda")
pytestmark = pytest.mark.skipif(DEV == "cuda" and not tp.cuda.is_available(),
                                reason="needs an NVIDIA GPU and its driver (libcuda)")
RTOL, ATOL = 1e-4, 1e-5


def on(d):
    """the device a tensor moved to `d` reports: "cuda" means the current
    device, and a CUDA tensor's .device names its index ("cuda:0"), which
    tp.device("cuda") does not equal (as in torch)"""
    return tp.device("cuda", tp.cuda.current_device()) if d == "cuda" else tp.device(d)


def mlp():
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def cnn():
    return nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(4 * 3 * 3, 4))


def batch(kind):
    rng = np.random.default_rng(1)
    shape = (6, 8) if kind == "mlp" else (6, 2, 6, 6)
    x = tp.tensor(rng.standard_normal(shape).astype(np.float32))
    y = tp.tensor(rng.integers(0, 4, size=6), dtype=tp.int64)
    return x, y


OPTS = {"sgd": lambda ps: tp.optim.SGD(ps, lr=0.1, momentum=0.9),
        "adam": lambda ps: tp.optim.Adam(ps, lr=1e-2),
        "adamw": lambda ps: tp.optim.AdamW(ps, lr=1e-2),
        "adam_fused": lambda ps: tp.optim.Adam(ps, lr=1e-2, fused=True)}


def train(kind, opt_name, device, compiled, steps=3):
    tp.manual_seed(0)
    model = mlp() if kind == "mlp" else cnn()
    params = list(model.parameters())
    opt = OPTS[opt_name](model.parameters())      # built before the move
    sched = tp.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    assert model.to(device) is model
    assert all(p is q for p, q in zip(params, model.parameters()))
    assert all(p.device == on(device) for p in model.parameters())
    fwd = tp.compile(model) if compiled else model
    x, y = batch(kind)
    x, y = x.to(device), y.to(device)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = F.cross_entropy(fwd(x), y)
        loss.backward()
        assert all(p.grad.device == on(device) for p in params)
        opt.step()
        sched.step()
        losses.append(loss.item())
    for st in opt.state.values():
        for k, v in st.items():
            if isinstance(v, tp.Tensor) and k != "step":
                assert v.device == on(device), k
    return losses, [p.detach().cpu().numpy() for p in params]


@pytest.mark.parametrize("kind,opt_name", [("mlp", "sgd"), ("mlp", "adam"), ("mlp", "adam_fused"),
                                           ("cnn", "adamw")])
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_training_steps_on_the_device_equal_the_cpu(kind, opt_name, compiled):
    want_l, want_p = train(kind, opt_name, "cpu", False)
    got_l, got_p = train(kind, opt_name, DEV, compiled)
    np.testing.assert_allclose(got_l, want_l, rtol=RTOL, atol=ATOL)
    for g, w in zip(got_p, want_p):
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL)


def test_state_dict_save_load_across_devices():
    tp.manual_seed(0)
    m = mlp().to(DEV)
    sd = m.state_dict()
    assert all(v.device == on(DEV) for v in sd.values())
    buf = io.BytesIO()
    tp.save(sd, buf)
    buf.seek(0)
    back = tp.load(buf)
    assert all(v.device == on(DEV) for v in back.values())
    buf.seek(0)
    on_cpu = tp.load(buf, map_location="cpu")
    assert all(v.device == on("cpu") for v in on_cpu.values())
    cpu_model = mlp()
    cpu_model.load_state_dict(sd)              # device -> cpu copy_
    m2 = mlp().to(DEV)
    m2.load_state_dict(on_cpu)                 # cpu -> device copy_
    for a, b, c in zip(m.parameters(), cpu_model.parameters(), m2.parameters()):
        assert b.device == on("cpu") and c.device == on(DEV)
        np.testing.assert_array_equal(a.detach().cpu().numpy(), b.detach().numpy())
        np.testing.assert_array_equal(a.detach().cpu().numpy(), c.detach().cpu().numpy())
    assert m.cpu() is m and all(p.device == on("cpu") for p in m.parameters())


def test_optimizer_load_state_dict_moves_state_to_the_parameters_device():
    for fused in (False, True):
        tp.manual_seed(0)
        m = mlp()
        opt = tp.optim.Adam(m.parameters(), lr=1e-2, fused=fused)
        x, y = batch("mlp")
        F.cross_entropy(m(x), y).backward()
        opt.step()
        sd = opt.state_dict()                      # state on the CPU
        m.to(DEV)
        opt2 = tp.optim.Adam(m.parameters(), lr=1e-2, fused=fused)
        opt2.load_state_dict(sd)
        for p in m.parameters():
            st = opt2.state[p]
            assert st["exp_avg"].device == on(DEV)
            assert st["exp_avg_sq"].device == on(DEV)
            assert st["step"].device == on(DEV if fused else "cpu")
        opt2.zero_grad()
        F.cross_entropy(m(x.to(DEV)), y.to(DEV)).backward()
        opt2.step()                                # runs on the device
        assert all(opt2.state[p]["step"].item() == 2.0 for p in m.parameters())


def test_pickle_and_deepcopy_of_device_tensors():
    w = nn.Parameter(tp.tensor([[1.0, -2.0], [0.5, 3.0]]).to(DEV))
    t = tp.arange(6, dtype=tp.float32).reshape(2, 3).to(DEV).bfloat16()
    for back in (pickle.loads(pickle.dumps({"w": w, "t": t})), copy.deepcopy({"w": w, "t": t})):
        assert isinstance(back["w"], nn.Parameter) and back["w"].requires_grad
        assert back["w"].device == on(DEV) and back["t"].device == on(DEV)
        assert back["t"].dtype == tp.bfloat16
        assert back["w"].detach().cpu().tolist() == w.detach().cpu().tolist()
        assert back["t"].float().cpu().tolist() == t.float().cpu().tolist()
    m = mlp().to(DEV)
    m2 = copy.deepcopy(m)
    assert all(p.device == on(DEV) for p in m2.parameters())
    buf = io.BytesIO()
    tp.save({"w": w}, buf)
    for ml in ("cpu", {str(w.device): "cpu"}, lambda s, loc: s):
        buf.seek(0)
        got = tp.load(buf, map_location=ml)["w"]
        assert got.device == on("cpu") and isinstance(got, nn.Parameter)
