"""einsum: torch's equation rules and errors, and a decomposition into
views, sums and (batched) matmuls that makes a traced einsum native.

The equation is parsed once into labels (letters, and one label per
ellipsis dim, right-aligned across operands as broadcasting aligns them),
checked with torch's messages, then contracted left to right as torch does
without opt_einsum: each operand first takes the diagonal of a repeated
label and sums the labels no other operand or the output has; each pair is
one matmul of (batch, kept-left, contracted) by (batch, contracted,
kept-right); the result sums what the output lacks and is permuted into
the output's order. Every step is an op-table op (permute, reshape, expand,
mul by an identity for a diagonal, sum, matmul), so the compiled program is native and the compiled
backward is theirs. Size-1 dims broadcast against the other operands'
sizes (torch's rule) by an expand before the contraction.

Eagerly the same checks run, then NumPy's einsum computes the value."""
from tensorplay import _C

_LETTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def _is_t(o):
    return isinstance(o, _C.Tensor) or type(o).__name__ == "Proxy"


def _title(dt):
    s = str(dt).split(".")[-1]
    return {"float32": "Float", "float64": "Double", "float16": "Half", "bfloat16": "BFloat16",
            "int64": "Long", "int32": "Int", "int16": "Short", "int8": "Char",
            "uint8": "Byte", "bool": "Bool"}.get(s, s)


def _sublist_equation(args):
    """torch's sublist form einsum(op0, [0, 1], op1, [1, 2], [0, 2]): the
    equivalent equation string and the operands."""
    ops, subs = list(args[0::2]), list(args[1::2])
    out = None
    if len(args) % 2:
        out = args[-1]
        ops, subs = list(args[0:-1:2]), list(args[1:-1:2])

    def term(sub):
        s = []
        for v in sub:
            if v is Ellipsis:
                s.append("...")
            elif isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 52:
                s.append(chr(ord("a") + v) if v < 26 else chr(ord("A") + v - 26))
            else:
                raise ValueError("einsum(): expected subscript to be in range [0, 52) "
                                 f"but got {v}")
        return "".join(s)
    eq = ",".join(term(s) for s in subs)
    if out is not None:
        eq += "->" + term(out)
    return eq, ops


def normalize_args(equation, operands):
    """(equation str, list of operands) from any of torch's call forms."""
    if not isinstance(equation, str):
        if _is_t(equation) and operands:
            return _sublist_equation((equation,) + tuple(operands))
        raise TypeError(f"einsum(): argument 'equation' must be str, not "
                        f"{type(equation).__name__}")
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    return equation, list(operands)


def plan(equation, shapes):
    """Labels of each operand, of the output, and each label's size.

    shapes: the operands' shapes (sequences of ints). Letters are str
    labels; ellipsis dim k (0 the leftmost of the widest ellipsis) is the
    int label k. Raises torch's RuntimeError for a malformed equation."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) < len(shapes):
        raise RuntimeError("einsum(): more operands were provided than specified in the "
                           "equation")
    if len(terms) > len(shapes):
        raise RuntimeError("einsum(): fewer operands were provided than specified in the "
                           "equation")
    parsed = []            # per operand: list of letters / None for the ellipsis
    pos = 0
    for i, t in enumerate(terms):
        items, j = [], 0
        while j < len(t):
            c = t[j]
            if c == ".":
                if t[j:j + 3] != "..." or None in items:
                    raise RuntimeError(f"einsum(): found '.' for operand {i} that is not "
                                       f"part of any ellipsis")
                items.append(None)
                j += 3
                continue
            if c not in _LETTERS:
                raise RuntimeError(f"einsum(): invalid subscript given at index {pos + j} in "
                                   f"the equation string, subscripts must be in [a-zA-Z]")
            items.append(c)
            j += 1
        pos += len(t) + 1
        parsed.append(items)
    ell = []
    for i, (items, shape) in enumerate(zip(parsed, shapes)):
        nl = sum(1 for c in items if c is not None)
        nd = len(shape)
        if None in items:
            if nl > nd:
                raise RuntimeError(f"einsum(): the number of subscripts in the equation ({nl}) "
                                   f"is more than the number of dimensions ({nd}) for operand "
                                   f"{i}")
            ell.append(nd - nl)
        else:
            if nl != nd:
                raise RuntimeError(f"einsum(): the number of subscripts in the equation ({nl}) "
                                   f"does not match the number of dimensions ({nd}) for "
                                   f"operand {i} and no ellipsis was given")
            ell.append(0)
    E = max(ell) if ell else 0
    labels = []
    for items, e in zip(parsed, ell):
        lab = []
        for c in items:
            if c is None:
                lab.extend(range(E - e, E))
            else:
                lab.append(c)
        labels.append(lab)
    sizes = {}
    for i, (lab, shape) in enumerate(zip(labels, shapes)):
        own = {}
        for l, n in zip(lab, shape):
            n = int(n)
            if l in own:
                if own[l] != n:
                    raise RuntimeError(f"einsum(): subscript {l} is repeated for operand {i} but "
                                       f"the sizes don't match, {n} != {own[l]}")
                continue
            own[l] = n
            seen = sizes.get(l)
            if seen is None or seen == 1:
                sizes[l] = n
            elif n != 1 and n != seen:
                if isinstance(l, int):
                    raise RuntimeError(f"einsum(): dimension {l} covered by ellipsis in operand "
                                       f"{i}has size {n} which does not broadcast with "
                                       f"previously seen ellipsis with size {seen} for the "
                                       f"respective dimension")
                raise RuntimeError(f"einsum(): subscript {l} has size {n} for operand {i} which "
                                   f"does not broadcast with previously seen size {seen}")
    if arrow:
        out, j, has_ell = [], 0, False
        while j < len(rhs):
            c = rhs[j]
            if c == ".":
                if rhs[j:j + 3] != "..." or has_ell:
                    raise RuntimeError("einsum(): found '.' for output but it is not part of "
                                       "any ellipsis (...)")
                out.extend(range(E))
                has_ell = True
                j += 3
                continue
            if c not in _LETTERS:
                raise RuntimeError(f"einsum(): invalid subscript given at index "
                                   f"{len(lhs) + 2 + j} in the equation string, subscripts "
                                   f"must be in [a-zA-Z]")
            if c in out:
                raise RuntimeError(f"einsum(): output subscript {c} appears more than once in "
                                   f"the output")
            if c not in sizes:
                raise RuntimeError(f"einsum(): output subscript {c} does not appear in the "
                                   f"equation for any input operand")
            out.append(c)
            j += 1
    else:
        count = {}
        for lab in labels:
            for l in lab:
                if isinstance(l, str):
                    count[l] = count.get(l, 0) + 1
        out = list(range(E)) + sorted(l for l, k in count.items() if k == 1)
    return labels, out, sizes


def check_dtypes(operands):
    dt = operands[0].dtype
    for t in operands[1:]:
        if t.dtype != dt:
            raise RuntimeError(f"expected scalar type {_title(dt)} but found {_title(t.dtype)}")


def _prepare(x, lab, sizes, keep):
    """Diagonals of repeated labels, size-1 dims expanded to the label's
    size, labels that nothing else needs summed out."""
    import tensorplay as tp
    lab = list(lab)
    while len(set(lab)) != len(lab):
        for d1, l in enumerate(lab):
            if l in lab[d1 + 1:]:
                # the diagonal as a masked sum with the identity (a
                # differentiable op-table composition; O(n^2) per pair)
                d2 = lab.index(l, d1 + 1)
                n = int(x.shape[d1])
                shape = [1] * len(lab)
                shape[d1] = shape[d2] = n
                eye = tp.eye(n, dtype=x.dtype if x.dtype != tp.bool else tp.uint8,
                             device=x.device)
                x = (x * eye.reshape(shape)).sum(d2)
                del lab[d2]
                break
    shape = [int(n) for n in x.shape]
    want = [sizes[l] for l in lab]
    if shape != want:
        x = x.expand(want)
    drop = [d for d, l in enumerate(lab) if l not in keep]
    if drop:
        x = x.sum(drop)
        lab = [l for d, l in enumerate(lab) if d not in drop]
    return x, lab


def _prod(ns):
    p = 1
    for n in ns:
        p *= n
    return p


def decompose(equation, operands):
    """einsum built from op-table ops (see the module's docstring)."""
    labels, out, sizes = plan(equation, [tuple(t.shape) for t in operands])
    check_dtypes(operands)
    later = [set() for _ in operands]
    acc = set(out)
    for i in range(len(operands) - 1, -1, -1):
        later[i] = set(acc)
        acc |= set(labels[i])
    # operand i keeps what the output or another operand has
    x, lab = None, None
    for i, t in enumerate(operands):
        others = set(out)
        for j, lj in enumerate(labels):
            if j != i:
                others |= set(lj)
        y, ly = _prepare(t, labels[i], sizes, others)
        if x is None:
            x, lab = y, ly
            continue
        need = later[i]
        sa, sb = set(lab), set(ly)
        drop = [d for d, l in enumerate(lab) if l not in sb and l not in need]
        if drop:
            x = x.sum(drop)
            lab = [l for d, l in enumerate(lab) if d not in drop]
            sa = set(lab)
        batch = [l for l in lab if l in sb and l in need]
        con = [l for l in lab if l in sb and l not in need]
        aonly = [l for l in lab if l not in sb]
        bonly = [l for l in ly if l not in sa]
        nb = _prod(sizes[l] for l in batch)
        m = _prod(sizes[l] for l in aonly)
        k = _prod(sizes[l] for l in con)
        n = _prod(sizes[l] for l in bonly)
        a = x.permute([lab.index(l) for l in batch + aonly + con]).reshape(nb, m, k)
        b = y.permute([ly.index(l) for l in batch + con + bonly]).reshape(nb, k, n)
        x = (a @ b).reshape([sizes[l] for l in batch + aonly + bonly])
        lab = batch + aonly + bonly
    drop = [d for d, l in enumerate(lab) if l not in out]
    if drop:
        x = x.sum(drop)
        lab = [l for d, l in enumerate(lab) if d not in drop]
    perm = [lab.index(l) for l in out]
    if perm != list(range(len(perm))):
        x = x.permute(perm)
    return x


def traced(equation, *operands):
    """The trace-time decomposition of tp.einsum (NotImplemented: the call
    is recorded whole, and its sample run raises eager's error)."""
    try:
        equation, ops = normalize_args(equation, operands)
    except (TypeError, ValueError):
        return NotImplemented
    if not ops or not all(_is_t(t) for t in ops):
        return NotImplemented
    try:
        plan(equation, [tuple(t.shape) for t in ops])
        check_dtypes(ops)
    except RuntimeError:
        return NotImplemented
    if any(type(n) is not int for t in ops for n in t.shape):
        return NotImplemented          # symbolic sizes: reshape products stay eager's
    return decompose(equation, ops)
