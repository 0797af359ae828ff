"""vsr.interrupt: signals that stop a run, recorded where the KeyboardInterrupt they raise can be lost."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time

import pytest

from vsr import interrupt


def _deliver(sig: int) -> None:
    os.kill(os.getpid(), sig)
    for _ in range(2000):  # the handler runs in this (main) thread between two bytecodes
        time.sleep(0.001)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_each_signal_raises_and_is_recorded(sig):
    # as a process started from a terminal has it (CI's test session starts with SIGINT and SIGHUP ignored, which
    # handled() leaves ignored)
    saved = signal.signal(sig, signal.SIG_DFL)
    try:
        _each_signal_raises_and_is_recorded(sig)
    finally:
        signal.signal(sig, saved)


def _each_signal_raises_and_is_recorded(sig):
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


def test_a_stop_raised_inside_a_ctypes_callback_is_kept_and_not_printed():
    @ctypes.CFUNCTYPE(None)
    def callback():
        _deliver(signal.SIGTERM)

    @ctypes.CFUNCTYPE(None)
    def failing():
        raise ValueError("a callback's own error")

    seen = []
    before, hook = sys.unraisablehook, seen.append
    sys.unraisablehook = hook  # (what pytest's own hook would turn into a warning)
    try:
        with interrupt.handled():
            callback()  # Python drops the KeyboardInterrupt ("Exception ignored ..."): the stop is kept, unprinted
            assert interrupt.requested() and seen == []
            with pytest.raises(KeyboardInterrupt):
                interrupt.check()
            failing()  # any other error a callback drops is said as Python says it
            assert [u.exc_type for u in seen] == [ValueError]
        assert sys.unraisablehook is hook  # restored
    finally:
        sys.unraisablehook = before


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


def _signal_main_after(seconds: float) -> threading.Thread:
    def send():
        time.sleep(seconds)
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)  # wakes the main thread's wait

    helper = threading.Thread(target=send, daemon=True)
    helper.start()
    return helper


@pytest.fixture
def ctrl_c():
    """Ctrl-C as Python handles it by default (a test session may have left SIGINT ignored)."""
    saved = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, saved)


def test_a_thread_stays_running_through_an_interrupted_wait(ctrl_c):
    """Unlike ``threading.Thread.join`` on CPython 3.11-3.12 (python/cpython#90882), which marks it ended."""
    release = threading.Event()
    t = interrupt.Thread(target=release.wait, args=(10,), daemon=True)
    try:
        t.start()
        helper = _signal_main_after(0.2)
        with pytest.raises(KeyboardInterrupt):
            t.wait()
        helper.join()
        assert t.running() and not t.wait(0.05)
        release.set()
        assert t.wait(5) and not t.running()
    finally:
        release.set()


def test_wait_through_waits_for_the_end_then_raises_the_interrupt(ctrl_c):
    ended = threading.Event()
    t = interrupt.Thread(target=lambda: (time.sleep(0.6), ended.set()), daemon=True)
    t.start()
    helper = _signal_main_after(0.1)
    with pytest.raises(KeyboardInterrupt):
        t.wait_through()
    assert ended.is_set()
    helper.join()


def test_a_ctrl_c_that_cuts_start_short_once_the_thread_exists_leaves_it_known_running(monkeypatch):
    """The KeyboardInterrupt of a signal another thread took comes to the main thread at any instruction: right
    after the thread was created, before start() returned (a full test session saw a stage thread, left inside an
    inference call, taken for never started). A start cut short before the thread exists: not launched."""
    started = threading.Thread.start

    def cut_short(self):
        started(self)
        raise KeyboardInterrupt

    release = threading.Event()
    t = interrupt.Thread(target=release.wait, args=(10,), daemon=True)
    monkeypatch.setattr(threading.Thread, "start", cut_short)
    with pytest.raises(KeyboardInterrupt):
        t.start()
    try:
        assert t.launched and t.running() and not t.wait(0.05)
    finally:
        release.set()
    assert t.wait(5) and not t.running()

    def before(self):
        raise KeyboardInterrupt

    monkeypatch.setattr(threading.Thread, "start", before)
    never = interrupt.Thread(target=release.wait, daemon=True)
    monkeypatch.setattr(interrupt, "START_S", 0.1)
    with pytest.raises(KeyboardInterrupt):
        never.start()
    assert not never.launched and not never.running() and never.wait(0)


def test_a_thread_class_must_not_override_run():
    with pytest.raises(TypeError, match="target="):
        class Beat(interrupt.Thread):  # noqa: F841
            def run(self):
                pass


def test_handled_outside_the_main_thread_changes_nothing():
    seen = []

    def in_a_thread():
        with interrupt.handled():
            seen.append(signal.getsignal(signal.SIGTERM))

    before = signal.getsignal(signal.SIGTERM)
    t = threading.Thread(target=in_a_thread)
    t.start()
    t.join()
    assert seen == [before]


def _publishers(tmp_path):
    """Each way vsr publishes a finished output, as ``(name, publish(), the path it would publish)``."""
    from onnx import TensorProto, helper

    from vsr.export.onnx import save_atomic
    from vsr.outfiles import write_file_output
    from vsr.video.output import commit_output

    staged = tmp_path / ".out.mp4.vsr-partial"
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    return [
        ("report", lambda: write_file_output(tmp_path / "run.json", "{}\n"), tmp_path / "run.json"),
        ("export", lambda: save_atomic(helper.make_model(graph), tmp_path / "m.onnx"), tmp_path / "m.onnx"),
        ("video", lambda: (staged.write_bytes(b"video"), commit_output(staged, tmp_path / "out.mp4",
                                                                      tmp_path / "in.mp4")),
         tmp_path / "out.mp4"),
    ]


def test_nothing_is_published_after_a_stop(tmp_path):
    """A stop whose KeyboardInterrupt a library dropped (an import lock's weakref callback during ``vsr export``:
    the export was written and the command exited 0) still keeps every output from being published."""
    for name, publish, path in _publishers(tmp_path):
        with interrupt.handled():
            interrupt.request()
            with pytest.raises(KeyboardInterrupt):
                publish()
        assert not path.exists(), name
        publish()  # no stop: published
        assert path.exists(), name
    assert not [p.name for p in tmp_path.iterdir() if "part" in p.name]  # no temporary left either


def test_a_signal_during_an_import_is_raised_after_it(tmp_path, monkeypatch):
    """Raised inside an import, the KeyboardInterrupt aborted `vsr export` (onnx's native module initialisation
    turned it into a C++ exception: "terminate called", SIGABRT); it comes once the import is over."""
    (tmp_path / "vsr_test_slow_import.py").write_text(
        "import os, signal, time\n"
        "os.kill(os.getpid(), signal.SIGTERM)\n"
        "for _ in range(300):\n"
        "    time.sleep(0.001)\n"
        "DONE = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with interrupt.handled():
        with pytest.raises(KeyboardInterrupt):
            import vsr_test_slow_import  # noqa: F401
            for _ in range(2000):
                time.sleep(0.001)
        import sys
        assert sys.modules["vsr_test_slow_import"].DONE  # imported whole: the stop came after
        assert interrupt.requested()
    monkeypatch.delitem(sys.modules, "vsr_test_slow_import")


def test_a_stop_during_the_teardown_after_a_finished_command_does_not_kill_it(tmp_path):
    """The interpreter's teardown after a run (0.7-1.6 s with torch, ONNX Runtime and numba loaded) came after
    the output was published; a SIGTERM then killed the process (exit -15) in 3 of 60 stopped runs of the hostile
    sweep.  Once the command is over, ``vsr.cli.entry`` ignores the stop signals."""
    import subprocess
    import sys
    from pathlib import Path

    code = ("import atexit, os, signal, sys, time\n"
            "atexit.register(lambda: (os.kill(os.getpid(), signal.SIGTERM), time.sleep(0.3)))  # in the teardown\n"
            "sys.argv = ['vsr', '--version']\n"
            "from vsr.cli import entry\n"
            "entry()\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[1], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.startswith("vsr "), (r.returncode, r.stderr)


def test_handled_can_leave_the_signals_ignored():
    before = {s: signal.getsignal(s) for s in interrupt.SIGNALS}
    try:
        with interrupt.handled(then=signal.SIG_IGN):
            assert signal.getsignal(signal.SIGTERM) is not signal.SIG_IGN
        assert all(signal.getsignal(s) is signal.SIG_IGN for s in interrupt.SIGNALS)
    finally:
        for s, h in before.items():
            signal.signal(s, h)


def test_a_stop_inside_a_deferred_section_is_raised_as_it_ends(capsys):
    done = []
    with interrupt.handled():
        with pytest.raises(KeyboardInterrupt):
            with interrupt.deferred("the ONNX export"):
                _deliver(signal.SIGTERM)
                _deliver(signal.SIGINT)  # pressed again: said once
                done.append("the section ran to its end")
        assert done and interrupt.requested()
    assert capsys.readouterr().err == "vsr: stopping once the ONNX export ends\n"


def test_once_records_a_second_stop_without_raising_it(ctrl_c):
    with interrupt.handled(once=True):
        with pytest.raises(KeyboardInterrupt):
            _deliver(signal.SIGINT)
        _deliver(signal.SIGTERM)  # from the parent, during the first one's cleanup: not raised
        assert interrupt.requested()
    with interrupt.handled():
        with pytest.raises(KeyboardInterrupt):
            _deliver(signal.SIGINT)
        with pytest.raises(KeyboardInterrupt):
            _deliver(signal.SIGINT)  # without once: each one raised


def test_a_ctrl_c_while_the_cli_is_imported_is_one_line_and_exit_130():
    """``python -m vsr`` and the ``vsr`` script imported :mod:`vsr.cli` (~20 ms) before its entry handled a stop: a
    Ctrl-C then printed Python's traceback.  Here the SIGINT comes as that import begins."""
    import subprocess
    import sys
    import tomllib
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    code = ("import os, runpy, signal, sys\n"
            "class Stop:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name == 'vsr.cli':\n"
            "            os.kill(os.getpid(), signal.SIGINT)\n"
            "        return None\n"
            "sys.meta_path.insert(0, Stop())\n"
            "sys.argv = ['vsr', '--version']\n"
            "runpy.run_module('vsr', run_name='__main__')\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=60,
                       preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # as from a terminal
    assert (r.returncode, r.stderr, r.stdout) == (130, "vsr: interrupted\n", "")
    # the console script takes the same entry
    scripts = tomllib.loads((root / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["vsr"] == "vsr.console:entry"


def test_a_stop_as_a_warning_line_is_written_leaves_it_a_line_of_its_own(tmp_path):
    """``print`` writes a line's text, then its newline: a SIGTERM between the two (seen in a stop sweep of
    `vsr export`) ran ``vsr: interrupted`` onto the warning's line ("...for testing onlyvsr: interrupted").  Here
    the signal comes the moment the warning's text is written."""
    import subprocess
    import sys
    from pathlib import Path

    code = ("import os, signal, sys\n"
            "class Stderr:\n"
            "    def __init__(self, f):\n"
            "        self.f = f\n"
            "    def write(self, text):\n"
            "        n = self.f.write(text)\n"
            "        if 'seeded random weights' in text:\n"
            "            os.kill(os.getpid(), signal.SIGTERM)\n"
            "        return n\n"
            "    def __getattr__(self, name):\n"
            "        return getattr(self.f, name)\n"
            "sys.stderr = Stderr(sys.stderr)\n"
            "sys.argv = ['vsr', *sys.argv[1:]]\n"
            "from vsr.cli import entry\n"
            "entry()\n")
    out = tmp_path / "m.onnx"
    r = subprocess.run([sys.executable, "-c", code, "export", "--weights", "random", "--config", "edvr-tiny",
                        "--height", "32", "--width", "32", "--out", str(out)],
                       cwd=Path(__file__).resolve().parents[1], capture_output=True, text=True, timeout=300)
    assert r.returncode == 130, r.stderr
    assert r.stderr.splitlines() == ["vsr: warning: using seeded random weights (--weights random): output is "
                                     "meaningless, for testing only", "vsr: interrupted"]
    assert list(tmp_path.iterdir()) == []
