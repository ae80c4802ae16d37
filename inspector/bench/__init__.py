"""Measurements of what speculation buys on this machine: cost model and benchmark."""
