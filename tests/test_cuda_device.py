"""The CUDA device model's host side: what runs without a GPU (CI).

Every way of asking for a CUDA tensor without a GPU raises PyTorch's kind
of error, "CUDA is not available: ...", naming what tensorplay looked for
(the driver library, a device); the cpu device keeps working under every
spelling. With a GPU these tests skip and tests/gpu/test_cuda_tensors.py
runs the real thing.
"""
import pytest

import tensorplay as tp

no_gpu = pytest.mark.skipif(tp.cuda.is_available(),
                            reason="a GPU is present: tests/gpu covers CUDA tensors")


def test_device_objects_have_torch_names():
    d = tp.device("cuda:0")
    assert d.type == "cuda" and d.index == 0
    assert str(d) == "cuda:0" and repr(d) == "device(type='cuda', index=0)"
    assert tp.device("cuda") != tp.device("cpu")
    x = tp.ones(2)
    assert x.device == tp.device("cpu") and x.is_cuda is False


def test_cpu_spellings_stay_on_the_host():
    for dev in (None, "cpu", tp.device("cpu")):
        for t in (tp.ones(2, device=dev), tp.zeros(2, device=dev), tp.empty(2, device=dev),
                  tp.full((2,), 3.0, device=dev), tp.arange(2, device=dev),
                  tp.rand(2, device=dev), tp.tensor([1.0, 2.0], device=dev),
                  tp.zeros_like(tp.ones(2), device=dev)):
            assert not t.is_cuda and str(t.device) == "cpu"
    x = tp.ones(3)
    assert x.cpu() is x and x.to("cpu") is x and x.to(tp.device("cpu")) is x
    assert x.to("cpu", tp.float64).dtype == tp.float64


@no_gpu
@pytest.mark.parametrize("make", [
    lambda: tp.ones(2, device="cuda"),
    lambda: tp.zeros(2, 3, device="cuda:0"),
    lambda: tp.empty(2, device=tp.device("cuda")),
    lambda: tp.rand(3, device="cuda"),
    lambda: tp.randn(3, device="cuda"),
    lambda: tp.full((2,), 1.0, device="cuda"),
    lambda: tp.arange(4, device="cuda"),
    lambda: tp.tensor([1.0], device="cuda"),
    lambda: tp.zeros_like(tp.ones(2), device="cuda"),
    lambda: tp.ones(2).cuda(),
    lambda: tp.ones(2).to("cuda"),
    lambda: tp.ones(2).to(device="cuda"),
    lambda: tp.ones(2).to(tp.device("cuda:0")),
    lambda: tp.cuda.current_device(),
    lambda: tp.cuda.synchronize(),
    lambda: tp.cuda.Event(enable_timing=True),
])
def test_cuda_without_a_gpu_names_what_was_looked_for(make):
    with pytest.raises(RuntimeError, match="CUDA is not available") as e:
        make()
    assert "libcuda" in str(e.value)


@no_gpu
def test_queries_without_a_gpu_do_not_raise():
    assert tp.cuda.is_available() is False
    assert tp.cuda.device_count() == 0
    assert tp.cuda.memory_allocated() == 0
    assert tp.cuda.max_memory_allocated() == 0
    tp.cuda.empty_cache()
    assert tp.cuda.host_fallbacks() == {}


def test_bad_device_strings_raise_torch_errors():
    with pytest.raises(RuntimeError, match="Expected one of cpu, cuda"):
        tp.ones(2, device="tpu")
    with pytest.raises(TypeError):
        tp.ones(2, device=1.5)


def test_out_of_memory_error_is_a_runtime_error():
    assert issubclass(tp.cuda.OutOfMemoryError, RuntimeError)
    assert tp.cuda.OutOfMemoryError.__name__ == "OutOfMemoryError"


def test_cuda_manual_seed_is_the_one_philox_stream():
    tp.cuda.manual_seed(7)
    a = tp.rand(5)
    tp.manual_seed(7)
    b = tp.rand(5)
    assert a.tolist() == b.tolist()


def test_signature_names_the_device():
    """sigma carries the device: a program compiled for host tensors is
    never reused for CUDA tensors (they differ in this field alone)."""
    sig = tp._C._guard_signature(tp.ones(2, 3))
    assert sig[4] == "cpu"
