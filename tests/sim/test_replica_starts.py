"""A Ray node's worker-process start queue in virtual time, and its fit to measured starts."""

from __future__ import annotations

import pytest

from sim.replica_starts import MeasuredStart, ProcessStarts, fit_process_starts, predicted_overheads


def test_processes_start_a_few_at_a_time_in_the_order_asked():
    queue = ProcessStarts(concurrency=2, process_s=3.0, after_s=1.0)

    ready = [queue.process_ready_s(10.0) for _ in range(5)]

    # Two slots: pairs every 3 s, each process then 1 s more outside the queue.
    assert ready == [14.0, 14.0, 17.0, 17.0, 20.0]
    # A start asked for once the slots are free again waits for none.
    assert queue.process_ready_s(30.0) == 34.0


def test_a_start_asked_while_others_run_waits_for_the_first_free_slot():
    queue = ProcessStarts(concurrency=2, process_s=4.0)
    queue.process_ready_s(0.0)  # slot A busy until 4
    queue.process_ready_s(3.0)  # slot B busy until 7

    assert queue.process_ready_s(3.5) == 8.0  # slot A, free at 4


def test_invalid_queues_are_refused():
    with pytest.raises(ValueError, match="concurrency"):
        ProcessStarts(concurrency=0, process_s=1.0)
    with pytest.raises(ValueError, match="process_s"):
        ProcessStarts(concurrency=1, process_s=-1.0)


def test_the_fit_recovers_the_queue_that_produced_the_starts():
    decided = [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 40.0, 41.0, 41.0]
    truth = ProcessStarts(concurrency=2, process_s=3.5, after_s=2.0)
    measured = [MeasuredStart(d, truth.process_ready_s(d) - d) for d in decided]

    fit = fit_process_starts(measured, concurrency=2)

    assert fit is not None
    assert (fit.process_s, fit.after_s) == pytest.approx((3.5, 2.0))
    assert fit.rms_error_s == pytest.approx(0.0, abs=1e-6)
    assert predicted_overheads(measured, fit.queue()) == pytest.approx([m.overhead_s for m in measured])


def test_a_uniform_start_up_fits_worse_than_the_queue_when_starts_come_in_batches():
    decided = [0.0] * 6
    truth = ProcessStarts(concurrency=2, process_s=3.0, after_s=1.0)
    measured = [MeasuredStart(d, truth.process_ready_s(d) - d) for d in decided]
    mean = sum(m.overhead_s for m in measured) / len(measured)
    uniform_rms = (sum((m.overhead_s - mean) ** 2 for m in measured) / len(measured)) ** 0.5

    fit = fit_process_starts(measured, concurrency=2)

    assert fit is not None and fit.rms_error_s < uniform_rms


def test_no_starts_no_fit():
    assert fit_process_starts([], concurrency=2) is None


def test_a_scale_ups_replicas_are_matched_shortest_with_shortest_whatever_order_the_log_gives():
    truth = ProcessStarts(concurrency=2, process_s=2.0, after_s=3.0)
    overheads = [truth.process_ready_s(0.0) for _ in range(4)]  # 5, 5, 7, 7
    # Logged decisions a few ms apart, the longest start first.
    measured = [MeasuredStart(0.01 * k, o - 0.01 * k) for k, o in enumerate(reversed(overheads))]

    fit = fit_process_starts(measured, concurrency=2)

    assert fit is not None and (fit.process_s, fit.after_s) == pytest.approx((2.0, 3.0), abs=0.11)
