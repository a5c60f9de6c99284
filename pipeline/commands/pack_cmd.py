"""`verlprof pack BUNDLE`: one `BUNDLE.tar.gz` of a share bundle, with a SHA256SUMS inside.

Why a command of its own: `collect --pack` packs right after collecting, but a bundle may also be
packed later (after reading it, or after `verlprof check`), so packing must not need a re-collect.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ...stages.core.errors import VerlprofError

_EPILOG = "Example: verlprof pack /tmp/verlprof-sample -o /tmp/verlprof-sample.tar.gz"


def register(app: typer.Typer) -> None:
    """Add the `pack` command to the verlprof CLI."""

    @app.command("pack", epilog=_EPILOG)
    def pack(
        bundle: Path = typer.Argument(..., metavar="BUNDLE",
                                      help="The bundle folder written by `verlprof collect -o OUT`."),
        out: Optional[Path] = typer.Option(
            None, "-o", "--out", help="Archive to write (default: BUNDLE.tar.gz beside BUNDLE)."),
        output: Optional[Path] = typer.Option(None, "--output", hidden=True,
                                              help="Old spelling of --out, kept for scripts."),
    ) -> None:
        """Pack a share bundle into BUNDLE.tar.gz (deterministic, no user names, SHA256SUMS inside)."""
        from ..pack import bundle_files, pack_bundle

        if out is not None and output is not None and out != output:
            raise VerlprofError(None, "give the archive once: -o/--out (--output is its old name)")
        from ..output_places import OutputPlace, check_output_places
        from ..pack import default_archive_path

        target = out or output
        if bundle.is_dir():   # a missing bundle: pack_bundle's own line says so first
            check_output_places(OutputPlace(target if target is not None else default_archive_path(bundle),
                                            "-o" if target is not None else "archive", inside=False))
        archive = pack_bundle(bundle, target)
        files = len(bundle_files(bundle, exclude=archive))
        size = archive.stat().st_size
        typer.echo(f"wrote {archive} ({files} files, {size / 1e6:.2f} MB)")
