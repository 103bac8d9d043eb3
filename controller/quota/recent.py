"""Recent usage: each queue's and cohort's borrowing share, averaged over time with a half-life.

Rule: pure arithmetic on the snapshot's clock (the simulator's and the controller's `now`), so
both compute the same values.

A node's recent share is an exponentially weighted average of its weighted-share numerator
(`quota.dominant`: what it borrows above its subtree quota, per mille of its parent's pool,
before dividing by its weight). Between two cycles at t0 and t1 the node is taken to have held
the share it had at the end of the cycle at t0 (`sampled`), so

    recent(t1) = recent(t0) * f + sampled * (1 - f),   f = 2 ** (-(t1 - t0) / half_life)

which is exact for usage that changes only at cycles. A queue that borrowed a share s for a
long time has a recent share near s; one half-life after it stopped, s/2. Usage within the
queue's own quota never counts: a team using what it is owed owes nobody.
"""

from __future__ import annotations

from dataclasses import dataclass

# A recent share below this (per mille: a hundred-thousandth of the pool) is forgotten, so that
# borrowing long past (some 16 half-lives for a share of 500) no longer breaks exact ties.
FORGOTTEN = 0.01


@dataclass(frozen=True, slots=True)
class Recent:
    """A node's recent share (unweighted, per mille of its parent's pool) as of clock `at`."""

    share: float
    at: float


def kept(elapsed: float, half_life: float) -> float:
    """The fraction of a recent share still counted after `elapsed` seconds (1 with no time
    elapsed; 0 when the half-life is 0 or less: no memory)."""
    if half_life <= 0:
        return 0.0
    if elapsed <= 0:
        return 1.0
    return float(0.5 ** (elapsed / half_life))


def advanced(recent: Recent | None, sampled: float, now: float, half_life: float) -> Recent:
    """`recent` moved on to `now`, the node having held `sampled` since `recent.at` (None: no
    history, so nothing to average yet: starts from `sampled` held for no time)."""
    if recent is None:
        return Recent(0.0, now)
    if now <= recent.at:
        return recent
    f = kept(now - recent.at, half_life)
    share = recent.share * f + sampled * (1.0 - f)
    return Recent(share if share >= FORGOTTEN else 0.0, now)


def weighted(recent: Recent | None, weight: float) -> float:
    """The recent share divided by the node's weight, as fair order compares it (weight 0 or
    less: infinite once it has borrowed at all)."""
    if recent is None or recent.share <= 0:
        return 0.0
    if weight <= 0:
        return float("inf")
    return recent.share / weight
