"""vsr.interrupt: signals that stop a run, recorded where the KeyboardInterrupt they raise can be lost."""

from __future__ import annotations

import ctypes
import os
import signal
import time

import pytest

from vsr import interrupt


def _deliver(sig: int) -> None:
    os.kill(os.getpid(), sig)
    for _ in range(2000):  # the handler runs in this (main) thread between two bytecodes
        time.sleep(0.001)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_each_signal_raises_and_is_recorded(sig):
    before = signal.getsignal(sig)
    with interrupt.handled():
        with pytest.raises(KeyboardInterrupt):
            _deliver(sig)
        assert interrupt.requested()
        with pytest.raises(KeyboardInterrupt):
            interrupt.check()
    assert not interrupt.requested()  # the record lasts as long as the handlers
    assert signal.getsignal(sig) is before
    interrupt.check()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the drop this test shows
def test_a_stop_raised_inside_a_ctypes_callback_is_kept():
    @ctypes.CFUNCTYPE(None)
    def callback():
        _deliver(signal.SIGTERM)

    with interrupt.handled():
        callback()  # Python prints "Exception ignored ..." and goes on: the KeyboardInterrupt is gone
        assert interrupt.requested()
        with pytest.raises(KeyboardInterrupt):
            interrupt.check()


def test_a_signal_ignored_at_start_stays_ignored():
    """``nohup vsr ...`` ignores SIGHUP: a closed terminal must not stop the run."""
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with interrupt.handled():
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) is not signal.SIG_IGN
            _deliver(signal.SIGHUP)
            assert not interrupt.requested()
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, previous)
