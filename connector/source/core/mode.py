"""What a receiver mode does for the offset protocol, and what the protocol guarantees it.

:class:`~.protocol.OffsetProtocol` turns Spark's calls into these duties. It calls them from
Spark's driver-side thread, one at a time, under its own lock; a mode's own threads (pullers,
leaser, acker) must not call back into the protocol.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # pragma: no cover
    from ..state.ledger import Ledger, Recovered


@dataclass(frozen=True)
class Limits:
    """The read limit of one batch (``None``: unlimited)."""

    max_messages: int | None = None
    max_bytes: int | None = None


class Mode(Protocol):
    """A receiver mode: who pulls, where a batch's messages are kept, how they are acknowledged."""

    def start(self, ledger: Ledger | None, recovered: Recovered | None) -> None:
        """Open the subscriptions and start.

        Called once, at the first Spark call that starts the reader, with the stateDir's ledger
        and what an earlier process left in it. Must raise (``ReceiverError``, ``StateDirError``)
        rather than start half: the protocol closes the ledger then.
        """

    def set_cutoff(self, cutoff_us: int | None) -> None:
        """Set Trigger.AvailableNow's cutoff: messages published after ``cutoff_us`` belong to the next run.

        ``None``: the run ended. May be called before :meth:`start`.
        """

    def check(self) -> None:
        """Raise the mode's permanent failure, if any (called at every ``latestOffset``)."""

    def first_latest(self, committed: int, limits: Limits) -> None:
        """Handle the first ``latestOffset`` of this process.

        Spark has committed every batch up to ``committed`` and knows no batch after it.
        """

    def available_now_over(self, committed: int) -> bool:
        """Return whether a Trigger.AvailableNow run may end with batch ``committed``.

        It may when every message published before the cutoff is in a committed batch, as far as
        Pub/Sub can show. May wait, bounded, for that evidence.
        """

    def plan(self, batch_id: int, limits: Limits, ensure_run: Callable[[], None]) -> bool:
        """Plan batch ``batch_id`` within ``limits``, durably first with a stateDir.

        False when there is nothing to plan. ``ensure_run()`` must be called before the first
        durable write (it ties the stateDir to the query run).
        """

    def inputs(self, batch_id: int) -> Sequence[Any] | None:
        """Return what each Spark partition of ``batch_id`` reads; ``None`` when this process can't replay it.

        The same content every time it is asked, across processes with a stateDir.
        """

    def known(self, after: int, upto: int) -> list[int]:
        """Return the batches in ``(after, upto]`` that :meth:`inputs` can answer (for huge ranges)."""

    def acknowledge(self, upto: int) -> None:
        """Acknowledge exactly the messages of the batches ``<= upto`` and record the commit in the ledger.

        Spark committed every batch ``<= upto``. Never acknowledges a message no committed batch
        yielded.
        """

    def end_available_now(self, within: float) -> bool:
        """End the AvailableNow run: hand back what belongs to the next run and wait for acknowledgements.

        Waits at most ``within`` s for every acknowledgement to be answered; False if some were not.
        """

    def gauges(self) -> dict[str, Any]:
        """Return the mode's gauges for the progress report (see :mod:`..metrics`)."""

    def shutdown(self, within: float) -> float:
        """Stop, hand held messages back where that helps the next run, at most ``within`` s.

        Returns the wall time until which messages this process leased (or an earlier process, as
        far as it knows) may still be leased: 0 when every hand-back and acknowledgement was
        answered and no Pull was left in flight, ``inf`` when unknown. The next process waits it
        out before an empty answer proves anything (``Recovered.leased_until``).
        """
