"""``receiver=driver``'s batches: sized so that pulling the next one overlaps the one Spark runs."""

from __future__ import annotations

import threading
import time

from polling import wait_for
from spark_calls import Logs, SparkCalls, ids_of

SUB = "projects/p/subscriptions/batches"
WINDOW = 200  # maxOutstandingMessages


def body(i: int) -> bytes:
    return f'{{"Key":[{i}],"Value":{{"after": {{"id": {i}}}}},"Topic":"t"}}'.encode()


def test_while_spark_runs_a_batch_the_receiver_pulls_the_next(fake, make_reader):
    """A Trigger.AvailableNow drain: a batch that filled the whole window would stop pulling until
    Spark committed it, and the next batch would be what little came in between (seen end to end:
    batches of 50,000, 2,000, 48,000, 3,000 ... with the default window of 50,000)."""
    fake.create_subscription(SUB)
    ids = fake.publish(SUB, [body(i) for i in range(1000)])
    reader = make_reader(SUB, maxOutstandingMessages=WINDOW)
    reader.prepareForTriggerAvailableNow()
    calls = SparkCalls(reader, Logs(), "4.3")
    calls.start()

    def sink(batch_id, batches):
        # Spark runs this batch: the receiver keeps pulling into the room the batch left (unless
        # it has pulled the whole backlog already).
        def pulling() -> bool:
            report = reader._planner.report()
            return report["buffered"] > 0 or report["received"] >= len(ids)

        wait_for(pulling, 10, "messages pulled while the batch runs")

    wait_for(lambda: len(set(calls.ids())) >= len(ids), 60, "the backlog", step=lambda: calls.trigger(sink))
    sizes = [len(ids_of(b)) for _, b in calls.batches if ids_of(b)]
    assert max(sizes) <= WINDOW // 2, f"batches {sizes} with maxOutstandingMessages={WINDOW}"
    assert sorted(set(calls.ids())) == sorted(ids)


def test_the_first_batch_of_a_run_that_may_have_only_one_takes_the_whole_window(fake, make_reader):
    """Trigger.Once, and Trigger.AvailableNow on Spark 4.0/4.1, run a single batch: it reads what
    flow control lets the receiver hold, as before; the batches after it leave half the window."""
    fake.create_subscription(SUB)
    fake.publish(SUB, [body(i) for i in range(1000)])
    calls = SparkCalls(make_reader(SUB, maxOutstandingMessages=WINDOW), Logs(), "4.1")
    calls.start()
    calls.trigger()
    assert len(ids_of(calls.batches[0][1])) == WINDOW
    wait_for(lambda: len(calls.batches) >= 3, 30, "two more batches", step=calls.trigger)
    assert all(len(ids_of(b)) <= WINDOW // 2 for _, b in calls.batches[1:])


def test_an_available_now_run_does_not_wait_for_messages_published_after_its_cutoff(fake, make_reader):
    """A Trigger.AvailableNow run (4.2+) on a live topic: its pullers stop once an answer brings
    only messages published after the run's cutoff, so what was published between the cutoff and
    the first offset call is never pulled. The first batch's wait for the backlog must read the
    run's own cutoff, or it waits its whole bound for those messages (seen in the simulation, seed
    1854 of driver/posix: 20 s, the bound, with 3 messages to read)."""
    from crdb_pubsub.source.driver import mode as driver_mode

    fake.create_subscription(SUB)
    backlog = fake.publish(SUB, [body(i) for i in range(3)])
    reader = make_reader(SUB, maxOutstandingMessages=WINDOW)
    reader.prepareForTriggerAvailableNow()
    time.sleep(0.01)
    fake.publish(SUB, [body(i) for i in range(3, 60)])  # after the cutoff: the next run's
    calls = SparkCalls(reader, Logs(), "4.3")
    calls.start()
    began = time.monotonic()
    calls.trigger()
    waited = time.monotonic() - began
    assert sorted(calls.ids()) == sorted(backlog)
    assert waited < driver_mode.FIRST_FILL_SECONDS / 2, f"the first batch waited {waited:.1f} s"


def test_a_restart_remembers_what_the_crashed_process_acknowledged_before_it_pulls(fake, tmp_path):
    """Issue 30 finding 3: a process that crashed after recording a commit and before its
    acknowledgements were answered leaves them unconfirmed in the stateDir; the next process must
    know those messages before its first Pull, or a redelivery pulled first is planned again (on
    11f59fe the pullers started first: 100, 100, 100, 20, 10, 0, 0 duplicated over seven restarts)."""
    from crdb_pubsub.source.driver.mode import DriverMode, make_receiver
    from crdb_pubsub.source.metrics import Counters
    from crdb_pubsub.source.options import parse_options
    from crdb_pubsub.source.state.ledger import Recovered

    fake.create_subscription(SUB)
    opts = parse_options({"subscription": SUB, "emulatorHost": "127.0.0.1:1", "stateDir": str(tmp_path / "s")})
    mids = [str(i) for i in range(1_000_100, 1_000_200)]
    seen_at_start: list[bool] = []

    def receiver(options, counters):
        r = make_receiver(options, counters)
        start = r.start

        def checked_start(**kw):
            seen_at_start.extend(r.remembered.seen(SUB, mids, r._clock()))
            start(**kw)

        r.start = checked_start
        return r

    mode = DriverMode(opts, Counters(), receiver_factory=receiver)
    recovered = Recovered(unconfirmed=[(SUB, [(m, f"stale-{m}") for m in mids])])
    try:
        mode.start(None, recovered)
        assert seen_at_start and all(seen_at_start), "the pullers started before the unconfirmed ids were remembered"
    finally:
        mode.shutdown(1.0)


def test_the_first_batch_of_a_multi_batch_available_now_run_does_not_wait_for_the_whole_backlog(fake, make_reader):
    """Trigger.AvailableNow on Spark 4.2+ runs batches until the backlog is read, so its first
    batch need not hold Spark idle while the rest comes in: on the service's terms a backlog of
    50,000 took 1.5 s to pull, and Spark started on it only then and after the subscriptions'
    evidence that they were drained. Here the backlog keeps coming in for 6 s (published before the
    run's cutoff, delivered late); its first batch is planned long before that, and the next
    batches read the rest."""
    fake.create_subscription(SUB)
    reader = make_reader(SUB, maxOutstandingMessages=WINDOW)
    reader.prepareForTriggerAvailableNow()
    before_cutoff = int(time.time() * 1_000_000) - 1_000_000
    ids = fake.publish(SUB, [body(i) for i in range(10)], publish_us=before_cutoff)
    stop = threading.Event()

    def trickle() -> None:
        for i in range(10, 40):  # 30 more over 6 s: the window's half (100) is not reached
            if stop.wait(0.2):
                return
            ids.extend(fake.publish(SUB, [body(i)], publish_us=before_cutoff))

    feeder = threading.Thread(target=trickle, daemon=True)
    feeder.start()
    try:
        calls = SparkCalls(reader, Logs(), "4.3")
        calls.start()
        began = time.monotonic()
        calls.trigger()
        first = time.monotonic() - began
        assert calls.batches and ids_of(calls.batches[0][1]), "the first trigger planned no batch"
        assert first < 3.0, f"the first batch waited {first:.1f} s for a backlog still coming in"
        feeder.join(10)
        wait_for(lambda: len(set(calls.ids())) >= 40, 60, "the rest of the backlog", step=calls.trigger)
        assert sorted(set(calls.ids())) == sorted(ids)
    finally:
        stop.set()
