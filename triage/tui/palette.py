"""The command palette's entry provider: jump to any entry of the knowledge base by id or title."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from textual.command import DiscoveryHit, Hit, Hits, Provider

if TYPE_CHECKING:
    from triage.tui.app import TriageApp


EXACT_ID_SCORE = 1e9


class EntryCommands(Provider):
    """Every entry as a palette command: "D9  Ranks run different numbers of batches…"."""

    def _entries(self) -> list[tuple[str, str]]:
        app: TriageApp = self.app  # type: ignore[assignment]
        return [(entry.id, f"{entry.id}  {entry.title}") for entry in app.kb.entries.values()]

    async def discover(self) -> Hits:
        app: TriageApp = self.app  # type: ignore[assignment]
        for entry_id, text in self._entries():
            yield DiscoveryHit(
                text,
                partial(app.open_entry, entry_id, "Opened from the command palette."),
                help="Open this entry",
            )

    async def search(self, query: str) -> Hits:
        app: TriageApp = self.app  # type: ignore[assignment]
        from triage.core.model import normalize_id

        matcher = self.matcher(query)
        wanted = normalize_id(query.strip()) if query.strip() else ""
        for entry_id, text in self._entries():
            score = matcher.match(text)
            if wanted == entry_id:
                # An exact id comes first whatever the fuzzy scores are (they are not bounded by 1:
                # "D20" scores "D4 ... port (29500)" above "D20 ..." itself).
                score = EXACT_ID_SCORE
            if score > 0:
                yield Hit(
                    score,
                    matcher.highlight(text),
                    partial(app.open_entry, entry_id, "Opened from the command palette."),
                    help="Open this entry",
                )
