"""A trace journals and undoes the eager writes of its own thread's code
only: another thread's writes made while a function is being traced stay
made (they were journaled and undone at the trace's end, so a thread
counting into a tensor lost increments whenever another thread compiled),
and another thread's creation calls (tp.randn, tp.zeros) are not recorded
into the trace."""
import sys
import threading
import warnings

import tensorplay as tp


def _traces_while(work):
    """run work() in a thread while this one traces fresh functions"""
    done = []
    t = threading.Thread(target=lambda: done.append(work()))
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        t.start()
        i = 0
        while t.is_alive() or i < 2:
            i += 1

            def f(x, i=i):
                y = x
                for _ in range(30):
                    y = y * 1.0001 + i
                return y
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                tp.compile(f)(tp.ones(4))
        t.join()
    finally:
        sys.setswitchinterval(old)
    return done[0]


def test_another_threads_writes_survive_a_trace():
    g = tp.zeros(1)
    n = 20000

    def writer():
        for _ in range(n):
            g.add_(1)
        return float(g)
    assert _traces_while(writer) == n
    assert float(g) == n


def test_another_thread_creates_real_tensors():
    def creator():
        kinds = set()
        for _ in range(3000):
            kinds.add(type(tp.randn(3)).__name__)
            kinds.add(type(tp.zeros(2)).__name__)
            kinds.add(tp._C.is_tracing())
        return kinds
    assert _traces_while(creator) == {"Tensor", False}
