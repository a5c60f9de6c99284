"""The wheel is what a user installs (issue 20): build it from the sources, install it without `-e`
into a fresh virtual environment, and run every command from there on the shipped sample.

Why: an editable install reads the source tree, so a package missing from the wheel (as
`verlprof.pipeline.report` once was) or package data left out of it passes every other test. Offline:
the build uses the installed setuptools (`--no-build-isolation`), the venv borrows pandas/pyarrow/
typer from the environment running the tests (a `.pth`), and the test proves that `verlprof` itself then
imports from the venv's wheel, not from this checkout or another install.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

pytestmark = pytest.mark.slow  # ~1-2 min: builds a wheel, makes a venv, runs collect on the sample

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "samples" / "tiny_run"
_SOURCES = ("pyproject.toml", "setup.py", "README.md", "pipeline", "stages")


def _run(cmd: list[str], cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    """Run with an environment that cannot reach the checkout: no PYTHONPATH, cwd outside the repo."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.update(COLUMNS="120", NO_COLOR="1", PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def _ok(out: subprocess.CompletedProcess[str]) -> str:
    assert out.returncode == 0, f"{out.args}: exit {out.returncode}\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out.stdout


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv holding only the wheel built from a copy of the sources."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    for name in _SOURCES:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            src.mkdir(exist_ok=True)
            shutil.copy2(REPO / name, src / name)
    _ok(_run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index",
              "-w", str(tmp / "dist"), str(src)], cwd=tmp))
    wheels = list((tmp / "dist").glob("verlprof-*.whl"))
    assert len(wheels) == 1, wheels
    env = tmp / "venv"
    # --without-pip: the pip of the environment running the tests installs into it (seen through
    # the .pth below), which also lends pandas/pyarrow/typer; the venv's own site-packages comes
    # first on sys.path, and an editable install out there stays inert (a .pth found through another
    # .pth is never executed), so `verlprof` can only come from the wheel
    _ok(_run([sys.executable, "-m", "venv", "--without-pip", str(env)], cwd=tmp))
    purelib = _ok(_run([str(env / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                       cwd=tmp)).strip()
    lent = [p for p in sys.path if Path(p).name in ("site-packages", "dist-packages") and Path(p).is_dir()]
    (Path(purelib) / "_lent_by_the_test_environment.pth").write_text("\n".join(lent) + "\n")
    _ok(_run([str(env / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", "--no-index",
              str(wheels[0])], cwd=tmp))
    shutil.rmtree(src)   # nothing of the sources is left to import from by accident
    return env


def test_verlprof_imports_from_the_wheel_in_the_venv(venv: Path, tmp_path: Path) -> None:
    """Every package of the source tree is in the wheel, with its package data, and is the one imported."""
    probe = ("import json, importlib, pkgutil, verlprof.pipeline, verlprof.stages;"
             "mods = sorted(m.name for p in (verlprof.pipeline, verlprof.stages)"
             " for m in pkgutil.walk_packages(p.__path__, p.__name__ + '.') if m.ispkg);"
             "files = {m: importlib.import_module(m).__file__ for m in ['verlprof.pipeline', 'verlprof.stages', *mods]};"
             "print(json.dumps(files))")
    files = json.loads(_ok(_run([str(venv / "bin" / "python"), "-c", probe], cwd=tmp_path)))
    site = venv.resolve()
    for mod, f in files.items():
        assert Path(f).resolve().is_relative_to(site), (mod, f)
    want = {"verlprof." + ".".join(p.relative_to(REPO).parts[:-1]) for p in REPO.glob("pipeline/**/__init__.py")}
    want |= {"verlprof." + ".".join(p.relative_to(REPO).parts[:-1]) for p in REPO.glob("stages/**/__init__.py")}
    assert want <= set(files) and "verlprof.pipeline.report" in files
    pkg = Path(files["verlprof.stages.doctor"]).parent
    assert sorted(p.name for p in (pkg / "keytrees").glob("*.json.gz")) == \
        sorted(p.name for p in (REPO / "stages" / "doctor" / "keytrees").glob("*.json.gz"))
    assert (Path(files["verlprof.stages.scrub"]).parent / "scrub_policy.toml").is_file()
    # the public-names corpus ships in the wheel and is the one the installed module reads (issue 39)
    probe = ("from verlprof.stages.scrub.public_names import CORPUS_FILE, public_names;"
             "print(CORPUS_FILE, public_names().source_of('TorchDynamo Cache Lookup'))")
    corpus_file, source = _ok(_run([str(venv / "bin" / "python"), "-c", probe], cwd=tmp_path)).split(" ", 1)
    assert Path(corpus_file).resolve().is_relative_to(site) and source.startswith("torch ")


def test_every_command_runs_from_the_wheel_on_the_shipped_sample(venv: Path, tmp_path: Path) -> None:
    verlprof = str(venv / "bin" / "verlprof")
    want = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert _ok(_run([verlprof, "--version"], cwd=tmp_path)) == f"verlprof {want}\n"

    out, work = tmp_path / "out", tmp_path / "work"
    text = _ok(_run([verlprof, "collect", str(SAMPLE), "-o", str(out), "--work", str(work), "--html", "--pack"],
                    cwd=tmp_path))
    assert "bundle:" in text
    assert (out / "report.html").stat().st_size > 0 and (out / "summaries" / "phases.parquet").is_file()
    with tarfile.open(tmp_path / "out.tar.gz") as tar:
        assert any(n.endswith("SHA256SUMS") for n in tar.getnames())

    assert "window: step 2" in _ok(_run([verlprof, "window", str(SAMPLE)], cwd=tmp_path))
    sqlite = SAMPLE / "ray_logs" / "nsight" / "worker_process_300.sqlite"
    _ok(_run([verlprof, "scrub", str(sqlite), "-o", str(tmp_path / "scrubbed"), "--work", str(work)], cwd=tmp_path))
    assert "no findings" in _ok(_run([verlprof, "check", str(out), str(tmp_path / "scrubbed")], cwd=tmp_path))
    _ok(_run([verlprof, "summarize", str(out), "-o", str(tmp_path / "cmp"), "--work", str(work), "-j", "1"],
             cwd=tmp_path))
    assert (tmp_path / "cmp" / "runs.parquet").is_file()
    _ok(_run([verlprof, "pack", str(out), "-o", str(tmp_path / "again.tar.gz")], cwd=tmp_path))

    # doctor against a key tree shipped inside the wheel (no verl, no Hydra needed)
    res = _run([verlprof, "doctor", "--json", "--verl-release", "verl-0.9.1", "--nsys", "none", "--",
                "python3", "-m", "verl.trainer.main_ppo", "global_profiler.tool=nsys",
                "global_profiler.steps=[1,2,3]", "trainer.total_training_steps=3"], cwd=tmp_path)
    assert res.returncode in (0, 1), res.stderr
    doc = json.loads(res.stdout)
    assert doc["inputs"]["verl_config"]["via"] == "keytree"
    assert "shipped key tree verl-0.9.1" in doc["inputs"]["verl_config"]["release"]
    assert "verl-0.9.1" in doc["inputs"]["verl_config"]["from"]
