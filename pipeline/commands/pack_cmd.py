"""`verlprof pack OUT`: one `OUT.tar.gz` of a share bundle, with a SHA256SUMS inside.

Why a command of its own: `collect --pack` packs right after collecting, but a bundle may also be
packed later (after reading it, or after `verlprof check`), so packing must not need a re-collect.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer


def register(app: typer.Typer) -> None:
    """Add the `pack` command to the verlprof CLI."""

    @app.command("pack")
    def pack(
        out: Path = typer.Argument(..., help="The bundle folder written by `verlprof collect -o OUT`."),
        output: Optional[Path] = typer.Option(
            None, "--output", "-o", help="Archive to write (default: OUT.tar.gz beside OUT)."),
    ) -> None:
        """Pack a share bundle into OUT.tar.gz (deterministic, no user names, SHA256SUMS inside)."""
        from ..pack import bundle_files, pack_bundle

        archive = pack_bundle(out, output)
        files = len(bundle_files(out, exclude=archive))
        size = archive.stat().st_size
        typer.echo(f"wrote {archive} ({files} files, {size / 1e6:.2f} MB)")
