"""`triage docs build`: write the knowledge base as a static site (HTML) or as Markdown pages."""

from __future__ import annotations

import argparse
from pathlib import Path

from triage.core.exitcodes import Exit

HELP = "the knowledge base as a static site or Markdown pages"
DESCRIPTION = (
    "build: render every entry, the index and the decision graph into --out. html (default) is a "
    "self-contained site with search that works from file:// or any static host; markdown writes .md "
    "pages with relative links plus nav snippets for MkDocs (mkdocs-nav.yml) and Sphinx/MyST "
    "(sphinx-toctree.txt)."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the command's arguments on its parser."""
    parser.add_argument("action", choices=["build"], help="what to do")
    parser.add_argument(
        "--out", required=True, type=Path, metavar="DIR", help="directory to write (new or empty)"
    )
    parser.add_argument(
        "--format", choices=["html", "markdown"], default="html", help="html (default) or markdown"
    )
    parser.add_argument(
        "--nav-prefix",
        metavar="PATH",
        help="markdown only: where the pages sit under the host site's docs dir (default: the name of --out)",
    )


def run(args: argparse.Namespace) -> int:
    """Run the command; returns its exit status."""
    from triage.kb.loader import load_kb
    from triage.site.builder import build

    result = build(load_kb(), args.out, args.format, nav_prefix=args.nav_prefix)
    pages = sum(1 for name in result.files if name.endswith((".html", ".md")))
    print(f"wrote {pages} pages ({len(result.files)} files, {result.format}) to {result.out}")
    if result.format == "html":
        print(f"open {(result.out / 'index.html').resolve().as_uri()}")
    else:
        print(
            f"nav snippets: {result.out / 'mkdocs-nav.yml'} (MkDocs), {result.out / 'sphinx-toctree.txt'} (Sphinx)"
        )
    return Exit.OK
