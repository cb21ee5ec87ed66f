"""Worker processes for the tuner: fresh interpreters that run jobs sent over a pipe.

Workers are started by `subprocess`: never fork (the parent may hold OpenMP threads, and
libgomp breaks in a forked child), and not `multiprocessing`'s spawn either (it re-imports
the caller's main script in each child, and a dask worker, being daemonic, may not start
multiprocessing children). Each has its own session, so a Ctrl-C reaches only the parent,
which kills them, and killing a worker's group kills any gcc it started. Jobs and replies
travel as pickles over a socket pair; the jobs are `tdsl.tuner.measure.JOBS`.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
from multiprocessing.connection import Connection
from pathlib import Path

STARTUP_TIMEOUT = 60.0      # for a fresh worker to import tdsl (~0.5 s here)


def short(text: str, lines: int = 5, chars: int = 1000) -> str:
    """A message cut to a few lines (of gcc's: the first and those that say error)."""
    kept = [line[:300] for line in text.strip().split("\n") if line.strip()]
    if len(kept) > lines:
        kept = kept[:1] + [line for line in kept[1:] if "error" in line]
    out = "\n".join(kept[:lines])
    return out if len(out) <= chars else out[:chars - 3] + "..."


def serve(jobs: dict, fd: int, parent_fd: int) -> None:
    """A worker's main loop: run the parent's jobs until it goes away."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)    # Ctrl-C is the parent's to handle
    threading.Thread(target=_exit_with_parent, args=(parent_fd,), daemon=True).start()
    conn = Connection(fd)
    conn.send(("ready", os.getpid()))
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return          # the parent closed the pipe
        try:
            reply = ("ok", jobs[msg[0]](*msg[1]))
        except Exception as exc:
            reply = ("error", short(f"{type(exc).__name__}: {exc}"))
        conn.send(reply)


def _exit_with_parent(fd: int) -> None:
    """Exit when the parent dies, even in the middle of a hung kernel (cffi releases the
    GIL during calls). The parent never writes to this pipe: the read ends at its death."""
    while os.read(fd, 1):
        pass
    os._exit(1)


class Worker:
    """One worker process, in a session of its own, and the parent's end of its pipe."""

    def __init__(self):
        parent, child = socket.socketpair()
        alive, self._alive = os.pipe()       # held open by this process while it lives
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parents[2])    # the tree this tdsl comes from
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        code = ("import sys; from tdsl.tuner.measure import JOBS; from tdsl.tuner.workers "
                "import serve; serve(JOBS, *map(int, sys.argv[1:]))")
        self.proc = subprocess.Popen([sys.executable, "-c", code, str(child.fileno()),
                                      str(alive)], pass_fds=[child.fileno(), alive],
                                     stdin=subprocess.DEVNULL, start_new_session=True, env=env)
        child.close()
        os.close(alive)
        self.conn = Connection(parent.detach())
        self.killed = False

    def wait_ready(self) -> None:
        kind, value = self.receive(STARTUP_TIMEOUT)
        if kind != "ok" or value[0] != "ready":
            raise RuntimeError(f"a tuner worker process did not start ({kind}: {value})")

    def send(self, kind: str, args: tuple) -> None:
        self.conn.send((kind, args))

    def receive(self, timeout: float | None):
        """``("ok", reply)``, ``("died", how)`` or ``("timeout", None)``; in the last two
        cases the process is gone (killed, reaped)."""
        if not self.conn.poll(timeout):
            self.kill()
            return "timeout", None
        try:
            return "ok", self.conn.recv()
        except (EOFError, OSError):
            try:
                code = self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                code = None
            self.kill()
            return "died", describe_exit(code)

    def alive(self) -> bool:
        return self.proc.poll() is None and not self.conn.closed

    def kill(self) -> None:
        """SIGKILL the process group (the worker and any gcc it started), and reap."""
        if not self.killed:     # once: afterwards the group id may be another's
            self.killed = True
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            self.proc.wait()
            os.close(self._alive)
        self.conn.close()


def describe_exit(code: int | None) -> str:
    if code is None:
        return "the process stopped answering"
    if code < 0 and -code in signal.valid_signals():
        return f"{signal.Signals(-code).name} (the process was killed by a signal)"
    return f"the process exited with status {code}"


def stop_all(workers: list, tmpdir: str | None = None) -> None:
    for w in workers:
        w.kill()
    workers.clear()
    if tmpdir:
        shutil.rmtree(tmpdir, ignore_errors=True)
