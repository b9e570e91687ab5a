"""Differential fuzzer: random programs over the public tensorplay API, run
eagerly and through ``tp.compile``; see docs/reliability.md.

program.py  the program AST, its typed random generator and the renderer to Python source
harness.py  inputs (values and layouts), eager/compiled execution, comparison, repro text
test_fuzz.py  the Hypothesis property (fixed-seed budget; TENSORPLAY_FUZZ_N raises it)
__main__.py  a seed sweep that groups failures (``PYTHONPATH=tests python3 -m fuzz --n 500``)
"""
