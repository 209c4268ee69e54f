"""The step-time report's choice of the host on a slow link
(:mod:`sparktrain.cluster.driver.stragglers`), from the ``link_busy`` shares trainers report."""

from __future__ import annotations

from sparktrain.cluster.driver.stragglers import slow_link


def test_the_host_whose_links_in_and_out_are_busy_is_named() -> None:
    # Host 1 sends on connection 1 and receives on connection 0: both busy.
    found = slow_link({0: 0.9, 1: 0.8, 2: 0.1}, 3)
    assert found is not None
    assert (found.task_index, found.link_busy, found.others) == (1, 0.8, 0.1)
    assert "holds the ring back" in found.describe("worker:0", "10.0.0.2")
    # Host 0 receives on the last connection (from rank 3).
    found = slow_link({0: 0.7, 1: 0.05, 2: 0.1, 3: 0.9}, 4)
    assert found is not None
    assert found.task_index == 0


def test_no_host_is_named_when_none_stands_out() -> None:
    assert slow_link({0: 0.5, 1: 0.5, 2: 0.5}, 3) is None  # evenly busy
    assert slow_link({0: 0.03, 1: 0.03, 2: 0.0}, 3) is None  # a ring mostly idle
    assert slow_link({0: 0.9, 1: 0.9}, 3) is None  # a trainer has not reported yet
    assert slow_link({0: 0.9, 1: 0.1}, 2) is None  # two trainers: both links touch both hosts
