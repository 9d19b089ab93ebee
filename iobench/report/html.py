"""What the report and the compare page share: their templates and figures inlined as PNG."""

from __future__ import annotations

import base64
import functools
import io
from typing import TYPE_CHECKING

import jinja2

if TYPE_CHECKING:
    from matplotlib.figure import Figure

PAGE_DPI = 110
"""Resolution of the figures inlined in a page (the files beside it keep the figures' own)."""


@functools.cache
def template(name: str) -> jinja2.Template:
    """The page template ``name`` from ``iobench/report/templates``: autoescaped, strict about undefined names."""
    environment = jinja2.Environment(
        loader=jinja2.PackageLoader("iobench.report", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )
    return environment.get_template(name)


def inline_png(fig: Figure) -> str:
    """``fig`` as base64 PNG text, for an ``<img src="data:image/png;base64,...">`` of a self-contained page."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=PAGE_DPI)
    return base64.b64encode(buffer.getvalue()).decode("ascii")
