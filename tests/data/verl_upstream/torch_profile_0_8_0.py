# Copyright 2025 Bytedance Ltd. and/or its affiliates
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
#
# verlprof: `get_torch_profiler` copied unchanged from verl 0.8.0 (the PyPI wheel,
# verl/utils/profiler/torch_profile.py), for tests of its file layout: one
# `<save_path>/<role>/[<prefix>_]prof_rank-<R>_<pid>_<ts>.json.gz` per profiled call (in discrete
# mode `DistProfiler.annotate(role=<stage>)` calls it around each stage call). The verl installed
# here (0.9.1) names its traces differently.
import os
from datetime import datetime, timezone
from typing import Optional

import torch


def get_torch_profiler(
    contents: list[str],
    save_path: str,
    role: Optional[str] = None,
    save_file_prefix: Optional[str] = None,
    rank: int = 0,
):
    if role:
        save_path = os.path.join(save_path, role)

    os.makedirs(save_path, exist_ok=True)

    current_time = datetime.now(tz=timezone.utc).astimezone()
    timestamp = current_time.strftime("%Y%m%d%H%M%S%f")[:-3]
    pid = os.getpid()

    save_file_name = f"prof_rank-{rank}_{pid}_{timestamp}.json.gz"
    if save_file_prefix:
        save_file_name = f"{save_file_prefix}_{save_file_name}"
    save_path = os.path.join(save_path, save_file_name)

    def _trace_handler(prof):
        print(f"[Profiler] Saving trace to {save_path}")
        prof.export_chrome_trace(save_path)

    contents = set(contents) if contents else set()
    activities = []
    if not contents or "cpu" in contents:
        activities.append(torch.profiler.ProfilerActivity.CPU)
    if not contents or "cuda" in contents:
        activities.append(torch.profiler.ProfilerActivity.CUDA)

    return torch.profiler.profile(
        activities=activities,
        with_stack="stack" in contents,
        record_shapes="shapes" in contents,
        profile_memory="memory" in contents,
        on_trace_ready=_trace_handler,
    )
