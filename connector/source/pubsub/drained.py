"""The evidence that a subscription delivered what was published before a cutoff (Trigger.AvailableNow).

Pub/Sub documents that an empty answer "does not necessarily indicate that there are no messages
available", so an AvailableNow run ends on evidence an answer alone does not give. Both receiver
modes read it by this one rule (the driver's pullers are the *slots* of ``receiver=driver``, a
batch's tasks those of ``receiver=executors``). A subscription is drained when every slot's newest
answer:

* brought nothing published at or before the cutoff: nothing, or only later messages (Pub/Sub
  delivers the oldest messages first as far as it can; what it delivers late, out of order,
  belongs to the next run: the documented limit);
* answered a Pull sent after the run began and after the subscription's *shadow*: a time until
  which messages may be leased to nobody (a Pull that timed out or failed may have been answered
  after its client gave up: its deadline plus the ack deadline; an acknowledgement not proven; the
  leases of an earlier process of the query);
* on an ordered subscription, was sent while none of its messages were held or being
  acknowledged (a key's next messages wait for those);
* and no Pull sent before the newest of those answers is still unanswered, or answered and not
  yet taken (:meth:`Drain.pulling`): Pub/Sub may give a message to one Pull and answer a Pull sent
  after it with nothing, which shows only that the message was taken.

:class:`Drain` keeps the answers and the shadows; it is not thread-safe, its owner's lock guards it.
Times are on the owner's clock (the driver's monotonic clock, or wall time when they come from
tasks on other hosts); publish times are epoch microseconds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

# An AvailableNow run fails once Pub/Sub has been unreachable this long (its Pulls or its tasks'):
# no evidence can come, and nothing is acknowledged that Spark did not commit.
UNAVAILABLE_LIMIT_SECONDS = 120.0


@dataclass(frozen=True)
class Answer:
    """One slot's newest answer from one subscription."""

    sent: float  # when its Pull was sent
    oldest_us: int | None  # the oldest publish time of the messages it brought; None: it brought none
    outstanding: bool = False  # an ordered subscription's messages were held or being acknowledged then


class Drain:
    """The answers and shadows of some subscriptions; :meth:`quiet` applies the rule."""

    def __init__(self, ack_deadlines: Mapping[str, float]) -> None:
        self._deadlines = dict(ack_deadlines)
        self._answers: dict[tuple[str, int], Answer] = {}
        self._shadow: dict[str, float] = {}
        self._pulling: dict[tuple[str, int], float] = {}  # when each slot's Pull not taken yet was sent

    def shadow(self, sub: str, until: float) -> None:
        """Messages of ``sub`` may be leased to nobody until ``until``: no answer before proves anything."""
        self._shadow[sub] = max(self._shadow.get(sub, 0.0), until)

    def leased_at(self, sub: str, at: float) -> None:
        """Messages of ``sub`` may have been leased to nobody at ``at``, for one ack deadline.

        A Pull that timed out (sent at ``at``, plus its timeout) or failed, or an acknowledgement
        answered without proof.
        """
        self.shadow(sub, at + self._deadlines.get(sub, 10.0))

    def handed_back(self, sub: str, failed: Mapping[str, str], leased_until: float, now: float) -> None:
        """Take the answer to a hand-back of ``sub``: ``failed`` maps ack ids to reasons.

        An ack id refused for good (``PERMANENT_FAILURE_*``: exactly-once subscriptions) holds no
        lease. Any other failure (the request lost or timed out, a transient refusal) may have
        left its message leased, to nobody, until the last lease asked for (``leased_until``), and
        at least an ack deadline from ``now``.
        """
        if any(not reason.startswith("PERMANENT_FAILURE") for reason in failed.values()):
            self.shadow(sub, leased_until)
            self.leased_at(sub, now)

    def shadow_of(self, sub: str) -> float:
        """Return the end of ``sub``'s shadow (0.0: none)."""
        return self._shadow.get(sub, 0.0)

    def shadowed(self, sub: str) -> bool:
        """Whether ``sub`` ever had a shadow (its Pulls are then better asked to return at once)."""
        return sub in self._shadow

    def latest_shadow(self) -> float:
        """Return the latest shadow of any subscription (0.0: none)."""
        return max(self._shadow.values(), default=0.0)

    def pulling(self, sub: str, slot: int, sent: float) -> None:
        """``slot`` sent a Pull of ``sub`` at ``sent``; until its answer is taken, none sent after proves anything."""
        self._pulling[(sub, slot)] = sent

    def pull_ended(self, sub: str, slot: int) -> None:
        """``slot``'s Pull ended without an answer to take (it timed out or failed: see :meth:`leased_at`)."""
        self._pulling.pop((sub, slot), None)

    def answered(self, sub: str, slot: int, answer: Answer) -> None:
        """Take ``answer`` as ``slot``'s newest (unless an answer to a later Pull is already there)."""
        if self._pulling.get((sub, slot), float("inf")) <= answer.sent:
            del self._pulling[(sub, slot)]
        have = self._answers.get((sub, slot))
        if have is None or have.sent <= answer.sent:
            self._answers[(sub, slot)] = answer

    def idle_until(self, sub: str, slot: int, cutoff_us: int) -> float:
        """Return until when a Pull of ``slot`` on ``sub`` shows nothing (0.0: it may, now).

        While a shadow lasts, an answer proves nothing: once the slot's newest answer brought
        nothing published at or before the cutoff (evidence but for the shadow), the next Pull
        waits for the shadow's end. Each Pull before it would risk another shadow (one answered
        after its client gave up), and a run that pulls on may never end.
        """
        a = self._answers.get((sub, slot))
        shadow = self._shadow.get(sub, 0.0)
        if a is None or a.sent >= shadow or (a.oldest_us is not None and a.oldest_us <= cutoff_us):
            return 0.0
        return shadow

    def quiet(self, sub: str, slots: Iterable[int], cutoff_us: int, since: float) -> bool:
        """Whether ``sub`` shows it delivered what was published until ``cutoff_us`` (see the module)."""
        shadow = self._shadow.get(sub, 0.0)
        seen, newest = False, 0.0
        slots = list(slots)
        for slot in slots:
            a = self._answers.get((sub, slot))
            if a is None or a.sent < since or a.sent < shadow or a.outstanding:
                return False
            if a.oldest_us is not None and a.oldest_us <= cutoff_us:
                return False
            seen = True
            newest = max(newest, a.sent)
        return seen and not any(self._pulling.get((sub, slot), newest) < newest for slot in slots)
