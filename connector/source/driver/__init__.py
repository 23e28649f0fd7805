"""``receiver=driver`` (the default): one receiver in the driver-side reader pulls every message.

:mod:`.receiver` pulls (:mod:`.pullers`, paced by :mod:`.flow`) and holds what it pulled; :mod:`.mode`
seals it into batches, which :mod:`.handoff` hands to the executors' tasks, and acknowledges them
once Spark's commit is proven. Nothing here imports :mod:`..executors`: the two modes share only
the offset protocol (:mod:`..core`) and the Pub/Sub parts (:mod:`..pubsub`).
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from .mode import DriverMode, make_receiver
    from .receiver import Receiver, ReceiverError

__all__ = ["DriverMode", "Receiver", "ReceiverError", "make_receiver"]


def __getattr__(name: str) -> Any:
    # Imported when first used (PEP 562): an executor's task imports only .handoff from here.
    if name in ("DriverMode", "make_receiver"):
        from . import mode

        return getattr(mode, name)
    if name in ("Receiver", "ReceiverError"):
        from . import receiver

        return getattr(receiver, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
