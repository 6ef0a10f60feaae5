"""The replays of a schedule on a network behind `planner.cost.predict` (start there): the
network as they see it (`network_view`), max-min fair rates (`max_min`), the event replay
(`events`), the replay in rounds when no two connections share a link (`dedicated_links`),
and what a replay gives (`results`)."""
