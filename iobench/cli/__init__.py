"""The user's door: the Typer app (the only place typer and rich are imported) and its console output."""

from iobench.cli.commands import app

__all__ = ["app"]
