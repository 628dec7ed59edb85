"""/proc helpers for orphan checks (imported by the service tests' conftest and modules)."""

from __future__ import annotations

import os


def descendants(pid: int) -> set[int]:
    """Every live process below ``pid`` (from /proc), for orphan checks."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def unread_action_bytes(pid: int) -> int:
    """Bytes waiting in the FIFO player ``pid`` reads its actions from (its ``client.pipe``,
    unirender.transport.fifo) that it has not read yet: with the player frozen (SIGSTOP), more than 0 means the
    service has sent it an action, i.e. a step is in flight. Read with FIONREAD on a reader of our own, which
    takes nothing from the pipe."""
    import fcntl
    import struct
    import termios

    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.endswith("/client.pipe"):
            reader = os.open(target, os.O_RDONLY | os.O_NONBLOCK)
            try:
                return struct.unpack("i", fcntl.ioctl(reader, termios.FIONREAD, b"\0" * 4))[0]
            finally:
                os.close(reader)
    raise AssertionError(f"process {pid} has no client.pipe open: not a FIFO player")


def tcp_connections() -> list[tuple[int, int, str, int, int]]:
    """This host's TCP sockets (/proc/net/tcp and tcp6) as ``(local port, remote port, state, tx queue, rx queue)``;
    state as the kernel writes it in hex (``01`` established, ``08`` close-wait, ``0A`` listening)."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            tx, rx = (int(q, 16) for q in fields[4].split(":"))
            found.append((int(fields[1].rsplit(":", 1)[1], 16), int(fields[2].rsplit(":", 1)[1], 16), fields[3],
                          tx, rx))
    return found


def unread_request_bytes(port: int) -> int:
    """Bytes clients have sent to the server listening on ``port`` (this host) that it has not read yet, over all
    its connections (each established socket's receive queue). With the server frozen (SIGSTOP), more than 0
    means a request is in flight to it."""
    return sum(rx for local, _remote, state, _tx, rx in tcp_connections() if local == port and state == "01")
