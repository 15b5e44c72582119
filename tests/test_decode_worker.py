"""The decode worker: a decode that hangs is killed with its child process, the next decode starts a new
child, every decoding process (each DataLoader worker) has its own, and none outlives its parent.

A hang is made two ways. Decord opening a named pipe that nobody writes to blocks in the kernel, as a
read from a stalled network file system does. ``decode_span`` refuses anything but a regular file, so
that case goes to the worker directly. Through ``decode_span``, the worker is frozen with SIGSTOP: it
answers nothing, as a hung decode does not, and only a kill ends it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from paths import REPO
from processes import gone, wait_until_gone

from core import decode_worker
from core.decoding import MediaSpec
from core.errors import DecodeError
from core.media import decode_span
from core.video_io import write_mp4

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc; dies-with-parent is Linux's")

TIMEOUT_S = 1.0
# Kill and reap take milliseconds; the rest is room for a busy shared machine.
SLACK_S = 10.0


@pytest.fixture()
def video(tmp_path):
    """A 2 s, 8 fps clip whose frame i has brightness 10 * i, so sampled indices can be read back."""
    path = tmp_path / "clip.mp4"
    write_mp4(path, np.stack([np.full((56, 56, 3), 10 * i, np.uint8) for i in range(16)]), fps=8.0)
    return path


def _decodes_correctly(video: Path) -> bool:
    clip = decode_span(video, 0.0, 2.0, MediaSpec(num_frames=4))
    brightness = clip.frames.reshape(len(clip.frames), -1).mean(axis=1)
    return np.allclose(brightness, [10 * i for i in clip.indices], atol=4)


def test_a_decoder_blocked_on_a_named_pipe_is_killed_and_the_next_decode_starts_a_new_child(video, tmp_path):
    assert _decodes_correctly(video)  # the child is up, so its start is not timed below
    hung = decode_worker.worker().pid
    pipe = tmp_path / "stream.mp4"
    os.mkfifo(pipe)
    started = time.monotonic()
    with pytest.raises(
        DecodeError, match=f"stream.mp4: cannot decode video: decoding took longer than {TIMEOUT_S} s"
    ):
        decode_worker.decode(str(pipe), 0.0, 2.0, MediaSpec(timeout_s=TIMEOUT_S))
    assert time.monotonic() - started < TIMEOUT_S + SLACK_S
    assert gone(hung), "the hung child was killed and reaped"
    assert _decodes_correctly(video)
    assert decode_worker.worker().pid != hung


def test_a_hung_decode_span_names_the_video_and_the_worker_is_replaced(video):
    assert _decodes_correctly(video)
    frozen = decode_worker.worker().pid
    os.kill(frozen, signal.SIGSTOP)
    try:
        with pytest.raises(
            DecodeError, match=f"clip.mp4: cannot decode video: decoding took longer than {TIMEOUT_S} s"
        ):
            decode_span(video, 0.0, 2.0, MediaSpec(num_frames=4, timeout_s=TIMEOUT_S))
    finally:
        with contextlib.suppress(ProcessLookupError):  # reaped already, unless the test failed early
            os.kill(frozen, signal.SIGCONT)
    assert gone(frozen)
    assert _decodes_correctly(video)


def test_a_child_killed_mid_decode_is_reported_and_replaced(video):
    """The OOM killer or a codec crash ends the child: the video is reported, the run goes on."""
    assert _decodes_correctly(video)
    child = decode_worker.worker().pid
    os.kill(child, signal.SIGSTOP)  # holds the request unanswered until the kill below
    threading.Timer(0.2, os.kill, (child, signal.SIGKILL)).start()
    started = time.monotonic()
    with pytest.raises(
        DecodeError, match=r"clip.mp4: cannot decode video: the decoder process died \(killed by SIGKILL\)"
    ):
        decode_span(video, 0.0, 2.0, MediaSpec(num_frames=4, timeout_s=60.0))
    assert time.monotonic() - started < SLACK_S, "noticed when it died, not at the timeout"
    assert _decodes_correctly(video)
    assert decode_worker.worker().pid != child


def test_a_worker_that_cannot_start_says_so(monkeypatch):
    monkeypatch.setattr(sys, "executable", "/bin/false")
    with pytest.raises(RuntimeError, match=r"decode worker process did not start \(exit code 1\)"):
        decode_worker.Worker()


def test_the_child_dies_with_its_parent_even_when_hung():
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time; from core import decode_worker; "
            "print(decode_worker.worker().pid, flush=True); time.sleep(600)",
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        child = int(parent.stdout.readline())
        # Frozen, the child cannot notice its socket closing: only the kernel's death signal reaches it.
        os.kill(child, signal.SIGSTOP)
    finally:
        parent.kill()
        parent.wait()
    assert wait_until_gone(child, SLACK_S), f"decode child {child} outlived its parent"


class _Decodes:
    """A map-style dataset whose items are decoded in DataLoader workers, as SampleDataset's are."""

    def __init__(self, video: Path):
        self.video = video

    def __len__(self) -> int:
        return 4

    def __getitem__(self, index: int) -> tuple[int, int, bool]:
        return os.getpid(), decode_worker.worker().pid, _decodes_correctly(self.video)


def test_each_dataloader_worker_decodes_in_a_child_of_its_own(video):
    from torch.utils.data import DataLoader

    assert _decodes_correctly(video)
    ours = decode_worker.worker().pid
    # Fork the DataLoader workers (forked: the DataLoader's default on Linux) while a decode of ours is in
    # flight, held there by freezing our child: they inherit our worker and its lock, taken, and must use
    # neither.
    os.kill(ours, signal.SIGSTOP)
    in_flight = []
    thread = threading.Thread(target=lambda: in_flight.append(_decodes_correctly(video)))
    thread.start()
    while not decode_worker._lock.locked():
        time.sleep(0.01)
    try:
        items = list(DataLoader(_Decodes(video), batch_size=None, num_workers=2, timeout=3 * SLACK_S))
    finally:
        os.kill(ours, signal.SIGCONT)
        thread.join()
    loader_pids = {loader_pid for loader_pid, _, _ in items}
    children = {child for _, child, _ in items}
    assert all(ok for _, _, ok in items)
    assert len(loader_pids) == 2 and os.getpid() not in loader_pids
    assert len(children) == 2 and ours not in children, "one decode child per DataLoader worker"
    assert in_flight == [True] and decode_worker.worker().pid == ours, "ours finished its decode, untouched"
    for child in children:
        assert wait_until_gone(child, SLACK_S), f"decode child {child} outlived its DataLoader worker"
