"""Normalizations and softmax of integer/bool inputs raise torch's
NotImplementedError in eager, compiled and strict_native code alike (issue 13:
compiled F.batch_norm of an int64 tensor reached the LLVM template, which
built a float constant of an integer type and crashed the process)."""
import pytest

import tensorplay as tp
import tensorplay.nn.functional as F

torch = pytest.importorskip("torch")

W, B, RM, RV = tp.ones(3), tp.zeros(3), tp.zeros(3), tp.ones(3)

CASES = {
    "batch_norm_eval": (lambda m: lambda x: m.batch_norm(x, RM, RV, W, B),
                        lambda x: torch.nn.functional.batch_norm(
                            x, torch.zeros(3), torch.ones(3), torch.ones(3), torch.zeros(3))),
    "batch_norm_train": (lambda m: lambda x: m.batch_norm(x, RM, RV, W, B, training=True),
                         lambda x: torch.nn.functional.batch_norm(
                             x, torch.zeros(3), torch.ones(3), training=True)),
    "layer_norm": (lambda m: lambda x: m.layer_norm(x, (4,)),
                   lambda x: torch.nn.functional.layer_norm(x, (4,))),
    "group_norm": (lambda m: lambda x: m.group_norm(x, 3),
                   lambda x: torch.nn.functional.group_norm(x, 3)),
    "instance_norm": (lambda m: lambda x: m.instance_norm(x),
                      lambda x: torch.nn.functional.instance_norm(x)),
    "softmax": (lambda m: lambda x: m.softmax(x, -1),
                lambda x: torch.softmax(x, -1)),
    "log_softmax": (lambda m: lambda x: m.log_softmax(x, -1),
                    lambda x: torch.log_softmax(x, -1)),
}
DTYPES = ["int64", "int32", "uint8", "bool"]


def _torch_error(fn, dtype):
    x = torch.arange(24).reshape(2, 3, 4).to(getattr(torch, dtype))
    with pytest.raises(Exception) as info:
        fn(x)
    return info.type, str(info.value)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("mode", ["eager", "compiled", "strict"])
def test_integer_input_raises_torchs_error(case, dtype, mode):
    make, ref = CASES[case]
    etype, emsg = _torch_error(ref, dtype)
    f = make(F)
    if mode == "compiled":
        f = tp.compile(f)
    elif mode == "strict":
        f = tp.compile(f, strict_native=True)
    x = tp.arange(24).reshape(2, 3, 4).to(getattr(tp, dtype))
    with pytest.raises(etype) as info:
        f(x)
    assert str(info.value) == emsg
    # a later float call still compiles and runs natively
    y = tp.arange(24, dtype=tp.float32).reshape(2, 3, 4)
    assert f(y).dtype == tp.float32
