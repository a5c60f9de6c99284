"""Build stages/scrub/vocabulary.txt: the words scrub keeps in free text (stages/scrub/words.py).

Run once when tests/data gains a capture (then review the diff of vocabulary.txt: every word in it
leaves a bundle as it is, so no person's or project's name may be in it):

    .venv/bin/python tests/build_scrub_vocabulary.py

Sources, each read the way the bundle carries it:
- every kernel, NVTX range and annotation name of tests/data (tests/scrub_corpus.py: the
  false-positive corpus, which must pass scrub unchanged);
- the other strings real captures publish: nsys thread and process names, GPU and device names,
  the text cells of the tables a bundle keeps, and every string of the Kineto traces (event names,
  argument keys and values, metadata);
- verlprof's own messages: the string literals of pipeline/ and stages/ but stages/scrub (statements, report
  texts, trace metadata are published and checked like the rest);
- nsys's own vocabulary: its ENUM_* tables and DIAGNOSTIC_EVENT messages;
- COMMON below: English and profiling words a message written by a person uses.
Only the words words.py judges are taken (plain words of >= 3 letters of strings that are not
code-shaped), never from other strings holding `=`, `/` or `\\` (environment rows, command lines, paths:
those are judged by their own rules), and never the planted fake identities of tests/data (EXCLUDE).
"""
from __future__ import annotations

import ast
import gzip
import json
import sqlite3
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from scrub_corpus import DATA, corpus, data_path, sqlite_files  # noqa: E402
from verlprof.stages.scrub.sqlite import SQLITE_ALLOWLIST  # noqa: E402
from verlprof.stages.scrub.words import VOCABULARY_FILE, WORD_RE, plain_words  # noqa: E402

# The planted fake identities and project names of tests/data (README.md "Planted FAKE secrets")
# and the tests' own made-up names: never vocabulary.
EXCLUDE = frozenset({"alice", "rlproj", "bob", "grace", "hopperx", "zorblax", "smith",
                     # a public capture's Windows user ("Alexander Gei\xdf" in its system rows) and a UUID group
                     "alexander", "gei", "febd"})

# Words a person writes in a message about a run (English function words, profiling and RL terms).
COMMON = """
about above after again all also and any are around back batch before begin being below best between
both but call called calls can cannot check checkpoint chunk clean client collect compute computing copy
could count create current data debug default did does doing done down during each else end ending
error event every fail failed failure fast few final finish finished first for forward from full get
got had has have here high how idle init initialize into its job just last late launch left less level
like load loaded loading local long loop low main many max may mean memory merge min more most much
must need new next not now off old once one only open other our out over own part pass per phase
post pre prepare prompt prompts queue ready receive received reduce remote request response result
resume retry return reward right round run running same save saved see send sent server set setup
should size skip slow some start started state step still stop sync take than that the their them
then there these they this those through time timer total train training try two under until update
use used using wait waiting warm warmup was way well were what when where which while who why will
with without work worker would yes you your connect connected connection disconnect ssh
listen listening bind open close closed shutdown exit abort kill killed timeout timed
actor critic rollout rollouts generate generation sequence sequences token tokens policy value values
advantage advantages ref reference old log prob probs logprob logprobs kl entropy loss grad grads
gradient gradients optimizer weight weights param params parameter parameters model models shard
sharded offload onload reshard gather scatter allgather allreduce broadcast barrier epoch epochs iter
iteration iterations instruct chat base tokenizer dataset dataloader sample samples response responses
micro mini global rank ranks node nodes device devices host gpu gpus cpu cpus stream streams kernel
kernels thread threads process processes engine engines inference trainer validation validate eval
evaluate evaluation metric metrics profile profiler profiling capture range ranges annotation marker
verlprof scrub check collect replacements replacement dropped kept pid tid utc epoch microseconds
milliseconds seconds bound longest shortest own slowest fastest straggler culprit wall busy
track tracks span spans group groups might been collected collecting
vmem vram hbm dram sram smem gmem tma nvlink nvswitch pcie rdma nic ssd disk cpu dma fabric
able across add added against already although always among another anything anyway apply applied
area ask asked away became because become becomes becoming behind below beside better beyond big
bit both bring build built came case cases cause caused certain change changed changes clear close
come comes coming common complete completed continue contains correct cost day days did different
does don due early either empty enough entire even ever example except expected far feel find
found free given gives going good great group half hand happen happened hard having head hold hour
hours however idea important include included including instead issue issues itself keep keeps
kind know known large larger later least let line lines list little look looks lost lot made
make makes making manage may mean means might minute minutes mode moment move moved name named
near nearly never none nor note nothing number numbers often okay only order others output
outside overall past path pending perhaps place plan point points possible present probably
problem problems put quite rather read real reason recent record records remove removed report
reported require required rest right run said say says second seconds seem seen several shall
short show shown side since single small so something sometimes soon source space special
specific spent still such sure system table tables tell test tested tests text thing things think
though three thus today together too took top toward tried true turn twice type types unknown
upon usage useful usually valid various very view want wanted watch week whether whole within
word words working works write written wrong year yet zero
"""


def _words(text: str, out: Counter, name: bool = False) -> None:
    """Count the words words.py judges in `text`; `name`: a kernel/range name of the corpus, taken
    whole (the other strings only when they hold no `=`, `/` or `\\`)."""
    if not isinstance(text, str):
        return
    if not name and ("=" in text or "/" in text or "\\" in text):
        return
    for w in plain_words(text):
        out[w] += 1


def _sqlite_strings(path: Path, out: Counter) -> None:
    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    con.text_factory = lambda b: b.decode("utf-8", "replace")
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        for keep in SQLITE_ALLOWLIST:
            t = keep.name
            if t not in tables or t == "StringIds":
                continue
            cols = [r[1] for r in con.execute(f'PRAGMA table_info("{t}")')]
            for c in cols:
                if c in keep.drop:
                    continue
                if c in keep.string_ids:
                    q = f'SELECT DISTINCT s.value FROM "{t}" x JOIN StringIds s ON s.id = x."{c}"'
                else:
                    q = f'SELECT DISTINCT "{c}" FROM "{t}" WHERE typeof("{c}") = \'text\''
                for (v,) in con.execute(q):
                    _words(v, out)
        for t in sorted(x for x in tables if x.startswith("ENUM_")):     # nsys's own vocabulary
            for r in con.execute(f'SELECT * FROM "{t}"'):
                for v in r:
                    _words(v, out)
        if "DIAGNOSTIC_EVENT" in tables:                                  # nsys's own messages
            for (v,) in con.execute("SELECT DISTINCT text FROM DIAGNOSTIC_EVENT"):
                _words(v, out)
    finally:
        con.close()


def _own_strings(out: Counter) -> None:
    """The words of verlprof's own messages (string literals of its code, not docstrings): its
    summaries' statements, report texts and trace metadata are published and checked too."""
    root = Path(__file__).resolve().parents[1]
    for py in sorted([*(root / "pipeline").rglob("*.py"), *(root / "stages").rglob("*.py")]):
        if "scrub" in py.parent.parts:      # the rules' own examples are made-up names, not messages
            continue
        tree = ast.parse(py.read_text(encoding="utf-8"))
        docs = {id(n.body[0].value) for n in ast.walk(tree)
                if isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
        for n in ast.walk(tree):
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs:
                for m in WORD_RE.finditer(n.value):
                    out[m.group(0).lower()] += 1


def _walk(obj: object, out: Counter) -> None:
    if isinstance(obj, str):
        _words(obj, out)
    elif isinstance(obj, dict):
        for k, v in obj.items():
            _words(k, out, name=True)          # a key is the tool's own vocabulary
            _walk(v, out)
    elif isinstance(obj, list):
        for v in obj:
            _walk(v, out)


def build() -> tuple[list[str], Counter]:
    found: Counter = Counter()
    for names in corpus().values():
        for n in names:
            _words(n, found, name=True)
    for p in sqlite_files():
        _sqlite_strings(p, found)
    for p in sorted(DATA.rglob("*.json.gz")) + sorted(DATA.rglob("*.json.xz")):
        if "golden" in p.parts:
            continue
        rel = str(p.relative_to(DATA))
        path = data_path(rel[:-3]) if rel.endswith(".xz") else p
        opener = gzip.open if path.name.endswith(".gz") else open
        with opener(path, "rt", encoding="utf-8") as f:
            _walk(json.load(f), found)
    _own_strings(found)
    common = {w for w in COMMON.split()}
    words = sorted((set(found) | common) - EXCLUDE)
    return words, found


def main() -> None:
    words, found = build()
    lines = ["# Words scrub keeps in free text (stages/scrub/words.py). Generated by",
             "# tests/build_scrub_vocabulary.py from the real names of tests/data and its COMMON list;",
             "# reviewed: no person's or project's name. Edit the script, not this file.",
             *words]
    VOCABULARY_FILE.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"{len(words)} words ({len(found)} from tests/data) -> {VOCABULARY_FILE}")


if __name__ == "__main__":
    main()
