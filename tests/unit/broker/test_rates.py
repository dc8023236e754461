"""Rate counters made on first use: the same rates as counters made up front, and the shared
placeholder never written."""

from __future__ import annotations

import pytest

from velamq.broker._rates import NO_RATE, RateCounter, SubscriptionRates, own


def _untouched() -> None:
    assert (NO_RATE.messages_total, NO_RATE.bytes_total, NO_RATE.message_rate, NO_RATE.byte_rate) == (0, 0, 0.0, 0.0)


@pytest.mark.parametrize("first_use_s", [10.5, 12.0, 14.9])
def test_a_counter_made_on_first_use_rates_as_one_made_with_out(first_use_s: float) -> None:
    eager = RateCounter.since(10.0)  # what a subscription's counters were: all made on its first dispatch
    lazy = SubscriptionRates.since(10.0)
    assert lazy.redelivered is NO_RATE and lazy.expired is NO_RATE and lazy.chunks_out is NO_RATE
    eager.sample(11.0)
    lazy.sample(11.0)
    _untouched()
    if first_use_s > 11.0:  # after a sample: the next rate covers the interval since that sample
        eager.add(30, 0)
        lazy.add_redelivered(30)
    else:  # before the first sample: it covers the time since the first dispatch
        eager = RateCounter.since(10.0)
        eager.add(30, 0)
        lazy = SubscriptionRates.since(10.0)
        lazy.add_redelivered(30)
    eager.sample(16.0)
    lazy.sample(16.0)
    assert lazy.redelivered.message_rate == pytest.approx(eager.message_rate)
    assert lazy.redelivered.messages_total == 30
    assert lazy.expired is NO_RATE  # still shared: nothing expired
    _untouched()


def test_each_lazy_counter_counts_its_own() -> None:
    rates = SubscriptionRates.since(1.0)
    rates.add_expired(4)
    rates.add_chunk(100)
    rates.add_chunk(50)
    rates.out.add(3, 300)
    rates.sample(3.0)
    assert (rates.expired.messages_total, rates.expired.message_rate) == (4, pytest.approx(2.0))
    assert (rates.chunks_out.messages_total, rates.chunks_out.bytes_total) == (2, 150)
    assert rates.chunks_out.byte_rate == pytest.approx(75.0)
    assert rates.redelivered is NO_RATE
    _untouched()


def test_own_follows_its_base_schedule() -> None:
    base = RateCounter()  # never sampled: its first sample only sets the baseline, as base's does
    made = own(NO_RATE, base)
    assert made is not NO_RATE and own(made, base) is made
    made.add(10, 10)
    made.sample(5.0)
    assert made.message_rate == 0.0
    made.add(10, 10)
    made.sample(7.0)
    assert made.message_rate == pytest.approx(5.0)
