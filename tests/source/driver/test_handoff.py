"""A sealed batch handed to its tasks: fetched whole, only with the ticket, never readable on the wire."""

from __future__ import annotations

import dataclasses
import pickle

import pyarrow as pa
import pytest

from crdb_pubsub.source.datasource import MessagesPartition
from crdb_pubsub.source.driver.handoff import FRAME_BYTES, BatchServer, HandoffError, fetch
from crdb_pubsub.source.endpoints import connect

SECRET_BODY = b'{"Key":["card"],"Value":{"after": {"number": "4111111111111111"}},"Topic":"payments"}'


@pytest.fixture
def server():
    s = BatchServer()
    yield s
    s.close()


def test_a_task_fetches_exactly_its_partition(server):
    # One frame, several, a last frame of one byte, nothing at all.
    payloads = [pa.py_buffer(SECRET_BODY * 1000), pa.py_buffer(bytes(range(256)) * 12_000)]
    payloads += [pa.py_buffer(b"y" * (FRAME_BYTES + 1)), pa.py_buffer(b"")]
    tickets = server.offer(4, payloads)
    assert [fetch(t).to_pybytes() for t in tickets] == [p.to_pybytes() for p in payloads]
    # Spark may ask for a batch's partitions again: tickets handed out before stay good.
    again = server.offer(4, payloads)
    assert fetch(tickets[1]).to_pybytes() == payloads[1].to_pybytes() and again == tickets


def test_a_ticket_travels_pickled_and_its_secrets_never_show(server):
    ticket = server.offer(1, [pa.py_buffer(SECRET_BODY)])[0]
    travelled = pickle.loads(pickle.dumps(MessagesPartition(1, 0, ticket, None)))
    assert fetch(travelled.messages).to_pybytes() == SECRET_BODY
    shown = repr(travelled) + repr(ticket) + str(ticket)
    assert ticket.token not in shown and ticket.key.hex() not in shown and repr(ticket.key) not in shown


def test_what_crosses_the_network_is_not_the_batch(server):
    ticket = server.offer(1, [pa.py_buffer(SECRET_BODY * 10)])[0]
    with connect(ticket.addresses, 5.0) as conn:
        conn.sendall(ticket.request())
        answer = b""
        while chunk := conn.recv(1 << 16):
            answer += chunk
    assert answer[0] == 0 and len(answer) == 9 + len(SECRET_BODY) * 10 + 16  # status, length, one sealed frame
    assert b"4111111111111111" not in answer and b"payments" not in answer


def test_without_the_token_nothing_is_served(server):
    ticket = server.offer(1, [pa.py_buffer(SECRET_BODY)])[0]
    with pytest.raises(HandoffError, match="refused the ticket"):
        fetch(dataclasses.replace(ticket, token="0" * 32))


def test_an_altered_or_misdirected_payload_is_refused(server):
    tickets = server.offer(1, [pa.py_buffer(SECRET_BODY), pa.py_buffer(SECRET_BODY)])
    # Another partition's nonce: the tag, bound to the partition and its nonce, does not match.
    with pytest.raises(HandoffError, match="arrived altered"):
        fetch(dataclasses.replace(tickets[0], nonce=tickets[1].nonce))


def test_an_acknowledged_batch_is_served_no_more(server):
    ticket = server.offer(3, [pa.py_buffer(SECRET_BODY)])[0]
    server.withdraw([3])
    with pytest.raises(HandoffError, match="holds no batch 3 partition 0"):
        fetch(ticket)


def test_a_task_that_cannot_reach_the_reader_says_where_and_what_to_do():
    s = BatchServer()
    ticket = s.offer(2, [pa.py_buffer(SECRET_BODY)])[0]
    s.close()
    with pytest.raises(HandoffError) as err:
        fetch(ticket)
    message = str(err.value)
    assert "batch 2 partition 0" in message and ticket.addresses[-1] in message
    assert "batchTransfer=tasks" in message


def test_several_tasks_fetch_at_once(server):
    from concurrent.futures import ThreadPoolExecutor

    payloads = [pa.py_buffer(bytes([i]) * 2_000_000) for i in range(8)]
    tickets = server.offer(9, payloads)
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda t: fetch(t).to_pybytes(), tickets))
    assert got == [p.to_pybytes() for p in payloads]


def test_a_server_closed_at_once_ends_its_threads_quietly():
    """A query that stops right after its reader started (a failed first batch, a test's teardown)
    closes the server before its accept threads ran: they end without an error of their own (a CI-shaped
    run of b036b81 printed ``OSError: [Errno 9] Bad file descriptor`` from one, a thread's unhandled exception)."""
    import threading

    errors: list[BaseException] = []
    hook = threading.excepthook
    threading.excepthook = lambda args: errors.append(args.exc_value)
    try:
        for _ in range(5):
            before = set(threading.enumerate())
            BatchServer().close()
            for t in set(threading.enumerate()) - before:
                t.join(5)
    finally:
        threading.excepthook = hook
    assert errors == []
