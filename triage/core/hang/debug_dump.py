"""Reading what torch.distributed.debug's server gives: its dump files and its pages.

The server (`torch.distributed.debug.start_debug_server`) runs a worker server in every rank and a
page on rank 0 (port 25999 by default). Its periodic dumps (`dump_dir=`) are text files named
after the handler and the time (`stacks_20250101_120000.txt`), one `=== Rank N: URL ===` section
per rank; `/stacks` and `/fr_trace_json` are HTML pages with one `<h2>Rank N: URL</h2>` and a
`<pre>` per rank. A rank's stack is in faulthandler's format, every thread of the process, most
recent call first. Pure: the probe reads the files and the pages.
"""

from __future__ import annotations

import html
import re

from triage.core.hang.stacks import Frame

_SECTION = re.compile(r"^=== Rank (\d+): (.*?) ===$", re.MULTILINE)
_HTML_SECTION = re.compile(
    r"<h2>Rank (\d+): ([^<]*)</h2>\s*(?:<p>Failed to fetch: status=(\d+)</p>\s*)?<pre>(.*?)</pre>",
    re.DOTALL,
)
_THREAD = re.compile(r"^(?:Current thread|Thread) 0x[0-9a-fA-F]+.*\(most recent call first\):\s*$")
_FRAME = re.compile(r'^\s+File "(.*)", line (\d+) in (.+?)\s*$')
_BOOTSTRAP = ("_bootstrap", "_bootstrap_inner")


def rank_sections(text: str) -> dict[int, tuple[str, bool]]:
    """A periodic dump's sections: rank -> (its text, whether the rank answered)."""
    found: dict[int, tuple[str, bool]] = {}
    marks = list(_SECTION.finditer(text))
    for index, mark in enumerate(marks):
        end = marks[index + 1].start() if index + 1 < len(marks) else len(text)
        body = text[mark.end() : end].strip("\n")
        answered = not re.fullmatch(r"Error: \d+\s*", body)
        found[int(mark.group(1))] = (body, answered)
    return found


def page_sections(page: str) -> dict[int, tuple[str, bool]]:
    """A server page's sections: rank -> (the text in its <pre>, whether the rank answered)."""
    found: dict[int, tuple[str, bool]] = {}
    for match in _HTML_SECTION.finditer(page):
        body = match.group(4)
        if "&lt;" in body or "&quot;" in body or "&amp;" in body:
            body = html.unescape(body)  # an autoescaping template
        found[int(match.group(1))] = (body, match.group(3) is None)
    return found


def _threads(text: str) -> list[list[Frame]]:
    threads: list[list[Frame]] = []
    for line in text.splitlines():
        if _THREAD.match(line):
            threads.append([])
            continue
        frame = _FRAME.match(line)
        if frame and threads:
            threads[-1].append(Frame(frame.group(3), frame.group(1), int(frame.group(2))))
    return threads


def main_thread(text: str) -> tuple[Frame, ...]:
    """The main thread's stack in a faulthandler dump (innermost first): the thread that was not
    started by `threading` (its outermost frame is no thread bootstrap), else the last one listed."""
    threads = [t for t in _threads(text) if t]
    for frames in threads:
        outer = frames[-1]
        if not (outer.file.endswith("threading.py") and outer.function in _BOOTSTRAP):
            return tuple(frames)
    return tuple(threads[-1]) if threads else ()
