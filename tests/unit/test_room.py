"""The arithmetic of the staging room check (multinode_llm.staging.room): what a commit still
needs and the claim size to ask for."""

from __future__ import annotations

from multinode_llm.staging.room import GIB, Room


def test_a_405b_model_on_the_default_claim_asks_for_a_size_that_holds_it() -> None:
    room = Room(total=410 * 10**9, staged=0, free=95 * GIB, capacity=100 * GIB, slack=1 << 20)
    assert not room.fits
    # 5 GiB used already + 410 GB (381.9 GiB) + the slack, rounded up to whole GiB
    assert room.size_to_ask == 387


def test_files_already_staged_are_not_needed_again() -> None:
    room = Room(total=10 * GIB, staged=8 * GIB, free=3 * GIB, capacity=20 * GIB, slack=0)
    assert room.needed == 2 * GIB
    assert room.fits


def test_a_commit_that_fills_the_volume_to_the_byte_fits() -> None:
    assert Room(total=GIB, staged=0, free=GIB, capacity=GIB, slack=0).fits
    assert not Room(total=GIB, staged=0, free=GIB - 1, capacity=GIB, slack=0).fits
