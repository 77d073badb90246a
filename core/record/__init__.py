"""The record format, once: the CommitLog record's fields, its encoders, the one checking parser,
the lazy record view, the scanners over many records, and the CRCs (DESIGN.md sections 1 and 3)."""
