"""torch.compile's calls run unchanged on tp.compile: mode= (torch's mode
names accepted, an unknown one refused as torch refuses it), disable=True
(the function itself), backend='inductor' (the native back end)."""
import pytest

import tensorplay as tp


def f(x):
    return x * 2 + 1


@pytest.mark.parametrize("mode", ["default", "reduce-overhead", "max-autotune",
                                  "max-autotune-no-cudagraphs"])
def test_mode_names_accepted(mode):
    cf = tp.compile(f, mode=mode)
    assert cf(tp.ones(3)).tolist() == [3.0, 3.0, 3.0]
    assert cf.stats()["compiles"] == 1


def test_mode_errors_like_torch():
    with pytest.raises(RuntimeError, match="Unrecognized mode=fast, should be one of: default"):
        tp.compile(f, mode="fast")
    with pytest.raises(RuntimeError, match="Either mode or options"):
        tp.compile(f, mode="default", options={})


def test_disable_returns_the_function():
    assert tp.compile(f, disable=True) is f
    m = tp.nn.Linear(2, 2)
    assert tp.compile(m, disable=True) is m

    @tp.compile(disable=True)
    def g(x):
        return x
    assert g.__name__ == "g" and not hasattr(g, "versions")


def test_backend_inductor_is_native():
    cf = tp.compile(f, backend="inductor", mode="max-autotune")
    assert cf(tp.ones(2)).tolist() == [3.0, 3.0]
    assert cf.stats()["backend_compiles"] + cf.stats()["cache_hits"] >= 1
    assert len(cf.versions[0].kernels) == 1

    @tp.compile(mode="reduce-overhead")
    def h(x):
        return x.relu()
    assert h(tp.tensor([-1.0, 2.0])).tolist() == [0.0, 2.0]
