"""The running webhook under ten thousand generated requests over HTTPS (bench/fuzz_webhook.py).

The server is the real one, `kohort webhook` in its own process with certificates from
`kohort certs generate`; no cluster needed. The requests come from the bench's seeded
generator: reviews of every kind kohort routes (and a Volcano PodGroup), mutated in every way
it knows, and bodies that are no review at all.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import fuzz_webhook

SEED = 20261125
COUNT = 10_000


def test_the_generator_is_seeded_and_covers_every_kind_operation_path_and_non_review() -> None:
    cases = fuzz_webhook.generate(SEED, 2_000)
    assert [c.body for c in cases[:200]] == [c.body for c in fuzz_webhook.generate(SEED, 200)]
    assert [c.body for c in cases[:200]] != [c.body for c in fuzz_webhook.generate(SEED + 1, 200)]
    heads = {c.what.split(";")[0] for c in cases if c.well_formed}
    for kind in fuzz_webhook.KINDS:
        for operation in ("CREATE", "UPDATE", "DELETE"):
            assert f"{kind} {operation}" in heads
    assert {c.path for c in cases} == set(fuzz_webhook.PATHS)
    not_reviews = {c.what.split(" at byte")[0] for c in cases if not c.well_formed}
    assert {"empty body", "review truncated", "an array of two reviews"} <= not_reviews


async def test_10_000_generated_reviews_over_https_get_no_5xx_and_every_refusal_says_why() -> None:
    report, log = await fuzz_webhook.run(seed=SEED, count=COUNT)
    shown = "\n".join(f.describe() for f in report.failures[:5])
    assert report.requests == COUNT
    assert sum(report.sent[path] for path in fuzz_webhook.PATHS) == COUNT
    assert report.server_errors == [], shown
    assert report.denials_without_message == [], shown
    assert report.bad_answers == [], shown  # a 200 review echoing the uid, or a 400 that says why
    assert report.transport_errors == [], shown
    assert report.crashes == [], log[-4000:]  # still running, /healthz answers on both ports
    assert set(report.statuses) <= {200, 400}
    assert report.allowed > 1_000 and report.denied > 1_000 and report.statuses[400] > 500
    assert report.patched > 500
