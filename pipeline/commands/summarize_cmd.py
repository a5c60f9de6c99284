"""Placeholder: this command is being written."""
import typer


def register(app: typer.Typer) -> None:  # noqa: D103
    return None
