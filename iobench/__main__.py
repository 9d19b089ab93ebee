"""``python -m iobench``."""

from iobench.cli import main

main()
