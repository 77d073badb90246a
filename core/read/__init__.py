"""The read side of the engine: the pull walk and queries (`StoreReader`), the checks a read makes
before it serves a record, read-only views of files another process writes, subscriptions."""
