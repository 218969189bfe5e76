"""Loading the knowledge base: the compiled JSON when it is fresh, else the YAML sources."""

from __future__ import annotations

import os

from triage.core.errors import UserError, shown
from triage.core.files import StrPath
from triage.core.model import KnowledgeBase
from triage.kb import compiled
from triage.kb.fingerprint import COMPILED_NAME, fingerprint
from triage.kb.paths import knowledge_root


def load_kb(root: StrPath | None = None, *, use_compiled: bool = True) -> KnowledgeBase:
    """The validated knowledge base; raises UserError (one line) when the sources are invalid."""
    root = os.fspath(root) if root is not None else knowledge_root()
    if not os.path.isdir(root):
        raise UserError(f"knowledge directory not found: {shown(str(root))}")
    if use_compiled:
        data = compiled.read(os.path.join(root, COMPILED_NAME))
        if data is not None and data.get("fingerprint") == fingerprint(root):
            return compiled.from_json(data)
    return compile_sources(root)


def compile_sources(root: StrPath) -> KnowledgeBase:
    """Parse and validate the YAML, then parse the Markdown (the slow path)."""
    from pathlib import Path

    from triage.kb.sources import read_sources
    from triage.kb.validate import check

    kb, diagnostics = check(read_sources(Path(root)))
    if kb is None:
        more = f" (and {len(diagnostics) - 1} more; run `triage kb check`)" if len(diagnostics) > 1 else ""
        raise UserError(f"invalid knowledge base: {diagnostics[0].format()}{more}")
    return compiled.with_docs(kb, os.fspath(root))
