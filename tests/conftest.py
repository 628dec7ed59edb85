"""Suite-wide settings: keep everything local and quiet."""

import os
import tempfile

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
if not os.environ.get("XDG_RUNTIME_DIR"):
    os.environ["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="unirender-xdg-")
    os.chmod(os.environ["XDG_RUNTIME_DIR"], 0o700)
