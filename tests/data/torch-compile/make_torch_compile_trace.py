"""Record a small real torch.compile run under torch.profiler (CPU, backend aot_eager).

Why: the public-names corpus test needs the names torch.compile writes into a trace
(`Torch-Compiled Region: 0/0`, `TorchDynamo Cache Lookup`, the AOTDispatcher and CompiledFunction
names, `autograd::engine::evaluate_function: CompiledFunctionBackward`), and the other traces in
tests/data come from eager runs. aot_eager needs no C++ compiler, so this runs on any CPU machine:

    .venv/bin/python tests/data/torch-compile/make_torch_compile_trace.py tests/data/torch-compile
"""
from __future__ import annotations

import gzip
import os
import shutil
import sys
from pathlib import Path

import torch


def main(out_dir: str) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    compiled = torch.compile(model, backend="aot_eager")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(8, 16)
    compiled(x).sum().backward()  # compile outside the profiled steps
    out = Path(out_dir)
    tmp = out / "trace.json"
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(2):
            opt.zero_grad()
            compiled(x).sum().backward()
            opt.step()
            prof.step()
    prof.export_chrome_trace(str(tmp))
    dest = out / f"torch-compile_aot_eager_torch{torch.__version__.split('+')[0]}.json.gz"
    with open(tmp, "rb") as src, gzip.GzipFile(dest, "wb", mtime=0) as dst:
        shutil.copyfileobj(src, dst)
    os.remove(tmp)
    print(dest, dest.stat().st_size)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
