"""``python -m iobench``."""

from iobench.cli.commands import main

main()
