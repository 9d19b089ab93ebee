"""``python3 -m iobench.agent``: the agent on this machine, serving on its standard input and output."""

from iobench.agent.serve import main

main()
