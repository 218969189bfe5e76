"""Branches that follow a random draw, direct or through data drawn from a clock-seeded generator.

A collective under a test that draws a random number (`if random.random() < p`) is a desync of the
ranks' generators (D19, D21 second). So is one under a test on anything such a generator chose,
where the script seeds a generator from the wall clock (`random.Random(int(time.time()))`,
`torch.manual_seed(time.time_ns())`, `default_rng(datetime.now()...)`): ranks started a second
apart (or a nanosecond) draw different streams, so a task, a branch or a batch picked from it
(`if task == "contrastive"`, the task a sampler drew) differs across ranks.
"""

from __future__ import annotations

from triage.core.hang.classify import RankState
from triage.core.hang.paths import RANDOM_DRAW


def drawn(header: str, state: RankState) -> str:
    """Why a branch `header` on `state`'s path follows a random draw ('' where it does not): its
    test draws a random number, or a file on that path seeds a generator from the clock (every
    choice drawn from it differs across ranks)."""
    if RANDOM_DRAW.search(header):
        return "its test draws a random number"
    if any(c is not None and c.clock_seeded for _, c in state.path):
        return "its test reads a choice drawn from a generator the script seeded from the clock"
    return ""
