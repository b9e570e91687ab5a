"""List the C functions of csrc/ longer than a limit (issue 12 item 6).

    python3 scripts/long_functions.py [--limit 150] [--root csrc] [--rooms trace,guards,...]

A function is a line that starts a definition at column 0 (a name followed
by '(' on a line not ending in ';', after a return-type line or on it) up to
the '}' at column 0 that closes it; the project's style (csrc/: return type
on its own line, braces at column 0) makes that exact. Prints
`lines  file:line  name`, longest first; exit status 0 always (a report,
not a gate)."""
import argparse
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")
START = re.compile(r"^(?:[A-Za-z_][\w \t\*]*?[\s\*])?([A-Za-z_]\w*)\s*\(")
KEYWORDS = {"if", "for", "while", "switch", "return", "sizeof", "do", "else"}


def functions(path):
    """(name, first line, length in lines) of each function definition."""
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.read().split("\n")
    out = []
    i = 0
    while i < len(lines):
        ln = lines[i]
        m = START.match(ln)
        if m and not ln.startswith((" ", "\t", "#", "/", "*", "}")) and m.group(1) not in KEYWORDS:
            # the header may span lines: find its '{' at column 0, no ';' first
            j = i
            while j < len(lines) and not lines[j].startswith("{"):
                if lines[j].rstrip().endswith(";") or (j > i and lines[j] == ""):
                    break
                j += 1
            if j < len(lines) and lines[j].startswith("{"):
                k = j + 1
                while k < len(lines) and not lines[k].startswith("}"):
                    k += 1
                out.append((m.group(1), i + 1, k - i + 1))
                i = k + 1
                continue
        i += 1
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--limit", type=int, default=150)
    ap.add_argument("--root", default=os.path.join(ROOT, "csrc"))
    ap.add_argument("--rooms", default="", help="comma list of csrc/ rooms (default: all)")
    a = ap.parse_args()
    rooms = set(filter(None, a.rooms.split(",")))
    rows = []
    for dirpath, _, files in os.walk(a.root):
        room = os.path.relpath(dirpath, a.root).split(os.sep)[0]
        if rooms and room not in rooms:
            continue
        for fn in sorted(files):
            if fn.endswith(".c"):
                p = os.path.join(dirpath, fn)
                for name, line, n in functions(p):
                    if n > a.limit:
                        rows.append((n, f"{os.path.relpath(p, os.path.join(a.root, '..'))}:{line}", name))
    rows.sort(reverse=True)
    for n, where, name in rows:
        print(f"{n:5d}  {where}  {name}")
    print(f"{len(rows)} function(s) over {a.limit} lines", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
