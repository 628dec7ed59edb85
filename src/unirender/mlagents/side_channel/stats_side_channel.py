"""``StatsSideChannel``: ``(key, value, aggregation)`` records the game reports (Unity -> Python), parsed by the
core's :func:`~unirender.protocol.mlagents.side_channels.parse_stats`."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

from unirender.mlagents.side_channel.incoming_message import IncomingMessage
from unirender.mlagents.side_channel.side_channel import SideChannel
from unirender.protocol.mlagents import side_channels as core

# How values within one summary period combine: AVERAGE, MOST_RECENT, SUM, HISTOGRAM (mlagents-envs' name).
StatsAggregationMethod = core.StatsAggregation
StatList = list[tuple[float, StatsAggregationMethod]]
EnvironmentStats = Mapping[str, StatList]


class StatsSideChannel(SideChannel):
    """Collects the game's stats until :meth:`get_and_reset_stats`."""

    def __init__(self) -> None:
        super().__init__(core.STATS)
        self.stats: EnvironmentStats = defaultdict(list)

    def on_message_received(self, msg: IncomingMessage) -> None:
        key, value, aggregation = core.parse_stats(bytes(msg.get_raw_bytes()))
        self.stats[key].append((value, StatsAggregationMethod(aggregation)))

    def get_and_reset_stats(self) -> EnvironmentStats:
        """The stats received since the last call (``{key: [(value, aggregation), ...]}``), then forgets them."""
        stats, self.stats = self.stats, defaultdict(list)
        return stats
