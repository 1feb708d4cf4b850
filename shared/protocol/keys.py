"""Every Redis key lagwatch uses, in one place.

Layout (`{...}` is the Redis Cluster hash tag: keys with the same tag live in the same slot)::

    lw:clusters                       SET   names of clusters that have data
    lw:readiness-probe                STR   never written: readiness sends `SET ... XX` to it, which Redis refuses
                                            when it is full (shared/runtime/redis_memory.py)
    lw:c:{<cluster>}:groups           ZSET  group -> newest commit timestamp (ms); listing and the expiry sweep
    lw:c:{<cluster>}:topics           HASH  topic -> partition count, from the broker-offset poller
    lw:c:{<cluster>}:retention        HASH  topic -> its `retention.ms`, where the broker let the poller read it
                                            (absent: unlimited, compact-only or not readable); retention risk
    lw:c:{<cluster>}:poller           STR   lease: id of the ingest worker polling broker offsets (expires)
    lw:c:{<cluster>}:behind           HASH  ingest worker id -> until when (ms) its commits are behind: the poller
                                            takes no log-end samples meanwhile (any worker's groups would look stopped)
                                            and new groups wait for their first evaluation (evaluator/newcomers.py)
    lw:c:{<cluster>}:read-through     HASH  offsets-topic partition, or "admin:<worker>/<workers>" -> the instant
                                            (ms) through which the ingest has stored its commits: the rules judge
                                            no later than the oldest of them plus a grace
                                            (shared/windows/read_through.py)
    lw:c:{<cluster>}:commit-clock     HASH  `offset:<p>` = how far the commit timestamps of offsets-topic partition p
                                            (its leader: the coordinator of its groups) are behind lagwatch's clock
                                            (negative: ahead), `partitions` = that topic's partition count (maps a
                                            group to its p), `at_ms` = when written; absent in admin mode
                                            (shared/windows/clock_offset.py, services/ingest/commit_clock.py)
    lw:c:{<cluster>}:topic-deletions  HASH  "<group>\n<topic>" -> when (ms) the api deleted the topic from the group;
                                            the ingest worker holding the group in memory drops it there, then the entry
    lw:c:{<cluster>}:history-deletions HASH a topic deletion's history record (JSON) -> when (ms) it was first sent:
                                            kept until the history topic took it, sent again by the next worker to
                                            start (services/ingest/pending_deletions.py)
    lw:c:{<cluster>}:stats            HASH  ingest counters (records, decode errors by type, outcomes, ...)
    lw:c:{<cluster>}:kafka-id         STR   the id of the Kafka cluster read under this name (Metadata's ClusterId):
                                            another one at a worker's start means the cluster was replaced, and its
                                            data here is forgotten (services/ingest/kafka_identity.py)
    lw:c:{<cluster>}:kafka-forgetting STR   lease: the ingest worker forgetting a replaced cluster's data (expires)
    lw:t:{<cluster>/<topic>}:bo       HASH  partition -> broker ring (see packing.py), last `intervals` log-end offsets
    lw:t:{<cluster>/<topic>}:h        HASH  partition -> log-end history for lag in seconds: (offset, at) pairs,
                                            `storage.lag-history` seconds, flat stretches collapsed (time_lag.py)
    lw:t:{<cluster>/<topic>}:ls       HASH  partition -> log-start offsets polled every topic-refresh (packed like
                                            `:h`): the pace at which retention deletes, for retention risk
    lw:t:{<cluster>/<topic>}:lp       HASH  partition -> the log probe's last answer past a committed offset that
                                            found nothing readable up to the log end (only transaction markers or
                                            aborted records): shared/windows/log_probes.py
    lw:t:{<cluster>/<topic>}:lu       HASH  partition -> its last answer that found an unread record (its timestamp)
    lw:g:{<cluster>/<group>}:w        HASH  "<topic>:<partition>" -> commit ring (see packing.py)
    lw:g:{<cluster>/<group>}:m        HASH  `last` = newest commit timestamp (ms), `generation` = latest generation;
                                            of a new-protocol (KIP-848) group also `member:<id>` =
                                            "<host>\\x1f<client id>" and `assigned:<id>` = {"epoch", "fields"}, each
                                            member's latest records (scripts.APPLY_MEMBER_CHANGES)
    lw:g:{<cluster>/<group>}:o        HASH  "<topic>:<partition>" -> "<owner>\\x1f<client_id>" (from group metadata)
    lw:g:{<cluster>/<group>}:r        ZSET  generation -> when it started (ms), the last hour: rebalances per hour
    lw:g:{<cluster>/<group>}:s        HASH  evaluator state: status, seq (transitions so far), incident_id,
                                            incident_started_at, changed_at (kept `expire-group` after NOTFOUND)
    lw:g:{<cluster>/<group>}:p        LIST  status-change events written but not yet acknowledged by Kafka
    lw:g:{<cluster>/<group>}:lt       HASH  alert thresholds: threshold ("300"; "data-loss-risk:600" and
                                            "messages-skipped:0" for the retention alerts) -> "<seq>:<started_at>",
                                            seq = crossings so far (odd: over it now); kept `expire-group` once
                                            under every threshold (services/evaluator/lag_thresholds.py)
    lw:g:{<cluster>/<group>}:lp       LIST  lag-threshold events written but not yet acknowledged by Kafka
    lw:c:{<cluster>}:lag-active       SET   groups over some lag-seconds threshold or with lag-threshold events
                                            pending (evaluator's index: only they are read when no threshold is set)
    lw:c:{<cluster>}:statuses         HASH  group -> current status, for groups not NOTFOUND (evaluator's index)
    lw:c:{<cluster>}:recent-changes   LIST  the cluster's latest status changes, newest first, JSON summaries,
                                            capped (status_store.RECENT_CHANGES); written with the index
    lw:c:{<cluster>}:evaluator        HASH  evaluator counters (evaluations, events published, ...)
    lw:c:{<cluster>}:unsent-events    HASH  "<outbox>\\n<group>" (outbox `status` or `lag`) -> "<since> <seen>" (ms):
                                            since when the group's events wait for Kafka, last retried when; the
                                            evaluators' `lagwatch_evaluator_unsent_events_seconds` (unsent_events.py)
    lw:c:{<cluster>}:instances:<service> ZSET instance id -> until when (ms, Redis's clock) that instance of the
                                            service (ingest worker, evaluator, notifier) says it runs: renewed while
                                            it does, removed at its stop (shared/runtime/presence.py): the api's
                                            `lagwatch_service_instances`; `forget-cluster` refuses while an ingest
                                            worker or an evaluator is there
    lw:c:{<cluster>}:results          HASH  group -> its last evaluated result, compact JSON (results_store.py): what
                                            /metrics, the dashboard and the consumer listing read
    lw:c:{<cluster>}:sparklines       HASH  group -> its lag sparkline's points before now (results_store.py)
    lw:c:{<cluster>}:due:<partition>  ZSET  group -> the next instant (ms) time alone can change its status, for the
                                            groups of one changes-topic partition (schedule_store.py)
    lw:n:{notify}:subs                HASH  subscription id -> JSON subscription (created through the api)
    lw:n:{notify}:subs-version        STR   bumped on every api change to subscriptions; notifiers reload on it
    lw:n:{notify}:lag-thresholds      HASH  subscription id -> JSON {"seconds", "retention_seconds", "clusters"}: the
                                            api's subscriptions with a `lag-seconds-threshold` or a
                                            `retention-risk-threshold`, written with them; the evaluator reads it
    lw:n:{notify}:state:<sub id>      HASH  "<cluster>/<group>" -> JSON incident announced to the subscription;
                                            "lag:<cluster>/<group>" -> the same for its lag-seconds threshold,
                                            "lag:<alert>:<cluster>/<group>" for its retention alerts
    lw:n:{notify}:active              HASH  "<cluster>/<group>" -> the group's latest status-change event while it is
                                            in an incident (not OK or NOTFOUND); "<threshold>\x1f<lag field>" -> the
                                            latest lag-threshold event while over that threshold: what the notifier
                                            announces to a subscription created or widened meanwhile (scope.py)
    lw:n:{notify}:identity-since      STR   epoch ms from which receivers' alerts are named per subscription (10
                                            minutes after the first start of a notifier doing so): incidents
                                            begun before keep the shared names
                                            (services/notifier/receiver_identity.py)
    lw:n:{notify}:repeats             ZSET  "<sub id>\x1f<state field>" -> when its next repeat is due (ms)
    lw:n:{notify}:seen:<event>:<sub>  STR   the event was handled for the subscription (expires `dedupe-ttl`)
    lw:n:{notify}:due                 ZSET  delivery id -> time of its next attempt (ms): the outbox's queue
    lw:n:{notify}:inflight            ZSET  delivery id -> lease expiry (ms, Redis's clock): claimed by a worker
    lw:n:{notify}:deliveries          HASH  delivery id -> JSON delivery (subscription, kind, event, attempts)
    lw:n:{notify}:order               ZSET  "<chain>:<seq, 20 digits>:<delivery id>", all scores 0 (ordered by the
                                            text): one incident's notifications to one subscription go out in order
    lw:n:{notify}:chain-of            HASH  delivery id -> its entry in `order`
    lw:n:{notify}:seq                 STR   numbers the entries of `order`
    lw:n:{notify}:silences            HASH  silence id -> JSON silence (matchers, starts-at, ends-at, ...), written
                                            by the api, read by notifiers
                                            (shared/notifications/subscriptions/silences.py)
    lw:n:{notify}:silences-version    STR   bumped on every change to silences; notifiers reload on it
    lw:n:{notify}:scope-looked        HASH  subscription id -> digest of its configuration when a notifier last looked
                                            at the incidents going on for it (a start looks again only at those changed)
    lw:n:{notify}:forgotten-clusters  HASH  cluster -> when (ms) `lagwatch forget-cluster` deleted its data: the
                                            notifiers close its incidents announced before then
                                            (shared/runtime/cluster_forgetting.py)
    lw:n:{notify}:forgotten-closed    HASH  cluster -> the forgetting (its time, ms) whose incidents a notifier has
                                            closed for every subscription: later starts need not look again
    lw:n:{notify}:skips               HASH  "<cluster>/<topic>:<partition>" -> "<lost> <resumed>": the latest stretch
                                            of a partition of the status or lag-threshold topic that retention
                                            deleted before the notifiers read it (their position fell off the log),
                                            counted once whichever notifier finds it
                                            (services/notifier/skipped_events.py)
    lw:n:{notify}:reconcile           HASH  the same field -> "<until> <at> <partitions>": a reconciliation of that
                                            partition's groups with the evaluator's statuses, due once a notifier has
                                            read it up to `until` (its log end when the skip was found at `at`, ms;
                                            `partitions`: the topic's count then) (services/notifier/reconcile.py)
    lw:n:{notify}:sample-requests     LIST  JSON sample notifications asked for through the api, taken by one notifier
                                            (shared/notifications/sample_requests.py)
    lw:n:{notify}:sample-report:<id>  STR   JSON report of the sample request <id>, for the api waiting on it (expires)

The notifier's keys all carry the tag `{notify}`: one slot (notifications are few), so its Lua scripts can move a
delivery between the outbox's sets and record an event's handling atomically on Redis Cluster too.

A group's keys share one slot, so a Lua script may touch all of them atomically on Redis Cluster; a topic's broker
ring sits in its own slot, which is why a commit's lag is computed from a broker offset the caller reads first.
The group keys expire by themselves `expire-group` after the group's newest commit (PEXPIREAT), so an abandoned
group frees its memory even if no sweep runs. Cluster names are restricted (see config) so they cannot break a
tag; a `}` inside a group name only shortens the tag, identically for all of that group's keys.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

PREFIX = "lw"
CLUSTERS = f"{PREFIX}:clusters"
READINESS_PROBE = f"{PREFIX}:readiness-probe"


def _cluster_key(name: str) -> Callable[[str], str]:
    return lambda cluster: f"{PREFIX}:c:{{{cluster}}}:{name}"


def _topic_key(kind: str) -> Callable[[str, str], str]:
    return lambda cluster, topic: f"{PREFIX}:t:{{{cluster}/{topic}}}:{kind}"


def _group_key(kind: str) -> Callable[[str, str], str]:
    return lambda cluster, group: f"{PREFIX}:g:{{{cluster}/{group}}}:{kind}"


groups_index = _cluster_key("groups")
topics_index = _cluster_key("topics")
topic_retention = _cluster_key("retention")
poller_lease = _cluster_key("poller")
ingest_behind = _cluster_key("behind")
read_through = _cluster_key("read-through")
commit_clock = _cluster_key("commit-clock")
topic_deletions = _cluster_key("topic-deletions")
history_deletions = _cluster_key("history-deletions")
ingest_stats = _cluster_key("stats")
kafka_id = _cluster_key("kafka-id")
kafka_forgetting = _cluster_key("kafka-forgetting")
lag_active_groups = _cluster_key("lag-active")
statuses_index = _cluster_key("statuses")
recent_status_changes = _cluster_key("recent-changes")
evaluator_stats = _cluster_key("evaluator")
unsent_events = _cluster_key("unsent-events")
group_results = _cluster_key("results")
group_sparklines = _cluster_key("sparklines")


def instances(cluster: str, service: str) -> str:
    return f"{PREFIX}:c:{{{cluster}}}:instances:{service}"


def due_groups(cluster: str, changes_partition: int) -> str:
    return f"{PREFIX}:c:{{{cluster}}}:due:{changes_partition}"


broker_ring = _topic_key("bo")
offset_history = _topic_key("h")
log_start_history = _topic_key("ls")
log_probes = _topic_key("lp")
log_probes_unread = _topic_key("lu")


def cluster_keys_pattern(cluster: str) -> str:
    """The SCAN pattern of every key of a cluster: its own (`lw:c:{<cluster>}:`), its groups' and its topics'
    (`lw:g:{<cluster>/`, `lw:t:{<cluster>/`), in one pass over the keyspace. Cluster names hold no glob character
    (protocol.CLUSTER_NAME); a group's or topic's name is matched by the `*`."""
    return f"{PREFIX}:[cgt]:{{{cluster}[}}/]*"


def topic_keys(cluster: str, topic: str) -> tuple[str, ...]:
    """Every key of a topic (one hash slot)."""
    kinds = (broker_ring, offset_history, log_start_history, log_probes, log_probes_unread)
    return tuple(key(cluster, topic) for key in kinds)


WINDOWS_KIND, META_KIND, OWNERS_KIND, REBALANCES_KIND = "w", "m", "o", "r"  # the last letter of each of a group's keys
GROUP_KEY_KINDS = (WINDOWS_KIND, META_KIND, OWNERS_KIND, REBALANCES_KIND)
group_windows = _group_key(WINDOWS_KIND)
group_meta = _group_key(META_KIND)
group_rebalances = _group_key(REBALANCES_KIND)
group_state = _group_key("s")
group_pending_events = _group_key("p")
group_lag_thresholds = _group_key("lt")
group_pending_lag_events = _group_key("lp")


def group_key_stem(cluster: str, group: str) -> str:
    """What a group's keys share, before the letters of GROUP_KEY_KINDS. The ingest keeps none of a group's keys in
    memory: its compiled flush writes them from the group's name and the text around it here."""
    return f"{PREFIX}:g:{{{cluster}/{group}}}:"


def group_keys(cluster: str, group: str) -> tuple[str, str, str, str]:
    """windows, meta, owners, rebalances: every key of a group (one hash slot)."""
    return keys_of_stem(group_key_stem(cluster, group))


def keys_of_stem(stem: str) -> tuple[str, str, str, str]:
    return stem + WINDOWS_KIND, stem + META_KIND, stem + OWNERS_KIND, stem + REBALANCES_KIND


def partition_field(topic: str, partition: int) -> str:
    # Kafka topic names cannot contain ':', and the partition is an int, so splitting at the last ':' is exact.
    return f"{topic}:{partition}"


def parse_partition_field(field: bytes | str) -> tuple[str, int]:
    text = field.decode() if isinstance(field, bytes) else field
    topic, _, partition = text.rpartition(":")
    # interned: the readers keep a topic's name once per group-partition they hold (indexes, watches), and many
    # groups read the same topics
    return sys.intern(topic), int(partition)


# --- the notifier (one hash slot: `{notify}`) ---------------------------------------------------------------------

NOTIFY = f"{PREFIX}:n:{{notify}}"
SUBSCRIPTIONS = f"{NOTIFY}:subs"
SUBSCRIPTIONS_VERSION = f"{NOTIFY}:subs-version"
LAG_THRESHOLDS = f"{NOTIFY}:lag-thresholds"
NOTIFY_REPEATS = f"{NOTIFY}:repeats"
NOTIFY_ACTIVE = f"{NOTIFY}:active"
NOTIFY_IDENTITY_SINCE = f"{NOTIFY}:identity-since"
NOTIFY_SCOPE_LOOKED = f"{NOTIFY}:scope-looked"
FORGOTTEN_CLUSTERS = f"{NOTIFY}:forgotten-clusters"
FORGOTTEN_CLOSED = f"{NOTIFY}:forgotten-closed"
SAMPLE_REQUESTS = f"{NOTIFY}:sample-requests"
NOTIFY_SKIPS = f"{NOTIFY}:skips"
NOTIFY_RECONCILE = f"{NOTIFY}:reconcile"
OUTBOX_DUE = f"{NOTIFY}:due"
OUTBOX_INFLIGHT = f"{NOTIFY}:inflight"
OUTBOX_DELIVERIES = f"{NOTIFY}:deliveries"
OUTBOX_ORDER = f"{NOTIFY}:order"
OUTBOX_CHAIN_OF = f"{NOTIFY}:chain-of"
OUTBOX_SEQ = f"{NOTIFY}:seq"
SILENCES = f"{NOTIFY}:silences"
SILENCES_VERSION = f"{NOTIFY}:silences-version"


def notify_state(subscription_id: str) -> str:
    return f"{NOTIFY}:state:{subscription_id}"


def sample_report(request_id: str) -> str:
    return f"{NOTIFY}:sample-report:{request_id}"


def notify_seen(event_id: str, subscription_id: str) -> str:
    return f"{NOTIFY}:seen:{event_id}:{subscription_id}"
