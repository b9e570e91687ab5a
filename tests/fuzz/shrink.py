"""Greedy shrinker for the seed sweep (Hypothesis does the shrinking under
pytest): drop calls, statements and outputs while the failure keeps its
category (the first words of its message)."""
import copy
import re

from .harness import FuzzFailure, Runner
from .program import If


def category(msg):
    head = msg.split("\n", 1)[0]
    head = re.sub(r"call \d+ \(.*?\):", "call N:", head)
    head = re.sub(r"at \(.*?\)", "", head)
    head = re.sub(r"-?\d+(\.\d+)?(e[-+]?\d+)?|nan|inf", "N", head)
    head = re.sub(r"\([^()]*\)", "", re.sub(r"\([^()]*\)", "", head))
    return head[:90]


def _fails(api, prog, plan, cat, avoid=()):
    try:
        Runner(api, prog, plan, avoid=avoid).run()
    except FuzzFailure as e:
        return category(str(e)) == cat
    except Exception:  # noqa: BLE001
        return False
    return False


def shrink(api, prog, plan, msg):
    cat = category(msg)
    # calls: keep a prefix up to the failing one, then try dropping each
    m = re.match(r"call (\d+)", msg)
    if m:
        k = int(m.group(1))
        p2 = copy.copy(plan)
        p2.calls = plan.calls[:k + 1]
        if _fails(api, prog, p2, cat):
            plan = p2
    i = 0
    while i < len(plan.calls) - 1:
        p2 = copy.copy(plan)
        p2.calls = plan.calls[:i] + plan.calls[i + 1:]
        if p2.calls[0][3]:
            p2.calls[0] = p2.calls[0][:3] + (False,)
        if _fails(api, prog, p2, cat):
            plan = p2
        else:
            i += 1
    changed = True
    while changed:
        changed = False
        for i in reversed(range(len(prog.body))):
            cands = []
            st = prog.body[i]
            if isinstance(st, If):
                for keep in (st.then, st.other):
                    q = copy.copy(prog)
                    q.body = prog.body[:i] + list(keep) + prog.body[i + 1:]
                    cands.append(q)
            q = copy.copy(prog)
            q.body = prog.body[:i] + prog.body[i + 1:]
            cands.append(q)
            for q in cands:
                if _fails(api, q, plan, cat):
                    prog, changed = q, True
                    break
            if changed:
                break
        if not changed and len(prog.ret) > 1:
            for r in prog.ret:
                q = copy.copy(prog)
                q.ret = [r]
                if _fails(api, q, plan, cat):
                    prog, changed = q, True
                    break
    try:
        Runner(api, prog, plan).run()
    except FuzzFailure as e:
        return str(e)
    return msg
