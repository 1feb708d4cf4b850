"""Lag velocity and the explanation, checked against generated partitions whose produce and consume rates are known:
rates within 5 % of the generated ones, time to catch up within 10 %, and the right explanation per scenario."""

from dataclasses import dataclass

import jsonschema
import pytest

from lagwatch.shared.events.status_event import Incident, build_event, schema
from lagwatch.shared.protocol.types import OffsetEntry, PartitionInput, RuleConfig, Sample, Status
from lagwatch.shared.statuses.explanation import explain
from lagwatch.shared.statuses.rules import partition_status as judge
from lagwatch.shared.statuses.rules import summarize_group
from lagwatch.shared.statuses.time_lag import add_sample, time_lag
from lagwatch.shared.statuses.velocity import (
    CatchUp,
    Velocity,
    consume_rate,
    group_velocity,
    log_end_flat_ms,
    partition_velocity,
    produce_rate,
)
from lagwatch.shared.windows.window import padded_ring

S = 1000
START = 1_767_225_600_000
BASE = 1_000_000  # log-end offset at the start
INTERVALS = 10


@dataclass
class Generated:
    """One partition, generated second by second: the producer writes `produce` msg/s (until `produce_until` s),
    the consumer starts `start_lag` behind and reads `consume` msg/s (never past the log end), committing every
    `commit_every` s (until `commit_until` s); the log end is polled every `poll_every` s."""

    produce: float
    consume: float
    start_lag: int = 0
    seconds: int = 600
    produce_until: int | None = None
    commit_until: int | None = None
    commit_every: int = 5
    poll_every: int = 5
    topic: str = "t"
    partition: int = 0
    owner: str = "host-1"

    def log_end(self, t: float) -> int:
        until = t if self.produce_until is None else self.produce_until
        return BASE + int(self.produce * min(t, until))

    def committed(self, t: float) -> int:
        return min(self.log_end(t), BASE - self.start_lag + int(self.consume * t))

    @property
    def now(self) -> int:
        return START + self.seconds * S

    def window(self) -> list[OffsetEntry]:
        last = self.seconds if self.commit_until is None else self.commit_until
        entries = []
        for t in range(0, last + 1, self.commit_every):
            polled = self.log_end(t - t % self.poll_every)
            offset = self.committed(t)
            entries.append(OffsetEntry(offset, START + t * S, START + t * S, max(0, polled - offset), t, t))
        return entries[-INTERVALS:]

    def history(self) -> list[Sample]:
        out: list[Sample] = []
        for t in range(0, self.seconds + 1, self.poll_every):
            add_sample(out, Sample(self.log_end(t), START + t * S), max_age_ms=3_600_000, max_samples=720)
        return out

    @property
    def lag(self) -> int:
        return max(0, self.log_end(self.seconds) - self.window()[-1].offset)

    def velocity(self) -> Velocity:
        return partition_velocity(self.window(), self.history(), self.lag, self.now)

    def status(self):
        history = self.history()
        ring = PartitionInput(
            self.topic,
            self.partition,
            padded_ring(self.window(), INTERVALS),
            tuple(s.offset for s in history[-INTERVALS:]),
            self.lag,
            self.owner,
        )
        return judge(ring, self.now, RuleConfig())


def judged(*parts: Generated, rebalances=()):
    """(status, explanation, group velocity) of a group of generated partitions."""
    status = summarize_group("c", "g", [p.status() for p in parts])
    speeds = {(p.topic, p.partition): p.velocity() for p in parts}
    overall = group_velocity(speeds.values())
    return status, explain(status, speeds, overall, rebalances, parts[0].now), overall


def test_a_consumer_slower_than_its_producer_never_catches_up_and_says_so():
    p = Generated(produce=100, consume=80, start_lag=1000)
    v = p.velocity()
    assert v.consume_rate == pytest.approx(80, rel=0.05)
    assert v.produce_rate == pytest.approx(100, rel=0.05)
    assert v.lag_growth == pytest.approx(20, rel=0.05)
    assert (v.catchup, v.catchup_seconds) == (CatchUp.NEVER, None)
    status, why, _ = judged(p)
    assert status.status == Status.WARN
    assert why.code == "slower-than-producer"
    assert "grows by 20" in why.text


@pytest.mark.parametrize(("produce", "consume", "start_lag"), [(50, 80, 20_000), (1000, 1500, 400_000), (3, 7, 2_000)])
def test_a_faster_consumer_catches_up_when_its_lag_over_the_rate_difference_says(produce, consume, start_lag):
    p = Generated(produce=produce, consume=consume, start_lag=start_lag, seconds=300)
    expected = p.lag / (consume - produce)
    v = p.velocity()
    assert v.consume_rate == pytest.approx(consume, rel=0.05)
    assert v.produce_rate == pytest.approx(produce, rel=0.05)
    assert v.catchup == CatchUp.CATCHING_UP
    assert v.catchup_seconds == pytest.approx(expected, rel=0.10)
    _, why, _ = judged(p)
    assert why.code == "catching-up"


def test_the_estimate_holds_when_checked_against_when_it_really_catches_up():
    """Generated further, the consumer really reaches the log end at the instant the estimate named."""
    p = Generated(produce=40, consume=100, start_lag=30_000, seconds=200)
    estimate = p.velocity().catchup_seconds
    caught_up_at = next(t for t in range(200, 10_000) if p.committed(t) >= p.log_end(t))
    assert estimate == pytest.approx(caught_up_at - 200, rel=0.10)


def test_a_stopped_producer_is_the_explanation_and_the_backlog_drains_at_the_consume_rate():
    p = Generated(produce=100, consume=30, produce_until=200)
    v = p.velocity()
    assert v.produce_rate == pytest.approx(0, abs=0.01)
    assert v.consume_rate == pytest.approx(30, rel=0.05)
    assert v.catchup_seconds == pytest.approx(p.lag / 30, rel=0.10)
    assert log_end_flat_ms(p.history(), p.now) == 400 * S
    _, why, _ = judged(p)
    assert why.code == "producer-stopped"


def test_a_caught_up_consumer_of_a_stopped_producer_is_told_apart_from_a_dead_one():
    p = Generated(produce=100, consume=200, produce_until=100)
    v = p.velocity()
    assert (v.catchup, v.catchup_seconds, v.lag) == (CatchUp.CAUGHT_UP, 0.0, 0)
    status, why, _ = judged(p)
    assert status.status == Status.OK
    assert why.code == "producer-stopped"


def test_a_busy_caught_up_consumer_reads_as_fast_as_its_producer_writes():
    p = Generated(produce=250, consume=400)
    v = p.velocity()
    assert v.consume_rate == pytest.approx(250, rel=0.05)
    assert v.produce_rate == pytest.approx(250, rel=0.05)
    _, why, _ = judged(p)
    assert why.code == "caught-up"


def test_a_healthy_consumer_between_its_commits_is_keeping_up_not_never():
    """On a busy topic a healthy consumer always has some lag: what arrived since its latest commit. Its rate equals
    the producer's within the measurement's noise; it used to read as "never at this rate" (or as catching up in
    hours), with "the lag grows by 0.0 msg/s"."""
    p = Generated(produce=250, consume=400, seconds=603, poll_every=1)  # 3 s after its commit at 600 s
    v = p.velocity()
    assert v.lag == 750
    assert v.consume_rate == pytest.approx(v.produce_rate, rel=0.05)
    assert (v.catchup, v.catchup_seconds) == (CatchUp.KEEPING_UP, 0.0)
    status, why, overall = judged(p)
    assert status.status == Status.OK
    assert (why.code, overall.catchup) == ("keeping-up", CatchUp.KEEPING_UP)
    assert "250.0 msg/s" in why.text


def test_a_consumer_that_misses_its_commits_is_no_longer_keeping_up():
    """Past two commit intervals of lag it is judged as before (here its rate over the window still matches)."""
    p = Generated(produce=100, consume=200, seconds=600, commit_until=580, poll_every=1)
    assert p.lag == 2000
    assert p.velocity().catchup == CatchUp.NEVER


def test_a_consumer_far_behind_at_its_producers_pace_never_catches_up_and_its_lag_holds():
    p = Generated(produce=100, consume=100, start_lag=50_000)
    v = p.velocity()
    assert v.lag_growth == pytest.approx(0, abs=1)
    assert v.catchup == CatchUp.NEVER
    _, why, _ = judged(p)
    assert why.code == "slower-than-producer"
    assert "the lag holds at 50,000 messages" in why.text


def test_a_group_the_rules_find_lagging_is_not_said_to_keep_up():
    """5 % slower than its producer: within the rates' tolerance and the lag still small, so its velocity reads
    keeping up; but its lag rose at every commit (WARN), and the explanation says so."""
    p = Generated(produce=100, consume=95, seconds=100)
    assert p.velocity().catchup == CatchUp.KEEPING_UP
    status, why, _ = judged(p)
    assert status.status == Status.WARN
    assert why.code == "slower-than-producer"
    assert "grows by 5.0 msg/s" in why.text


def test_a_group_keeps_up_when_each_partition_is_caught_up_or_keeping_up():
    keeping = Generated(produce=250, consume=400, seconds=603, poll_every=1).velocity()
    caught = Generated(produce=250, consume=400).velocity()
    never = Generated(produce=100, consume=80, start_lag=1000).velocity()
    assert (caught.catchup, keeping.catchup) == (CatchUp.CAUGHT_UP, CatchUp.KEEPING_UP)
    assert group_velocity([caught, keeping]).catchup == CatchUp.KEEPING_UP
    assert group_velocity([caught, caught]).catchup == CatchUp.CAUGHT_UP
    assert group_velocity([keeping, never]).catchup == CatchUp.NEVER


def test_a_consumer_of_a_quiet_topic_keeps_up_when_its_newest_commit_read_everything():
    """A message a minute, a commit every 5 s: the window of commits sees no message (consume rate 0) and the
    producer's pace allows no whole message between commits; a message arrived since the latest commit. That lag
    is what arrived since (the commit, 5 s ago, left nothing unread): keeping up, not "never" / "slower than the
    producer" (which a group of a hundred such partitions read nearly always)."""
    quiet = Generated(produce=1 / 60, consume=10, commit_every=5, poll_every=10, commit_until=595)
    v = quiet.velocity()
    assert (v.lag, v.consume_rate, v.catchup, v.catchup_seconds) == (1, 0.0, CatchUp.KEEPING_UP, 0.0)
    status, why, _ = judged(quiet)
    assert (status.status, why.code) == (Status.OK, "keeping-up")
    assert "(0.022 msg/s)" in why.text  # not "0.0 msg/s"

    # its newest commit 15 s ago (three of its intervals, more than two log-end samples' ten seconds): not pacing
    late = Generated(produce=1 / 60, consume=10, commit_every=5, poll_every=5, commit_until=585)
    assert late.velocity().lag > 0 and late.velocity().catchup == CatchUp.NEVER
    # its newest commit left messages unread: the rates decide, as before
    behind = Generated(produce=1, consume=0.8, start_lag=30, commit_every=5, poll_every=5, commit_until=595)
    assert behind.window()[-1].lag > 0 and behind.velocity().catchup == CatchUp.NEVER


def test_a_consumer_whose_members_left_stopped_and_its_lag_will_not_shrink():
    p = Generated(produce=100, consume=80, commit_until=300, owner="")
    v = p.velocity()
    assert v.consume_rate == 0.0
    assert v.catchup == CatchUp.NEVER
    status, why, _ = judged(p)
    assert status.partitions[0].status == Status.STOP
    assert why.code == "consumer-gone"


def test_a_stopped_consumer_still_in_the_group_is_named_with_its_host():
    p = Generated(produce=100, consume=80, commit_until=300, owner="10.0.0.7")
    _, why, _ = judged(p)
    assert why.code == "consumer-stopped"
    assert "10.0.0.7" in why.text


def test_one_stalled_partition_while_the_others_move_is_stuck_on_that_partition():
    stuck = Generated(produce=100, consume=0, start_lag=500, partition=0)
    moving = Generated(produce=100, consume=100, partition=1)
    status, why, overall = judged(stuck, moving)
    assert status.partitions[0].status == Status.STALL
    assert why.code == "stuck-partition"
    assert "t/0" in why.text
    assert overall.catchup == CatchUp.NEVER  # the slowest partition decides


def test_the_group_waits_for_its_slowest_partition():
    fast = Generated(produce=10, consume=100, start_lag=9_000, seconds=60, partition=0)
    slow = Generated(produce=10, consume=20, start_lag=9_000, seconds=60, partition=1)
    overall = group_velocity([fast.velocity(), slow.velocity()])
    assert overall.catchup_seconds == pytest.approx(slow.lag / 10, rel=0.10)
    assert overall.consume_rate == pytest.approx(120, rel=0.05)
    assert overall.produce_rate == pytest.approx(20, rel=0.05)
    assert overall.lag == fast.lag + slow.lag


def test_a_rewind_is_explained_and_not_counted_as_consumption():
    p = Generated(produce=100, consume=100)
    window = p.window()
    back = [e._replace(offset=e.offset - 50_000) for e in window[-3:]]
    rewound = window[:-3] + back
    assert consume_rate(rewound, p.now) == pytest.approx(100, rel=0.05)  # from the commits after the reset
    ring = PartitionInput("t", 0, padded_ring(rewound, INTERVALS), (p.log_end(600),), 50_000, "h")
    status = summarize_group("c", "g", [judge(ring, p.now, RuleConfig())])
    speeds = {("t", 0): partition_velocity(rewound, p.history(), 50_000, p.now)}
    assert explain(status, speeds, group_velocity(speeds.values()), (), p.now).code == "rewound"


def test_generations_started_minutes_apart_are_a_rebalance_storm():
    p = Generated(produce=100, consume=80, start_lag=1000)
    _, why, _ = judged(p, rebalances=[p.now - 60 * S, p.now - 200 * S, p.now - 400 * S])
    assert why.code == "rebalance-storm"
    assert "3 generations" in why.text


def test_a_generation_that_just_started_explains_a_bad_status_but_not_a_good_one():
    waiting = Generated(produce=100, consume=80, start_lag=1000, commit_until=565)  # no commit since it started
    status, why, _ = judged(waiting, rebalances=[waiting.now - 30 * S])
    assert (status.status, why.code) == (Status.WARN, "rebalancing")
    assert why.text.startswith("Rebalance in progress: a new generation started 30 s ago")
    healthy = Generated(produce=100, consume=200)
    assert judged(healthy, rebalances=[healthy.now - 30 * S])[1].code == "caught-up"


def test_a_group_committing_since_its_generation_started_is_not_waiting_for_the_rebalance():
    """A slow consumer whose generation started a minute ago, or 3 s ago, and has committed since: the rebalance is
    over, its lag grows because it reads slower than its producer writes, and that is what the explanation says (the
    demo's first alerts said "Rebalance in progress" for every group that went WARN within 2 minutes of starting)."""
    lagging = Generated(produce=100, consume=80, start_lag=1000)  # commits every 5 s, the newest at `now`
    for started in (lagging.now - 60 * S, lagging.now - 3 * S):
        status, why, _ = judged(lagging, rebalances=[started])
        assert (status.status, why.code) == (Status.WARN, "slower-than-producer"), started


def test_too_little_data_is_unknown_not_a_guess():
    one_commit = [OffsetEntry(100, START, START, 50, 0, 0)]
    assert consume_rate(one_commit, START) is None
    assert produce_rate([Sample(150, START)], None) is None
    v = partition_velocity(one_commit, [Sample(150, START)], 50, START)
    assert (v.catchup, v.catchup_seconds, v.lag_growth) == (CatchUp.UNKNOWN, None, None)


def test_without_the_groups_membership_no_owner_does_not_mean_the_members_left():
    p = Generated(produce=100, consume=80, commit_until=300, owner="")
    status = summarize_group("c", "g", [p.status()])
    speeds = {("t", 0): p.velocity()}
    why = explain(status, speeds, group_velocity(speeds.values()), (), p.now, membership_known=False)
    assert why.code == "consumer-stopped"


def test_every_partition_committing_one_offset_while_messages_arrive_is_stalled():
    status, why, _ = judged(Generated(produce=100, consume=0, start_lag=500))
    assert status.partitions[0].status == Status.STALL
    assert why.code == "stalled"


def test_a_status_event_with_velocity_and_explanation_matches_the_published_schema():
    p = Generated(produce=100, consume=80, start_lag=1000)
    status, why, _ = judged(p)
    event = build_event(
        cluster="c",
        group="g",
        seq=1,
        previous=Status.OK,
        group_status=status,
        incident=Incident("inc-1", p.now),
        evaluated_at=p.now,
        velocities={("t", 0): p.velocity()},
        explanation=why,
    ).as_dict()
    jsonschema.validate(event, schema())
    assert event["velocity"]["catchup"] == "never"
    assert event["partitions"][0]["velocity"]["lag_growth_per_second"] == pytest.approx(20, rel=0.05)
    assert event["explanation"]["code"] == "slower-than-producer"


def test_a_lag_threshold_event_carries_the_explanation_within_its_schema():
    from lagwatch.shared.events import lag_threshold_event

    p = Generated(produce=100, consume=80, start_lag=1000)
    status, why, _ = judged(p)
    lags = {("t", 0): time_lag(p.window()[-1].offset, p.history(), p.now)}
    event = lag_threshold_event.build_event(
        cluster="c",
        group="g",
        crossing=lag_threshold_event.Crossing(5.0, True),
        seq=1,
        incident_started_at=p.now,
        evaluated_at=p.now,
        group_status=status,
        time_lags=lags,
        explanation=why,
    ).as_dict()
    jsonschema.validate(event, lag_threshold_event.schema())
    assert event["explanation"]["code"] == "slower-than-producer"
