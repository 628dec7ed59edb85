"""Deprecated name of :mod:`unirender.http_format` (the render service's HTTP body formats; docs/service.md named
it ``unirender.wire`` before issue 22). Importing it gives that very module, with a ``DeprecationWarning``."""

import sys
import warnings

from unirender import http_format

warnings.warn("unirender.wire is now unirender.http_format (the service's HTTP body formats)", DeprecationWarning,
              stacklevel=2)
sys.modules[__name__] = http_format
