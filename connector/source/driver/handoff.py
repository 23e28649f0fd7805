"""The hand-off of a sealed batch to the tasks that decode it (``batchTransfer=fetch``).

Inside Spark's tasks a partition travels through the JVM: the driver-side runner pickles it, the
JVM reads it into the task, serialises and deserialises the task, and writes it to the Python
worker as an Arrow stream, which the worker copies twice more. For batches of 100,000 messages
(40 MB) that cost about 8 us of CPU per message between the runner, the JVM and the workers, and a
fifth of the throughput (``profile_stream.py``, 2026-11-26). Instead, the partition carries a
:class:`Ticket` and the task fetches its share from the driver-side reader:

* the reader serves the payloads of the batches it holds (:class:`BatchServer`), until their
  commit is acknowledged, where the executors reach it (:mod:`..endpoints`), to whoever shows the
  token of the ticket;
* a payload crosses the network encrypted with AES-GCM, under a key of the reader's process and a
  nonce of the partition, both inside the ticket. The key travels in Spark's own channel, so what
  crosses the network is exactly as private as the task itself: encrypted when Spark's network
  encryption is on, readable by whoever reads Spark's traffic when it is not. It is sent in frames
  of :data:`FRAME_BYTES`, each sealed on its own (so the reader holds one frame per connection,
  not a second copy of the batch, and the task decrypts while the rest arrives); each frame's tag
  binds it to its partition, its place and the number of frames, which proves the payload whole,
  in order and the one the ticket names.

A task that can't reach the reader fails, naming the addresses and the option that ships batches
inside the tasks (``batchTransfer=tasks``); Spark retries it as any failed task.
"""

from __future__ import annotations

import logging
import os
import secrets
import threading
from dataclasses import dataclass, field

import pyarrow as pa
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from ..endpoints import Listening, connect

log = logging.getLogger("crdb_pubsub.handoff")

CONNECT_TIMEOUT_SECONDS = 10.0
READ_TIMEOUT_SECONDS = 120.0  # between two reads of one payload
MAX_CONNECTIONS = 64  # served at once; more wait in the listen backlog
ACCEPT_WAIT_SECONDS = 0.5
MAX_REQUEST = 256
FRAME_BYTES = 1 << 20  # plaintext bytes sealed at a time
TAG_BYTES = 16
OK, UNKNOWN, REFUSED = 0, 1, 2  # the status byte of an answer


class HandoffError(RuntimeError):
    """A task could not get its partition's messages from the driver-side reader."""


@dataclass(frozen=True)
class Ticket:
    """What a task needs to fetch one partition of a batch; the secrets are never shown."""

    addresses: tuple[str, ...]
    batch_id: int
    index: int
    size: int  # bytes of the (plaintext) Arrow IPC stream
    token: str = field(repr=False)
    key: bytes = field(repr=False)
    nonce: bytes = field(repr=False)

    def request(self) -> bytes:
        return f"{self.token} {self.batch_id} {self.index}\n".encode()


def _frames(size: int) -> int:
    return max(1, -(-size // FRAME_BYTES))


def _nonce(base: bytes, frame: int) -> bytes:
    # A nonce per frame, never repeated under the key: the partition's random nonce plus the frame.
    return ((int.from_bytes(base, "big") + frame) % (1 << 96)).to_bytes(12, "big")


def _aad(batch_id: int, index: int, frame: int, frames: int) -> bytes:
    # Binds each frame to its partition, its place and the count: a frame served for another
    # partition, out of order, or a payload cut short fails its tag.
    return f"crdb_pubsub batch {batch_id} partition {index} frame {frame} of {frames}".encode()


def _header(status: int, length: int) -> bytes:
    return bytes([status]) + length.to_bytes(8, "big")


class BatchServer:
    """Serves the payloads of the sealed batches the driver mode holds, to the tasks that show the token.

    ``_lock`` guards ``_payloads``; it is a leaf: nothing else is taken under it, and it is never
    held while encrypting or sending. One thread accepts on each listening socket; each
    connection gets a thread of its own (a payload is tens of MB, sent with the GIL released), at
    most :data:`MAX_CONNECTIONS` at a time.
    """

    def __init__(self) -> None:
        self.token = secrets.token_hex(16)
        self._key = AESGCM.generate_key(bit_length=256)
        self._aead = AESGCM(self._key)
        self._lock = threading.Lock()
        self._payloads: dict[tuple[int, int], tuple[pa.Buffer, bytes]] = {}
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self._closed = threading.Event()
        self._listening = Listening()
        self.addresses = self._listening.addresses
        for sock in self._listening.sockets:
            threading.Thread(target=self._accept, args=(sock,), name="crdb-pubsub-handoff", daemon=True).start()

    def offer(self, batch_id: int, payloads: list[pa.Buffer]) -> list[Ticket]:
        """Serve ``payloads`` as the partitions of ``batch_id``; return their tickets.

        Offering the same batch again (Spark asks for a batch's partitions more than once) keeps
        each partition's nonce, so tickets already handed out stay good.
        """
        tickets = []
        with self._lock:
            for i, payload in enumerate(payloads):
                held = self._payloads.get((batch_id, i))
                nonce = held[1] if held is not None and held[0] is payload else os.urandom(12)
                self._payloads[(batch_id, i)] = (payload, nonce)
                tickets.append(Ticket(self.addresses, batch_id, i, payload.size, self.token, self._key, nonce))
        return tickets

    def withdraw(self, batch_ids: list[int]) -> None:
        """Serve these batches no more (their commit was acknowledged)."""
        gone = set(batch_ids)
        with self._lock:
            for k in [k for k in self._payloads if k[0] in gone]:
                del self._payloads[k]

    def close(self) -> None:
        self._closed.set()
        self._listening.close()

    # ---------------------------------------------------------------- serving

    def _accept(self, sock) -> None:
        # A thread blocked in accept() is not woken when another closes the socket: it waits at
        # most ACCEPT_WAIT_SECONDS at a time and looks whether the server closed.
        try:
            sock.settimeout(ACCEPT_WAIT_SECONDS)
        except OSError:
            return  # closed before this thread ran
        while not self._closed.is_set():
            if not self._slots.acquire(timeout=ACCEPT_WAIT_SECONDS):
                continue
            try:
                conn, _ = sock.accept()
            except TimeoutError:
                self._slots.release()
                continue
            except OSError:
                self._slots.release()
                return
            conn.settimeout(READ_TIMEOUT_SECONDS)
            threading.Thread(target=self._serve, args=(conn,), name="crdb-pubsub-handoff-send", daemon=True).start()

    def _serve(self, conn) -> None:
        try:
            with conn:
                self._answer(conn, _read_line(conn))
        except OSError as exc:
            log.debug("a task's fetch ended early: %s", exc)
        finally:
            self._slots.release()

    def _answer(self, conn, request: bytes) -> None:
        try:
            token, batch, index = request.decode("ascii").split()
            key = (int(batch), int(index))
        except (UnicodeDecodeError, ValueError):
            conn.sendall(_header(REFUSED, 0))
            return
        if not secrets.compare_digest(token, self.token):
            conn.sendall(_header(REFUSED, 0))
            return
        with self._lock:
            held = self._payloads.get(key)
        if held is None:
            reason = (
                f"the driver-side reader holds no batch {key[0]} partition {key[1]} (acknowledged already, "
                "or planned by another process)"
            ).encode()
            conn.sendall(_header(UNKNOWN, len(reason)) + reason)
            return
        payload, nonce = held
        conn.sendall(_header(OK, payload.size))
        # cryptography takes unsigned bytes; pyarrow exports its buffers as signed ones (format "b").
        view = memoryview(payload).cast("B")
        frames = _frames(payload.size)
        for f in range(frames):
            part = view[f * FRAME_BYTES : (f + 1) * FRAME_BYTES]
            conn.sendall(self._aead.encrypt(_nonce(nonce, f), part, _aad(*key, f, frames)))


def _read_line(conn) -> bytes:
    data = b""
    while not data.endswith(b"\n") and len(data) < MAX_REQUEST:
        part = conn.recv(MAX_REQUEST - len(data))
        if not part:
            break
        data += part
    return data


def _read_exactly(conn, n: int) -> bytearray:
    out = bytearray(n)
    view, got = memoryview(out), 0
    while got < n:
        k = conn.recv_into(view[got:])
        if not k:
            raise ConnectionError(f"the connection closed after {got} of {n} bytes")
        got += k
    return out


def fetch(ticket: Ticket) -> pa.Buffer:
    """Executor side: the Arrow IPC stream of the ticket's partition, from the driver-side reader."""
    where = (
        f"batch {ticket.batch_id} partition {ticket.index} from the driver-side reader at {', '.join(ticket.addresses)}"
    )
    aead = AESGCM(ticket.key)
    try:
        with connect(ticket.addresses, CONNECT_TIMEOUT_SECONDS) as conn:
            conn.settimeout(READ_TIMEOUT_SECONDS)
            conn.sendall(ticket.request())
            header = _read_exactly(conn, 9)
            status, length = header[0], int.from_bytes(header[1:], "big")
            if status != OK:
                reason = _read_exactly(conn, length).decode(errors="replace") if status == UNKNOWN else ""
                raise HandoffError(f"crdb_pubsub: could not fetch {where}: {reason or 'the reader refused the ticket'}")
            out = bytearray(length)
            frames = _frames(length)
            for f in range(frames):
                begin = f * FRAME_BYTES
                sealed = _read_exactly(conn, min(FRAME_BYTES, length - begin) + TAG_BYTES)
                try:
                    plain = aead.decrypt(
                        _nonce(ticket.nonce, f), sealed, _aad(ticket.batch_id, ticket.index, f, frames)
                    )
                except InvalidTag:
                    raise HandoffError(
                        f"crdb_pubsub: {where} arrived altered (its authentication tag does not match)"
                    ) from None
                out[begin : begin + len(plain)] = plain
    except OSError as exc:
        raise HandoffError(
            f"crdb_pubsub: could not fetch {where}: {exc}. The executors must reach the driver's host over "
            "TCP; option batchTransfer=tasks ships batches inside Spark's tasks instead"
        ) from None
    return pa.py_buffer(out)
