"""The store's logs and their bookkeeping: the CommitLog, consume queues, index files, checkpoint,
dispatch, recovery, epochs and the format file."""
