"""The reader process: pulls, queries, consumer offsets and groups (docs/SERVICES.md, reader)."""
