"""Find aux framers that would run inside themselves, before anything runs.

``framer A`` running ``aux B`` whose frame runs ``aux A`` (or any longer
ring, or ``aux me`` in an aux framer) enters A inside B inside A ... on the
first tick: the run died with "maximum recursion depth exceeded" and no
location, and ``flowcast check`` passed it.  The builder records every
aux use (plain and conditional) as an edge and asks here for rings, so the
error points at the ``aux`` line that closes one.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from flowcast.flow.spec import Where

__all__ = ["aux_cycles"]

Edge = tuple[str, str, "Where | None"]  # (framer that runs it, aux framer, where the aux is written)


def aux_cycles(edges: Iterable[Edge]) -> list[tuple[list[str], Where | None]]:
    """Each ring of aux uses once: (framer names around it, starting and ending
    at the same name; where its closing ``aux`` is written)."""
    graph: dict[str, list[tuple[str, Any]]] = {}
    for owner, aux, where in edges:
        graph.setdefault(owner, []).append((aux, where))
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    found: list[tuple[list[str], Where | None]] = []
    for root in graph:
        if state.get(root):
            continue
        # iterative depth-first search: an aux chain can be as long as the flow
        path: list[str] = [root]
        todo: list[Any] = [iter(graph.get(root, ()))]
        state[root] = 1
        while todo:
            step = next(todo[-1], None)
            if step is None:
                state[path.pop()] = 2
                todo.pop()
                continue
            aux, where = step
            mark = state.get(aux)
            if mark == 1:
                ring = path[path.index(aux):] + [aux]
                found.append((ring, where))
            elif mark is None:
                state[aux] = 1
                path.append(aux)
                todo.append(iter(graph.get(aux, ())))
    return found
