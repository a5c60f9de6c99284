#!/bin/bash
# The 16-core GPU machine (issue 30): install the wheels it lacks (orjson, msgspec, isal,
# pyahocorasick, a typer < 0.29: put them in .whl/, git-ignored, and carry it), make verlprof
# importable, compile bytecode as an installed machine has it, then run bench_collect.py once per
# argument, e.g.
#   bash bench/run_on_gpu_machine.sh "--mb 100 --many 16 --many-jobs 1 --many-jobs 16 --repeat 2 --timeline"
set -e
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
mkdir -p /tmp/vp && ln -sfn "$PWD" /tmp/vp/verlprof
export PYTHONPATH=/tmp/site:/tmp/vp PYTHONUNBUFFERED=1
echo "cores: $(nproc) $(python3 -c 'import os;print(os.cpu_count())')"; python3 -V; env | grep -i pythondont || true
STD=$(python3 -c 'import os; print(os.path.dirname(os.__file__))')
PKGS=$(python3 -c 'import numpy, pyarrow, pandas, rich, yaml, os; print(" ".join(os.path.dirname(m.__file__) for m in (numpy, pyarrow, pandas, rich, yaml)))')
python3 - $STD $PKGS <<'PY'
import sys, pathlib
for d in sys.argv[1:]:
    py = list(pathlib.Path(d).glob("*.py")) + list(pathlib.Path(d).glob("*/*.py"))
    pyc = [p for p in py if list((p.parent / "__pycache__").glob(p.stem + ".*.pyc"))]
    print(f"bytecode in {d}: {len(pyc)} of {len(py)} .py (two levels)")
PY
imp() { python3 -c "import time; t=time.perf_counter(); import verlprof.pipeline.collect; a=time.perf_counter(); import pandas; print(f'import collect {a-t:.2f} s, then pandas {time.perf_counter()-a:.2f} s')"; }
echo "before compiling: $(imp) $(imp)"
# a user's install has bytecode (pip and Debian compile on install); this image lacks it for numpy
# and part of the standard library, sets PYTHONDONTWRITEBYTECODE, and the copied tree has none:
# compile once, in place, everything collect imports
python3 -m compileall -q -j 0 pipeline stages /tmp/site $STD $PKGS >/dev/null 2>&1 || true
echo "after compiling: $(imp) $(imp)"
python3 bench/make_big_sqlite.py --mb 100 >/dev/null
for spec in "$@"; do echo "== bench_collect.py $spec"; python3 bench/bench_collect.py $spec --tmp /tmp/bc; done
