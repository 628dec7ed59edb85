"""``python -m unirender.player``: same as the ``unirender-player`` console script."""

import sys

from unirender.player.main import main

sys.exit(main())
