"""The public-names corpus (stages/scrub/public_names.py, tools/build_public_names.py; issue 39).

What it proves: the shipped corpus holds the names public packages write into the real captures of
tests/data (NVTX ranges of the nsys exports, Kineto op / annotation / thread names of the torch
traces, torch.compile's names), its templates take numbers but never free text, the strings people
write (names, handles, projects, URIs, tickets, CJK names) are not in it, its header names the
builder's pins, and two builds from the same downloads give the same bytes.
"""
from __future__ import annotations

import gzip
import importlib.util
import json
import pickle
import re
import sqlite3
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import scrub_corpus  # noqa: E402
from testdata import DATA, data_path  # noqa: E402

from verlprof.stages.scrub.public_names import CORPUS_FILE, PublicNames, public_names, template_parts

ROOT = Path(__file__).resolve().parent.parent
BUILDER = ROOT / "tools" / "build_public_names.py"


def _builder():
    spec = importlib.util.spec_from_file_location("build_public_names", BUILDER)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# Names in tests/data that no pinned package writes, each with who writes it. A capture name that is
# neither public nor matched here fails the test: either the corpus lost a public name, or a new
# capture brought a writer this table must name.
NOT_FROM_PINNED = [
    (r"main(?:->.*)?", "captures/: the test programs of the public repositories they come from"),
    (r"(?:GpuLower|KernelExecutor|executor_utils|fusion_executor|PrecomputedValues|TransformReplay|Fusion|"
     r"ExpressionEvaluator|ConditionalFromPredicateModifier|ExecutorRunFusion|Index|IrContainer|Kernel|"
     r"SyncMap|PrecomputedValuess|transform_replay\.cpp)(?:::| ).*"
     r"|generateCudaKernel|getKernelArgument|getTerminatingOutputs|reuseMemoryAllocations",
     "nvFuser's C++ (FUSER_PERF_SCOPE), not a pinned package"),
    (r"MPI_\w+", "nsys's MPI trace: the MPI standard's function names"),
    (r"de\.tu-darmstadt\.parallel\.extra_prof", "a captures/ tool's NVTX domain"),
    (r"saxpy|started|compile|compile_worker|cublasCreate_v2", "captures/: the programs recorded there"),
    (r"FSDP::(?:pre|post)_forward \([\w.]+\)(?:, op_id = \d+)?",
     "torch FSDP2 with the model's module path: the path is the user's model, left out as free text"),
    (r"(?:mini_batch\d+|actor_update|actor_compute_log_prob|ref_compute_log_prob|generate_sequences|"
     r"execute_model|train|all_reduce|old_log_prob|ref|reward|adv|gen|step)(?:, op_id = \d+)?",
     "verl-shaped names written by the project's own workloads (h200-workload.py, samples/make_gpu_run.py)"),
    (r"## .* ##|Optimizer\.step#(?:EMAOptimizer|Shampoo)\.step|All2All_Pooled_\w+|fb::\w+|fbgemm::\w+|"
     r"_grad_sum_to_size|(?:autograd::engine::evaluate_function: )?torch::(?:autograd::CppNode<|jit::).*",
     "kineto_public/: Meta's internal trainers (torchrec internals, fbgemm_gpu, distributed_shampoo), "
     "not pinned"),
    (r"timing_s/wait_last_valid", "verl's fully_async recipe (verl main), not in the verl 0.9.1 wheel"),
    (r"verlprof_capture", "verlprof's own samples/make_gpu_run.py (the range that starts an nsys capture)"),
    (r"pyper:trainer:\d+:\d+", "kineto_public/: a Meta-internal process name"),
]
_NOT_FROM_PINNED = re.compile("|".join(f"(?:{p})" for p, _ in NOT_FROM_PINNED))
_KINETO_NAME_CATS = {"cpu_op", "user_annotation", "gpu_user_annotation", "Trace", "overhead", "ac2g",
                     "fwdbwd",
                     "cpu_instant_event", None}


def _nsys_names(path: Path) -> set[str]:
    """NVTX range texts and domain names of one nsys export."""
    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    con.text_factory = lambda b: b.decode("utf-8", "replace")
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if "NVTX_EVENTS" not in tables:
            return set()
        cols = {r[1] for r in con.execute("PRAGMA table_info(NVTX_EVENTS)")}
        join = "LEFT JOIN StringIds s ON s.id = n.textId" if "textId" in cols else ""
        text = "coalesce(n.text, s.value)" if join else "n.text"
        return {r[0] for r in con.execute(f"SELECT DISTINCT {text} FROM NVTX_EVENTS n {join}") if r[0]}
    finally:
        con.close()


def _trace_files() -> list[Path]:
    out = []
    for p in sorted(DATA.rglob("*.json.gz")) + sorted(DATA.rglob("*.json.xz")) + sorted(DATA.rglob("*.json")):
        if "golden" in p.parts or "keytrees" in p.parts or p.parent.name == "doctor":
            continue
        rel = str(p.relative_to(DATA))
        out.append(data_path(rel[:-3]) if rel.endswith(".xz") else p)
    return out


def _kineto_names(path: Path) -> set[str]:
    """Op, annotation and profiler event names and the process / thread names of one torch trace."""
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        try:
            doc = json.load(f)
        except ValueError:
            return set()
    events = doc if isinstance(doc, list) else doc.get("traceEvents", ()) if isinstance(doc, dict) else ()
    names: set[str] = set()
    for e in events:
        if not isinstance(e, dict):
            continue
        if e.get("ph") == "M" and e.get("name") in ("process_name", "thread_name"):
            v = (e.get("args") or {}).get("name")
            if isinstance(v, str) and v:
                names.add(v)
        elif e.get("cat") in _KINETO_NAME_CATS and isinstance(e.get("name"), str) and e["name"]:
            names.add(e["name"])
    return names


@pytest.fixture(scope="module")
def capture_names() -> dict[str, set[str]]:
    out = {p.name: _nsys_names(p) for p in scrub_corpus.sqlite_files()}
    for p in _trace_files():
        out.setdefault(p.name, set()).update(_kineto_names(p))
    return out


def test_every_name_a_pinned_package_writes_in_the_captures_is_public(capture_names):
    corpus = public_names()
    missing = {}
    public = 0
    for capture, names in capture_names.items():
        for name in names:
            if corpus.is_public(name):
                public += 1
            elif not _NOT_FROM_PINNED.fullmatch(name):
                missing.setdefault(name, capture)
    assert not missing, f"{len(missing)} capture names neither public nor known user-written: " + \
        ", ".join(f"{n!r} ({c})" for n, c in sorted(missing.items())[:30])
    assert public > 20_000  # the emit_nvtx exports alone hold ~22,000 distinct public range names


def test_torch_compile_names_are_public_and_from_torch():
    trace = data_path("torch-compile/torch-compile_aot_eager_torch2.13.0.json.gz")
    names = _kineto_names(trace)
    compile_names = {"TorchDynamo Cache Lookup", "Torch-Compiled Region: 0/0", "Pregraph bytecode",
                     "AOTDispatcher Runtime Wrapper Prologue", "CompiledFunction", "CompiledFunctionBackward",
                     "autograd::engine::evaluate_function: CompiledFunctionBackward"}
    assert compile_names <= names  # the capture really holds them
    corpus = public_names()
    assert {n: corpus.source_of(n) for n in names if not corpus.is_public(n)} == {}
    assert {corpus.source_of(n) for n in compile_names} == {"torch 2.13.0"}


def test_verl_stage_names_are_public_and_from_verl():
    # fully-async/: ranges verl's own marked_timer wrote (see its README).
    names = _nsys_names(data_path("fully-async/fully_async_trainer_13021.sqlite"))
    assert {"step", "timing_s/param_sync"} <= names
    corpus = public_names()
    assert corpus.source_of("timing_s/param_sync") == "verl 0.9.1"
    assert corpus.source_of("step") == "verl 0.9.1"
    for name in ("update_actor", "old_log_prob", "gen", "adv"):
        assert corpus.source_of(name) == "verl 0.9.1", name


def _nsys_thread_names() -> set[str]:
    names: set[str] = set()
    for path in scrub_corpus.sqlite_files():
        con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
        con.text_factory = lambda b: b.decode("utf-8", "replace")
        try:
            if con.execute("SELECT 1 FROM sqlite_master WHERE name='ThreadNames'").fetchone():
                names.update(r[0] for r in con.execute(
                    "SELECT DISTINCT s.value FROM ThreadNames t JOIN StringIds s ON s.id = t.nameId") if r[0])
        finally:
            con.close()
    return names


def test_thread_names_as_linux_cuts_them_are_public():
    # nsys records a thread's name as Linux keeps it, 15 characters: the captures hold these cut names.
    threads = _nsys_thread_names()
    corpus = public_names()
    want = {"ray::DashboardA": "ray 2.60.0", "ray::RuntimeEnv": "ray 2.60.0", "ray::IDLE": "ray 2.60.0",
            "CUPTI worker th": "torch 2.13.0", "pt_autograd_0": "torch 2.13.0", "pt_elastic": "torch 2.13.0",
            "[NSys Comms]": "nsys", "python3": "python 3"}
    assert set(want) <= threads  # the captures really hold them
    assert {n: corpus.source_of(n) for n in want} == want


@pytest.mark.parametrize("text", [
    "ProfilerStep#0", "ProfilerStep#552", "Torch-Compiled Region: 12/3", "Torch-Compiled Region: 0/0_1",
    "pt_autograd_7", "thread 31037 (pt_gloo_runloop)", "Thread-12", "ThreadPoolExecutor-3_11",
    "aten::mm, seq = 12, op_id = 3, sizes = [[8, 16], [16, 32]], input_op_ids = [(1,0), (2,0)]",
    "autograd::engine::evaluate_function: ViewBackward0, op_id = 899", "nccl:all_reduce", "gloo:broadcast",
])
def test_templates_take_numbers(text):
    assert public_names().is_public(text), text


@pytest.mark.parametrize("text", [
    # people, handles, projects: alone, in code-shaped tokens, in templates' holes
    "alice", "Alice", "Rose Baker", "Grant Hunter", "jdoe42", "run_alice_ppo_v2", "exp-acme-prod-0412",
    "customer=bob", "aliceSmithModel", "王小明", "김민준",
    "s3://acme-ml-prod/ckpt/run7", "gs://acme/data", "hf://datasets/acme/private-set", "acme/rlhf/3x9k2p1q",
    "git@git.acme.internal:ml/verl-fork.git", "PROJ-1234", "#team-rlhf-private", "@jdoe",
    # a template's hole never takes text
    "ProfilerStep#alice", "ProfilerStep#", "ProfilerStep#1 alice", "Torch-Compiled Region: alice/0",
    "thread 12 (alice)", "Thread-3 (alice)", "alice, op_id = 3", "aten::mm, op_id = 3, sizes = [[alice]]",
    "autograd::engine::evaluate_function: alice", "pt_autograd_x", "nccl:alice", "timing_s/alice",
    "update_actor alice", " update_actor", "update_actor\n", "",
])
def test_what_people_write_is_not_public(text):
    corpus = public_names()
    assert not corpus.is_public(text), (text, corpus.source_of(text))
    assert corpus.source_of(text) is None


def test_header_names_the_builders_pins():
    corpus = PublicNames(CORPUS_FILE)
    fmt, *pins = corpus.version.split(" ")
    assert fmt == "verlprof-public-names/1"
    assert pins == [f"{d}=={v}" for d, v in sorted(_builder().PINS)]
    assert corpus.strings > 3000 and corpus.templates > 100


def test_every_template_parses_and_every_set_it_names_exists():
    corpus = public_names()
    assert corpus.is_public("aten::mm")  # loads
    for t in corpus._templates:
        for kind, val in template_parts(t.template):
            if kind == "hole" and val.startswith("="):
                assert val[1:] in corpus._sets, t.template
            if kind == "hole":
                assert val in ("int", "float", "numlist", "public") or val.startswith("="), t.template


def test_the_instance_pickles_as_a_reference_and_loads_lazily(tmp_path):
    corpus = public_names()
    assert pickle.loads(pickle.dumps(corpus)) is corpus
    assert len(pickle.dumps(corpus)) < 200
    fresh = PublicNames(CORPUS_FILE)
    assert fresh._loaded is False
    assert fresh.is_public("aten::mm") and fresh._loaded


def test_a_damaged_corpus_is_one_clear_error(tmp_path):
    bad = tmp_path / "public_names.txt.gz"
    bad.write_bytes(gzip.compress(b"not a corpus\n"))
    with pytest.raises(ValueError, match=r"public_names.txt.gz: not a public-names corpus"):
        PublicNames(bad).is_public("x")


@pytest.mark.slow
def test_the_build_is_reproducible_and_the_shipped_file_is_current(tmp_path):
    builder = _builder()
    if not all(builder.archive_for(d, v, builder.CACHE) for d, v in builder.PINS):
        pytest.skip(f"no download cache at {builder.CACHE} (run tools/build_public_names.py once)")
    out = tmp_path / "public_names.txt.gz"
    assert builder.main(["--offline", "--out", str(out)]) == 0
    # The shipped file was built by an earlier run of the same script from the same downloads.
    assert out.read_bytes() == CORPUS_FILE.read_bytes()
