#!/usr/bin/env python3
"""Compose every verl Hydra entrypoint config of a verl source tree and write a compact JSON key tree.

These trees are what `verlprof doctor` checks overrides against when verl or Hydra is not installed
(stages/doctor/keytrees.py); they ship as package data next to this script, one
``<release>.json.gz`` per release. Needs hydra-core 1.3 (and omegaconf) where it runs.

How to regenerate (or add a release), from the repository root:

    # the installed wheel (site-packages/verl):
    python stages/doctor/keytrees/make_keytrees.py "$(python -c 'import verl,os;print(os.path.dirname(verl.__file__))')" \
        --source "PyPI wheel verl==$(python -c 'import verl;print(verl.__version__)') (site-packages)"
    # a release from git (an export of the tag):
    git --git-dir=verl.git archive v0.8.0 verl | tar -x -C /tmp/verl-0.8.0
    python stages/doctor/keytrees/make_keytrees.py /tmp/verl-0.8.0 --source "git github.com/verl-project/verl <commit> (tag v0.8.0)"
    # verl-omni (its omni_trainer pulls pkg://verl.trainer.config: give the verl it pins):
    python stages/doctor/keytrees/make_keytrees.py /tmp/omni-v0.2.0 --config-dir verl_omni/trainer/config \
        --package verl_omni --no-experimental --verl-config /tmp/verl-pin/verl/trainer/config \
        --version verl-omni-v0.2.0 --out stages/doctor/keytrees/verl-omni-v0.2.0.json --source "..."

The shipped trees: verl 0.5.0, 0.6.1, 0.7.0, 0.7.1, 0.8.0, 0.9.0 (git tags / release commits of
github.com/verl-project/verl), 0.9.1 (the PyPI wheel) and verl-omni v0.1.0, v0.2.0 and a main
snapshot; each file's "source" says exactly which. Then run tests/test_doctor_verl.py.

Usage:
    python make_keytrees.py SRC [--version V] [--source LABEL] [--out FILE] [--no-variants] [--no-experimental]

SRC is a folder that holds verl/trainer/config (a git export, an unpacked wheel, or site-packages),
or a path directly to a .../verl/trainer/config folder.

Output (one file per release):
{
  "format": 1,
  "verl_version": "0.9.1",
  "source": "<free text: pypi wheel / git commit / site-packages path>",
  "hydra_version": "1.3.8", "omegaconf_version": "2.3.1",
  "configs": {
    "ppo_trainer": {
      "config_dir": "verl/trainer/config",      # relative to SRC
      "entrypoint": true,                        # named in some @hydra.main(config_name=...) of SRC (null: no .py in SRC)
      "overrides": [],                           # overrides used to compose this entry (variants)
      "choices": {"model_engine": "dp", "actor@actor_rollout_ref.actor": "dp_actor", ...},
      "keys": {"trainer": "dict", "trainer.logger": "list", "trainer.total_epochs": "int", ...}
    },
    "ppo_trainer[model_engine=megatron]": {...},          # config-group variants
  },
  "groups": {"model_engine": ["dp", "megatron", ...], "actor": [...], ...},   # options per config group folder
  "errors": {"<name>": "<exception text>"}                 # configs that did not compose
}

Key types: one of dict, list, str, int, float, bool, null, missing ("???"), interp (an interpolation that
cannot be resolved offline, e.g. ${oc.env:X}). Interpolations that resolve are typed by their resolved value.
Dotted keys are emitted for every dict node and every leaf; lists are leaves (their items are not listed).
The Hydra-internal `hydra` node is left out. Output is always gzip-compressed (".json.gz", mtime 0, so a
regenerated tree of the same release is byte-identical).
"""
from __future__ import annotations

import argparse
import ast
import gzip
import json
import os
import re
import sys
from pathlib import Path

import hydra
import omegaconf
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, ListConfig, OmegaConf


# ----------------------------------------------------------------------------------------------
# discovery
# ----------------------------------------------------------------------------------------------
def find_trainer_config(src: Path) -> tuple[Path, Path]:
    """Return (root, trainer_config_dir). root is the folder that holds `verl/`."""
    src = src.resolve()
    if (src / "verl" / "trainer" / "config").is_dir():
        return src, src / "verl" / "trainer" / "config"
    if src.name == "config" and src.parent.name == "trainer":
        return src.parent.parent.parent, src
    if (src / "trainer" / "config").is_dir() and src.name == "verl":  # SRC is the verl package itself
        return src.parent, src / "trainer" / "config"
    raise SystemExit(f"no verl/trainer/config under {src}")


def read_version(root: Path, package: str = "verl") -> str | None:
    vf = root / package / "version" / "version"
    if vf.is_file():
        return vf.read_text().strip()
    return None


HYDRA_MAIN_RE = re.compile(r"@hydra\.main\((?P<args>[^)]*)\)")


def hydra_entrypoints(root: Path, package: str = "verl") -> dict[tuple[str, str], list[str]] | None:
    """Scan *.py under root/verl for @hydra.main(config_path=..., config_name=...).
    Returns {(abs_config_dir, config_name): [py files]} or None when SRC holds no Python code."""
    pyfiles = list((root / package).rglob("*.py"))
    if not any(p.name != "__init__.py" and "config" not in p.parts[-2:] for p in pyfiles):
        return None
    found: dict[tuple[str, str], list[str]] = {}
    for p in pyfiles:
        try:
            text = p.read_text(errors="replace")
        except OSError:
            continue
        for m in HYDRA_MAIN_RE.finditer(text):
            kwargs = {}
            try:
                call = ast.parse("f(" + m.group("args") + ")", mode="eval").body
                for kw in call.keywords:
                    if isinstance(kw.value, ast.Constant):
                        kwargs[kw.arg] = kw.value.value
            except SyntaxError:
                continue
            cp, cn = kwargs.get("config_path"), kwargs.get("config_name")
            if not cn:
                continue
            cdir = (p.parent / cp).resolve() if cp else p.parent.resolve()
            found.setdefault((str(cdir), cn), []).append(str(p.relative_to(root)))
    return found


def candidate_configs(root: Path, trainer_cfg: Path, experimental: bool) -> list[tuple[Path, str]]:
    """Top-level yaml files of the trainer config dir (not _generated_*) plus, optionally,
    verl/experimental/**/config/*.yaml and recipe/**/config/*.yaml top-level files."""
    out = []
    for y in sorted(trainer_cfg.glob("*.yaml")):
        if not y.name.startswith("_"):
            out.append((trainer_cfg, y.stem))
    if experimental:
        for base in (root / "verl" / "experimental", root / "recipe"):
            if not base.is_dir():
                continue
            for cdir in sorted(p for p in base.rglob("config") if p.is_dir()):
                for y in sorted(cdir.glob("*.yaml")):
                    if not y.name.startswith("_"):
                        out.append((cdir, y.stem))
    return out


def group_options(cfg_dir: Path) -> dict[str, list[str]]:
    groups = {}
    for d in sorted(p for p in cfg_dir.rglob("*") if p.is_dir() and "__pycache__" not in p.parts):
        opts = sorted(y.stem for y in d.glob("*.yaml"))
        if opts:
            groups[str(d.relative_to(cfg_dir))] = opts
    return groups


# ----------------------------------------------------------------------------------------------
# flattening
# ----------------------------------------------------------------------------------------------
def _type_name(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "float"
    if isinstance(v, str):
        return "str"
    if isinstance(v, (list, tuple, ListConfig)):
        return "list"
    if isinstance(v, (dict, DictConfig)):
        return "dict"
    return type(v).__name__


def flatten(node: DictConfig, prefix: str, out: dict[str, str]) -> None:
    for key in node:
        k = str(key)
        if not prefix and k == "hydra":
            continue
        dotted = f"{prefix}.{k}" if prefix else k
        if OmegaConf.is_missing(node, key):
            out[dotted] = "missing"
            continue
        if OmegaConf.is_interpolation(node, key):
            try:
                v = node[key]  # resolves
            except Exception:  # noqa: BLE001 - any resolution failure: an offline-unresolvable interpolation
                out[dotted] = "interp"
                continue
        else:
            v = node._get_node(key)
            if not isinstance(v, (DictConfig, ListConfig)):
                v = node[key]
        if isinstance(v, DictConfig):
            if v._is_none():
                out[dotted] = "null"
                continue
            out[dotted] = "dict"
            flatten(v, dotted, out)
        else:
            out[dotted] = _type_name(v)


# ----------------------------------------------------------------------------------------------
# composition
# ----------------------------------------------------------------------------------------------
def compose_one(cfg_dir: Path, name: str, overrides: list[str], trainer_cfg: Path, repo_root: Path):
    """trainer_cfg: folder substituted for pkg://verl.trainer.config search-path entries."""
    """Compose; returns (cfg, choices). Rewrites pkg://verl.trainer.config search paths to the exported dir."""
    GlobalHydra.instance().clear()
    raw = OmegaConf.load(cfg_dir / f"{name}.yaml")
    extra = []
    sp = OmegaConf.select(raw, "hydra.searchpath", default=None)
    if sp:
        new = []
        for entry in sp:
            if str(entry).startswith("pkg://verl.trainer.config") or str(entry).startswith("pkg://verl/trainer/config"):
                new.append("file://" + str(trainer_cfg))
            elif str(entry).startswith("file://") and not os.path.isabs(str(entry)[7:]):
                # relative file:// paths are resolved by Hydra against the *current working directory*;
                # verl's experimental configs use file://verl/trainer/config, i.e. they assume CWD = repo root.
                new.append("file://" + str((repo_root / str(entry)[7:]).resolve()))
            else:
                new.append(str(entry))
        extra.append("hydra.searchpath=[" + ",".join(new) + "]")
    with initialize_config_dir(config_dir=str(cfg_dir), version_base=None):
        cfg = compose(config_name=name, overrides=extra + overrides, return_hydra_config=True)
    ch = OmegaConf.select(cfg, "hydra.runtime.choices", default=None) or {}
    choices = {str(k): (None if v is None else str(v)) for k, v in ch.items() if not str(k).startswith("hydra/")}
    return cfg, choices


def _declares_group(yaml_path: Path, group: str) -> bool:
    """True when the yaml's own defaults list selects `group` (not via `override group: ...`)."""
    try:
        raw = OmegaConf.to_container(OmegaConf.load(yaml_path), resolve=False)
    except Exception:  # noqa: BLE001 - an unreadable yaml declares nothing
        return False
    for item in raw.get("defaults", []) or []:
        if isinstance(item, dict) and group in item:
            return True
    return False


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("src")
    ap.add_argument("--version", help="verl version (default: verl/version/version of SRC)")
    ap.add_argument("--source", help="free-text provenance recorded in the JSON (default: SRC path)")
    ap.add_argument("--out", help="output path (default: keytrees/verl-<version>.json[.gz] next to this script)")
    ap.add_argument("--no-variants", action="store_true", help="do not compose model_engine=<x> variants")
    ap.add_argument("--no-experimental", action="store_true", help="skip verl/experimental/**/config and recipe/**/config")
    ap.add_argument("--config-dir", help="config folder relative to SRC when it is not verl/trainer/config "
                    "(e.g. verl_omni/trainer/config for verl-omni); SRC is then the repo root")
    ap.add_argument("--verl-config", help="folder to use for `pkg://verl.trainer.config` search paths "
                    "(default: the trainer config folder itself); needed for verl-omni's omni_trainer")
    ap.add_argument("--package", default="verl", help="python package folder scanned for @hydra.main and version "
                    "(default verl; verl_omni for verl-omni)")
    args = ap.parse_args(argv)

    if args.config_dir:
        root = Path(args.src).resolve()
        trainer_cfg = (root / args.config_dir).resolve()
    else:
        root, trainer_cfg = find_trainer_config(Path(args.src))
    verl_cfg = Path(args.verl_config).resolve() if args.verl_config else trainer_cfg
    version = args.version or read_version(root, args.package) or "unknown"
    eps = hydra_entrypoints(root, args.package)

    result = {
        "format": 1,
        "verl_version": version,
        "source": args.source or Path(args.src).resolve().name,
        "hydra_version": hydra.__version__,
        "omegaconf_version": omegaconf.__version__,
        "configs": {},
        "groups": group_options(trainer_cfg),
        "errors": {},
    }

    def rel(p: Path) -> str:
        try:
            return str(p.relative_to(root))
        except ValueError:
            return str(p)

    def record(label, cfg_dir, name, overrides):
        try:
            cfg, choices = compose_one(cfg_dir, name, overrides, verl_cfg, root)
        except Exception as e:  # noqa: BLE001
            result["errors"][label] = f"{type(e).__name__}: {e}".strip()
            return None
        keys: dict[str, str] = {}
        flatten(cfg, "", keys)
        entry = {
            "config_dir": rel(cfg_dir),
            "entrypoint": None if eps is None else any(
                Path(d) == cfg_dir.resolve() and n == name for (d, n) in eps),
            "overrides": overrides,
            "choices": choices,
            "keys": keys,
        }
        if eps:
            users = sorted({f for (d, n), fs in eps.items() if Path(d) == cfg_dir.resolve() and n == name for f in fs})
            if users:
                entry["used_by"] = users
        result["configs"][label] = entry
        return choices

    for cfg_dir, name in candidate_configs(root, trainer_cfg, not args.no_experimental):
        label = name if cfg_dir == trainer_cfg else f"{rel(cfg_dir)}/{name}"
        choices = record(label, cfg_dir, name, [])
        # model_engine variants (0.7+: ppo_trainer defaults use `${model_engine}_actor` etc.)
        if choices and not args.no_variants and cfg_dir == trainer_cfg:
            for grp in ("model_engine", "diffusion/model_engine"):
                if grp in choices and _declares_group(cfg_dir / f"{name}.yaml", grp):
                    for opt in result["groups"].get(grp, []):
                        if opt != choices[grp]:
                            record(f"{name}[{grp}={opt}]", cfg_dir, name, [f"{grp}={opt}"])

    # sanity check against verl's own pre-flattened _generated_<name>.yaml (0.5+), when present
    for gen in sorted(trainer_cfg.glob("_generated_*.yaml")):
        base = gen.stem[len("_generated_"):]
        label = base
        if label not in result["configs"]:
            # e.g. _generated_ppo_veomni_trainer.yaml == ppo_trainer composed with model_engine=veomni
            m = re.fullmatch(r"ppo_(\w+)_trainer", base) or re.fullmatch(r"diffusion_(\w+)_trainer", base)
            if m and base.startswith("ppo_"):
                label = f"ppo_trainer[model_engine={m.group(1)}]"
            elif m:
                label = f"diffusion_trainer[diffusion/model_engine={m.group(1)}_diffusion]"
            else:
                label = None
            if label not in result["configs"]:
                continue
        gkeys: dict[str, str] = {}
        flatten(OmegaConf.load(gen), "", gkeys)
        ours = result["configs"][label]["keys"]
        result["configs"][label]["generated_check"] = {
            "file": rel(gen),
            "only_in_compose": sorted(set(ours) - set(gkeys)),
            "only_in_generated": sorted(set(gkeys) - set(ours)),
        }

    text = json.dumps(result, separators=(",", ":"), sort_keys=False)
    out = args.out
    if not out:
        out = str(Path(__file__).resolve().parent / f"verl-{version}.json")
    if not out.endswith(".gz"):
        out += ".gz"
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    tmp = out + ".tmp"
    with open(tmp, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, compresslevel=9) as f:
        f.write(text.encode("utf-8"))
    os.replace(tmp, out)
    n_keys = {k: len(v["keys"]) for k, v in result["configs"].items()}
    print(f"wrote {out} ({os.path.getsize(out)} bytes) version={version}")
    for k, n in n_keys.items():
        print(f"  {k}: {n} keys")
    for k, c in result["configs"].items():
        gc = c.get("generated_check")
        if gc:
            print(f"  check {k} vs {gc['file']}: only_in_compose={len(gc['only_in_compose'])} only_in_generated={len(gc['only_in_generated'])}")
    for k, e in result["errors"].items():
        print(f"  ERROR {k}: {e.splitlines()[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
