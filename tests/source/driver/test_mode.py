"""``receiver=driver``'s batches: sized so that pulling the next one overlaps the one Spark runs."""

from __future__ import annotations

from spark_calls import Logs, SparkCalls, ids_of

from ..conftest import until

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

        until(pulling, 10, "messages pulled while the batch runs")

    until(lambda: len(set(calls.ids())) >= len(ids), 60, "the backlog", step=lambda: calls.trigger(sink))
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
    until(lambda: len(calls.batches) >= 3, 30, "two more batches", step=calls.trigger)
    assert all(len(ids_of(b)) <= WINDOW // 2 for _, b in calls.batches[1:])
