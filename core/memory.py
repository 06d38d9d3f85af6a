"""How much memory this process may still take, read from the OS (no torch, nothing of deltalens)."""

from __future__ import annotations

from pathlib import Path


def available_memory() -> int | None:
    """Bytes this process may still allocate: the smaller of MemAvailable and the cgroup's headroom
    (None where neither can be read)."""
    found = []
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                found.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    for limit, usage in (("memory.max", "memory.current"), ("memory.limit_in_bytes", "memory.usage_in_bytes")):
        for root in ("/sys/fs/cgroup", "/sys/fs/cgroup/memory"):
            try:
                found.append(int(Path(root, limit).read_text()) - int(Path(root, usage).read_text()))
            except (OSError, ValueError):  # "max" (no limit) or no such file
                continue
    return min(found) if found else None
