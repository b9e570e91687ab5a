import atexit
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python"))

# The persistent compile cache (docs/cache.md) of a test session lives in a
# fresh temporary directory, never in ~/.cache: set before tensorplay is
# imported (subprocesses of tests inherit it), removed at exit.
_cache_dir = tempfile.mkdtemp(prefix="tensorplay-test-cache-")
os.environ["TENSORPLAY_CACHE_DIR"] = _cache_dir
atexit.register(shutil.rmtree, _cache_dir, True)
