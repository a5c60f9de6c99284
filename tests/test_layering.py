"""The layout's dependency direction, checked on the source tree (issue 17).

pipeline -> stages -> core: nothing under stages/ imports pipeline/; core/ imports nothing else of
the project; readers/ and schema.py import only core (and readers); a stage package imports readers,
schema, core, its own modules and other stages only through their package face (`..window`, never
`..window.steps`); pipeline/ reaches a stage only through its face; and there is no cycle between
stage packages. Every project import inside the package is relative.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STAGE_PKGS = {"gather", "export", "scrub", "window", "summarize", "traces", "doctor", "formats"}


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return "verlprof." + ".".join(parts)


def _resolve(here: str, is_pkg: bool, node: ast.ImportFrom) -> list[str]:
    """Absolute targets of one `from X import a, b` (a name may be a submodule)."""
    if node.level:
        base = here.split(".") if is_pkg else here.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        mod = ".".join(base + ([node.module] if node.module else []))
    else:
        mod = node.module or ""
    out = []
    for alias in node.names:
        sub = f"{mod}.{alias.name}"
        rel = sub.split(".", 1)[1].replace(".", "/") if sub.startswith("verlprof.") else ""
        if rel and ((ROOT / (rel + ".py")).exists() or (ROOT / rel / "__init__.py").exists()):
            out.append(sub)
        else:
            out.append(mod)
    return out


def _edges() -> list[tuple[str, str, str, bool]]:
    """(importer module, imported module, file:line, relative?) for every project import."""
    edges = []
    for top in ("stages", "pipeline"):
        for path in sorted((ROOT / top).rglob("*.py")):
            here = _module_name(path)
            tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
            for node in ast.walk(tree):
                where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}"
                if isinstance(node, ast.ImportFrom):
                    targets = _resolve(here, path.name == "__init__.py", node)
                    for t in targets:
                        if t == "verlprof" or t.startswith("verlprof."):
                            edges.append((here, t, where, node.level > 0))
                elif isinstance(node, ast.Import):
                    for alias in node.names:
                        if alias.name.startswith("verlprof"):
                            edges.append((here, alias.name, where, False))
    return edges


EDGES = _edges()


def _layer(mod: str) -> tuple[str, str | None]:
    """('pipeline'|'core'|'readers'|'schema'|'stage'|'stages-root', stage package or None)."""
    p = mod.split(".")
    if p[1] == "pipeline":
        return "pipeline", None
    if len(p) == 2:
        return "stages-root", None
    if p[2] == "core":
        return "core", None
    if p[2] == "readers":
        return "readers", None
    if p[2] == "schema":
        return "schema", None
    if p[2] in STAGE_PKGS:
        return "stage", p[2]
    return "unknown", None


def test_walk_finds_the_imports() -> None:
    # the walk itself must see real edges, or every rule below would pass vacuously
    assert len(EDGES) > 100
    assert any(a.startswith("verlprof.pipeline") and b.startswith("verlprof.stages.scrub") for a, b, *_ in EDGES)


def test_project_imports_are_relative() -> None:
    absolute = [w for _a, _b, w, rel in EDGES if not rel]
    assert not absolute, f"absolute verlprof imports (use relative ones): {absolute[:10]}"


@pytest.mark.parametrize("rule", ["stages-not-pipeline", "core-alone", "readers-below-stages",
                                  "stage-faces", "pipeline-uses-faces"])
def test_dependency_direction(rule: str) -> None:
    bad = []
    for a, b, where, _rel in EDGES:
        la, sa = _layer(a)
        lb, sb = _layer(b)
        if la == "unknown" or lb == "unknown":
            bad.append(f"{where}: unknown module {a} -> {b}")
        elif rule == "stages-not-pipeline" and la != "pipeline" and lb == "pipeline":
            bad.append(f"{where}: {a} -> {b}")
        elif rule == "core-alone" and la == "core" and lb != "core":
            bad.append(f"{where}: {a} -> {b}")
        elif rule == "readers-below-stages" and la in ("readers", "schema") and lb not in ("readers", "core"):
            bad.append(f"{where}: {a} -> {b}")
        elif rule == "stage-faces" and la == "stage" and lb == "stage" and sa != sb \
                and b != f"verlprof.stages.{sb}":
            bad.append(f"{where}: {a} reaches into {b} (import the face verlprof.stages.{sb})")
        elif rule == "pipeline-uses-faces" and la == "pipeline" and lb == "stage" and b != f"verlprof.stages.{sb}":
            bad.append(f"{where}: {a} reaches into {b} (import the face verlprof.stages.{sb})")
    assert not bad, "\n".join(bad)


def test_no_cycle_between_stage_packages() -> None:
    graph: dict[str, set[str]] = {s: set() for s in STAGE_PKGS}
    for a, b, _w, _r in EDGES:
        (la, sa), (lb, sb) = _layer(a), _layer(b)
        if la == lb == "stage" and sa != sb:
            graph[sa].add(sb)
    seen: dict[str, int] = {}

    def visit(n: str, path: list[str]) -> None:
        if seen.get(n) == 1:
            raise AssertionError("cycle between stages: " + " -> ".join(path + [n]))
        if seen.get(n) == 2:
            return
        seen[n] = 1
        for m in sorted(graph[n]):
            visit(m, path + [n])
        seen[n] = 2

    for n in sorted(graph):
        visit(n, [])


def test_faces_name_their_entry_points() -> None:
    # each stage package's __init__ is short and declares what it exports
    for pkg in sorted(STAGE_PKGS):
        init = ROOT / "stages" / pkg / "__init__.py"
        text = init.read_text(encoding="utf-8")
        tree = ast.parse(text)
        assert ast.get_docstring(tree), f"{init} has no docstring"
        assert "__all__" in text, f"{init} declares no __all__"
        defs = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
        assert not defs, f"{init} defines code; it should only name entry points"


def _private_imports() -> list[str]:
    """`from verlprof... import _name`: another module's private name (dunders are not private)."""
    bad = []
    for top in ("stages", "pipeline"):
        for path in sorted((ROOT / top).rglob("*.py")):
            here = _module_name(path)
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
                if not isinstance(node, ast.ImportFrom) or node.module == "__future__":
                    continue
                if not (node.level or (node.module or "").startswith("verlprof")):
                    continue
                for alias in node.names:
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        bad.append(f"{path.relative_to(ROOT)}:{node.lineno}: {here} imports {alias.name}")
    return bad


def _cycles(edges: list[tuple[str, str, str, bool]]) -> list[list[str]]:
    """Every strongly connected set of more than one module (Tarjan), each as a sorted list."""
    graph: dict[str, set[str]] = {}
    for a, b, _w, _r in edges:
        if a != b:
            graph.setdefault(a, set()).add(b)
            graph.setdefault(b, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return out


def _module_edges() -> list[tuple[str, str, str, bool]]:
    """Every import edge, imports in functions too, except a module's import of its own package
    (`from . import x` in a package's module reaches its __init__: how a package is assembled,
    not a cycle between modules)."""
    return [e for e in EDGES if not e[0].startswith(e[1] + ".")]


def test_cycle_check_finds_a_cycle() -> None:
    # the check itself must see a cycle when there is one, or the test below passes vacuously
    fake = [("verlprof.a", "verlprof.b", "a:1", True), ("verlprof.b", "verlprof.c", "b:1", True),
            ("verlprof.c", "verlprof.a", "c:1", True), ("verlprof.c", "verlprof.d", "c:2", True)]
    assert _cycles(fake) == [["verlprof.a", "verlprof.b", "verlprof.c"]]


def test_no_import_cycle_between_modules() -> None:
    cycles = _cycles(_module_edges())
    assert not cycles, "import cycles (imports inside functions included):\n" + "\n".join(
        " <-> ".join(m.removeprefix("verlprof.") for m in c) for c in cycles)


def test_no_module_imports_another_modules_private_names() -> None:
    bad = _private_imports()
    assert not bad, "\n".join(bad)


def test_collect_reads_as_the_design_card() -> None:
    """pipeline/collect.py: under 300 lines, every import at module level (pipeline/collect*.py)."""
    text = (ROOT / "pipeline" / "collect.py").read_text(encoding="utf-8")
    assert len(text.splitlines()) < 300
    for path in sorted((ROOT / "pipeline").glob("collect*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        inner = [f"{path.name}:{n.lineno}" for f in ast.walk(tree)
                 if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                 for n in ast.walk(f) if isinstance(n, (ast.Import, ast.ImportFrom))]
        assert not inner, f"imports inside functions: {inner}"


# ----------------------------------------------------------------------------------------------
# One of each (issue 43): one SQL identifier quoter, one schema probe, one SQLite header check, one
# JSON codec; no module in stages/ or pipeline/ over 600 lines
# ----------------------------------------------------------------------------------------------

SOURCES = sorted(p for top in ("stages", "pipeline") for p in (ROOT / top).rglob("*.py"))


def _grep(pattern: str) -> list[str]:
    """`file:line` of every source line of stages/ and pipeline/ matching `pattern` (a regex)."""
    rx = re.compile(pattern)
    return [f"{p.relative_to(ROOT)}:{i}" for p in SOURCES
            for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if rx.search(line)]


def _files(hits: list[str]) -> set[str]:
    return {h.rsplit(":", 1)[0] for h in hits}


def test_one_sql_identifier_quoter() -> None:
    """Identifiers from a file (table, column, schema names) are quoted by `quote_ident` alone: no
    second quoter, and no identifier pasted between double quotes unescaped (`FROM "{table}"`)."""
    assert _files(_grep(r"""replace\(\s*['"]\\?"['"]\s*,\s*['"]\\?"\\?"['"]\s*\)""")) == {
        "stages/readers/sqlite_export.py"}
    assert _grep(r"""(FROM|JOIN|INTO|TABLE|table_info\(|CAST\()\s*\\?"\{""") == []


def test_one_schema_probe() -> None:
    """Columns are probed in one place (sqlite_export.table_columns), tables listed in one place
    (sqlite_export.table_statements); nsys_sqlite.probe_tables builds on them."""
    assert _files(_grep(r"table_info")) == {"stages/readers/sqlite_export.py"}
    assert _files(_grep(r"sqlite_master WHERE type\s*=\s*'table'\s*\"\s*$|AND name NOT LIKE 'sqlite_%'")) == {
        "stages/readers/sqlite_export.py"}


def test_one_sqlite_header_check() -> None:
    """The SQLite header (magic, page size, page count) is read by sqlite_header.parse_header
    alone; others sniff with it or its SQLITE_MAGIC."""
    assert _files(_grep(r"SQLite format 3")) == {"stages/readers/sqlite_header.py"}
    assert _files(_grep(r"\[16:18\]|\[24:32\]")) == {"stages/readers/sqlite_header.py"}


def test_one_json_codec() -> None:
    """The orjson/standard-library fallback lives in readers/json_codec.py alone: no other module
    imports both (each such pair was a second fallback with its own handling of invalid UTF-8)."""
    orjson = _files(_grep(r"^\s*(import orjson|from orjson )"))
    stdlib = _files(_grep(r"^\s*(import json\b|from json )"))
    assert orjson & stdlib == {"stages/readers/json_codec.py"}


#: Modules over the 600-line limit today, each being rewritten by another branch of issue 43
#: (scrub: scrubber/check/sqlite; window: steps; pipeline: ranks). Empty this list as they land.
KNOWN_OVER_600 = {
    "stages/scrub/scrubber.py", "stages/scrub/check.py", "stages/scrub/sqlite.py",
}


def test_no_module_over_600_lines() -> None:
    """Small modules with one job each: none in stages/ or pipeline/ over 600 lines (but the known
    exceptions above, which must still be over: a module that shrank leaves the list)."""
    sizes = {str(p.relative_to(ROOT)): len(p.read_text(encoding="utf-8").splitlines()) for p in SOURCES}
    over = {name for name, n in sizes.items() if n > 600}
    assert over - KNOWN_OVER_600 == set(), {n: sizes[n] for n in over - KNOWN_OVER_600}
    assert KNOWN_OVER_600 - over == set(), "no longer over 600 lines: remove from KNOWN_OVER_600"


#: Imports inside functions, outside the CLI's lazy command bodies (pipeline/commands/), each kept
#: there on purpose: "file module" -> why. Any other import belongs at the top of its module.
LAZY_IMPORTS = {
    **{f"stages/doctor/hydra_compose.py {m}": "Hydra/OmegaConf: verl's optional config stack, only "
       "for `doctor` on a launch line" for m in (
           "hydra", "hydra.core.override_parser.overrides_parser", "hydra._internal.config_loader_impl",
           "hydra.core.global_hydra", "hydra.errors", "hydra.types", "omegaconf", "omegaconf.errors")},
    "pipeline/workers.py typer": "the CLI library, only where an option is declared: executors.py imports workers.py "
       "on every pool worker, which never parses options",
    "pipeline/ray_executor.py ray": "Ray: an optional dependency (`pip install verlprof[ray]`), ~1 s to import",
    "pipeline/ray_executor.py ray.util.scheduling_strategies": "Ray (as above)",
    "stages/gather/discover.py concurrent.futures": "on `verlprof --help`'s import path; only a gather "
                                                  "that hashes files starts threads",
    **{f"stages/summarize/write.py {m}": "pyarrow only where Parquet is written: the summary jobs "
       "(every adapter) never load it (module docstring)" for m in ("pyarrow", "pyarrow.parquet", "..schema", ".")},
    **{f"pipeline/bundle_tables.py {m}": "pandas/pyarrow.compute only in the table jobs that make "
       "ranks.parquet and report.html (module docstring; `prepare_tables` imports them ahead on purpose)"
       for m in ("pyarrow.compute", "pyarrow.parquet", ".", ".report")},
    "pipeline/batch.py .": "the whole collect engine, only for a raw run folder given to `summarize`",
    "pipeline/batch.py .report_html": "pandas and the report pages, only with `summarize --html`",
}

#: Modules another branch of issue 43 rewrites (scrub, steps, ranks): their inner imports are left
#: for that branch; empty this set as they land.
LAZY_IMPORTS_PENDING = {
    "stages/scrub/check.py", "stages/scrub/identities.py", "stages/scrub/policy.py", "stages/scrub/tasks.py",
    "stages/window/steps.py", "stages/window/torch_steps.py", "pipeline/ranks.py",
}


def test_imports_inside_functions_are_listed_with_their_reason() -> None:
    """No import inside a function in stages/ or pipeline/ but the CLI's command bodies and the
    ones listed above (each with why it is lazy); listed ones that are gone leave the list."""
    found = set()
    for path in SOURCES:
        rel = str(path.relative_to(ROOT))
        if rel.startswith("pipeline/commands/") or rel in LAZY_IMPORTS_PENDING:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for node in ast.walk(fn):
                    if isinstance(node, ast.ImportFrom):
                        found.add(f"{rel} {'.' * node.level}{node.module or ''}")
                    elif isinstance(node, ast.Import):
                        found.update(f"{rel} {alias.name}" for alias in node.names)
    assert found - set(LAZY_IMPORTS) == set(), sorted(found - set(LAZY_IMPORTS))
    assert set(LAZY_IMPORTS) - found == set(), sorted(set(LAZY_IMPORTS) - found)


# ------------------------------------------------------------------------------------------------
# A format is one folder (issue 43): nothing outside stages/formats/<kind>/ branches on a kind
# ------------------------------------------------------------------------------------------------

#: Modules outside stages/formats/ that still name a format's kind, each with why. A module leaves
#: the list when it no longer does (the test below fails until it is taken off), and no module
#: joins it without a reason here. The engine and the stages' dispatch points are on no list:
#: pipeline/collect_*.py, stages/traces/jobs.py, stages/summarize/dispatch.py, stages/gather/,
#: stages/window/identity.py, scrub/tasks.py's identities and scrubber dispatch ask the registry.
KIND_MENTIONS_ALLOWED = {
    "stages/core/model.py": "ArtifactKind: the one spelling of the built-in formats' file kinds (manifest.json's "
                            "`kind`); the folders name its members, a plugin format's file kind is a plain str",
    "stages/readers/naming.py": "verl's file-naming table: one ordered list of patterns over every built-in format "
                                "(first match wins, so it cannot be split per folder without reordering); each "
                                "format's `classify` reads it and keeps its own file kinds",
    "stages/export/nsys_export.py": "the export stage is the nsys format's converter (nsys export to SQLite): "
                                    "the nsys folder's `needs_export` sends it its files",
    "stages/summarize/torch_profile.py": "the kineto and memory formats' event-model adapter, which the folders "
                                         "point at; it stamps the rows of a memory snapshot with its own kind",
    "stages/window/torch_steps.py": "the kineto and memory formats' step readers, which the folders point at; "
                                    "they stamp the identity with their own kind",
    "stages/scrub/tasks.py": "the `scrub` command's own sniffing of any file given to it (sniff_kind, "
                             "output_name, the refusal of raw reports); being rewritten on branch provscrub",
    "stages/doctor/after_run.py": "`doctor`'s after-run check lists a run folder with its own suffix classifier "
                                  "(no gather, no header reads); to be rewired to formats.classify",
}


def _kind_words() -> tuple[set[str], set[str]]:
    """The one vocabulary (the registry's keys) and the file kinds the registered formats own."""
    from verlprof.stages.core import formats

    return set(formats.kinds()), {str(k) for f in formats.all_formats() for k in f.file_kinds}


def _kind_mentions(path: Path, kinds: set[str], file_kinds: set[str]) -> list[str]:
    """Where a module names a kind: an `ArtifactKind.<MEMBER>`, a file kind's string anywhere but
    a docstring, or a format kind's string compared with (or passed as) something called *kind*."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}

    def strings(node: ast.AST) -> set[str]:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return {node.value}
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return set().union(*(strings(e) for e in node.elts)) if node.elts else set()
        return set()

    out = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "ArtifactKind":
            out.append(f"{n.lineno}: ArtifactKind.{n.attr}")
        elif isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in file_kinds and id(n) not in docs:
            out.append(f"{n.lineno}: {n.value!r}")
        elif isinstance(n, ast.Compare) and any("kind" in ast.unparse(x) for x in (n.left, *n.comparators)):
            out += [f"{n.lineno}: compares with {sorted(hit)}" for x in (n.left, *n.comparators)
                    for hit in [strings(x) & kinds] if hit]
        elif isinstance(n, ast.keyword) and n.arg and "kind" in n.arg and strings(n.value) & kinds:
            out.append(f"{n.value.lineno}: {n.arg}={sorted(strings(n.value) & kinds)}")
    return out


def test_no_module_outside_a_format_folder_branches_on_a_kind() -> None:
    """Gather, window, summarize, traces, scrub and the engine ask the format registry; only the
    modules listed in KIND_MENTIONS_ALLOWED (each with its reason) still name a kind."""
    kinds, file_kinds = _kind_words()
    assert {"nsys", "torch", "memory"} <= kinds and "torch_trace" in file_kinds   # the scan has words to find
    found = {}
    for path in SOURCES:
        rel = str(path.relative_to(ROOT))
        if rel.startswith("stages/formats/") or rel.startswith("stages/doctor/") and rel not in KIND_MENTIONS_ALLOWED:
            continue   # doctor reads verl's *profiler config* (`tool: nsys|torch`), not input files
        hits = _kind_mentions(path, kinds, file_kinds)
        if hits:
            found[rel] = hits
    assert set(found) - set(KIND_MENTIONS_ALLOWED) == set(), {k: v[:3] for k, v in found.items()
                                                            if k not in KIND_MENTIONS_ALLOWED}
    assert set(KIND_MENTIONS_ALLOWED) - set(found) == set(), "names no kind any more: take it off the list"


def test_the_kind_scan_finds_a_branch_on_a_kind(tmp_path: Path) -> None:
    """The scan itself sees the three ways a module names a kind (else the test above could not fail)."""
    kinds, file_kinds = _kind_words()
    src = tmp_path / "m.py"
    src.write_text('"""torch_trace in a docstring is no mention."""\n'
                   'def f(a, ident):\n'
                   '    if ident.source_kind == "torch":\n        return 1\n'
                   '    return a.kind in (ArtifactKind.NSYS_REPORT, "memory_snapshot")\n', encoding="utf-8")
    assert sorted(_kind_mentions(src, kinds, file_kinds)) == [
        "3: compares with ['torch']", "5: 'memory_snapshot'", "5: ArtifactKind.NSYS_REPORT"]


def test_the_engine_and_the_dispatch_points_name_no_kind() -> None:
    """The modules that used to branch on torch-versus-nsys (issue 43's list) name no kind at all:
    not even in a string, a docstring aside."""
    kinds, file_kinds = _kind_words()
    engine = ["pipeline/collect_tasks.py", "pipeline/collect_survey.py", "pipeline/collect_publish.py",
              "pipeline/collect_manifest.py", "stages/traces/jobs.py", "stages/summarize/dispatch.py",
              "stages/gather/discover.py", "stages/gather/headers.py", "stages/window/identity.py",
              "stages/scrub/folder_plan.py", "stages/core/errors.py", "pipeline/ranks.py", "pipeline/compare.py"]
    for rel in engine:
        assert _kind_mentions(ROOT / rel, kinds, file_kinds) == [], rel


def test_the_registry_is_loaded_lazily_and_listed() -> None:
    """The registry (stages/core/formats.py) imports the built-in formats with one importlib call at
    its first lookup, so core imports nothing above it and `verlprof --help` loads no format; it is
    the one import by name outside the CLI's command loader, listed here with its reason."""
    text = (ROOT / "stages/core/formats.py").read_text(encoding="utf-8")
    assert text.count("importlib.import_module(") == 1
    assert _files(_grep(r"importlib\.import_module\(")) == {"stages/core/formats.py", "pipeline/cli.py"}
