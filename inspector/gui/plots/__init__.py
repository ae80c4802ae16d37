"""The plots and logs: KV timeline, lock wait and hold, Statistics, probability charts, event log."""
