"""Silences as the api parses them and Redis stores them: a stored silence reads back as it was (kebab-case keys,
defaults for what an older writer left out), and a matcher's regex is refused with RE2's own reason, as a
subscription's group regexes are."""

import json

import pytest

from lagwatch.shared.notifications.subscriptions.silences import Matcher, Silence, SilenceInvalid, from_json, parse_new
from lagwatch.shared.notifications.subscriptions.validation import deep_problems
from lagwatch.shared.protocol.group_filter import linear_regex_error
from lagwatch.shared.runtime.config import SubscriptionConfig


def test_a_stored_silence_reads_back_as_the_same_silence():
    silence = Silence("sil-1", (Matcher("group", "billing"), Matcher("topic", "a.*", True)), 10.0, 20.0, "r", "me", 5.0)
    doc = silence.to_json(now=15.0)
    assert doc == {
        "id": "sil-1",
        "matchers": [
            {"name": "group", "value": "billing", "regex": False},
            {"name": "topic", "value": "a.*", "regex": True},
        ],
        "starts-at": 10.0,
        "ends-at": 20.0,
        "reason": "r",
        "created-by": "me",
        "created-at": 5.0,
        "state": "active",
    }
    assert from_json(json.dumps(silence.to_json(), sort_keys=True)) == silence


def test_a_silence_stored_without_its_optional_fields_reads_with_their_defaults():
    stored = '{"id": "s", "matchers": [{"name": "group", "value": "g"}], "starts-at": 1, "ends-at": 2}'
    assert from_json(stored) == Silence("s", (Matcher("group", "g"),), 1.0, 2.0, "", "", 0.0)


def test_an_unreadable_stored_silence_is_a_value_error():
    with pytest.raises(ValueError):
        from_json('{"id": "s", "matchers": []}')


def test_a_matcher_regex_re2_refuses_is_named_with_its_reason():
    reason = linear_regex_error("(?=a)")
    assert reason
    assert linear_regex_error("a.*") is None
    config = SubscriptionConfig(
        id="s", url="https://hooks.example.com/x", group_allowlist="a.*", group_denylist="(?=a)"
    )
    assert deep_problems(config, allow_private=False) == {
        "group_denylist": f"not a valid regular expression (RE2 syntax, as Burrow's): {reason}"
    }
    doc = {"matchers": [{"name": "group", "value": "(?=a)", "regex": True}], "ends-at": 200, "created-by": "me"}
    with pytest.raises(SilenceInvalid) as refused:
        parse_new(doc, now=100)
    assert refused.value.errors == {"matchers[0].value": f"not a valid regular expression (RE2 syntax): {reason}"}
