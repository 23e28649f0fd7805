"""``receiver=driver`` (the default): one receiver in the driver-side reader pulls every message.

:mod:`.receiver` pulls (:mod:`.pullers`, paced by :mod:`.flow`) and holds what it pulled; :mod:`.mode`
seals it into batches that travel to the executors inside Spark's input partitions, and
acknowledges them once Spark's commit is proven. Nothing here imports :mod:`..executors`: the two
modes share only the offset protocol (:mod:`..core`) and the Pub/Sub parts (:mod:`..pubsub`).
"""

from .mode import DriverMode, make_receiver
from .receiver import Receiver, ReceiverError

__all__ = ["DriverMode", "Receiver", "ReceiverError", "make_receiver"]
