"""Files of a session: autosave, crash recovery, receipts export and loading, File menu actions."""
