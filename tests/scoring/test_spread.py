"""The seed-spread rule every "beats" rests on (`electra.scoring.spread`) and the probe's verdict
that says it: ranges apart on three seeds a side, else no difference shown."""

from __future__ import annotations

import itertools

import pytest

from electra.probing.probe import _gains, _verdict
from electra.scoring.spread import BETTER, NONE_SHOWN, WORSE, compared, difference


def test_ranges_apart_on_three_seeds_are_a_difference_and_overlaps_are_not():
    d = difference([61.0, 62.5, 61.8], [58.0, 60.3, 59.1])
    assert d.shown == BETTER and d.gain == pytest.approx(61.8 - 59.1) and d.mark == "▲"
    assert difference([58.0, 60.3, 59.1], [61.0, 62.5, 61.8]).shown == WORSE
    # The case: +0.46 on ranges 57.68-60.78 against 58.37-60.32.
    d = difference([57.68, 59.40, 60.78], [58.37, 58.94, 60.32])
    assert d.shown == NONE_SHOWN and d.gain == pytest.approx(0.46) and d.mark == ""
    assert d.in_words() == "+0.46, within the seed spread"
    # Two seeds a side, however far apart, cannot show it (p = 1/6).
    d = difference([70.0, 71.0], [50.0, 51.0])
    assert d.shown == NONE_SHOWN and "too few seeds" in d.in_words()


def test_ranges_apart_is_the_one_sided_exact_test_at_one_in_twenty():
    """Of the orderings of six exchangeable scores, the share in which a given three all lie above
    the other three: the chance that the rule says BETTER where nothing differs."""
    orders = list(itertools.permutations(range(6)))
    apart = sum(difference(o[:3], o[3:]).shown == BETTER for o in orders)
    assert apart / len(orders) == pytest.approx(1 / 20)


def test_a_summary_without_its_seeds_shows_no_difference():
    with_seeds = {"median": 5, "min": 4, "max": 6, "per_seed": [4, 5, 6]}
    assert compared(with_seeds, {"median": 2, "per_seed": [1, 2, 3]}).shown == BETTER
    d = compared({"median": 9, "min": 9, "max": 9}, with_seeds)  # an earlier version's summary
    assert d.gain == 4 and d.shown == NONE_SHOWN and "seeds' scores not recorded" in d.in_words()


def _side(*scores):
    return {
        "median": sorted(scores)[len(scores) // 2],
        "min": min(scores),
        "max": max(scores),
        "per_seed": list(scores),
    }


def test_the_probe_says_beat_only_beyond_the_spread():
    random = {"mean": _side(58.37, 58.94, 60.32), "first": _side(57.0, 58.0, 59.0)}
    overlapping = {"mean": _side(57.68, 59.40, 60.78), "first": _side(57.5, 58.5, 59.5)}
    results = {"features": overlapping, "random_weights": random, **_gains(overlapping, random)}
    assert results["beats_random"] is False
    assert results["difference"] == {"mean": NONE_SHOWN, "first": NONE_SHOWN}
    line = _verdict(results)
    assert line.startswith("pretrained features show no difference from random weights")
    assert "mean-pooled +0.46, within the seed spread" in line
    apart = {"mean": _side(61.0, 61.5, 62.0), "first": _side(55.0, 55.5, 56.0)}
    results = {"features": apart, "random_weights": random, **_gains(apart, random)}
    assert results["beats_random"] is False  # one pooling lost
    line = _verdict(results)
    assert "beat random weights with mean-pooled and do worse than random weights with " in line
    apart["first"] = _side(60.0, 60.5, 61.0)
    results = {"features": apart, "random_weights": random, **_gains(apart, random)}
    assert results["beats_random"] is True
    assert _verdict(results).startswith("pretrained features beat random weights beyond the seed")
