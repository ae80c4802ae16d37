"""The Audit window (issue 39, item 1): where the shown run parts from plain decoding, which verify widths
pick which token there, and whether batch-shape numerics explain it (the view, and its wiring to the
engine thread's ``AuditWorker``)."""
