"""The soak's verdict (not marked soak: it runs in the default suite, no broker): each failure is caught."""

from __future__ import annotations

import dataclasses
from collections import Counter

from .harness import SoakConfig, SoakResult


def test_the_verdict_fails_on_loss_unexplained_duplicates_rss_or_unconfirmed():
    config = SoakConfig(url="stomp://127.0.0.1:1/", broker="x", messages=10, max_rss_growth_mb=50)
    good = SoakResult(config, confirmed=10, received=12, unique=10, rss_warm=30 << 20, rss_peak=40 << 20)
    good.duplicates.update({"redelivered": 1, "re-sent": 1})
    assert good.problems() == []
    line = good.summary()
    assert "lost 0; duplicates 2 (redelivered after a lost ack 1, re-sent after a lost receipt 1, " in line
    for change, words in [
        ({"lost": 1}, "never received"),
        ({"confirmed": 9}, "were confirmed"),
        ({"rss_peak": 90 << 20}, "RSS grew"),
    ]:
        bad = dataclasses.replace(good, **change)
        assert any(words in p for p in bad.problems()), (change, bad.problems())
    bad = dataclasses.replace(good)
    bad.duplicates = Counter({"unexplained": 1})
    assert any("neither redelivered" in p for p in bad.problems())
