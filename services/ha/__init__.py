"""The ha process, RocketMQ's HA service: replication of the CommitLog (DESIGN.md section 10)."""
