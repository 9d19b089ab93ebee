"""iobench's own files: typed records with schema versions, the run directory, atomic writes.

The lowest floor above ``errors``: every other layer may write through it, it imports none of them.
"""
