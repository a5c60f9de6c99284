"""Issue 16: secrets that do not look like themselves (encoded, embedded, unlabelled, split).

Every class is planted (FAKE values, made up here) into copies of the real H200 fixtures: NVTX
ranges inserted into `StringIds` / `NVTX_EVENTS` of whole_1873.sqlite inside step 2, and events
appended to the real step-2 torch trace. Then, through `verlprof collect`: no planted value and none
of its encoded forms is left in any byte of the bundle (gzip opened, Parquet cells read), the
scrub report names the rule that removed it, and `verlprof check` exits 1 on an unscrubbed bundle
holding each form. Negative side: scrubbing every real fixture, the entropy rule and the decoders
touch 0 strings, and kernel names, phase names and counts are what an entropy-free scrub gives.
"""
from __future__ import annotations

import re
import base64
import gzip
import json
import shutil
import sqlite3
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner
from provenance_expect import leaves_as_is  # noqa: E402
from testdata import fixtures_dir
from verlprof.pipeline.cli import app
from verlprof.stages.scrub.check import check_paths
from verlprof.stages.scrub.hidden import encoded_value_forms, verify_allow_examples
from verlprof.stages.scrub.identities import Pseudonyms
from verlprof.stages.scrub.policy import load_policy
from verlprof.stages.scrub.rules import REDACTED, verify_pattern_examples
from verlprof.stages.scrub.scrubber import Scrubber
from verlprof.stages.scrub.tasks import ScrubTask, build_options, find_identities, scrub_artifact, sniff_kind

REPO = Path(__file__).resolve().parents[1]
FIXTURES = fixtures_dir()
WHOLE = FIXTURES / "h200-nsys-2025.3" / "whole" / "whole_1873.sqlite"
TRACE2 = FIXTURES / "h200-torch-2.11" / "actor-rollout-ref_train_step2_rank0-of-1_pid754_20261202085621396.json.gz"
POLICY = load_policy(use_local_environment=False)
runner = CliRunner()

# FAKE secrets, none valid anywhere, none in the fixtures' environment.
TOK_B64 = "hf_B64PlantedTok3nIssue16abcdEFGHijklMN"
TOK_URL_FULL = "hf_UrlFullyEnc0dedTok3nIssue16abcdEFGH"
TOK_URL_EQ = "hf_UrlEqEnc0dedTok3nIssue16abcdEFGHijkl"
TOK_HEX = "hf_HexEnc0dedTok3nIssue16abcdEFGHijklMN"
BASIC_PASS = "Sup3r-S3cret-Basic-Pa55"
AWS_ID = "AKIAZ7Q3XK4M9P2L8N5R"
AWS_SECRET = "q8Zr2LmV7nXc4Tb9Wk1Hs6Jd3Fg5Pa0Ye8Ru2Io7"   # 40 chars, no label next to it
RANDOM_KEY = "Zx8Kq2Lm9Vb4Np7Rt3Wy6Hj1Qe5Uc0"          # unlabelled, no provider shape
SPLIT_A, SPLIT_B = "hf_Sp1itT0kenPa1r", "tQ9wE8rT7yU6iO5p"  # joined: an hf token; each half is not
FIXTURE_HF = "hf_kQ7ZpLm2XvB9tR4sWc8YnD1eUfA6gHjK3o"      # the fixture's own HF_TOKEN (a known value)


def _b64(s: str) -> str:
    return base64.b64encode(s.encode()).decode()


def _pct(s: str) -> str:
    return "".join(f"%{c:02X}" for c in s.encode())


# class -> (NVTX texts planted in sequence on the main thread, secrets that must vanish, the kind
# `verlprof check` reports). Pattern matches are also collected by scrub's identity pass and then
# replaced as known values, so scrub_report.json may count them as `secret_value` (SCRUB_KINDS).
PLANTS: dict[str, tuple[tuple[str, ...], tuple[str, ...], str]] = {
    "base64_unlabelled": ((f"load cfg {_b64('HF_TOKEN=' + TOK_B64)}",), (TOK_B64,), "encoded:base64"),
    "base64_basic_auth": ((f"GET /x Authorization: Basic {_b64('bob:' + BASIC_PASS)}",), (BASIC_PASS,), "pattern:bearer"),
    "url_fully_encoded": ((f"fetch https://hub.example/api?q={_pct('token=' + TOK_URL_FULL)}",), (TOK_URL_FULL,), "encoded:url"),
    "url_embedded_token": ((f"fetch https://hub.example/api?token%3D{TOK_URL_EQ}&rev=main",), (TOK_URL_EQ,), "pattern:hf"),
    "hex_encoded": ((f"dump {('HF_TOKEN=' + TOK_HEX).encode().hex()}",), (TOK_HEX,), "encoded:hex"),
    "aws_companion": ((f"s3 sync {AWS_ID} {AWS_SECRET}",), (AWS_ID, AWS_SECRET), "context:aws_secret"),
    "entropy_unlabelled": ((f"shard key {RANDOM_KEY}",), (RANDOM_KEY,), "entropy"),
    "split_ranges": ((SPLIT_A, SPLIT_B), (SPLIT_A, SPLIT_B, SPLIT_A + SPLIT_B), "split_value"),
    "known_value_base64": ((f"x-auth:{_b64(FIXTURE_HF)}",), (FIXTURE_HF,), "secret_value"),
}


SCRUB_KINDS = {"base64_basic_auth": ("pattern:bearer", "secret_value"), "url_embedded_token": ("pattern:hf", "secret_value")}


def _forms(secret: str) -> set[str]:
    """The secret and how it looks encoded (URL, hex, base64 cores of every alignment)."""
    return {secret, *encoded_value_forms(secret)}


def _all_text(root: Path) -> bytes:
    """Every byte under root as a reader sees it: raw files, gzip members, Parquet cells and metadata."""
    chunks = []
    for p in sorted(x for x in root.rglob("*") if x.is_file()):
        data = p.read_bytes()
        chunks.append(data)
        if data[:2] == b"\x1f\x8b":
            chunks.append(gzip.decompress(data))
        if data[:4] == b"PAR1":
            t = pq.read_table(p)
            chunks.append(json.dumps(t.to_pylist(), default=str).encode())
            chunks.extend(k + v for k, v in (pq.ParquetFile(p).metadata.metadata or {}).items())
    return b"\n".join(chunks)


def _plant_sqlite(dst: Path, texts: list[str]) -> None:
    """Copy whole_1873 and insert one NVTX range per text inside step 2's `gen` on the main thread,
    alternately as a registered string (StringIds + textId) and as an explicit `text`."""
    shutil.copyfile(WHOLE, dst)
    c = sqlite3.connect(dst)
    tid = c.execute("SELECT globalTid FROM NVTX_EVENTS WHERE textId IS NOT NULL ORDER BY start LIMIT 1").fetchone()[0]
    sid = c.execute("SELECT max(id) FROM StringIds").fetchone()[0] + 1
    start = 13_416_700_000            # after step 2's generate_sequences starts, before reward
    for i, text in enumerate(texts):
        s0 = start + i * 1_000_000
        if i % 2 == 0:
            c.execute("INSERT INTO StringIds(id, value) VALUES (?, ?)", (sid, text))
            c.execute("INSERT INTO NVTX_EVENTS(start, end, eventType, globalTid, endGlobalTid, textId) "
                      "VALUES (?, ?, 60, ?, ?, ?)", (s0, s0 + 500_000, tid, tid, sid))
            sid += 1
        else:
            c.execute("INSERT INTO NVTX_EVENTS(start, end, eventType, globalTid, endGlobalTid, text) "
                      "VALUES (?, ?, 60, ?, ?, ?)", (s0, s0 + 500_000, tid, tid, text))
    c.commit()
    c.close()


def _plant_trace(dst: Path, texts: list[str]) -> None:
    """Copy the real step-2 torch trace with user annotations (and args) holding the texts."""
    with gzip.open(TRACE2, "rb") as f:
        doc = json.load(f)
    base = next(e for e in doc["traceEvents"] if e.get("cat") == "user_annotation")
    for i, text in enumerate(texts):
        doc["traceEvents"].append({**base, "name": text, "ts": base["ts"] + 10 + i, "dur": 5.0,
                                   "args": {**base.get("args", {}), "note": text}})
    with gzip.open(dst, "wt", encoding="utf-8") as f:
        json.dump(doc, f)


def _planted_texts() -> list[str]:
    return [t for texts, _s, _k in PLANTS.values() for t in texts]


@pytest.fixture(scope="module")
def planted_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("planted") / "run"
    (run / "nsight").mkdir(parents=True)
    (run / "profile").mkdir()
    _plant_sqlite(run / "nsight" / WHOLE.name, _planted_texts())
    _plant_trace(run / "profile" / TRACE2.name, [t for k, (ts, _s, _k) in PLANTS.items() if k != "split_ranges" for t in ts])
    return run


@pytest.fixture(scope="module")
def bundle(planted_run: Path) -> Path:
    out = planted_run.parent / "out"
    res = runner.invoke(app, ["collect", str(planted_run), "-o", str(out), "--work", str(planted_run.parent / "work"),
                              "--jobs", "2"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    return out


def test_planted_rows_are_where_a_reader_finds_them(planted_run: Path) -> None:
    """The plant itself is real: an unscrubbed copy holds every text, in step 2, on the main thread."""
    c = sqlite3.connect(planted_run / "nsight" / WHOLE.name)
    rows = c.execute("SELECT coalesce(e.text, s.value) FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId "
                     "WHERE e.start BETWEEN 13416446434 AND 13639478231").fetchall()
    c.close()
    assert set(_planted_texts()) <= {r[0] for r in rows}


# Since issue 11, collect summarizes the RAW export and scrubs summary strings one by one; it
# passes its raw exports to `scrub_summary_rows(..., raw_exports=...)` so split halves are found there.


@pytest.mark.parametrize("cls", sorted(PLANTS))
def test_collect_bundle_holds_no_planted_value_nor_its_encoded_forms(bundle: Path, cls: str) -> None:
    everything = _all_text(bundle)
    texts, secrets, _kind = PLANTS[cls]
    for secret in secrets:
        for form in _forms(secret):
            assert form.encode() not in everything, f"{cls}: a form of the planted value survived"
    for text in texts:
        assert text.encode() not in everything


@pytest.mark.parametrize("cls", sorted(PLANTS))
def test_scrub_report_names_the_rule_that_removed_each_class(bundle: Path, cls: str) -> None:
    report = json.loads((bundle / "scrub_report.json").read_text())
    assert any(report["totals"].get(k, 0) >= 1 for k in SCRUB_KINDS.get(cls, (PLANTS[cls][2],))), report["totals"]


def test_phases_and_kernels_survive_the_plant(bundle: Path) -> None:
    """Redaction stays inside the planted ranges: step 2's phase names and kernel count are intact."""
    phases = pq.read_table(bundle / "summaries" / "phases.parquet").to_pylist()
    names = {r["phase"] for r in phases if r["source_kind"] == "nsys"}
    # user-written phase names: the public ones stay whole (issue 39), the others are pseudonyms
    assert {n for n in ("gen", "reward", "old_log_prob", "ref", "adv", "update_actor") if leaves_as_is(n)} <= names
    assert not any(REDACTED in n and n in ("step", "gen") for n in names)


def _unscrubbed_bundle(root: Path, texts: list[str]) -> Path:
    """A bundle-shaped folder that was NOT scrubbed: planted SQLite, a Parquet and a trace."""
    root.mkdir()
    (root / "traces").mkdir()
    (root / "summaries").mkdir()
    db = root / "traces" / "w.sqlite"
    c = sqlite3.connect(db)
    c.execute("CREATE TABLE StringIds(id INTEGER PRIMARY KEY, value TEXT)")
    c.execute("CREATE TABLE NVTX_EVENTS(start INTEGER, end INTEGER, eventType INTEGER, globalTid INTEGER, "
              "text TEXT, textId INTEGER)")
    c.execute("INSERT INTO StringIds VALUES (1, 'step')")
    c.execute("INSERT INTO NVTX_EVENTS VALUES (0, 100, 60, 7, NULL, 1)")
    for i, t in enumerate(texts, 1):
        c.execute("INSERT INTO NVTX_EVENTS VALUES (?, ?, 60, 7, ?, NULL)", (i * 10, i * 10 + 5, t))
    c.commit()
    c.close()
    pq.write_table(pa.table({"phase": texts}), root / "summaries" / "phases.parquet")
    with gzip.open(root / "traces" / "w.trace.json.gz", "wt") as f:
        json.dump({"traceEvents": [{"ph": "X", "name": t, "ts": 1, "dur": 1, "pid": 1, "tid": 1} for t in texts]}, f)
    return root


@pytest.mark.parametrize("cls", sorted(PLANTS))
def test_check_fails_on_an_unscrubbed_bundle_holding_each_form(tmp_path: Path, cls: str) -> None:
    texts = list(PLANTS[cls][0])
    root = _unscrubbed_bundle(tmp_path / "b", texts)
    args = ["check", str(root), "--no-local-env"]
    if cls == "known_value_base64":
        values = tmp_path / "values.txt"
        values.write_text(FIXTURE_HF + "\n")
        args += ["--values-file", str(values)]
    res = runner.invoke(app, args)
    assert res.exit_code == 1, res.output
    assert PLANTS[cls][2] in res.output
    for secret in PLANTS[cls][1]:
        for form in _forms(secret):
            assert form not in res.output
    if cls == "split_ranges":
        # each half alone is clean: only the joined scan finds it, and only in the SQLite
        # (the unscrubbed summaries hold user-written names: user_text, what issue 39 adds)
        assert [f for f in check_paths([root / "summaries"], POLICY) if f.kind != "user_text"] == []


def test_check_passes_the_collected_bundle(bundle: Path) -> None:
    assert check_paths([bundle], POLICY) == []


# --------------------------------------------------------------------------------------------
# Negative side: the real fixtures lose nothing to the new rules
# --------------------------------------------------------------------------------------------

def _fixture_inputs() -> list[Path]:
    return sorted(p for p in FIXTURES.rglob("*") if p.suffix in (".sqlite", ".gz", ".pickle") and "golden" not in p.parts)


def _scrub_all(policy, out: Path) -> dict[str, dict[str, int]]:
    out.mkdir()
    totals: dict[str, dict[str, int]] = {}
    for src in _fixture_inputs():
        kind = sniff_kind(src)
        opts = build_options([find_identities(src, kind, policy)], policy, salt="t", include_local=False)
        res = scrub_artifact(ScrubTask(str(src), str(out / src.name), kind, src.name), opts)
        tot: dict[str, int] = {}
        for kinds in res.counts.values():
            for k, n in kinds.items():
                tot[k] = tot.get(k, 0) + n
        totals[src.name] = tot
    return totals


def test_new_rules_touch_nothing_on_the_real_fixtures(tmp_path: Path) -> None:
    """Every fixture scrubbed: the entropy rule, decoders, context and split rules remove 0 strings,
    and every kernel name, NVTX phase name and their counts come out as they went in."""
    totals = _scrub_all(POLICY, tmp_path / "on")
    print("entropy-rule removals per fixture:", {n: t.get("entropy", 0) for n, t in totals.items()})
    new = {k for t in totals.values() for k in t if k in ("entropy", "split_value") or k.startswith(("encoded:", "context:"))}
    assert new == set(), totals
    assert len(totals) == 8
    q = ("SELECT s.value, count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName "
         "GROUP BY 1 UNION ALL SELECT s.value, count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s "
         "ON s.id = k.shortName GROUP BY 1 UNION ALL SELECT coalesce(e.text, s.value), count(*) FROM NVTX_EVENTS e "
         "LEFT JOIN StringIds s ON s.id = e.textId GROUP BY 1 ORDER BY 1")
    for src in _fixture_inputs():
        if src.suffix == ".sqlite":
            before = sqlite3.connect(f"file:{src}?mode=ro&immutable=1", uri=True).execute(q).fetchall()
            after = sqlite3.connect(tmp_path / "on" / src.name).execute(q).fetchall()
            # kernel names whole; NVTX text by the provenance rule (public whole, else a pseudonym)
            assert len(after) == len(before) > 30
            assert sum(n for _v, n in after) == sum(n for _v, n in before)
            assert {v for v, _n in before if v and leaves_as_is(v)} <= {v for v, _n in after}


def test_rules_carry_their_examples() -> None:
    assert verify_pattern_examples() == []
    assert verify_allow_examples(POLICY.entropy_allow) == []
    assert {n for n, _rx, _ex in POLICY.entropy_allow} >= {"mangled_symbol", "cuda_api_version", "uuid"}


@pytest.mark.parametrize("text", [
    "GET /m?token%3Dhf_kQ7ZpLm2XvB9tR4sWc8YnD1eUfA6gHjK3o",          # glued after a URL escape
    "cfg\\nhf_kQ7ZpLm2XvB9tR4sWc8YnD1eUfA6gHjK3o",                    # after a literal \n
    "{\\u0022t\\u0022:\\u0022hf_kQ7ZpLm2XvB9tR4sWc8YnD1eUfA6gHjK3o",  # JSON-escaped quote
    "id%3DAKIAZ7Q3XK4M9P2L8N5R",
    "key%3DAIzaSyD3x9Q7pL2mK8vN4bR6tY1uW5eI0oA7sF3",
])
def test_provider_tokens_embedded_after_escapes(text: str) -> None:
    sc = Scrubber(POLICY, Pseudonyms())
    assert any(k.startswith("pattern:") for k in sc.findings(text))
    assert REDACTED in sc.scrub_rules(text, "l")


@pytest.mark.parametrize("text", [
    "cudaGetDriverEntryPointByVersion_v12050", "nvjet_sm90_tst_128x64_64x8_1x2_h_bz_NNT",
    "EmbeddingBackward0_apply_functional", "L2CacheDataReadMisses", "commit 5f0c3e9a1b7d24e8c6a90f1b3d5e7a9c2b4d6f80",
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>>",
    "kernel_f31e45c5-e457-86cb-1f99-47df0918ba09", "site-packages/torch/_dynamo/eval_frame.py",
    "/tmp/torchinductor_root/qd/cqd2vhk5xjz3m4ab7wq9p2rdl6s8t0yvn1c5e7g3h.py", "client_id: verl-trainer",
])
def test_look_alikes_stay(text: str) -> None:
    sc = Scrubber(POLICY, Pseudonyms())
    assert sc.scrub_rules(text, "l") == text
    assert sc.findings(text) == ()


def test_entropy_allow_keys_keep_trace_ids_but_not_secrets_in_them() -> None:
    sc = Scrubber(POLICY, Pseudonyms())
    assert sc.scrub_keyed("trace_id", "EA965E6C6FB74601B987C126767E5698", "l") == "EA965E6C6FB74601B987C126767E5698"
    assert sc.scrub_keyed("trace_id", TOK_B64, "l") == REDACTED
    assert sc.scrub_keyed("note", "EA965E6C6FB74601B987C126767E5698", "l") == REDACTED


@pytest.mark.parametrize("content,msg", [
    ("[entropy.allow.x]\nregex = '('\nexamples = ['a']\n", "regex is not valid"),
    ("[entropy.allow.x]\nregex = 'zz[0-9]+'\nexamples = ['nothing here']\n", "does not match its example"),
    ("[entropy.allow.x]\nregex = 'zz[0-9]+'\n", "has no examples"),
    ("[context]\nenabled = ['nope']\n", "unknown context rule"),
])
def test_bad_new_policy_sections_are_one_line_errors(tmp_path: Path, content: str, msg: str) -> None:
    from verlprof.stages.core.errors import BadInputError

    f = tmp_path / "p.toml"
    f.write_text(content)
    with pytest.raises(BadInputError) as exc:
        Scrubber(load_policy(f, use_local_environment=False), Pseudonyms())
    assert msg in str(exc.value) and "\n" not in str(exc.value)


def test_summary_rows_lose_split_halves_when_given_their_raw_export(tmp_path: Path) -> None:
    from verlprof.stages.scrub.values import scrub_summary_rows

    raw = tmp_path / "raw.sqlite"
    _plant_sqlite(raw, ["reward", SPLIT_A, SPLIT_B, "adv"])
    opts = build_options([], POLICY, salt="t", include_local=False)
    rows = {"phases": [{"phase": "reward"}, {"phase": SPLIT_A}, {"phase": SPLIT_B}]}
    clean, res = scrub_summary_rows(rows, opts, raw_exports=[raw])
    first = clean["phases"][0]["phase"]
    assert [r["phase"] for r in clean["phases"]][1:] == [REDACTED, REDACTED]
    assert first == "reward" if leaves_as_is("reward") else re.fullmatch(r"name-[g-z]{8}", first)
    assert sum(k.get("split_value", 0) for k in res.counts.values()) == 2
    # without the export: no context (user-written phases: public whole, the others pseudonyms)
    alone = scrub_summary_rows(rows, opts)[0]["phases"]
    assert not any("REDACTED" in r["phase"] for r in alone) and [r["phase"] == o["phase"] for r, o in zip(
        alone, rows["phases"])] == [leaves_as_is(o["phase"]) for o in rows["phases"]]


def test_a_scrubbed_copy_pairs_its_ranges_as_its_source_did(tmp_path: Path) -> None:
    """Scrub judges split values on the source's adjacent NVTX pairs and again on the copy's; the
    copy's pairs are derived from the source's (`copied_pairs`), not read again (issue 25). They
    are the pairs a read of the copy finds, with the texts the copy holds, when the copy rewrote
    texts of both kinds (explicit `text` and StringIds values); text in a thread id reads again."""
    import dataclasses

    from verlprof.stages.scrub.sqlite import copied_pairs, scrub_sqlite
    from verlprof.stages.scrub.sqlite_cells import iter_adjacent_nvtx, reading

    raw = tmp_path / "raw.sqlite"
    _plant_sqlite(raw, ["reward", *_planted_texts(), "adv"])
    policy = dataclasses.replace(POLICY, join_adjacent_nvtx=False)   # the copy as it is, no split redaction
    opts = build_options([find_identities(raw, "nsys_sqlite", policy)], policy, salt="t", include_local=False)
    out = tmp_path / "out.sqlite"
    stats = scrub_sqlite(raw, out, Scrubber(opts.policy, opts.pseudonyms))
    assert stats.changed["NVTX_EVENTS.text"] and stats.changed["StringIds.value[user]"]   # both kinds rewritten
    with reading(raw) as (conn, _path):
        source = list(iter_adjacent_nvtx(conn))

    def texts(pairs: list) -> set:
        return {((a[1], a[2]), (b[1], b[2])) for a, b in pairs}

    con = sqlite3.connect(out)
    derived = copied_pairs(con, source, stats.changed)
    assert derived is not None and texts(derived) == texts(iter_adjacent_nvtx(con))
    assert texts(derived) != texts(source) and len(derived) == len(source) > 20
    assert copied_pairs(con, source, {**stats.changed, "NVTX_EVENTS.globalTid": {"7": "x"}}) is None
    assert copied_pairs(con, source, {**stats.changed, "NVTX_EVENTS.textId": {}}) is None
    assert copied_pairs(con, source, {**stats.changed, "NVTX_EVENTS.text": None}) is None


def test_split_halves_found_in_a_raw_export_are_redacted_wherever_met(tmp_path: Path) -> None:
    """For summaries built from a raw export and scrubbed string by string (no adjacency there):
    the halves are found on the raw export first and then redacted as whole strings."""
    from verlprof.stages.scrub.sqlite_cells import split_nvtx_texts

    raw = tmp_path / "raw.sqlite"
    _plant_sqlite(raw, ["reward", SPLIT_A, SPLIT_B, "adv"])
    sc = Scrubber(POLICY, Pseudonyms())
    assert sc.scrub_rules(SPLIT_A, "l") == SPLIT_A and sc.scrub_rules(SPLIT_B, "l") == SPLIT_B   # alone: clean
    halves = split_nvtx_texts(raw, sc)
    assert halves == {SPLIT_A, SPLIT_B}                       # phase names next to them stay
    sc.force_redact(halves)
    assert sc.scrub_rules(SPLIT_A, "phases.phase") == REDACTED and sc.findings(SPLIT_B) == ("split_value",)
    assert sc.scrub_rules("reward", "l") == "reward" and sc.counts[("split_value", "phases.phase")] == 1
