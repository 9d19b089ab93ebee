"""Statistics over repeats — kept for imports; the rules live in :mod:`iobench.points`."""

from __future__ import annotations

from iobench.points import SUMMARY_METRICS, over_repeats, summarize, t975

__all__ = ["SUMMARY_METRICS", "over_repeats", "summarize", "t975"]
