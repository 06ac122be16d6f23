"""A server in its own process group, up when its health route answers 200: how the
SGLang tests and the side-by-side benchmark start `adaserve sglang serve-cpu`,
`sglang.launch_server` or `adaserve serve`, and stop them with every child (SGLang spawns
a scheduler and a detokenizer)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """``argv`` + ``--port <free port>``, output to ``log``; raises (with the log's tail)
    if the process exits or is not healthy within ``timeout_s``."""

    def __init__(self, argv: list[str], log: Path, *, health: str = "/health_generate",
                 env: dict[str, str] | None = None, cwd: Path | None = None,
                 timeout_s: float = 900.0) -> None:
        import httpx

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        t0 = time.monotonic()
        self.proc = subprocess.Popen([*argv, "--port", str(self.port)], env=env, cwd=cwd,
                                     stdout=log.open("w"), stderr=subprocess.STDOUT,
                                     start_new_session=True)
        while time.monotonic() - t0 < timeout_s:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{argv[:4]} exited: {self.tail()}")
            try:
                if httpx.get(self.url + health, timeout=60).status_code == 200:
                    self.start_s = time.monotonic() - t0
                    return
            except httpx.HTTPError:
                pass
            time.sleep(2)
        self.stop()
        raise TimeoutError(f"{argv[:4]} did not come up in {timeout_s:.0f} s: {self.tail()}")

    def tail(self, chars: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-chars:]

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        """SIGTERM to the whole group, SIGKILL after 60 s (``stop_group``); then the
        /dev/shm files its processes had mapped are removed: SGLang's leave a
        shared-memory file and semaphores behind (the fleet's bare start measured its
        baseline on such a server and left them)."""
        shm = shared_memory_of([self.proc.pid])
        stop_group(self.proc, 60.0)
        unlink_all(shm)


def shared_memory_of(pgids: list[int]) -> set[Path]:
    """The /dev/shm files the processes of these process groups have mapped (their
    multiprocessing semaphores and shared buffers). SGLang's processes leave their
    semaphores behind when stopped (a fleet left a dozen ``sem.mp-*`` per run); read from
    /proc/<pid>/maps while they run, so the fleet removes only its own."""
    import psutil

    found: set[Path] = set()
    wanted = set(pgids)
    for p in psutil.process_iter():
        try:
            if os.getpgid(p.pid) not in wanted:
                continue
            with open(f"/proc/{p.pid}/maps") as maps:
                for line in maps:
                    path = line.rstrip("\n").split(maxsplit=5)[-1]
                    if path.startswith("/dev/shm/"):
                        found.add(Path(path.removesuffix(" (deleted)")))
        except (OSError, ProcessLookupError, psutil.Error):
            pass
    return found


def unlink_all(paths: set[Path]) -> None:
    """Remove what stopped processes left in /dev/shm (``shared_memory_of``, read while
    they ran); a file already gone is fine."""
    for path in paths:
        with contextlib.suppress(OSError):
            path.unlink()


def group_alive(pgid: int) -> bool:
    """Is any process of the group still running (zombies not counted)?"""
    import psutil

    for p in psutil.process_iter(["status"]):
        try:
            if os.getpgid(p.pid) == pgid and p.info["status"] != psutil.STATUS_ZOMBIE:
                return True
        except (ProcessLookupError, psutil.Error):
            pass
    return False


def stop_group(proc: subprocess.Popen, grace_s: float) -> None:
    """SIGTERM to ``proc``'s process group, SIGKILL to the group after ``grace_s``."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        proc.poll()  # reap our own child: a zombie leader is not a running process
        if not group_alive(proc.pid):
            proc.wait()
            return
        time.sleep(0.2)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
