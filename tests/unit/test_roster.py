"""The mp head's rank roster: pure rules, driven with an explicit clock."""

from __future__ import annotations

import itertools

import pytest
from multinode_llm.group.roster import Joined, Refused, Roster


def _join(roster: Roster, instance: str, now: float = 0.0, pod: str = "") -> Joined | Refused:
    return roster.join(instance, f"10.0.0.{len(instance)}", pod or f"pod-{instance}", 8081, now)


def _rank(outcome: Joined | Refused) -> int:
    assert isinstance(outcome, Joined), outcome
    return outcome.member.rank


def test_ranks_go_lowest_first_and_once_per_instance() -> None:
    roster = Roster(nnodes=4)
    assert [_rank(_join(roster, name)) for name in ("a", "bb", "ccc")] == [1, 2, 3]
    assert _rank(_join(roster, "bb", now=1.0)) == 2  # asked again: the same rank
    assert roster.missing_ranks() == []
    assert roster.complete(now=1.0)


def test_a_fourth_worker_is_refused_naming_the_holders() -> None:
    roster = Roster(nnodes=3)
    _join(roster, "a")
    _join(roster, "bb")
    refused = _join(roster, "zzzz")
    assert isinstance(refused, Refused)
    assert "rank 1 (pod pod-a, 10.0.0.1), rank 2 (pod pod-bb, 10.0.0.2)" in refused.reason
    assert "PIPELINE_PARALLEL_SIZE - 1 workers" in refused.reason


def test_every_join_carries_the_epoch_and_epochs_differ_per_head_run() -> None:
    first, second = Roster(nnodes=2), Roster(nnodes=2)
    joined = _join(first, "a")
    assert isinstance(joined, Joined)
    assert joined.epoch == first.epoch
    assert first.epoch != second.epoch


def test_no_two_instances_ever_hold_one_rank_in_an_epoch() -> None:
    """Whatever order joins, leaves and lapses come in, a rank is bound to one instance."""
    events = ["join a", "join b", "join c", "leave a", "lapse", "join d", "beat b"]
    for order in itertools.permutations(events):
        holders: dict[int, str]
        roster, holders, now = Roster(nnodes=3, lease_s=5.0), {}, 0.0
        for event in order:
            verb, _, name = event.partition(" ")
            if verb == "join":
                outcome = roster.join(name, "10.0.0.1", name, 8081, now)
                if isinstance(outcome, Joined):
                    rank = outcome.member.rank
                    assert holders.setdefault(rank, name) == name, (order, rank)
            elif verb == "leave" and "a" in holders.values():
                rank = next(r for r, n in holders.items() if n == "a")
                roster.leave(roster.epoch, rank, "a", now)
            elif verb == "beat":
                for rank, holder in holders.items():
                    if roster.heartbeat(roster.epoch, rank, name, now):
                        assert holder == name, (order, rank)
                        assert roster.ended is None, (order, rank)
            else:
                now += 10.0


def test_a_heartbeat_renews_only_its_own_rank_in_its_own_epoch() -> None:
    roster = Roster(nnodes=2, lease_s=5.0)
    _join(roster, "a", now=0.0)
    assert roster.heartbeat(roster.epoch, 1, "a", now=4.0)
    assert roster.fresh(now=8.0)
    assert not roster.lapsed(now=8.0)
    assert not roster.heartbeat("another-epoch", 1, "a", now=8.0)  # the head restarted
    assert not roster.heartbeat(roster.epoch, 1, "b", now=8.0)  # not the holder
    assert not roster.heartbeat(roster.epoch, 2, "a", now=8.0)  # no such member
    assert [member.rank for member in roster.lapsed(now=9.5)] == [1]
    assert not roster.complete(now=9.5)


def test_a_heartbeat_after_the_lease_lapsed_ends_the_epoch() -> None:
    """The head may notice a lapse only at its next tick: a late heartbeat must not revive it."""
    roster = Roster(nnodes=2, lease_s=5.0)
    _join(roster, "a", now=0.0)
    assert not roster.heartbeat(roster.epoch, 1, "a", now=5.5)
    assert roster.ended == "worker rank 1 (pod pod-a, 10.0.0.1) sent no heartbeat for 5 s"


def test_a_leave_ends_the_epoch_and_its_rank_is_never_given_again() -> None:
    roster = Roster(nnodes=2)
    _join(roster, "a")
    assert roster.leave(roster.epoch, 1, "someone-else", now=1.0) is None
    member = roster.leave(roster.epoch, 1, "a", now=1.0)
    assert member is not None
    assert member.rank == 1
    assert roster.ended == "worker rank 1 (pod pod-a, 10.0.0.1) left"
    assert not roster.heartbeat(roster.epoch, 1, "a", now=1.0)
    refused = _join(roster, "bb", now=2.0)
    assert isinstance(refused, Refused)
    assert "group ended" in refused.reason
    assert not roster.complete(now=2.0)


def test_a_new_run_from_a_members_pod_ends_the_epoch_at_once() -> None:
    """A restarted worker container is a new instance from the same pod: its old run is gone."""
    roster = Roster(nnodes=2)
    _join(roster, "a", pod="worker-0")
    refused = _join(roster, "a2", pod="worker-0")
    assert isinstance(refused, Refused)
    assert roster.ended == "worker rank 1 (pod worker-0, 10.0.0.1) restarted"


def test_progress_words_name_the_missing_ranks_and_the_joined_pods() -> None:
    roster = Roster(nnodes=4)
    assert roster.line(now=0.0) == "1/4 nodes; waiting for ranks 1, 2, 3"
    _join(roster, "a", now=0.0)
    assert roster.line(now=0.0) == "2/4 nodes; waiting for ranks 2, 3"
    assert roster.missing(now=0.0) == (
        "ranks 2, 3 missing of --nnodes 4 (PIPELINE_PARALLEL_SIZE); "
        "joined workers: rank 1 (pod pod-a, 10.0.0.1)"
    )
    lone = Roster(nnodes=2)
    assert lone.missing(now=0.0).startswith("rank 1 missing of --nnodes 2")
    assert lone.missing(now=0.0).endswith("joined workers: none")


@pytest.mark.parametrize("nnodes", [1])
def test_a_one_node_group_is_complete_with_no_workers(nnodes: int) -> None:
    roster = Roster(nnodes=nnodes)
    assert roster.complete(now=0.0)
    assert isinstance(_join(roster, "a"), Refused)
