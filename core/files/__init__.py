"""Files and mappings: the I/O seam, mapped segments and their queues, prefaulting, the page-cache
and mapping windows, the transient store pool, the lock and abort files."""
