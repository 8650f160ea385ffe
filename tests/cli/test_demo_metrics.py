"""The demo reads /metrics until the compaction it waited for is counted (the timeline shows it a moment before)."""

from __future__ import annotations

from tableservice.cli.demo_cmd import compactions_counted

SCRAPE = """\
# HELP tableservice_actions_completed_total Actions executed and committed
# TYPE tableservice_actions_completed_total counter
tableservice_actions_completed_total{action="clean",table="demo_trips"} 3.0
tableservice_actions_completed_total{action="compaction",table="demo_trips"} 1.0
tableservice_actions_completed_total{action="compaction",table="other"} 2.0
tableservice_actions_completed_total{action="indexing",table="demo_trips"} 0.0
tableservice_actions_failed_total{action="compaction",table="demo_trips"} 5.0
"""


def test_the_completed_compactions_of_every_table_are_summed_and_nothing_else() -> None:
    assert compactions_counted(SCRAPE) == 3.0


def test_before_the_action_returns_nothing_is_counted() -> None:
    before = SCRAPE.replace('compaction",table="demo_trips"} 1.0', 'compaction",table="demo_trips"} 0.0').replace(
        'table="other"} 2.0', 'table="other"} 0.0'
    )
    assert compactions_counted(before) == 0.0
    assert compactions_counted("") == 0.0
