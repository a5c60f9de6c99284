"""Issue 32: who held the step back, on three real 4-rank gloo runs (tests/data/straggler_runs).

Each run is collected for real (torch.profiler traces of 3 profiled steps, every rank); the
expected culprit, its loss and the victims' wait are read from the raw traces with plain `json`
(the `user_annotation` ranges of each rank), not from verlprof, and must appear as one statement,
exactly, in ranks.parquet, collect's terminal and report.html; the even run blames nobody.
"""
from __future__ import annotations

import gzip
import html
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner
from verlprof.pipeline import ranks as ranks_mod
from verlprof.pipeline.cli import app
from verlprof.stages.scrub.provenance import REVIEW_NAME, read_review_map, reveal

DATA = Path(__file__).parent / "data" / "straggler_runs"
runner = CliRunner()


@pytest.fixture(scope="module")
def runs(collect_once) -> dict[str, tuple[Path, str]]:
    """scenario -> (bundle, collect's terminal output at 80 columns), collected with --html (once
    per session: tests/test_summarize_terminal.py summarizes the same bundles)."""
    out = {}
    for name in ("gen_slow", "update_slow", "even"):
        res = collect_once(DATA / name, "--html", columns=80)
        assert res.code == 0, (name, (res.stdout + res.stderr)[-3000:])
        out[name] = (res.out, res.stdout + res.stderr)
    return out


def _pseudonyms(bundle: Path) -> dict[str, str]:
    """The owner's original -> its pseudonym, from the collect's review list in WORK: the workload's
    own range names (`all_reduce`) are user-written, published as pseudonyms (issue 39)."""
    review = read_review_map(bundle.parent / "work" / REVIEW_NAME)
    return {orig: pseudo for pseudo, orig in review.items()}


def _raw(name: str) -> dict[int, dict[int, dict[str, tuple[float, float]]]]:
    """step -> rank -> range name -> (start us, duration us), main-thread annotations, plain json."""
    out: dict[int, dict[int, dict[str, tuple[float, float]]]] = {}
    for f in sorted((DATA / name).glob("*.json.gz")):
        m = re.search(r"step(\d+)_rank(\d+)-of-4", f.name)
        assert m, f
        evs = json.loads(gzip.open(f).read())["traceEvents"]
        spans = out.setdefault(int(m.group(1)), {}).setdefault(int(m.group(2)), {})
        for e in evs:
            if e.get("cat") == "user_annotation" and e.get("ph") == "X" and e["name"] not in spans:
                spans[e["name"]] = (float(e["ts"]), float(e["dur"]))
    return out


def _others_median(v: dict[int, float], r: int) -> float:
    return float(np.median([x for k, x in v.items() if k != r]))


def _expected(name: str, step: int, wait_in: str = "all-reduce") -> str:
    """The statement of one step, from the raw ranges: own time = the phase minus its all_reduce;
    the culprit is the largest own time over the others' median, above max(5% of the phase, 1 ms)
    and 5% of the step (the median `step` range); the victims wait in actor_update's all_reduce
    longer than the culprit by more than the floor. `wait_in` names that range as the bundle
    publishes it (the pseudonym of the workload's own `all_reduce`)."""
    raw = _raw(name)[step]
    best = None
    step_floor = 0.05 * float(np.median([s["step"][1] for s in raw.values()]))
    for phase in ("generate_sequences", "actor_compute_log_prob", "actor_update"):
        own = {r: s[phase][1] - (s["all_reduce"][1] if phase == "actor_update" else 0.0) for r, s in raw.items()}
        wall = [s[phase][1] for s in raw.values()]
        floor = max(0.05 * float(np.median(wall)), 1000.0, step_floor)
        for r in own:
            ex = own[r] - _others_median(own, r)
            if ex > floor and (best is None or ex > best[2]):
                best = (r, phase, ex)
    if best is None:
        return "no straggler: every rank within the noise floor (5% of the phase and 1 ms, 5% of the step)"
    who, phase, ex = best
    waits = {r: s["all_reduce"][1] - raw[who]["all_reduce"][1] for r, s in raw.items() if r != who}
    floor = max(0.05 * float(np.median([s["actor_update"][1] for s in raw.values()])), 1000.0)
    victims = sorted(r for r, w in waits.items() if w > floor)
    wait = float(np.median([waits[r] for r in victims]))
    names = ("rank " if len(victims) == 1 else "ranks ") + ", ".join(map(str, victims))
    return (f"rank {who} lost {ranks_mod.fmt_ms(ex * 1000)} in {phase}; {names} waited "
            f"{ranks_mod.fmt_ms(wait * 1000)} for it in actor_update ({wait_in})")


def _flat(text: str) -> str:
    return " ".join(text.split())


def _page_text(bundle: Path) -> str:
    return _flat(html.unescape(re.sub(r"<[^>]+>", " ", (bundle / "report.html").read_text())))


@pytest.mark.parametrize("name,culprit,phase", [("gen_slow", 2, "generate_sequences"),
                                                ("update_slow", 1, "actor_update")])
def test_culprit_and_victims_in_parquet_terminal_and_report(runs, name: str, culprit: int, phase: str) -> None:
    b, output = runs[name]
    t = pd.read_parquet(b / "summaries" / "ranks.parquet")
    cul = t[t["row_kind"] == "culprit"].set_index("step")
    assert sorted(cul.index) == sorted(_raw(name)), cul   # every profiled step has its statement
    # the wait range is the workload's own `all_reduce`: published as its pseudonym, the one the
    # owner's review list maps back to it (a name no public source writes never leaves)
    wait_in = _pseudonyms(b)["all_reduce"]
    for step in cul.index:
        want = _expected(name, int(step), wait_in)
        assert cul.loc[step, "statement"] == want, (step, cul.loc[step, "statement"], want)
        assert "all_reduce" not in cul.loc[step, "statement"]
        assert int(cul.loc[step, "rank"]) == culprit and cul.loc[step, "path"].endswith(phase)
    chosen = cul[cul["chosen"] == True]   # noqa: E712
    assert len(chosen) == 1
    statement = chosen["statement"].iloc[0]
    assert statement.startswith(f"rank {culprit} lost ")
    # the same sentence, exactly, in the terminal (wrapped at 80 columns) and the report
    assert statement in _flat(output), output[-2500:]
    assert statement in _page_text(b)
    assert f'<b class="straggler-rank">rank {culprit}</b>' in (b / "report.html").read_text()
    # every line fits; the one word allowed past it (commands/wrap.py: a path stays whole to be
    # copied) is the WORK path of the closing names line, the session's long temporary folder
    wide = [x for x in output.splitlines() if len(x) > 80]
    assert all(x.strip().rstrip(";") == str(b.parent / "work" / REVIEW_NAME) for x in wide), wide
    # the recurrence line: the same rank in every profiled step, its phase with the steps, in
    # parquet, terminal and report
    rec = t[t["row_kind"] == "recurrence"]["statement"].tolist()
    steps = ", ".join(str(s) for s in sorted(_raw(name)))
    want = f"rank {culprit} culprit in 3 of 3 profiled steps: {phase} in steps {steps}"
    assert rec == [want]
    assert want in _flat(output) and want in _page_text(b)


def test_arrival_alone_never_names_a_straggler(runs) -> None:
    """In gen_slow the culprit's late start of actor_compute_log_prob (~150 ms) is the cost of its
    generation: that phase names nobody, and no row names anybody by arrival."""
    t = pd.read_parquet(runs["gen_slow"][0] / "summaries" / "ranks.parquet")
    across = t[t["row_kind"] == "ranks"]
    logprob = across[across["path"].str.endswith("actor_compute_log_prob")]
    assert (logprob["arrival_ns"] > 100e6).all() and logprob["straggler_rank"].isna().all(), logprob.T
    assert set(across["straggler_by"]) <= {"excess", "none: every rank within the noise floor"}


def test_even_run_blames_nobody(runs) -> None:
    b, output = runs["even"]
    t = pd.read_parquet(b / "summaries" / "ranks.parquet")
    for step in _raw("even"):   # the raw ranges agree: nobody above the floor
        assert _expected("even", step).startswith("no straggler"), step
    assert t[t["row_kind"] == "culprit"]["rank"].isna().all()
    assert t[t["row_kind"] == "ranks"]["straggler_rank"].isna().all()
    assert t[t["row_kind"] == "recurrence"]["statement"].tolist() == ["no culprit in any of 3 profiled steps"]
    assert "lost" not in _flat(output) and "no straggler: every rank within the noise floor" in _flat(output)
    page = (b / "report.html").read_text()
    assert "straggler-rank" not in page and "no culprit in any of 3 profiled steps" in _page_text(b)
    merged = json.loads(gzip.open(b / "traces" / "all_ranks.trace.json.gz").read())["traceEvents"]
    assert not [e for e in merged if e.get("cat") == "verlprof.culprit"]


def test_a_larger_noise_floor_names_nobody(runs) -> None:
    """The floor is an option: at 60% of the phase, gen_slow's 150 ms of a 200 ms generation is noise."""
    ph = pd.read_parquet(runs["gen_slow"][0] / "summaries" / "phases.parquet")
    t = ranks_mod.ranks_table(ph, floor=ranks_mod.parse_noise_floor("80%,1ms")).to_pandas()
    assert t[t["row_kind"] == "culprit"]["rank"].isna().all()
    assert ranks_mod.parse_noise_floor("5%,1ms") == ranks_mod.DEFAULT_FLOOR
    with pytest.raises(ValueError):
        ranks_mod.parse_noise_floor("fast")


def test_rows_for_every_profiled_step_the_chosen_one_flagged(runs) -> None:
    for name, (b, _) in runs.items():
        t = pd.read_parquet(b / "summaries" / "ranks.parquet")
        steps = pd.read_parquet(b / "summaries" / "steps.parquet")
        chosen = int(steps[steps["chosen"]]["step"].iloc[0])
        rank_rows = t[t["row_kind"] == "rank"]
        assert set(rank_rows["step"]) == set(_raw(name)) == set(steps["step"]), name
        assert set(t[t["chosen"] == True]["step"]) == {chosen}, name   # noqa: E712
        # the per-step figures are the raw ranges' own durations (plain json), every step and rank
        raw = _raw(name)
        for r in rank_rows[rank_rows["path"].str.endswith("generate_sequences")].to_dict("records"):
            assert abs(r["wall_ns"] / 1000 - raw[int(r["step"])][int(r["rank"])]["generate_sequences"][1]) < 2, r
        # phases.parquet still holds the chosen step only
        assert set(pd.read_parquet(b / "summaries" / "phases.parquet")["step"]) == {chosen}


def test_critical_path_busy_and_idle_add_up(runs) -> None:
    b, output = runs["gen_slow"]
    t = pd.read_parquet(b / "summaries" / "ranks.parquet")
    c = t[t["row_kind"] == "critical_path"]
    assert set(c["step"]) == set(_raw("gen_slow"))
    assert ((c["busy_ns"] + c["idle_ns"]) == c["wall_ns"]).all()
    # rank 2's 350 ms generation bounds the step, not the others' wait in actor_update
    assert set(c["bound_stage"]) == {"generation"} and set(c["slowest_rank"]) == {2}
    chosen = c[c["chosen"] == True]["statement"].iloc[0]   # noqa: E712
    assert chosen in _flat(output) and chosen in _page_text(b)
    assert "Critical path of the RL step" in (b / "report.html").read_text()


def test_merged_trace_marks_culprit_and_victims(runs) -> None:
    """Plain json: one lane per rank named `<role> rank R`, the culprit's and victims' marks on
    their lanes at the start of the culprit's phase and of the victims' wait."""
    b = runs["gen_slow"][0]
    evs = json.loads(gzip.open(b / "traces" / "all_ranks.trace.json.gz").read())["traceEvents"]
    lanes = {e["pid"]: e["args"]["name"] for e in evs if e.get("name") == "process_name" and " · " not in e["args"]["name"]}
    assert sorted(lanes.values()) == [f"actor_rollout_ref rank {r}" for r in range(4)]
    marks = [e for e in evs if e.get("cat") == "verlprof.culprit"]
    by_lane = {lanes[e["pid"]]: e for e in marks}
    assert set(by_lane) == set(lanes.values())
    assert by_lane["actor_rollout_ref rank 2"]["name"].startswith("culprit: lost")
    assert all(by_lane[f"actor_rollout_ref rank {r}"]["name"] == "victim: waited for rank 2" for r in (0, 1, 3))
    ph = pd.read_parquet(b / "summaries" / "phases.parquet")
    gen = ph[(ph["rank"] == 2) & ph["path"].str.endswith("generate_sequences")]["start_ns"].iloc[0]
    assert abs(by_lane["actor_rollout_ref rank 2"]["ts"] - gen / 1000) < 1
    own = {p: o for o, p in _pseudonyms(b).items()}   # the owner reads their own path back
    ar = ph[(ph["rank"] == 0) & (ph["path"].map(lambda p: reveal(p, own))
                                 == "step > update_actor > actor_update > all_reduce")]["start_ns"].iloc[0]
    assert abs(by_lane["actor_rollout_ref rank 0"]["ts"] - ar / 1000) < 1
    labels = [e for e in evs if e.get("name") == "process_labels" and lanes.get(e["pid"]) == "actor_rollout_ref rank 2"]
    assert labels and "culprit of step" in labels[0]["args"]["labels"]


def test_summarize_keeps_every_step_and_compares_the_culprits(runs, tmp_path: Path) -> None:
    """`summarize` stacks the bundles' own ranks.parquet (every profiled step, not recomputed from
    the chosen step's phases) and its page says per run who held the step back."""
    res = runner.invoke(app, ["summarize", *(str(b) for b, _ in runs.values()), "-o", str(tmp_path / "cmp"),
                              "--work", str(tmp_path / "work"), "--html"])
    assert res.exit_code == 0, res.output[-2000:]
    stacked = pd.read_parquet(tmp_path / "cmp" / "ranks.parquet")
    page = " ".join(html.unescape(re.sub(r"<[^>]+>", " ", (tmp_path / "cmp" / "report.html").read_text())).split())
    assert "Who held the step back" in page
    for name, (b, _) in runs.items():
        own = pd.read_parquet(b / "summaries" / "ranks.parquet")
        mine = stacked[stacked["run"] == name]
        assert set(mine["step"].dropna()) == set(own["step"].dropna()) == set(_raw(name)), name
        for text in own[own["row_kind"].isin(["culprit", "recurrence"]) & (own["chosen"] != False)]["statement"]:  # noqa: E712
            assert text in page, (name, text)


def test_others_median_is_the_median_of_the_other_ranks() -> None:
    """The O(n log n) median of the others equals the plain one (ties and 2 ranks included)."""
    rng = np.random.default_rng(32)
    for n in range(2, 12):
        for _ in range(20):
            x = rng.integers(0, 5, n).astype(float) if n % 2 else rng.normal(size=n)
            want = [float(np.median(np.delete(x, i))) for i in range(n)]
            assert np.allclose(ranks_mod.others_median(x), want), x
    assert np.isnan(ranks_mod.others_median(np.array([3.0]))).all()
