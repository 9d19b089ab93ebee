"""A page measured in headless Chromium (Debian's ``chromium``): widths, height, images, errors.

The page is copied with two small scripts added: one at the top of ``<head>``
records every error and ``console.error`` from then on, one at the end writes
the measurements into the DOM once the page has loaded, and Chromium's
``--dump-dom`` prints that DOM. No driver, no protocol client: only the
browser and the standard library.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)
_RECORD = (
    "<script>window.__errors=[];"
    "window.addEventListener('error',function(e){window.__errors.push(String(e.message||e.type)+' '+"
    "String((e.target&&(e.target.alt||e.target.src||'')).slice(0,80)))},true);"
    "var __error=console.error;console.error=function(){"
    "window.__errors.push(Array.prototype.join.call(arguments,' '));__error.apply(console,arguments)};"
    "</script>"
)
_MEASURE = (
    "<script>window.addEventListener('load',function(){"
    "var d=document.documentElement,images=Array.prototype.slice.call(document.images);"
    "var wide=Array.prototype.slice.call(document.querySelectorAll('body *')).filter(function(e){"
    "return e.getBoundingClientRect().right>d.clientWidth+1}).map(function(e){return e.tagName});"
    "var out={scrollWidth:d.scrollWidth,clientWidth:d.clientWidth,height:d.scrollHeight,"
    "images:images.length,broken:images.filter(function(i){return !(i.complete&&i.naturalWidth>0)})"
    ".map(function(i){return i.alt}),errors:window.__errors,wide:wide.slice(0,10)};"
    "var pre=document.createElement('pre');pre.id='iobench-measure';pre.textContent=JSON.stringify(out);"
    "document.body.appendChild(pre)});</script>"
)


def chromium() -> str:
    """The browser's path; the test skips (and fails under CI) where Debian's ``chromium`` is missing."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.skip("needs Debian's chromium (make test installs it)")
    return found


def measure(page: Path, tmp_path: Path, *, width: int = 1400, height: int = 900) -> dict[str, Any]:
    """``page`` opened in a ``width`` × ``height`` window: scroll width, page height, images, errors.

    ``wide`` names elements (tag names) whose right edge passes the window's.
    """
    text = page.read_text(encoding="utf-8")
    probe = tmp_path / f"measured-{page.name}"
    probe.write_text(
        text.replace("<head>", "<head>" + _RECORD, 1).replace("</body>", _MEASURE + "</body>", 1),
        encoding="utf-8",
    )
    profile = tmp_path / "chromium-profile"
    profile.mkdir(exist_ok=True)
    done = subprocess.run(
        [
            chromium(),
            *FLAGS,
            f"--user-data-dir={profile}",
            f"--window-size={width},{height}",
            "--dump-dom",
            probe.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    found = re.search(r'<pre id="iobench-measure">([^<]*)</pre>', done.stdout)
    assert found, f"chromium printed no measurements (exit {done.returncode}): {done.stderr[-2000:]}"
    result: dict[str, Any] = json.loads(html.unescape(found.group(1)))
    return result
