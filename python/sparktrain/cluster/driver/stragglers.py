"""Which trainer's host holds the ring back: the step-time report of a job's status. Runs on the
driver.

In a synchronous ring every trainer waits for the slowest link, so step times alone cannot say
where it is: they are the same everywhere. What differs is how long each connection is busy
sending. sparktrain's engine reports, with every progress line, the share of the time since
the last one that its trainer's connection to the next rank had data in flight
(``link_busy``, from the kernel's count, see the ring's ``send_busy_seconds``). A host on a
slow link, in and out, makes two connections busy: the one it sends on and the one it
receives on (the previous rank's). So each host's score is the lesser of the two, and the
host named is the one whose score is at least :data:`RATIO` times every other host's, on a
ring busy at least :data:`MIN_BUSY` of the time (a ring that is mostly idle is held back by
nothing). With two trainers both connections touch both hosts, and no host is named.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

#: A named host's score is at least this many times every other host's.
RATIO: Final = 2.0
#: ... and its links are busy at least this share of the time.
MIN_BUSY: Final = 0.05
#: The metric the trainers report.
METRIC: Final = "link_busy"


@dataclass(frozen=True)
class Straggler:
    """The training task whose host sits on the ring's slow link."""

    task_index: int
    #: The lesser share of the time its two ring connections were busy.
    link_busy: float
    #: The largest such share among the other hosts.
    others: float

    def describe(self, role: str, host: str) -> str:
        return (
            f"{role} on {host} holds the ring back: its links were busy {self.link_busy:.0%} of the "
            f"time, the other hosts' at most {self.others:.0%} (a slow or loaded network link)"
        )


def slow_link(busy: Mapping[int, float], num_workers: int) -> Straggler | None:
    """The straggler among training tasks ``0 .. num_workers - 1`` given each one's latest
    ``link_busy`` (the share of the time its connection to the next rank was busy); None when
    no host stands out or some task has not reported yet."""
    if num_workers < 3 or any(rank not in busy for rank in range(num_workers)):
        return None
    # Host h sends on connection h (to h + 1) and receives on connection h - 1.
    scores = {h: min(busy[(h - 1) % num_workers], busy[h]) for h in range(num_workers)}
    top = max(scores, key=lambda h: scores[h])
    others = max(v for h, v in scores.items() if h != top)
    if scores[top] < MIN_BUSY or scores[top] < RATIO * others:
        return None
    return Straggler(task_index=top, link_busy=scores[top], others=others)


__all__ = ["METRIC", "MIN_BUSY", "RATIO", "Straggler", "slow_link"]
