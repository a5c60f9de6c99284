#!/usr/bin/env bash
# Test-only extras that must not pull their (heavy, CUDA) dependency trees:
# - verl 0.9.1 and the handful of packages `verl.utils.profiler` imports, so tests use verl's own
#   profiler code and file naming (samples/make_sample.py too);
# - HolisticTraceAnalysis, to prove our torch window traces load in the tool users already run.
set -euo pipefail
python -m pip install -q --no-deps verl==0.9.1 tensordict==0.10.0 pyvers==0.1.0 omegaconf==2.4.0 \
  transformers==5.10.4 huggingface-hub==1.33.0 tokenizers==0.22.2 safetensors==0.8.0 tqdm==4.70.1 \
  httpx==0.29.0 httpcore==1.0.9 h11==0.16.0 codetiming==1.4.0 antlr4-python3-runtime==4.13.2
python -m pip install -q cloudpickle regex importlib_metadata
python -m pip install -q --no-deps HolisticTraceAnalysis==0.5.0
# HTA imports psutil at load time; --no-deps above does not bring it, and nothing else here requires it.
python -m pip install -q psutil
python -c "import verl.utils.profiler" && echo "verl profiler imports"
# hydra-core for `verlprof doctor` (issue 12: compose verl's own config and report Hydra's errors).
# verl requires hydra-core, and hydra-core 1.3.8's override parser is generated for antlr 4.9
# ("Could not deserialize ATN with version 3 (expected 4)" under antlr 4.13), so this is the set
# `pip install verl` resolves: hydra-core 1.3.8 + omegaconf 2.3.1 + antlr4 4.9.3 (replacing the
# omegaconf 2.4.0 / antlr 4.13.2 above, which verl.utils.profiler also imports fine with).
python -m pip install -q --no-deps hydra-core==1.3.8 omegaconf==2.3.1 antlr4-python3-runtime==4.9.3
python -c "from hydra.core.override_parser.overrides_parser import OverridesParser as P; P.create().parse_overrides(['a=[1]'])" \
  && echo "hydra override parser works"
