"""Hand-built Problems that tests of several layers share."""

from solvercast.ir.problem import Machine, Problem, Role, Task


def two_group_collectives(order=True, same_group: bool = False) -> Problem:
    """Two collectives of two process groups (one comm stream each), one compute stream::

        x (50) -> ag (group 0, 100) -> w_ag ----------------> z (10)
                  rs (group 1, 100) -> w_rs -> y (60) ------^

    In the original order ag comes first, and ag waits for x; rs needs nothing. Launching rs before x
    (a cross-group reordering) lets y follow rs while ag is still running. With ``same_group`` both
    are group 0 (so a per-group order keeps ag first). ``order``: `Problem.preserve_collective_order`."""
    tasks = (Task("x", Role.COMPUTE, 50, op="mm"),
             Task("ag", Role.COMM, 100, group=0, op="all_gather"),
             Task("rs", Role.COMM, 100, group=0 if same_group else 1, op="reduce_scatter"),
             Task("w_ag", Role.WAIT, waits_for=1),
             Task("w_rs", Role.WAIT, waits_for=2),
             Task("y", Role.COMPUTE, 60, op="mm"),
             Task("z", Role.COMPUTE, 10, op="mm"))
    edges = ((0, 1), (1, 3), (2, 4), (4, 5), (3, 6), (5, 6))
    return Problem(tasks, edges, machine=Machine(comm_streams=2, sync_overhead=2), preserve_collective_order=order,
                   name="two_group_collectives" + ("_same_group" if same_group else ""))
