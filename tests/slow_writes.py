"""The proxy's and the service's log files written late, for tests of what waits for them."""

from __future__ import annotations

import time

from dtoc_rl.serve import log_writer


def slow_log_writes(monkeypatch, seconds: float) -> None:
    """Each log file written ``seconds`` after it was due (``log_writer.write_text_atomic``)."""
    real = log_writer.write_text_atomic

    def slow(path, chunks, encoding=None, private=False):
        time.sleep(seconds)
        real(path, chunks, encoding=encoding, private=private)

    monkeypatch.setattr(log_writer, "write_text_atomic", slow)
