"""From every rank's state to the picture of the hang: groups, the odd ranks out, the entries.

The rules read like an engineer comparing eight stacks:
- ranks waiting in different collectives: a mismatch, read in mismatch.py (D21, D9, D19), or in
  hooks.py where the interpreter ordered the calls (a finalizer, an exit hook, a loop over a set).
- every rank with a thread in a collective and another waiting on a lock: a lock held across
  collectives, won by a different thread on each rank (locks.py, D19).
- some ranks in a collective, others not: the others are the stragglers; what they do names the
  entry (data loading, a wait, compute: MN3 with P7; gone: D20).
- every rank in the same collective while the group forms: a partner never arrived (P1, D2, MN2).
- every local rank in the same collective, ranks of the world missing here: look at the other
  nodes (run `triage hang --json` on each, then `triage hang merge`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from triage.core.hang.claimed import claimed_apart
from triage.core.hang.classify import JOINING, RankState, classify, in_distributed
from triage.core.hang.dispatch import set_up_apart
from triage.core.hang.drift import drifted
from triage.core.hang.errors_apart import errors_apart
from triage.core.hang.hooks import interpreter_order
from triage.core.hang.locks import lock_cycle
from triage.core.hang.mismatch import (
    GROUPS_WHY,
    POINT_TO_POINT,
    Diagnosis,
    Group,
    ints,
    mismatch,
    wait_in_new_group,
)
from triage.core.hang.p2p import p2p_apart
from triage.core.hang.p2p_skips import p2p_skipped
from triage.core.hang.record_compare import agreement, compare, state_from_record
from triage.core.hang.recorded import RankRecord
from triage.core.hang.roots import disagreed_root
from triage.core.hang.stacks import RankSample, rank_label


@dataclass(frozen=True)
class HangPicture:
    """What every rank of a hung job is doing, grouped, and the verdict."""

    ranks: tuple[RankState, ...]
    groups: tuple[Group, ...]
    suspect_ranks: tuple[int, ...]
    diagnoses: tuple[Diagnosis, ...]
    verdict: str
    world_size: int | None = None
    missing_ranks: tuple[int, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)
    recorded: tuple[str, ...] = ()  # what the job's own records (Flight Recorder, NCCL RAS) say


def _group(states: list[RankState]) -> tuple[Group, ...]:
    order: dict[tuple[str, str, str], list[RankState]] = {}
    for state in states:
        order.setdefault(state.key(), []).append(state)
    groups = [Group(tuple(s.rank for s in members), members[0]) for members in order.values()]
    groups.sort(key=lambda g: (-len(g.ranks), min((r for r in g.ranks if r is not None), default=1 << 30)))
    return tuple(groups)


# States of a rank held at an interactive prompt: under a launcher nobody answers it.
PROMPTS = frozenset({"debugger", "stdin"})
_PROMPTED = "waits at an interactive prompt (a debugger or input() left in)"


def _never_launched(waiting: list[Group], gone: Sequence[int | None] = ()) -> bool:
    """Every rank seen waits while the group forms and none was started by a launcher: a plain
    `python train.py` per rank, where a missing rank is one nobody started. Not where every rank
    `gone` lies between two ranks that run: ranks are started in a row (a shell loop, a Slurm
    task list), so one missing among them was started and is gone."""
    running = [r for g in waiting for r in g.ranks if r is not None]
    known = [r for r in gone if r is not None]
    if running and known and all(min(running) < r < max(running) for r in known):
        return False
    return all(g.state.kind == "init" and g.state.launcher == RankState.NO_LAUNCHER for g in waiting)


def _straggler(waiting: list[Group], others: list[Group]) -> tuple[list[Diagnosis], tuple[int, ...], str]:
    odd = [r for g in others for r in g.ranks]
    label = rank_label(tuple(odd))
    lines = tuple(f"{rank_label(g.ranks)} {g.state.describe()}" for g in [*others, *waiting])
    kinds = {g.state.kind for g in others}
    if kinds == {"exited"}:
        if _never_launched(waiting, odd):
            verdict = (
                f"{label} never joined: the others wait for it while the process group forms, and no "
                "launcher started this job (its WORLD_SIZE counts ranks that were never started)"
            )
            return [Diagnosis("D1", lines), Diagnosis("D20", lines)], ints(tuple(odd)), verdict
        verdict = f"{label} is gone while the others wait for it"
        return [Diagnosis("D20", lines), Diagnosis("MN3", lines)], ints(tuple(odd)), verdict
    if kinds <= PROMPTS:
        verdict = f"{label} {_PROMPTED} while the others wait in a collective"
        return [Diagnosis("P8", lines), Diagnosis("MN3", lines)], ints(tuple(odd)), verdict
    doing = {
        "data": "is stuck loading data",
        "saving": "is stuck writing a checkpoint",
        "debugger": "is stopped in a debugger",
        "stdin": "waits for input on its stdin",
        "waiting": "is stuck outside any collective",
        "computing": "is still computing",
        "outside": "has no collective in flight",
        "unknown": "could not be read",
    }
    what = " / ".join(doing.get(k, k) for k in sorted(kinds))
    verdict = f"{label} {what} while the others wait in a collective"
    return (
        [Diagnosis("MN3", lines), Diagnosis("P7", lines), Diagnosis("D20", lines)],
        ints(tuple(odd)),
        verdict,
    )


def _loopback(address: str) -> bool:
    return address.startswith("127.") or address in ("localhost", "::1", "ip6-localhost")


def visible_slots(samples: Sequence[RankSample], world: int | None) -> int:
    """How many ranks of the world run on the nodes seen. Ranks of other nodes are not missing,
    only out of sight; ranks that meet on this machine's loopback address all run on it."""
    slots = sum(n or 0 for n in {s.host: s.local_world_size for s in samples}.values())
    if samples and world and all(_loopback(s.master_addr) for s in samples):
        slots = max(slots, world)
    return slots


def analyse(samples: list[RankSample], records: Sequence[RankRecord] = ()) -> HangPicture:
    """The picture for the ranks sampled on this node, with what their Flight Recorders hold.

    A rank whose stack could not be read is described by its record where there is one; ranks
    with a record and no process seen here (dumps from another node, a job seen only through its
    dumps) are added from their records."""
    by_rank = {r.rank: r for r in records}
    states: list[RankState] = []
    read: list[RankState] = []
    for sample in samples:
        record = by_rank.get(sample.rank) if sample.rank is not None else None
        if sample.error and record is not None:
            states.append(state_from_record(record, sample.host))
        else:
            states.append(classify(sample))
            if not sample.error:
                read.append(states[-1])
    seen = {s.rank for s in samples}
    states += [state_from_record(r) for r in records if r.rank not in seen]
    world = max([0] + [s.world_size or 0 for s in samples] + [r.world_size or 0 for r in records]) or None
    asked = max((s.world_asked or 0 for s in samples), default=0)
    if world is None and asked:  # mp.spawn's ranks: the world is the script's own argument
        picture = _fewer_spawned(analyse_states(states, asked, _spawned_slots(samples, asked)), asked)
    else:
        picture = _never_started(analyse_states(states, world, visible_slots(samples, world)), asked)
    picture = disagreed_root(lock_cycle(_extra_thread(picture, samples), samples), samples)
    picture = p2p_skipped(p2p_apart(claimed_apart(picture, samples), samples), samples)
    return with_records(drifted(picture, samples), read, records)


def _spawned_slots(samples: Sequence[RankSample], world: int) -> int:
    """visible_slots for ranks whose environment does not say the world size: also the whole
    world where every rank missing lies between two ranks seen on this one host (a launcher
    numbers its ranks on a node in a row: the one missing there was started here and is gone)."""
    slots = visible_slots(samples, world)
    seen = [s.rank for s in samples if s.rank is not None]
    if slots >= world or not seen or len({s.host for s in samples}) != 1:
        return slots
    missing = set(range(world)) - set(seen)
    return world if all(min(seen) < r < max(seen) for r in missing) else slots


def _fewer_spawned(picture: HangPicture, asked: int) -> HangPicture:
    """Ranks a script started itself (mp.spawn), counted by init_process_group(world_size=asked):
    missing ranks numbered past every rank that runs were never started (D1); one missing
    between them was started and is gone (D20, as analyse_states reads it)."""
    missing, first = picture.missing_ranks, picture.diagnoses[0] if picture.diagnoses else None
    running = [s.rank for s in picture.ranks if s.rank is not None and s.kind != "exited"]
    if not missing or first is None or first.entry != "D20" or not running or min(missing) < max(running):
        return picture
    line = (
        f"init_process_group(world_size={asked}) counts {rank_label(missing)}, which nothing started "
        f"(the script started {len(running)})"
    )
    evidence = (*first.evidence, line)
    return replace(
        picture,
        verdict=f"{rank_label(missing)} never joined: {line}",
        diagnoses=(Diagnosis("D1", evidence), Diagnosis("D20", evidence), *picture.diagnoses[2:]),
    )


def _extra_thread(picture: HangPicture, samples: Sequence[RankSample]) -> HangPicture:
    """Ranks with a second collective in flight, issued from a thread of theirs while their main
    thread waits in its own, where the other ranks have no such thread: the thread's collective is
    one the others never issue (a thread started on some ranks only), so the sequences part (D21)."""
    if picture.suspect_ranks or not picture.diagnoses:
        return picture
    extra: dict[int, RankState] = {}
    for sample in samples:
        state = next((s for s in picture.ranks if s.pid == sample.pid), None)
        thread = next((t for t in sample.threads if in_distributed(t.frames)), None)
        if sample.rank is None or state is None or thread is None or state.kind != "collective":
            continue
        if "in thread" not in state.via:  # the main thread waits in a collective of its own
            alone = classify(replace(sample, frames=thread.frames, threads=()))
            extra[sample.rank] = replace(alone, via=f"in thread {thread.name!r}")
    ranks = {s.rank for s in picture.ranks if s.rank is not None}
    if not extra or len(extra) >= len(ranks):
        return picture
    odd = tuple(sorted(extra))
    first = extra[odd[0]]
    line = (
        f"{rank_label(odd)} {'has' if len(odd) == 1 else 'have'} a second collective in flight: "
        f"{first.describe()}, while the main thread waits in its own; "
        f"{rank_label(tuple(sorted(ranks - set(odd))))} never issues it"
    )
    evidence = (line, *(d for d in picture.diagnoses[0].evidence))
    return replace(
        picture,
        suspect_ranks=odd,
        verdict=f"{rank_label(odd)} issued a collective from a thread the other ranks do not run",
        diagnoses=(Diagnosis("D21", evidence), Diagnosis("D19", evidence)),
    )


def _never_started(picture: HangPicture, asked: int) -> HangPicture:
    """A group formed for `asked` ranks (init_process_group's world_size argument) that the
    launcher never started: those ranks are the missing ones, where the picture is D1."""
    world = picture.world_size or 0
    if not (0 < world < asked) or picture.suspect_ranks or not picture.diagnoses:
        return picture
    first = picture.diagnoses[0]
    if first.entry != "D1":
        return picture
    never = tuple(range(world, min(asked, world + 64)))
    line = (
        f"init_process_group(world_size={asked}) counts {rank_label(never)}, which nothing started "
        f"(the launcher started {world})"
    )
    return replace(
        picture,
        suspect_ranks=never,
        missing_ranks=never,
        verdict=f"{picture.verdict}: {line}",
        diagnoses=(replace(first, evidence=(*first.evidence, line)), *picture.diagnoses[1:]),
    )


def with_records(
    picture: HangPicture, read: Sequence[RankState], records: Sequence[RankRecord]
) -> HangPicture:
    """`picture` with the records' own reading, their agreement with the stacks, and their evidence
    added to the first diagnosis."""
    if not records:
        return picture
    findings = compare(records)
    lines = (*findings.lines, *agreement(read, records))
    diagnoses = picture.diagnoses
    if diagnoses and findings.mismatch:
        first = diagnoses[0]
        evidence = (*first.evidence, *(f"Flight Recorder: {line}" for line in findings.lines))
        diagnoses = (replace(first, evidence=evidence), *diagnoses[1:])
    suspects = picture.suspect_ranks or (findings.suspects if diagnoses else ())
    return replace(picture, diagnoses=diagnoses, suspect_ranks=suspects, recorded=(*picture.recorded, *lines))


def with_ras(picture: HangPicture, lines: Sequence[str], suspects: tuple[int, ...]) -> HangPicture:
    """`picture` with what NCCL RAS reported twice alike; RAS alone names the lagging ranks."""
    if not lines:
        return picture
    recorded = (*picture.recorded, *lines)
    if picture.ranks or not suspects:
        named = picture.suspect_ranks or (suspects if picture.diagnoses else ())
        return replace(picture, recorded=recorded, suspect_ranks=named)
    evidence = tuple(lines)
    return replace(
        picture,
        recorded=recorded,
        suspect_ranks=suspects,
        verdict=f"NCCL RAS: {rank_label(suspects)} launched fewer operations than the others and did "
        "not move between two reads",
        diagnoses=(Diagnosis("MN3", evidence), Diagnosis("P7", evidence), Diagnosis("D20", evidence)),
    )


_STUCK = {
    "data": "loading data",
    "saving": "writing a checkpoint",
    "waiting": "waiting outside any collective",
}


def _all_stuck(groups: tuple[Group, ...]) -> str:
    """`; every rank is loading data (...)`, where every rank is stuck alike outside torch.distributed."""
    kinds = {g.state.kind for g in groups}
    if len(kinds) != 1 or not kinds <= _STUCK.keys():
        return ""
    first = groups[0]
    return (
        f"; every rank is {_STUCK[kinds.pop()]} ({rank_label(first.ranks)} {first.state.describe()}): "
        "a hang in the ranks' own work, not between them"
    )


def _gone_while_others_wait(
    groups: tuple[Group, ...],
) -> tuple[tuple[int, ...], tuple[Diagnosis, ...], str] | None:
    """Ranks gone while every other rank waits outside any collective (a lock, a file, a poll):
    what they wait for is what the gone ranks were to do or release (D20), as in a collective."""
    gone = tuple(r for g in groups if g.state.kind == "exited" for r in g.ranks if r is not None)
    alive = [g for g in groups if g.state.kind != "exited"]
    if not gone or not alive or any(g.state.kind != "waiting" for g in alive):
        return None
    lines = tuple(f"{rank_label(g.ranks)} {g.state.describe()}" for g in groups)
    verdict = f"{rank_label(gone)} is gone while the others wait for it outside any collective"
    return ints(gone), (Diagnosis("D20", lines), Diagnosis("MN3", lines)), verdict


def analyse_states(found: list[RankState], world: int | None, slots: int) -> HangPicture:
    """The picture from every rank's state: `slots` ranks of the `world` were visible."""
    states = sorted(found, key=lambda s: (s.rank is None, s.rank or 0, s.host, s.pid))
    seen = {s.rank for s in states}
    missing = tuple(r for r in range(world or 0) if r not in seen)
    notes: list[str] = []
    if missing and world and slots >= world:
        states += [RankState(r, 0, "", kind="exited") for r in missing[:64]]
    elif missing:
        notes.append(
            f"{len(missing)} of {world} ranks run on other nodes: run `triage hang --json > $(hostname).json` "
            "on every node, then `triage hang merge *.json` for the whole job"
        )
        missing = ()
    groups = _group(states)
    waiting = [g for g in groups if g.state.kind in ("collective", "init")]
    others = [g for g in groups if g.state.kind not in ("collective", "init")]
    prompted = [g for g in groups if g.state.kind in PROMPTS]
    if not waiting and prompted:
        ranks = tuple(r for g in prompted for r in g.ranks)
        lines = tuple(f"{rank_label(g.ranks)} {g.state.describe()}" for g in groups)
        verdict = f"{rank_label(ranks)} {_PROMPTED}"
        return HangPicture(
            tuple(states),
            groups,
            ints(ranks),
            (Diagnosis("P8", lines), Diagnosis("P7", lines)),
            verdict,
            world,
            missing,
            tuple(notes),
        )
    gone = _gone_while_others_wait(groups)
    if not waiting and gone:
        return HangPicture(tuple(states), groups, *gone, world, missing, tuple(notes))
    if not waiting:
        verdict = (
            "the job's processes exited while triage read them: nothing is hung now"
            if states and all(s.kind == "exited" for s in states)
            else "no rank is waiting in a collective: this does not look like a distributed hang"
            + _all_stuck(groups)
        )
        return HangPicture(tuple(states), groups, (), (), verdict, world, missing, tuple(notes))
    suspects: tuple[int, ...]
    if others:
        diagnoses, suspects, verdict = _straggler(waiting, others)
    elif len(waiting) > 1:
        diagnoses, suspects, verdict = (
            interpreter_order(tuple(waiting))
            or set_up_apart(tuple(waiting))
            or errors_apart(tuple(waiting))
            or mismatch(tuple(waiting))
        )
    else:
        only = waiting[0].state
        who = (
            "every rank seen" if only.rank is not None else f"{only.launcher or 'a process'} (PID {only.pid})"
        )
        lines = (f"{who} {only.describe()}",)
        suspects = ()
        whole_world = bool(world) and slots >= (world or 0) and seen >= set(range(world or 0))
        if only.collective == "rendezvous":
            verdict = (
                f"{only.launcher or 'the launcher'} waits in its rendezvous and has started no worker: "
                "another node of the job never joined (not started, or it cannot reach this one)"
            )
            diagnoses = [Diagnosis("P1", lines), Diagnosis("D2", lines), Diagnosis("P3", lines)]
        elif only.collective == "new_group":
            verdict = f"every rank seen waits in new_group(): {GROUPS_WHY}"
            lines = (*lines, wait_in_new_group(waiting[0].ranks))
            diagnoses = [Diagnosis("D21", lines), Diagnosis("D19", lines)]
        elif only.kind == "init" and _never_launched(waiting):
            verdict = (
                "every rank waits while the process group forms, and no launcher started them: a rank "
                "the world size counts was never started (or cannot reach the master)"
            )
            diagnoses = [Diagnosis("D1", lines), Diagnosis("P1", lines), Diagnosis("D2", lines)]
        elif only.via == JOINING and whole_world:
            verdict = (
                f"all {world} ranks the launcher started wait while the process group forms: the group "
                "waits for ranks nobody started (a world_size or rank passed to init_process_group "
                "that is not the launcher's)"
            )
            diagnoses = [Diagnosis("D1", lines), Diagnosis("P1", lines), Diagnosis("E17", lines)]
        elif only.kind == "init":
            verdict = "every rank waits while the process group forms: a partner never arrived"
            diagnoses = [Diagnosis("P1", lines), Diagnosis("D2", lines), Diagnosis("MN2", lines)]
        elif whole_world and only.collective in POINT_TO_POINT:
            verdict = (
                f"all {world} ranks wait in {only.collective}() and none is missing: each waits for a "
                "message that no rank is sending (the ranks' sends and receives are out of order)"
            )
            diagnoses = [Diagnosis("D19", lines), Diagnosis("P7", lines)]
            suspects = ints(waiting[0].ranks)
        elif whole_world:
            verdict = (
                f"all {world} ranks wait in the same {only.collective}() and none is missing: the "
                "collective itself does not complete (ranks that disagree on its size or sequence, "
                "or a transport that never delivers: GPU peer-to-peer, the network interface)"
            )
            diagnoses = [Diagnosis("D19", lines), Diagnosis("E1", lines), Diagnosis("MN2", lines)]
        else:
            verdict = (
                f"every rank seen waits in {only.collective}(): the rank holding it up is not among them"
            )
            diagnoses = [Diagnosis("MN3", lines), Diagnosis("D19", lines)]
    return HangPicture(
        tuple(states), groups, suspects, tuple(diagnoses), verdict, world, missing, tuple(notes)
    )
