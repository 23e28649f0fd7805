"""What a query keeps in its ``stateDir`` for exactly-once replay (:mod:`.ledger`)."""
