"""The appender process: the only CommitLog writer on a master (docs/SERVICES.md, appender)."""
