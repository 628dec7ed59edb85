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


def unread_request_bytes(port: int) -> int:
    """Bytes clients have sent to the server listening on ``port`` (this host) that it has not read yet, over all
    its connections (/proc/net/tcp and tcp6: each established socket's receive queue). With the server frozen
    (SIGSTOP), more than 0 means a request is in flight to it."""
    total = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            local, state, queues = fields[1], fields[3], fields[4]
            if state == "01" and int(local.rsplit(":", 1)[1], 16) == port:  # 01: ESTABLISHED
                total += int(queues.split(":")[1], 16)
    return total
