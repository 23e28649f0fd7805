"""The offset protocol both receiver modes share.

Offsets, what each Spark call proves, and the duties a mode takes on (:class:`~.mode.Mode`).
"""
