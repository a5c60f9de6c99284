"""Every repository path the docs name exists (issue 34: `shared/fixtures/...` and
`stages/scrub_policy.toml` were left behind by moves). README.md, docs/*.md, samples/README.md,
tests/data/README.md and bench/README.md are read; a path is a word that starts with one of the
repository's top-level folders (or `shared/`, which lives outside it); `<placeholders>`, `*` globs
and `{a,b}` alternatives are expanded, and one match is enough.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted({ROOT / "README.md", *ROOT.glob("docs/*.md"), ROOT / "samples" / "README.md",
               ROOT / "tests" / "data" / "README.md", ROOT / "bench" / "README.md"})
TOP = ("pipeline", "stages", "tests", "samples", "docs", "bench", ".ci", "shared")
# a path: a top-level folder, then path characters; it ends before a space, quote or closing mark
PATH = re.compile(r"(?<![\w./<>-])(?:\.\./)?(?:" + "|".join(re.escape(t) for t in TOP)
                  + r")/[\w.*<>{},/+-]*")


def repo_paths(text: str) -> list[str]:
    out = []
    for m in PATH.finditer(text):
        before = text[max(0, m.start() - 200):m.start()].split()
        if before and "://" in before[-1]:
            continue                                   # part of a URL
        out.append(m.group(0).rstrip(".,:;)"))
    return out


def _ignored_dirs() -> list[str]:
    """Folders .gitignore keeps out of the repository on purpose (`/bench/data/`: made by scripts)."""
    gi = ROOT / ".gitignore"
    lines = gi.read_text().splitlines() if gi.is_file() else []
    return [ln.strip("/") + "/" for ln in lines if ln.startswith("/") and ln.endswith("/")]


def exists(rel: str) -> bool:
    rel = rel.removeprefix("../")
    if any(rel.startswith(d) for d in _ignored_dirs()):
        return True                                    # generated, git-ignored (the doc says how)
    head, dot, attr = rel.rpartition(".")
    if dot and "/" not in attr and attr[:1].isalpha() and not (ROOT / rel).exists() \
            and (ROOT / f"{head}.py").is_file():
        return True                                    # `stages/core/errors.VerlprofError`: a module's name
    alts = [rel]
    m = re.search(r"\{([^{}]*)\}", rel)
    if m:
        alts = [rel[:m.start()] + a + rel[m.end():] for a in m.group(1).split(",")]
    for a in alts:
        pattern = re.sub(r"<[^<>/]*>", "*", a).rstrip("/")
        if not pattern:
            continue
        if any(ch in pattern for ch in "*?["):
            if next(iter(ROOT.glob(pattern)), None) is not None:
                return True
        elif (ROOT / pattern).exists():
            return True
    return False


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_path_a_doc_names_exists(doc: Path) -> None:
    if not doc.is_file():
        pytest.skip(f"{doc.relative_to(ROOT)} is not in this checkout")
    missing = sorted({p for p in repo_paths(doc.read_text()) if not exists(p)})
    assert missing == [], f"{doc.relative_to(ROOT)} names paths that do not exist: {missing}"


def test_the_check_finds_a_stale_path() -> None:
    text = "see `shared/fixtures/h200-torch-2.11/` and stages/scrub_policy.toml, or `stages/scrub/`."
    assert [p for p in repo_paths(text) if not exists(p)] == ["shared/fixtures/h200-torch-2.11/",
                                                              "stages/scrub_policy.toml"]
