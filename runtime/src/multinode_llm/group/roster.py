"""The mp head's rank roster: who holds which node rank in this epoch. Pure logic, no I/O.

KServe's mp mode runs the workers as plain Deployment replicas: no rank, no master address. The
head supervisor is the one authority that hands ranks out (docs/executors.md says why it is safe):

- an epoch is one run of the head supervisor (a random id made at its start); a worker instance is
  one run of a worker supervisor (a random id it makes at its start);
- ranks 1..nnodes-1 are handed out lowest first, each at most once per epoch: a rank once given is
  never given to another instance in the same epoch, even after its holder is gone. The same
  instance asking again gets the same rank (a lost answer is retried safely);
- a holder stays a member while its heartbeats arrive within ``lease_s``; a member that leaves,
  lapses, or is replaced (a new instance from the same pod) ends the epoch: its rank cannot be
  given again, so the group cannot be whole again, and the head must restart with a new epoch.

Every method takes the time (``now``, monotonic seconds) as an argument: the tests drive the clock.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field

DEFAULT_LEASE_S = 5.0  # a worker heartbeats every second: four lost in a row are tolerated

# The roster's routes on the head's status port (POST, JSON bodies; docs/executors.md).
JOIN_PATH = "/group/join"
HEARTBEAT_PATH = "/group/heartbeat"
LEAVE_PATH = "/group/leave"


@dataclass(frozen=True)
class Member:
    rank: int
    instance: str
    pod_ip: str
    pod_name: str
    status_port: int

    def describe(self) -> str:
        """How a person finds this worker: 'rank 1 (pod x-worker-abc, 10.0.0.6)'."""
        return f"rank {self.rank} (pod {self.pod_name or '?'}, {self.pod_ip})"


@dataclass(frozen=True)
class Joined:
    """A join was granted: ``member`` holds its rank in ``epoch``."""

    epoch: str
    member: Member


@dataclass(frozen=True)
class Refused:
    """A join was refused: ``reason`` says why, naming the holders."""

    reason: str


@dataclass
class Roster:
    nnodes: int  # the head (rank 0) included
    lease_s: float = DEFAULT_LEASE_S
    epoch: str = field(default_factory=lambda: secrets.token_hex(8))
    members: dict[int, Member] = field(default_factory=dict)  # rank -> its holder
    last_seen: dict[int, float] = field(default_factory=dict)  # rank -> monotonic seconds
    ended: str | None = None  # why the epoch ended; no rank is given or kept after that

    @property
    def ranks(self) -> range:
        """The ranks workers hold (the head is rank 0)."""
        return range(1, self.nnodes)

    def join(
        self, instance: str, pod_ip: str, pod_name: str, status_port: int, now: float
    ) -> Joined | Refused:
        if self.ended is not None:
            return Refused(f"this head's group ended ({self.ended}); it is restarting")
        for member in self.members.values():
            if member.instance == instance:  # asked again (its answer was lost): the same rank
                self.last_seen[member.rank] = now
                return Joined(self.epoch, member)
        for member in self.members.values():
            if pod_name and member.pod_name == pod_name:
                # The same pod started a new worker run: the old one is gone without a word.
                self.end(f"worker {member.describe()} restarted", now)
                return Refused(
                    f"{member.describe()} restarted; the group restarts with a new epoch"
                )
        free = [rank for rank in self.ranks if rank not in self.members]
        if not free:
            holders = ", ".join(member.describe() for member in self.members.values())
            return Refused(
                f"every worker rank of {self.nnodes} nodes is held ({holders or 'no workers'}): "
                "a group has PIPELINE_PARALLEL_SIZE - 1 workers"
            )
        member = Member(free[0], instance, pod_ip, pod_name, status_port)
        self.members[member.rank] = member
        self.last_seen[member.rank] = now
        return Joined(self.epoch, member)

    def heartbeat(self, epoch: str, rank: int, instance: str, now: float) -> bool:
        """Renew a lease; False when the caller holds no rank here (it must start over)."""
        member = self.members.get(rank)
        if self.ended is not None or epoch != self.epoch or member is None:
            return False
        if member.instance != instance:
            return False
        if now - self.last_seen[rank] > self.lease_s:
            # Lapsed before the head's watch noticed: the lapse stands, the epoch is over.
            self.end(f"worker {member.describe()} sent no heartbeat for {self.lease_s:.0f} s", now)
            return False
        self.last_seen[rank] = now
        return True

    def leave(self, epoch: str, rank: int, instance: str, now: float) -> Member | None:
        """A member says it is gone: the epoch ends. None when the caller was no member."""
        member = self.members.get(rank)
        if epoch != self.epoch or member is None or member.instance != instance:
            return None
        self.end(f"worker {member.describe()} left", now)
        return member

    def end(self, reason: str, now: float) -> None:
        """End the epoch for ``reason`` (the first reason wins)."""
        del now  # the time is not kept: the reason is what the head logs
        if self.ended is None:
            self.ended = reason

    def lapsed(self, now: float) -> list[Member]:
        """Members whose last heartbeat is older than the lease."""
        return [
            member
            for rank, member in sorted(self.members.items())
            if now - self.last_seen[rank] > self.lease_s
        ]

    def fresh(self, now: float) -> list[Member]:
        """Members whose lease runs."""
        return [
            member
            for rank, member in sorted(self.members.items())
            if now - self.last_seen[rank] <= self.lease_s
        ]

    def missing_ranks(self) -> list[int]:
        return [rank for rank in self.ranks if rank not in self.members]

    def complete(self, now: float) -> bool:
        """Every worker rank held, every lease running, and the epoch not ended."""
        return self.ended is None and len(self.fresh(now)) == len(self.ranks)

    def line(self, now: float) -> str:
        """One progress line, e.g. '1/2 nodes; waiting for rank 1'."""
        nodes = f"{1 + len(self.fresh(now))}/{self.nnodes} nodes"
        missing = self.missing_ranks()
        if not missing:
            return f"{nodes}; every rank is held"
        return f"{nodes}; waiting for {_ranks(missing)}"

    def missing(self, now: float) -> str:
        """What is missing at the deadline, and who did join, so that someone can act on it."""
        joined = ", ".join(member.describe() for member in self.fresh(now)) or "none"
        return (
            f"{_ranks(self.missing_ranks())} missing of --nnodes {self.nnodes} "
            f"(PIPELINE_PARALLEL_SIZE); joined workers: {joined}"
        )


def _ranks(ranks: list[int]) -> str:
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    return "ranks " + ", ".join(str(rank) for rank in ranks)
