"""Lower bounds that see the memory budget: cut the program at a collective's launch and solve the rest
exactly (the prefix search, solvers/prefixes.py, on a relaxation).

One compute stream, collective order kept. Cut at asynchronous collective c: every task that is issued before
c's launch point in *every* order (A: the ancestors of c and of the comm tasks before it in the kept order,
those included) is replaced by one first task, the prefix, that runs A's compute work and produces every
buffer of A that a later task holds (or that is an output); the waits of the collectives in A become views
(they only release what they hold, at once); what A alone holds is left out. Memory is checked only from c's
launch on (`search_prefixes(memory_from=)`): there all of A has been issued in any schedule.

Why its optimum bounds the problem's: take any schedule, keep its order without A, the prefix first. Before
the launch, stream 0 has run all of A's compute work and the rest it issued there (X), so the prefix and X end
no later than the real launch point, and the comm streams (their collectives all in A) are free: from the
launch on every task starts no later (the placement is monotone), so the makespan is no larger. That needs
every task after the cut to start after the launch point or on c's comm stream after c: a synchronous
collective that may run on another comm stream starts when its inputs are ready, and these may be tasks of X
that the relaxation runs after the prefix (relaxations came out 14-100 ns above the optimum), so no cut
is made before one (`cuttable`). From the
launch on the bytes resident are the real ones restricted to the kept buffers, each freed no later (fewer
holders). Before it, nothing is checked. The relaxation keeps the memory-forced idle of everything after the
cut, which no bound of `bounds.py` sees: simple_fsdp 2 layers' memory-forced idle, for one, is 268.58 us
against their 262.15 (results/cut_bounds.md).

The cuts are searched from the last collective backwards: a later cut is cheaper and weaker, and the cost
grows about geometrically towards the front, so the whole walk costs about what its earliest finished cut
does. A cut whose search would not finish in what is left stops at a tenth of its lengths
(`PrefixTuning.growth_after_a_tenth`) and the walk goes on with the next one."""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import select
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass

from solvercast.ir.problem import Buffer, Problem, Role, Task
from solvercast.solvers.prefixes import search_prefixes


#: Past this many tasks no cut is tried: each cut builds a relaxation of the whole graph, and the graphs whose
#: cuts finish (one or two FSDP layers, up to 290 tasks) are far smaller; the widest search lengths grow with
#: the graph, so larger ones would spend the time and prove nothing
MAX_TASKS = 1000
#: Expansions a second the walk is counted at when the clock ends it (`cut_bound`'s ``max_expansions``, for the
#: search's own stop at a tenth of its lengths): the relaxations ran at 44,000-83,000 a second on the quiet
#: 2-core machine
CUT_EXPANSIONS_PER_SECOND = 60_000


@dataclass(frozen=True)
class CutBound:
    """What `cut_bound` proved: ``bound`` (0: nothing) from the cut at collective ``cut`` (its name);
    ``proven`` when a cut's relaxation has no schedule below ``upper`` (then ``bound`` is ``upper``)."""

    bound: int
    cut: str | None
    proven: bool
    expansions: int
    cuts_tried: int
    cuts_finished: int
    seconds: float

    def to_dict(self) -> dict:
        return {"bound": self.bound, "cut": self.cut, "proven": self.proven, "expansions": self.expansions,
                "cuts_tried": self.cuts_tried, "cuts_finished": self.cuts_finished}


def not_applicable(problem: Problem) -> str | None:
    """Why cut bounds do not apply to ``problem`` (None: they do)."""
    if problem.machine.compute_streams != 1:
        return "several compute streams"
    if problem.collective_order != "global":
        return (f"a {problem.collective_order} collective order (only the global order makes every comm task before "
                "a launch precede it)")
    if not problem.async_chain:
        return "no asynchronous collective to cut at"
    if problem.num_tasks > MAX_TASKS:
        return f"more than {MAX_TASKS} tasks"
    return None


def cuttable(problem: Problem, c: int) -> bool:
    """Whether the cut at asynchronous collective ``c`` bounds the problem: no synchronous collective after it
    (kept order) may run on a comm stream other than c's (module docstring)."""
    comm = list(problem.comm_tasks)
    stream = problem.comm_stream(c)
    return all(problem.is_async_comm(t) or set(problem.allowed_streams(t)) <= {0, stream}
               for t in comm[comm.index(c) + 1:])


def cut_relaxation(problem: Problem, c: int) -> tuple[Problem, int]:
    """The relaxation of ``problem`` cut at asynchronous collective ``c``'s launch (module docstring), and c's
    id in it: search it with ``memory_from`` that id. Raises ValueError where the cut bounds nothing
    (`cuttable`)."""
    if not cuttable(problem, c):
        raise ValueError(f"no cut at {problem.tasks[c].name}: a synchronous collective after it may run on "
                         f"another comm stream, whatever the prefix")
    n = problem.num_tasks
    comm = list(problem.comm_tasks)
    before = [False] * n  # A
    stack = list(comm[:comm.index(c) + 1])
    while stack:
        t = stack.pop()
        if not before[t]:
            before[t] = True
            stack.extend(problem.preds[t])
    before[c] = False
    released = {problem.wait_of[q] for q in problem.async_chain if before[q]}  # waits of the collectives in A
    producers = {buf.producer for buf in problem.buffers if buf.producer is not None}
    kept = [t for t in range(n) if not before[t]]
    new = {t: i + 1 for i, t in enumerate(kept)}
    work = sum(task.duration for t, task in enumerate(problem.tasks) if before[t] and task.role == Role.COMPUTE)
    tasks = [Task("prefix", Role.COMPUTE, duration=work, movable=False)]
    for t in kept:
        task = problem.tasks[t]
        if t in released:  # its collective is gone: it only releases what it holds (a view, unless it allocates)
            task = Task(task.name, Role.COMPUTE if t in producers else Role.FREE, duration=0, op=task.op)
        elif task.role == Role.WAIT:
            task = Task(task.name, Role.WAIT, waits_for=new[task.waits_for], op=task.op)
        tasks.append(task)
    # every task after the prefix, but the synchronous collectives (on c's comm stream they follow c anyway)
    edges = [(0, new[t]) for t in kept if not (problem.tasks[t].role == Role.COMM and not problem.is_async_comm(t))]
    edges += [(new[u], new[v]) for u, v in problem.edges if u in new and v in new]
    buffers = []
    for b, buf in enumerate(problem.buffers):
        users = tuple(new[u] for u in problem.buffer_users[b] if u in new)  # holders: the waits among them
        if buf.producer is None:
            if buf.freeable and not buf.is_output and problem.buffer_users[b] and not users:
                continue  # freed in A
            buffers.append(Buffer(buf.name, buf.size, None, users, is_output=buf.is_output, freeable=buf.freeable))
        elif buf.producer in new:
            buffers.append(Buffer(buf.name, buf.size, new[buf.producer], users, is_output=buf.is_output))
        elif buf.size and (buf.is_output or users):  # made in A, held after the cut: the prefix makes it
            buffers.append(Buffer(buf.name, buf.size, 0, users, is_output=buf.is_output))
    relaxed = Problem(tuple(tasks), tuple(edges), tuple(buffers), problem.machine, True,
                      f"{problem.name} cut at {problem.tasks[c].name}")
    return relaxed, new[c]


def cut_bound(problem: Problem, upper: int, max_expansions: int, *, deadline: float | None = None,
              progress: Callable[[str], None] | None = None,
              better: Callable[[CutBound], None] | None = None) -> CutBound:
    """The best bound of the cuts at ``problem``'s asynchronous collectives, last first, within
    ``max_expansions`` expansions of the prefix search in all (counted: the same answer on every run) or
    until ``deadline`` (the wall clock; what was proven by then holds). Stops as soon as a cut proves
    ``upper`` (no schedule of the relaxation ends before it: one of ``upper`` is optimal). ``better`` is
    given the walk so far whenever its bound rises."""
    started = time.perf_counter()
    why = not_applicable(problem)
    if why:
        return CutBound(0, None, False, 0, 0, 0, 0.0)
    best, best_cut, spent, tried, finished = 0, None, 0, 0, 0
    for c in reversed(problem.async_chain):
        left = max_expansions - spent
        if left <= 0 or (deadline is not None and time.perf_counter() > deadline):
            break
        if not cuttable(problem, c):
            continue
        relaxed, launch = cut_relaxation(problem, c)
        found = search_prefixes(relaxed, upper, max_expansions=left, deadline=deadline, memory_from=launch)
        spent += found.expansions
        tried += 1
        if not found.complete:
            continue
        finished += 1
        value = upper if found.order is None else found.makespan
        if value > best:
            best, best_cut = value, problem.tasks[c].name
            if progress is not None:
                progress(f"cut bound: {best / 1e3:.2f} us from the cut at {best_cut}")
            if better is not None:
                better(CutBound(best, best_cut, best >= upper, spent, tried, finished, time.perf_counter() - started))
        if best >= upper:
            break
    return CutBound(best, best_cut, best >= upper, spent, tried, finished, time.perf_counter() - started)


class BackgroundCutBound:
    """`cut_bound` in a forked process, on a core of its own, while the caller searches for schedules: the
    walk needs seconds (simple_fsdp 2 layers: 267,000 expansions, 4-6 s, to the cut that proves its optimum)
    that the schedule's search cannot spare. The schedule never depends on it (the caller's search is
    counted); the bound depends on the machine's speed, as the walk at the end of the call does.

    `start` returns None where no second core or no fork is at hand: the caller then walks in its own time.
    The child reports each better bound through a pipe; `result` reads them until one proves the caller's
    makespan, the walk ends, or its deadline passes, then ends the child."""

    def __init__(self, process, connection, deadline: float):
        self._process, self._connection, self._deadline = process, connection, deadline
        self._best = CutBound(0, None, False, 0, 0, 0, 0.0)
        self.error: str | None = None

    @classmethod
    def start(cls, problem: Problem, upper: int, deadline: float) -> BackgroundCutBound | None:
        """The walk below ``upper`` until ``deadline`` (a `time.perf_counter` reading, the same clock in
        the child), in a child process; None where it cannot run beside the caller: cuts that do not apply,
        one usable core, no fork, a daemonic process (a pool's worker may not have children), the
        environment's ``SOLVERCAST_CUT_WALK_BESIDE=0``, or a pipe or fork that fails (out of memory,
        processes or file descriptors; then none is tried again in this process)."""
        global _FORK_FAILED
        if (_FORK_FAILED or not_applicable(problem) or os.environ.get("SOLVERCAST_CUT_WALK_BESIDE", "1") == "0"
                or "fork" not in multiprocessing.get_all_start_methods() or _cores() < 2
                or multiprocessing.current_process().daemon):
            return None
        context = multiprocessing.get_context("fork")
        ends = []
        try:
            receive, send = context.Pipe(duplex=False)
            ends = [receive, send]
            _widen(send)
            expansions = int(max(0.0, deadline - time.perf_counter()) * CUT_EXPANSIONS_PER_SECOND)
            process = context.Process(target=_walk_and_report, args=(problem, upper, expansions, deadline, send),
                                      daemon=True, name="solvercast cut bound")
            with warnings.catch_warnings():  # a multi-threaded parent (torch, OR-Tools): the child runs Python only
                warnings.simplefilter("ignore", DeprecationWarning)
                process.start()
        except OSError:  # ENOMEM, EAGAIN, EMFILE: the caller walks in its own time instead, and from now on (a
            for end in ends:  # failed fork leaves multiprocessing's own four pipe ends open: no retries)
                end.close()
            _FORK_FAILED = True
            return None
        send.close()
        return cls(process, receive, deadline)

    def result(self, makespan: int, progress: Callable[[str], None] | None = None) -> CutBound:
        """The walk's best bound once it proves ``makespan`` (``proven``: no schedule is shorter), ends, or
        its deadline passes; the child is ended either way."""
        try:
            while self._best.bound < makespan:
                # past the deadline what the child has sent is still read (a caller late to read loses no proof)
                if not self._connection.poll(max(0.0, self._deadline - time.perf_counter())):
                    break
                try:
                    kind, what = self._connection.recv()
                except (EOFError, OSError):  # the child ended without a last word, or in the middle of one
                    self.stop()
                    self.error = self.error or f"the cut walk's process ended (exit code {self._process.exitcode})"
                    break
                if kind == "error":
                    self.error = what
                    break
                if what.bound > self._best.bound and progress is not None:
                    progress(f"cut bound: {what.bound / 1e3:.2f} us from the cut at {what.cut}")
                self._best = what if what.bound >= self._best.bound else self._best
                if kind == "done":
                    break
        finally:
            self.stop()
        return dataclasses.replace(self._best, proven=self._best.bound >= makespan)

    def stop(self) -> None:
        """End the child (idempotent)."""
        if self._process.is_alive():
            self._process.kill()
        self._process.join()
        self._connection.close()


#: Bytes asked of the pipe from the child (Linux; the unprivileged maximum by default): a message for every
#: cut of a graph of MAX_TASKS tasks (about 220 bytes each), so the child never finds it full before the
#: parent reads (a default pipe holds about 300: a dropped bound could be the last one a late reader gets)
PIPE_BYTES = 1 << 20


def _widen(connection) -> None:
    try:
        import fcntl  # POSIX only, as fork

        fcntl.fcntl(connection.fileno(), fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    except (ImportError, AttributeError, OSError):  # not Linux, or above pipe-max-size: the default stands
        pass


_FORK_FAILED = False  # set by a fork that failed in this process: the walk beside is not tried again


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _walk_and_report(problem: Problem, upper: int, expansions: int, deadline: float, send) -> None:
    """The child: `cut_bound`, a better bound sent to the parent whenever the pipe has room for it (the
    parent reads only when its own search is done: a full pipe must not stop the walk; a message is far below
    the page a writable pipe has free), and the last word."""

    room = select.poll()  # poll, not select: descriptors past 1024 (a training job opens many files)
    room.register(send.fileno(), select.POLLOUT)

    def better(cut: CutBound) -> None:
        if room.poll(0):
            send.send(("better", cut))

    try:
        done = cut_bound(problem, upper, expansions, deadline=deadline, better=better)
        send.send(("done", done))
    except BaseException:  # noqa: BLE001 - the parent reports it; the child must not die silently
        send.send(("error", traceback.format_exc()))
    finally:
        send.close()
