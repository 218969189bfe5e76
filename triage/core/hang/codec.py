"""The JSON form of a hang picture (`triage hang --json`), and reading it back for `merge`."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from triage.core.hang.analyse import HangPicture, analyse_states
from triage.core.hang.classify import RankState
from triage.core.hang.stacks import Frame, LineContext

SCHEMA = 1


def _frame(frame: Frame | None, context: LineContext | None) -> dict[str, Any] | None:
    if frame is None:
        return None
    data: dict[str, Any] = {"file": frame.file, "line": frame.line, "function": frame.function}
    if context is not None:
        data["context"] = {
            "function": context.function,
            "code": context.code,
            "rank_condition": list(context.rank_condition) if context.rank_condition else None,
            "loop": list(context.loop) if context.loop else None,
            "jumps": [list(j) for j in context.jumps],
            "swallowed": list(context.swallowed) if context.swallowed else None,
        }
    return data


def state_json(state: RankState) -> dict[str, Any]:
    """One rank's state as JSON data."""
    return {
        "rank": state.rank,
        "pid": state.pid,
        "host": state.host,
        "state": state.kind,
        "collective": state.collective or None,
        "via": state.via or None,
        "user_frame": _frame(state.user_frame, state.context),
        "detail": state.detail or None,
        "doing": state.describe(),
        "rank_conditions": [list(c) for c in state.conditions],
        "launcher": state.launcher or None,
    }


def picture_json(picture: HangPicture, slots: int) -> dict[str, Any]:
    """A hang picture as JSON data (the `triage hang --json` schema)."""
    return {
        "schema": SCHEMA,
        "verdict": picture.verdict,
        "world_size": picture.world_size,
        "visible_slots": slots,
        "ranks": [state_json(s) for s in picture.ranks if s.kind != "exited" or s.pid],
        "missing_ranks": list(picture.missing_ranks),
        "groups": [
            {"ranks": list(g.ranks), "doing": g.state.describe(), "state": g.state.kind}
            for g in picture.groups
        ],
        "suspect_ranks": list(picture.suspect_ranks),
        "diagnoses": [{"id": d.entry, "evidence": list(d.evidence)} for d in picture.diagnoses],
        "recorded": list(picture.recorded),
        "notes": list(picture.notes),
    }


def _state_from(data: dict[str, Any]) -> RankState:
    frame_data = data.get("user_frame") or None
    frame = context = None
    if isinstance(frame_data, dict):
        frame = Frame(
            str(frame_data.get("function", "?")),
            str(frame_data.get("file", "?")),
            int(frame_data.get("line") or 0),
        )
        ctx = frame_data.get("context")
        if isinstance(ctx, dict):
            cond = ctx.get("rank_condition")
            loop = ctx.get("loop")
            caught = ctx.get("swallowed")
            context = LineContext(
                function=str(ctx.get("function", "")),
                code=str(ctx.get("code", "")),
                rank_condition=(int(cond[0]), str(cond[1]))
                if isinstance(cond, list) and len(cond) == 2
                else None,
                loop=(int(loop[0]), int(loop[1])) if isinstance(loop, list) and len(loop) == 2 else None,
                jumps=tuple(
                    (int(j[0]), str(j[1]))
                    for j in ctx.get("jumps") or []
                    if isinstance(j, list) and len(j) == 2
                ),
                swallowed=(int(caught[0]), int(caught[1]), int(caught[2]))
                if isinstance(caught, list) and len(caught) == 3
                else None,
            )
    rank = data.get("rank")
    return RankState(
        rank=rank if isinstance(rank, int) else None,
        pid=int(data.get("pid") or 0),
        host=str(data.get("host") or ""),
        kind=str(data.get("state") or "unknown"),
        collective=str(data.get("collective") or ""),
        via=str(data.get("via") or ""),
        user_frame=frame,
        context=context,
        detail=str(data.get("detail") or ""),
        conditions=tuple(
            (str(c[0]), int(c[1]), str(c[2]))
            for c in data.get("rank_conditions") or []
            if isinstance(c, list) and len(c) == 3 and isinstance(c[1], int)
        ),
        launcher=str(data.get("launcher") or ""),
    )


def merge(documents: list[dict[str, Any]]) -> tuple[HangPicture, int]:
    """One picture from several nodes' `triage hang --json` documents."""
    states: dict[tuple[str, int, int | None], RankState] = {}
    recorded: list[str] = []
    world = 0
    slots: dict[str, int] = {}
    for doc in documents:
        if doc.get("schema") != SCHEMA or not isinstance(doc.get("ranks"), list):
            raise ValueError("not the output of `triage hang --json`")
        world = max(world, int(doc.get("world_size") or 0))
        lines = doc.get("recorded")
        recorded += [f"{_host_of(doc)}: {line}" for line in lines or [] if isinstance(line, str)]
        for item in doc["ranks"]:
            if isinstance(item, dict):
                state = _state_from(item)
                states[(state.host, state.pid, state.rank)] = state
                slots[state.host] = max(slots.get(state.host, 0), int(doc.get("visible_slots") or 0))
    total = sum(slots.values())
    picture = analyse_states(list(states.values()), world or None, total)
    return replace(picture, recorded=tuple(recorded)), total


def _host_of(doc: dict[str, Any]) -> str:
    hosts = {str(r.get("host")) for r in doc.get("ranks") or [] if isinstance(r, dict) and r.get("host")}
    return ", ".join(sorted(hosts)) or "a node"
