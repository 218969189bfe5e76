"""The data a hang probe hands to the core: one sample of every rank's Python stack."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Frame:
    """One Python frame, innermost first in a stack."""

    function: str
    file: str
    line: int

    def where(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True)
class LineContext:
    """What the source around a user frame says (computed where the file can be read).

    `rank_condition` is the test of an enclosing `if` that depends on the rank (text and line);
    `loop` is the span of the innermost enclosing loop; `jumps` are the lines of `continue`,
    `break` or `return` statements inside that loop that sit under an `if` or an `except` (ways for
    one rank to skip the rest of an iteration).
    """

    function: str = ""
    code: str = ""
    rank_condition: tuple[int, str] | None = None
    rank_conditions: tuple[tuple[int, str], ...] = ()  # every enclosing rank test, innermost first
    loop: tuple[int, int] | None = None
    jumps: tuple[tuple[int, str], ...] = ()
    # The innermost `try` whose body holds the line and whose handler swallows the exception (no
    # `raise` in it): (the `try` line, the handler's line, the last line of the whole statement).
    # A rank that raised in that body went on past the statement, skipping the rest of the body.
    swallowed: tuple[int, int, int] | None = None
    # The `if`s and loops of the line's own function around it, outermost first, as (first line,
    # last line, header: "if predictions", "for callback in self.callbacks"): the control flow
    # a rank went through to get there.
    blocks: tuple[tuple[int, int, str], ...] = ()
    # The `if`s before the line in its own function whose body ends in a `return`, innermost first,
    # as (line, test): a rank where the test held left the function without reaching the line.
    returns: tuple[tuple[int, str], ...] = ()
    # The innermost `except` clause of the line's own function that holds the line, as (line,
    # "except RuntimeError"): only a rank that raised in its `try` runs it.
    handler: tuple[int, str] | None = None
    # The guarded `continue`s of the innermost loop, as (line, the innermost `if` test above it):
    # a rank whose test held skipped the rest of that iteration (its collectives among them).
    skips: tuple[tuple[int, str], ...] = ()
    # The innermost `try` of the line's own function whose `finally` holds the line, as (try line,
    # the `finally` body's first line, the try body's last line): a rank there left that body.
    final: tuple[int, int, int] | None = None
    # The key-value store method the line calls (`get`, `wait`, ...) on a name the source binds to a
    # c10d store (TCPStore, FileStore, PrefixStore, the default group's store): a wait for a key
    # another rank sets, issued from C++ with no Python frame under the line.
    store_call: str = ""
    # The `with` statement whose header is the line (a rank there runs its manager's `__enter__` or
    # `__exit__`), as (the `with` line, its body's first line, its body's last line), and whether
    # that body holds a `return` / `break` / `continue` (other ways than an exception to leave it).
    managed: tuple[int, int, int] | None = None
    managed_jumps: bool = False
    # The line's function is a context manager's `__exit__` that returns a true value: it
    # swallows the exception of the `with` body it closes.
    suppresses: bool = False
    # The signal the line's function is installed for (`signal.signal(signal.SIGALRM, on_budget)`):
    # it runs wherever the main thread is when the signal lands, at a different point on each rank.
    signal_handler: str = ""
    # The `if`s around the line (own function) whose test reads a running count the function keeps
    # itself (`tokens_seen += ...`): each rank's count is its own, so the ranks cross it apart.
    drifting: tuple[int, ...] = ()
    # The line's function is run by the interpreter on its own: "atexit" (registered with
    # `atexit.register`, run once the main code has ended) or "__del__" (a finalizer: `__del__` or a
    # `weakref.finalize` callback, run wherever the object's last reference goes); for a finalizer, the rank test around the place its
    # class is made (`if rank == 0: writer = Writer()`), if any.
    exit_hook: str = ""
    made_under: str = ""
    # The first lines of the loops around the line (own function) that end where an iterator
    # pulled by hand runs out (`except StopIteration: break`), and of those over an iterable that
    # never runs out (`itertools.count()`, a generator that loops `while True`): iteration.py.
    exhausting: tuple[int, ...] = ()
    endless: tuple[int, ...] = ()
    # The line's function is memoised (`@functools.lru_cache(...)`, `@cache`, `@cached_property`),
    # the decorator's text: its body, collectives and all, runs only where a call misses the cache.
    memoised: str = ""
    # The line's function is a method of a class that the source makes only under an `if` (every
    # `Cls(...)` call sits in one): that `if`'s test. Only ranks whose test held hold an instance.
    made_if: str = ""
    # The `if`s before the line in its own function whose body ends in a `raise`, innermost first,
    # as (line, test): a rank where the test held left by an exception its caller may catch.
    raises: tuple[tuple[int, str], ...] = ()
    # The innermost `with contextlib.suppress(...)` of the line's own function around it, as (the
    # `with` line, its last line): an exception in its body is swallowed there, as by a `try`.
    suppressed: tuple[int, int] | None = None
    # The `break`s / `return`s under a rank test of every loop of the line's own function around
    # it, as (the loop's first line, the jump's line, "break" / "return"): rank_exits.py.
    rank_jumps: tuple[tuple[int, int, str], ...] = ()
    # The guarded `break`s / `return`s (under any `if`) of every loop around the line, the same way.
    guarded_jumps: tuple[tuple[int, int, str], ...] = ()
    # The loops of the line's own function around it that a broad `except` leaves (`except
    # Exception: break`), as (the loop's first line, the clause's line, its header): iteration.py.
    error_exits: tuple[tuple[int, int, str], ...] = ()
    # The `if`s around the line (own function) testing `step % every` where `every` is bound there
    # from values of the rank's own (`every = EVAL_TOKENS // tokens.numel()`): periods.py.
    derived_periods: tuple[int, ...] = ()
    # Of those, the ones whose period takes the length of a value of the rank's own (`every =
    # len(loader) // 2`): the ranks' loaders differ in length (D22).
    length_periods: tuple[int, ...] = ()
    # The file seeds a random generator from the wall clock (seeds.py): the ranks' draws differ.
    clock_seeded: bool = False
    # The `try`s in the loops of the line's own function around it whose broad `except` goes on to
    # the next iteration, as (the loop's first line, the `try` line, its body's last line, the
    # clause's header): iteration.py.
    error_skips: tuple[tuple[int, int, int, str], ...] = ()


@dataclass(frozen=True)
class ThreadStack:
    """A thread of a rank other than its main thread: its name and stack (innermost first)."""

    name: str
    frames: tuple[Frame, ...]
    active: bool = False


@dataclass(frozen=True)
class RankSample:
    """A rank's process as the probe saw it: identity, main-thread stack (innermost first)."""

    pid: int
    host: str
    rank: int | None
    local_rank: int | None = None
    world_size: int | None = None
    local_world_size: int | None = None
    frames: tuple[Frame, ...] = ()
    active: bool = False  # the thread was running (not waiting) when sampled
    moving: bool = False  # two samples differed: the rank is making progress
    error: str = ""  # why the stack could not be read
    gone: bool = False  # the process exited while it was being read
    contexts: dict[str, LineContext] = field(default_factory=dict)  # "file:line" -> context
    launcher: str = ""  # what started the rank: torchrun, mp.spawn, ..., "none" (plain python), "" unknown
    master_addr: str = ""  # MASTER_ADDR in its environment
    role: str = "rank"  # "agent": a launcher read because no rank process runs yet
    worker_pid: int = 0  # the DataLoader worker the rank waits on, stuck in the user's code
    worker_frames: tuple[Frame, ...] = ()  # that worker's own frames, innermost first
    threads: tuple[ThreadStack, ...] = ()  # the process's other Python threads
    world_asked: int | None = None  # init_process_group's world_size argument, where it waits there
    rank_asked: int | None = None  # init_process_group's rank argument, where it waits there
    p2p: tuple[str, int] | None = None  # ("recv", src) / ("send", dst) where it waits in send / recv
    # The integer locals of its user frames ("file:line", name, value): the loop counters, read
    # where it waits in a collective, to tell ranks at the same line in different iterations.
    counters: tuple[tuple[str, str, int], ...] = ()


def agree(ranks: tuple[int | None, ...], one: str, many: str) -> str:
    """The verb that agrees with rank_label(ranks): `rank 2 waits`, `ranks 0, 1 wait`."""
    return many if len([r for r in ranks if r is not None]) > 1 else one


def rank_label(ranks: tuple[int | None, ...]) -> str:
    """`rank 3`, `ranks 0, 1`, or `a process` where no rank is known."""
    known = [r for r in ranks if r is not None]
    if not known:
        return "a process"
    return ("rank " if len(known) == 1 else "ranks ") + ", ".join(str(r) for r in known)
