"""Issue 42: the second shipped sample, `samples/gpu_run`, is real GPU data and its report shows it.

It is what `samples/make_gpu_sample.py` makes from tests/data/gpu_captures/n2-gloo-same-gpu (the
script is re-run here, byte for byte the same files), it holds nothing of the recording machine's
environment but the rank variables, and `verlprof collect samples/gpu_run --html` shows kernels,
device-host copies, GPU memory, GPU idle and two ranks, each checked against the exports' own rows
read with plain `sqlite3`.
"""
from __future__ import annotations

import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner
from verlprof.pipeline.cli import app

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "samples" / "gpu_run"
EXPORTS = sorted((SAMPLE / "ray_logs" / "nsight").glob("*.sqlite"))


def _q(path: Path, sql: str) -> list[tuple]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    tmp = tmp_path_factory.mktemp("gpu_sample")
    res = CliRunner().invoke(app, ["collect", str(SAMPLE), "-o", str(tmp / "b"), "--work", str(tmp / "w"), "--html"],
                             env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output[-3000:]
    return tmp / "b", res.output


def test_the_script_makes_the_committed_sample(tmp_path: Path) -> None:
    res = subprocess.run([sys.executable, str(ROOT / "samples" / "make_gpu_sample.py"), "--out", str(tmp_path / "s")],
                         capture_output=True, text=True, timeout=600, check=False)
    assert res.returncode == 0, res.stderr[-2000:]
    made = sorted((tmp_path / "s" / "ray_logs" / "nsight").glob("*.sqlite"))
    assert [p.name for p in made] == [p.name for p in EXPORTS] and len(EXPORTS) == 4
    for a, b in zip(made, EXPORTS):
        assert a.read_bytes() == b.read_bytes(), a.name
    assert sum(p.stat().st_size for p in EXPORTS) < 8 * 2**20   # a few MB


def test_sample_keeps_no_environment_but_the_rank() -> None:
    for p in EXPORTS:
        env = _q(p, "SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'DeviceEnvironment'")
        assert len(env) == 1 and re.fullmatch(r"RANK=[01];WORLD_SIZE=2;LOCAL_RANK=[01]", env[0][0]), env
        raw = p.read_bytes()
        for needle in (b"gpurun", b"HOME=", b"PATH=", b"NCCL_NVLS_ENABLE"):
            assert needle not in raw, (p.name, needle)


def test_report_shows_kernels_copies_memory_and_gpu_idle(bundle) -> None:
    b, output = bundle
    kernels = pd.read_parquet(b / "summaries" / "kernels.parquet")
    phases = pd.read_parquet(b / "summaries" / "phases.parquet")
    step = int(phases["step"].iloc[0])
    chosen = [p for p in EXPORTS if p.name.endswith(f".{step}.sqlite")]
    # kernels: as many launches as the chosen step's exports hold (plain sqlite)
    want = sum(_q(p, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0][0] for p in chosen)
    assert want > 1000 and int(kernels["count"].sum()) <= want and kernels["count"].sum() > 0.9 * want
    # two ranks, told apart by the kept RANK variable
    assert set(phases["rank"].dropna().astype(int)) == {0, 1}
    # GPU memory per phase (cuda-memory-usage events)
    assert _q(chosen[0], "SELECT count(*) FROM CUDA_GPU_MEMORY_USAGE_EVENTS")[0][0] > 0
    assert phases["mem_peak_bytes"].max() > 100 * 2**20
    page = (b / "report.html").read_text()
    assert 'class="gpu-memcpy"' in page and 'class="gpu-gemm"' in page   # copies and kernels on the lanes
    assert _q(chosen[0], "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY")[0][0] > 100
    # the headline's GPU idle is the phase's wall minus its GPU busy time
    m = re.search(r"largest GPU idle ([\d.,]+) ms of ([\d.,]+) ms \((\d+)%\) in (\w+) on trainer rank (\d)",
                  " ".join(output.split()))
    assert m, output[-3000:]
    row = phases[(phases["rank"] == int(m.group(5))) & (phases["phase"] == m.group(4))].iloc[0]
    idle = (row["wall_ns"] - row["gpu_busy_inherited_ns"]) / 1e6
    assert abs(idle - float(m.group(1).replace(",", ""))) <= 0.5 * max(1.0, idle / 100)
    assert "largest GPU idle" in page and "no GPU work recorded" not in page
