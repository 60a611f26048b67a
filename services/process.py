"""Start, find and stop the embedded services' background processes.

Each service runs in its own session (process group) with its output in
``<state>/logs/<name>.log`` and a pid record in ``<state>/run/<name>.json`` holding the pid,
its kernel start time (so a recycled pid is never mistaken for ours) and the port. ``stop``
signals the whole group, so children (uvicorn workers, rq work horses) go too.
With ``keep=True`` each service runs under a keeper that starts it again when it dies
(services/keeper.py): the record then holds the keeper, and :meth:`ProcessManager.running`
reports the keeper's child, the service itself.

Linux only (reads ``/proc``), like the machines this project targets.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from crowdpref.errors import ServiceError
from services import keeper


@dataclass
class ServiceSpec:
    """How to run one background service."""

    name: str
    argv: Sequence[str]
    env: Mapping[str, str]
    health: Callable[[], bool]
    port: int | None = None
    port_setting: str | None = None  # the env var that moves it, named in errors
    cwd: Path | None = None
    start_timeout_s: float = 60.0
    term_signals: int = 1  # SIGTERMs it needs to exit (a Prefect worker needs two)
    # restart a running one whose environment names (those starting with these prefixes) or
    # argv differ from what it was started with: the pid record keeps a salted hash, never a value
    restart_on_change: tuple[str, ...] = ()


@dataclass
class RunningService:
    name: str
    pid: int
    port: int | None
    started_at: float
    restarted: bool = False  # ``start`` restarted it: its settings had changed


def as_user(argv: Sequence[str], user: str | int, group: str | int, capabilities: Sequence[str] = ()) -> list[str]:
    """``argv`` run as ``user``:``group`` (and that user's groups) through ``setpriv`` (util-linux),
    which sets them and execs ``argv`` (no root parent stays behind): ``--no-new-privs``, and no
    capability but ``capabilities`` (e.g. ``CAP_NET_BIND_SERVICE``), bounded, inheritable and
    ambient, so the program keeps them and can gain no other."""
    caps = ",".join(["-all", *(f"+{c.lower().removeprefix('cap_')}" for c in capabilities)])
    return [shutil.which("setpriv") or "setpriv", f"--reuid={user}", f"--regid={group}", "--init-groups",
            f"--inh-caps={caps}", f"--ambient-caps={caps}", f"--bounding-set={caps}", "--no-new-privs", "--",
            *map(str, argv)]


def settings_hash(spec: ServiceSpec, salt: str) -> str:
    """A salted hash of what ``spec.restart_on_change`` watches (argv and the environment
    variables with those prefixes): secrets in it are never written anywhere in clear."""
    watched = {k: v for k, v in spec.env.items() if k.startswith(spec.restart_on_change)}
    payload = json.dumps({"argv": list(spec.argv), "env": watched}, sort_keys=True).encode()
    return hmac.new(salt.encode(), payload, hashlib.sha256).hexdigest()


def _proc_stat(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # the command name (field 2) may hold spaces/parentheses: split after the last ')'
    return raw[raw.rfind(")") + 2 :].split()


def process_start_time(pid: int) -> int | None:
    """Kernel start time of ``pid`` in clock ticks (field 22 of /proc/PID/stat)."""
    stat = _proc_stat(pid)
    return int(stat[19]) if stat else None


def _is_live(pid: int) -> bool:
    stat = _proc_stat(pid)
    return stat is not None and stat[0] not in ("Z", "X")


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes whose process group is ``pgid``."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        stat = _proc_stat(int(entry.name))
        if stat and stat[0] not in ("Z", "X") and int(stat[2]) == pgid:
            members.append(int(entry.name))
    return members


def port_in_use(host: str, port: int) -> bool:
    """True when something already listens on host:port (or the port cannot be bound)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


class ProcessManager:
    """Pid records and process groups under one state folder."""

    def __init__(self, state_dir: Path, launch_as: Callable[[ServiceSpec], ServiceSpec] | None = None,
                 keep: bool = False):
        self.pids_dir = state_dir / "run"
        self.logs_dir = state_dir / "logs"
        # how a spec is started: as its own user where `crowdpref up` runs as root (services/privileges.py)
        self.launch_as = launch_as or (lambda spec: spec)
        self.keep = keep  # under a keeper that starts it again when it dies (services/keeper.py)

    def _record(self, name: str) -> dict | None:
        """The pid record if its process (the service, or its keeper) still runs."""
        try:
            record = json.loads(self.record_path(name).read_text())
            pid = int(record["pid"])
        except (FileNotFoundError, json.JSONDecodeError, KeyError, TypeError, ValueError):
            return None
        if not _is_live(pid) or process_start_time(pid) != record.get("start_time"):
            return None
        return record

    def record_path(self, name: str) -> Path:
        return self.pids_dir / f"{name}.json"

    def log_path(self, name: str) -> Path:
        return self.logs_dir / f"{name}.log"

    def running(self, name: str) -> RunningService | None:
        """The service if its recorded process is still alive (and is the same process); a kept
        one: its keeper's child, None while the keeper starts it again."""
        record = self._record(name)
        if record is None:
            return None
        pid = _service_child(record["pid"]) if record.get("kept") else record["pid"]
        if pid is None:
            return None
        return RunningService(name=name, pid=pid, port=record.get("port"), started_at=record["started_at"])

    def start(self, spec: ServiceSpec, host: str) -> RunningService:
        """Start ``spec`` unless it already runs; wait until healthy. Refuses a port taken by a
        process that is not ours. With ``spec.restart_on_change``, a running one started with
        other settings is stopped and started again (``restarted``)."""
        spec = self.launch_as(spec)
        if self.keep:
            spec = replace(spec, argv=keeper.wrap(spec.argv, spec.name, spec.term_signals))
        current = self.running(spec.name)
        restarted = False
        if current is not None:
            if not spec.restart_on_change or not self.changed(spec):
                return current
            self.stop(spec.name)
            restarted = True
        elif self._record(spec.name) is not None:  # its keeper runs, starting it again: this start replaces both
            self.stop(spec.name)
        if spec.port is not None and port_in_use(host, spec.port):
            hint = f": stop it or set {spec.port_setting} to a free port" if spec.port_setting else ""
            raise ServiceError(
                f"{spec.name}: port {spec.port} on {host} is in use by a program crowdpref did not start{hint}"
            )
        self.pids_dir.mkdir(parents=True, exist_ok=True)
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_path(spec.name)
        with open(log_path, "ab") as log:
            log.write(f"\n--- {time.strftime('%Y-%m-%d %H:%M:%S')} starting {spec.name}\n".encode())
            log.flush()
            proc = subprocess.Popen(
                list(spec.argv),
                env=dict(spec.env),
                cwd=spec.cwd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        record = {
            "pid": proc.pid,
            "start_time": process_start_time(proc.pid),
            "port": spec.port,
            "started_at": time.time(),
            "argv0": spec.argv[0],
            "term_signals": spec.term_signals,
            "kept": self.keep,
        }
        if spec.restart_on_change:
            salt = secrets.token_hex(16)
            record.update(settings_salt=salt, settings_hash=settings_hash(spec, salt))
        tmp = self.record_path(spec.name).with_suffix(".tmp")
        tmp.write_text(json.dumps(record))
        tmp.replace(self.record_path(spec.name))

        deadline = time.monotonic() + spec.start_timeout_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                self._forget(spec.name)
                raise ServiceError(
                    f"{spec.name} exited with code {proc.returncode} while starting: see {log_path}"
                    f" (last line: {last_line(log_path)})"
                )
            if spec.health():
                pid = proc.pid
                if self.keep:  # its child runs (so the keeper's traps are set): from now on it is started again
                    pid = _service_child(proc.pid)
                    if pid is None:
                        time.sleep(0.05)
                        continue
                    self._tell_keeper(spec.name, proc.pid, keeper.ARM)
                return RunningService(spec.name, pid, spec.port, record["started_at"], restarted)
            time.sleep(0.3)
        self.stop(spec.name)
        raise ServiceError(
            f"{spec.name} did not become healthy within {spec.start_timeout_s:.0f} s: see {log_path}"
        )

    def changed(self, spec: ServiceSpec) -> bool:
        """Whether the running ``spec.name`` was started with other watched settings than
        ``spec`` has (a record without a hash - an older crowdpref started it - counts as
        changed)."""
        try:
            record = json.loads(self.record_path(spec.name).read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return False
        salt, recorded = record.get("settings_salt"), record.get("settings_hash")
        if not isinstance(salt, str) or not isinstance(recorded, str):
            return True
        return not hmac.compare_digest(recorded, settings_hash(spec, salt))

    def stop(self, name: str, timeout_s: float = 20.0) -> bool:
        """Stop the service's whole process group: SIGTERM, then SIGKILL after ``timeout_s``.
        A kept one: SIGTERM to its keeper, which starts nothing again and stops the service the
        same way; after ``timeout_s`` both groups are killed. Returns True if something was stopped."""
        record = self._record(name)
        if record is None:
            self._forget(name)
            return False
        pid, term_signals = int(record["pid"]), int(record.get("term_signals", 1))
        if record.get("kept"):
            return self._stop_kept(name, pid, timeout_s + term_signals + 5.0)
        pgid = os.getpgid(pid)
        for attempt in range(term_signals):
            if attempt:
                time.sleep(1.0)
            self._signal_group(pgid, signal.SIGTERM)
        if not self._wait_groups_gone([pgid], pid, timeout_s):
            self._signal_group(pgid, signal.SIGKILL)
            self._wait_groups_gone([pgid], pid, 5.0)
        self._forget(name)
        return True

    def release(self, name: str) -> None:
        """Before a kept service is stopped another way (PostgreSQL's ``pg_ctl stop``): its keeper
        lets it end and exits instead of starting it again (nothing for a service not kept)."""
        record = self._record(name)
        if record is not None and record.get("kept"):
            self._tell_keeper(name, int(record["pid"]), keeper.RELEASE)

    def _tell_keeper(self, name: str, pid: int, what: tuple[str, str], timeout_s: float = 5.0) -> None:
        """Signal the keeper, then wait until it says in the log that it took it (a signal that
        came with its child's death could otherwise be handled after it)."""
        log = self.log_path(name)
        offset = log.stat().st_size if log.exists() else 0
        self._signal(pid, getattr(signal, what[0]))
        said = f"crowdpref-keeper: {name} {what[1]}".encode()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and _is_live(pid):
            with open(log, "rb") as handle:
                handle.seek(offset)
                if said in handle.read():
                    return
            time.sleep(0.02)

    def _stop_kept(self, name: str, keeper_pid: int, timeout_s: float) -> bool:
        child = _service_child(keeper_pid)
        self._signal(keeper_pid, signal.SIGTERM)  # it passes the service its SIGTERM(s), waits, exits
        groups = [keeper_pid] + ([child] if child else [])  # each leads its own process group
        if not self._wait_groups_gone(groups, keeper_pid, timeout_s):
            for pgid in groups:
                self._signal_group(pgid, signal.SIGKILL)
            self._wait_groups_gone(groups, keeper_pid, 5.0)
        self._forget(name)
        return True

    @staticmethod
    def _signal(pid: int, sig: signal.Signals) -> None:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass

    @staticmethod
    def _wait_groups_gone(groups: list[int], leader: int, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while True:
            try:  # reap the leader if it is our own child (tests start and stop in one process)
                os.waitpid(leader, os.WNOHANG)
            except ChildProcessError:
                pass
            if not any(group_members(pgid) for pgid in groups):
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.2)

    @staticmethod
    def _signal_group(pgid: int, sig: signal.Signals) -> None:
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            pass

    def _forget(self, name: str) -> None:
        self.record_path(name).unlink(missing_ok=True)


def _service_child(keeper_pid: int) -> int | None:
    """The service a keeper runs: its child that leads its own session (a ``sleep`` of the
    keeper's own stays in the keeper's group)."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = _proc_stat(int(entry.name))
            if stat and stat[0] not in ("Z", "X") and int(stat[1]) == keeper_pid and int(stat[2]) == int(entry.name):
                return int(entry.name)
    return None


def last_line(path: Path, limit: int = 300) -> str:
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except FileNotFoundError:
        return ""
    return lines[-1][:limit] if lines else ""


def http_ok(url: str, timeout_s: float = 2.0) -> bool:
    """True if GET url answers 2xx. Uses only the standard library (no proxy lookups)."""
    import urllib.error
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=timeout_s) as response:
            return 200 <= response.status < 300
    except (urllib.error.URLError, OSError, ValueError):
        return False


def redis_command(host: str, port: int, *args: str, password: str | None = None,
                  timeout_s: float = 2.0) -> bytes | None:
    """Send one command in the Redis protocol, after ``AUTH password`` when given; return the
    raw first line of its reply (of AUTH's, when AUTH fails: ``-WRONGPASS ...``), None if
    unreachable. The password goes over the socket only, never into an error."""
    def encode(*words: str) -> bytes:
        return f"*{len(words)}\r\n".encode() + b"".join(
            f"${len(w.encode())}\r\n".encode() + w.encode() + b"\r\n" for w in words
        )

    payload = (encode("AUTH", password) if password is not None else b"") + encode(*args)
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock, sock.makefile("rb") as replies:
            sock.sendall(payload)
            line = replies.readline(4096).split(b"\r\n", 1)[0]
            if password is not None and line.startswith(b"+"):  # AUTH's +OK: the command's reply next
                line = replies.readline(4096).split(b"\r\n", 1)[0]
            return line
    except OSError:
        return None
