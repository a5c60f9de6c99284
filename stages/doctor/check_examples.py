"""Check every launch script under a folder (verl's ``examples/``) with the doctor, two ways.

Validates a shipped key tree against Hydra on real scripts: each script is read with
``read_launch_script`` and its overrides are checked (1) by Hydra composing the installed verl and
(2) by replaying Hydra's rules over the shipped tree RELEASE. Prints how many scripts were read,
how many are clean per tree, whether both ways found the same problems, and the time each took.

    git --git-dir=verl.git archive v0.9.0 examples | tar -x -C /tmp/ex090
    python -m verlprof.stages.doctor.check_examples /tmp/ex090/examples --release verl-0.9.1 --also verl-0.9.0
"""
from __future__ import annotations

import argparse
import collections
import glob
import os
import time
import warnings

from .. import doctor as D
from ..core.errors import VerlprofError


def _problems(line: D.LaunchLine, release: str | None) -> tuple[set, float]:
    words = [w.text for w in line.words if "${" not in w.text.lstrip("+~").split("=", 1)[0]]
    t0 = time.perf_counter()
    comp = D.check_launch(words, line.entrypoint, config_name=line.config_name, config_path=line.config_path,
                          release=release).composition
    return ({(p.word, p.kind) for p in comp.problems} if comp else set()), time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder")
    ap.add_argument("--release", default="verl-0.9.1", help="shipped tree compared with Hydra (the installed verl's)")
    ap.add_argument("--also", action="append", default=[], help="other shipped trees to count clean scripts for")
    ap.add_argument("--no-hydra", action="store_true", help="skip the Hydra side")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    paths = sorted(glob.glob(os.path.join(args.folder, "**", "*.sh"), recursive=True))
    lines, unread = [], []
    for p in paths:
        try:
            lines.append((p, D.read_launch_script(p)))
        except VerlprofError as e:
            unread.append(str(e))
    print(f"scripts: {len(paths)}, read: {len(lines)}, no trainer launch / unreadable: {len(unread)}")
    for release in [args.release, *args.also]:
        kinds: collections.Counter = collections.Counter()
        clean, spent = 0, 0.0
        for _, line in lines:
            probs, dt = _problems(line, release)
            spent += dt
            clean += not probs
            kinds.update(k for _, k in probs)
        print(f"{release} key tree: clean {clean}/{len(lines)}, problems {dict(kinds)}, {spent:.1f}s")
    if args.no_hydra or not D.hydra_version():
        return
    same, diff, spent, n = 0, [], 0.0, 0
    for path, line in lines:
        hydra, dt = _problems(line, None)
        tree, _ = _problems(line, args.release)
        spent += dt
        n += len(hydra)
        if hydra == tree:
            same += 1
        else:
            diff.append((os.path.relpath(path, args.folder), sorted(hydra ^ tree)[:4]))
    print(f"Hydra (installed verl {D.installed_version('verl')}): {n} problems; same as the {args.release} tree "
          f"on {same}/{len(lines)} scripts; {spent:.1f}s ({spent / max(1, len(lines)):.2f}s a script)")
    for d in diff:
        print("  differs:", d)


if __name__ == "__main__":
    main()
