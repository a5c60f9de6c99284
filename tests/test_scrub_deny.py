"""Issue 33, deny by default: path parts outside known roots and packages and option values outside
a short vocabulary become stable pseudonyms, with no identity pass to learn them first.

Made-up names (no Hydra config, no USER: nothing tells the scrubber they are names) are planted in a
path, a Hydra override, `--x=v`, `--x v` and `["--x", "v"]` where clusters put them: NVTX range
texts and the domain row, a thread name and the process row of a copy of the real H200 export; a
cpu_op's args (string and `Concrete Inputs` list), frames, process metadata and a user annotation of
the real H200 torch traces. A real `verlprof collect` runs; no planted name is in any byte of the
bundle, the real kernel and range names are, `verlprof check` of the raw run names `denied_text`
and check of the bundle is clean. The rule's own examples and salt independence are checked too;
the false-positive corpus is test_scrub_corpus.py / test_scrub_issue33.py (unchanged).
"""
from __future__ import annotations

import gzip
import json
import re
import shutil
import sqlite3
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))
from test_scrub_issue33 import _bundle_texts  # noqa: E402
from provenance_expect import leaves_as_is  # noqa: E402
from testdata import DATA, data_path  # noqa: E402
from verlprof.pipeline.cli import app  # noqa: E402
from verlprof.stages.scrub.deny import EXAMPLES, deny_spans, denied_flag_items  # noqa: E402
from verlprof.stages.scrub.identities import Pseudonyms  # noqa: E402
from verlprof.stages.scrub.policy import load_policy  # noqa: E402
from verlprof.stages.scrub.scrubber import Scrubber  # noqa: E402

runner = CliRunner()
POLICY = load_policy(use_local_environment=False)

# made-up names, each one distinct so a leak names its place
NAMES = ["zorbexteam", "qvxcfg", "quixrun-grpo7", "kappawolf", "vexilloid", "plumtrix"]
PATH = "/lab7/zorbexteam/qvxcfg/run.py"
HYDRA = "trainer.experiment_name=quixrun-grpo7"
FLAG_EQ = "--save-dir=/nfs/kappawolf/ckpt"
FLAG_SP = "--run-tag vexilloid"
ITEMS = ["--wandb-group", "plumtrix"]
LINE = f"python3 -m verl.trainer.main_ppo {HYDRA} {FLAG_EQ} {FLAG_SP} actor_rollout_ref.rollout.name=vllm {PATH}"


@pytest.mark.parametrize("text", EXAMPLES[0])
def test_the_rule_replaces_its_examples(text: str) -> None:
    sc = Scrubber(POLICY, Pseudonyms(salt="d"))
    spans = deny_spans(text)
    assert spans, text
    out = sc.scrub_rules(text, "t")
    words = set(re.split(r"[/\s=]", out))
    for a, b in spans:
        assert text[a:b] not in words, (text, out)
    assert dict(sc.report_counts()).get("t", {}).get("denied_text"), sc.report_counts()


@pytest.mark.parametrize("text", EXAMPLES[1])
def test_the_rule_leaves_its_look_alikes(text: str) -> None:
    sc = Scrubber(POLICY, Pseudonyms(salt="d"))
    out = sc.scrub_rules(text, "t")
    assert not deny_spans(text) and (out == text or "site-packages" in text), (text, out)
    assert not {k for k, _l in sc.counts} - {"env_path"}, sc.counts   # (prefix trim: cosmetic)


def test_option_values_as_list_items() -> None:
    assert denied_flag_items(ITEMS) == {1}
    assert denied_flag_items(["--dtype", "bf16", "--epochs", "15", "--flag", "--other"]) == set()


def test_the_verdict_does_not_depend_on_the_salt() -> None:
    """What scrub leaves is clean to check (and to a checker with another salt), and a second
    scrub changes nothing: the pseudonyms are in the rule's own vocabulary."""
    for i in range(40):
        sc = Scrubber(POLICY, Pseudonyms(salt=f"s{i}"))
        other = Scrubber(POLICY, Pseudonyms(salt=""))
        for t in list(EXAMPLES[0]) + [LINE]:
            out = sc.scrub_rules(t, "t")
            assert not other.findings(out), (t, out, other.findings(out))
            assert sc.scrub_rules(out, "t") == out


# ------------------------------------------------------------------------------------------------
# End to end: planted in every location of real captures, a real collect, every byte of the bundle
# ------------------------------------------------------------------------------------------------

def _plant_sqlite(db: Path) -> list[str]:
    con = sqlite3.connect(db)
    try:
        upd = con.execute("SELECT id FROM StringIds WHERE value = 'update_actor'").fetchone()[0]
        con.execute("UPDATE StringIds SET value = value || ' ' || ? WHERE id = ?", (LINE, upd))
        dom = con.execute("SELECT textId, text FROM NVTX_EVENTS WHERE eventType = 75").fetchone()
        if dom is not None and dom[1] is not None:
            con.execute("UPDATE NVTX_EVENTS SET text = text || ? WHERE eventType = 75", (" " + PATH,))
        elif dom is not None:
            con.execute("UPDATE StringIds SET value = value || ? WHERE id = ?", (" " + PATH, dom[0]))
        tid = con.execute("SELECT nameId FROM ThreadNames ORDER BY rowid LIMIT 1").fetchone()[0]
        con.execute("UPDATE StringIds SET value = ? WHERE id = ?", (f"wk {FLAG_EQ}", tid))
        con.execute("UPDATE PROCESSES SET name = ?", (LINE,))
        kernels = [r[0] for r in con.execute(
            "SELECT DISTINCT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName LIMIT 20")]
        con.commit()
    finally:
        con.close()
    return kernels + ["reward", "generate_sequences", "compute_log_prob"]   # (update_actor: renamed by the plant)


def _plant_trace(src: Path, dst: Path) -> list[str]:
    doc = json.loads(gzip.decompress(src.read_bytes()))
    ev = doc["traceEvents"]
    ops = [e for e in ev if e.get("cat") == "cpu_op"]
    mid = len(ops) // 2
    ops[mid]["args"]["Concrete Inputs"] = ["", *ITEMS]
    ops[mid + 1]["args"]["cmd"] = LINE
    ev.append(dict(ops[mid + 2], cat="user_annotation", name=f"load {PATH}", args={}))
    frames = [e for e in ev if e.get("cat") == "python_function"]
    if frames:
        frames[len(frames) // 2]["name"] = PATH + "(12): main"
    for e in ev:
        if e.get("ph") == "M" and e.get("name") == "process_name":
            e["args"]["name"] = LINE
    dst.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return sorted({e["name"] for e in ev if e.get("cat") == "kernel"})[:20]


@pytest.mark.parametrize("fmt", ["nsys", "torch"])
def test_planted_names_reach_no_byte_of_a_real_collect(tmp_path: Path, fmt: str) -> None:
    root = tmp_path / "run"
    root.mkdir()
    if fmt == "nsys":
        db = root / "whole_1873.sqlite"
        shutil.copyfile(data_path("h200-nsys-2025.3/whole/whole_1873.sqlite"), db)
        real = _plant_sqlite(db)
        planted = [n for n in NAMES if n != "plumtrix"]       # list items: the trace's place
    else:
        real = []
        for src in sorted((DATA / "h200-torch-2.11").glob("*.json.gz")):
            real += _plant_trace(src, root / src.name)
        planted = list(NAMES)
    raw = _bundle_texts(root)
    assert all(n in raw for n in planted)
    assert real

    out = tmp_path / "out"
    res = runner.invoke(app, ["collect", str(root), "-o", str(out), "--work", str(tmp_path / "work"),
                              "--jobs", "1"])
    assert res.exit_code == 0, res.output
    assert " 0 summarized" not in res.output, res.output
    blob = _bundle_texts(out)
    leaked = [n for n in planted if n in blob]
    assert not leaked, leaked
    assert "p-" in blob                                      # replaced by pseudonyms, not dropped
    # real kernel names whole; range names (user-written, issue 39) whole when public
    missing = [n for n in real if n not in blob and (n not in ("generate_sequences", "compute_log_prob", "reward")
                                                      or leaves_as_is(n))]
    assert not missing, missing[:5]

    chk = runner.invoke(app, ["check", str(root), "--no-local-env"])
    assert chk.exit_code != 0 and "denied_text" in chk.output, chk.output[-2000:]
    # one line per class with its occurrences: the kinds scrub_report.json counts
    by_class = [ln for ln in chk.output.splitlines() if ln.startswith("by class: ")]
    assert any(ln.startswith("by class: denied_text: ") for ln in by_class), by_class
    total = sum(int(ln.split(": ")[2].split()[0]) for ln in by_class)
    assert total == sum(int(ln.rsplit("(", 1)[1].split()[0]) if ln.endswith("occurrences)") else 1
                        for ln in chk.output.splitlines() if ": " in ln and not ln.startswith(("by class", "verlprof")))
    assert runner.invoke(app, ["check", str(out), "--no-local-env"]).exit_code == 0
    # the owner's review list (WORK, issue 39) names the user text of the summary rows scrubbed in
    # the workers too
    review = (tmp_path / "work" / "names_review.txt").read_text(encoding="utf-8")
    assert "summaries." in review, review[:2000]
