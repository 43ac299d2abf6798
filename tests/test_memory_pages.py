"""memory.small_pages: a session's creation turns numpy's huge page advice off, then back."""

import threading
from pathlib import Path

import pytest

import onyx
from onyx.runtime import memory

TINY = Path(onyx.__file__).parent / "examples" / "tiny_cnn.onnx"


def _huge() -> bool:
    switch = memory._madvise_switch()  # noqa: SLF001
    if switch is None:
        pytest.skip("this numpy has no huge page switch")
    was = switch(True)
    switch(was)
    return was


def test_off_inside_back_after_and_nested():
    before = _huge()
    with memory.small_pages():
        assert _huge() is False
        with memory.small_pages():
            assert _huge() is False
        assert _huge() is False  # (the outer block still holds it)
    assert _huge() is before


def test_the_last_thread_to_leave_restores_it():
    before = _huge()
    inside, leave = threading.Event(), threading.Event()

    def hold():
        with memory.small_pages():
            inside.set()
            leave.wait(10)

    other = threading.Thread(target=hold)
    other.start()
    inside.wait(10)
    with memory.small_pages():
        pass
    assert _huge() is False  # the other thread is still inside
    leave.set()
    other.join()
    assert _huge() is before


def test_a_session_leaves_the_setting_as_it_found_it():
    before = _huge()
    seen = []
    real = memory.small_pages.__enter__

    def spy(self):
        result = real(self)
        seen.append(_huge())
        return result

    try:
        memory.small_pages.__enter__ = spy
        onyx.InferenceSession(str(TINY))
    finally:
        memory.small_pages.__enter__ = real
    assert seen == [False]
    assert _huge() is before
