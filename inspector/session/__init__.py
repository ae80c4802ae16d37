"""One session as every consumer sees it, without Qt.

- ``run_records``: the immutable records a run appends (engine records plus the run's
  header, progress, end and baseline) and the thread-safe ``RecordStream`` the
  window's worker fills.
- ``session_record``: ``SessionRecord``, built live from those records, from a receipts
  document or from an autosave (``record_from_file``); every view and every export reads only it.
- ``document``: the receipts document written from a ``SessionRecord``.
- ``run``: the run service that prepares and drives one generation (CLI and window).
- ``step_control``: pause / step window / step token / break-on, as a pure state machine.
- ``run_states``: the window's states (the worker's and its own) and which controls each enables.
- ``audit``: the losslessness audit: where a greedy run parts from plain decoding, the target's pick
  at every verify width and place, and whether batch-shape numerics explain it.
"""
