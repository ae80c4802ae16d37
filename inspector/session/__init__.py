"""One session as every consumer sees it, without Qt.

- ``step_control``: pause / step window / step token / break-on, as a pure state machine.
"""
