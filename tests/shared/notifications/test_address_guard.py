"""The address guard (shared/notifications/delivery/address_guard.py): hosts are judged as the HTTP client will connect
to them (Unicode look-alike digits, numeric IPv4 spellings), non-global ranges are refused, and the notifier's client
checks every address again when it connects — a real HTTP receiver on 127.0.0.1 gets nothing it should not."""

import pytest

from lagwatch.services.notifier.delivery import Sender
from lagwatch.services.notifier.messages import Request
from lagwatch.services.notifier.subscriptions import from_config
from lagwatch.shared.notifications.delivery import address_guard
from lagwatch.shared.runtime.config import ConfigError, load_config
from tests.services.notifier.test_notifier_support import Receiver

LOOK_ALIKES = [
    "http://\uff11\uff12\uff17.\uff10.\uff10.\uff11:47001/",  # full-width digits
    "http://127\u30020\u30020\u30021/",  # ideographic full stops
    "http://\u2460\u2461\u2466.\u24ea.\u24ea.\u2460/",  # circled digits
    "http://2130706433/",  # one decimal number
    "http://0x7f.1/",
    "http://127.1/",
]
ROW_12 = [
    "http://[::127.0.0.1]/",  # IPv4-compatible
    "http://[::ffff:0:7f00:1]/",  # IPv4-translated
    "http://[64:ff9b::7f00:1]/",  # NAT64
    "http://[64:ff9b:1::7f00:1]/",  # local-use NAT64
    "http://[2002:7f00:1::1]/",  # 6to4 of 127.0.0.1
    "http://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/",  # Teredo
    "http://198.18.0.1/",  # benchmarking
    "http://198.19.255.1/",
    "http://192.0.0.8/",  # IETF protocol assignments
    "http://192.0.2.10/",  # documentation
    "http://255.255.255.255/",
    "http://[fec0::1]/",  # site-local
]


@pytest.mark.parametrize("url", LOOK_ALIKES)
def test_unicode_and_numeric_spellings_of_a_private_address_are_read_as_the_client_reads_them(url):
    assert address_guard.parse_target(url).host == "127.0.0.1"
    with pytest.raises(address_guard.TargetError, match=r"127\.0\.0\.1 is a private address"):
        address_guard.check_url_static(url, allow_private=False)


def test_a_look_alike_metadata_address_is_refused_even_where_private_targets_are_allowed():
    url = "http://\uff11\uff16\uff19.\uff12\uff15\uff14.\uff11\uff16\uff19.\uff12\uff15\uff14/latest/meta-data/"
    with pytest.raises(address_guard.TargetError, match="metadata"):
        address_guard.check_url_static(url, allow_private=True)
    with pytest.raises(address_guard.TargetError, match="metadata"):
        address_guard.check_url_static("http://METADATA.google.internal./", allow_private=True)


@pytest.mark.parametrize("url", ROW_12)
def test_ranges_that_are_not_global_unicast_are_refused_even_where_private_targets_are_allowed(url):
    with pytest.raises(address_guard.TargetError, match="not a global unicast"):
        address_guard.check_url_static(url, allow_private=True)


@pytest.mark.parametrize(
    "url", ["http://a b/", "http://x\x00y/", "http://[fe80::1%25eth0]/", "http://127.0.0.1:99999/", "http://xn--/"]
)
def test_hosts_no_client_should_be_given_are_refused(url):
    with pytest.raises(address_guard.TargetError):
        address_guard.check_url_static(url, allow_private=True)


async def test_public_addresses_and_names_pass_and_destinations_use_the_normalised_host():
    await address_guard.check_url("https://93.184.216.34/hook", allow_private=False)
    await address_guard.check_url("http://[2606:2800:220:1::1]/", allow_private=False, resolve=False)
    await address_guard.check_url("https://B\u00fccher.Example./x", allow_private=False, resolve=False)
    await address_guard.check_url("http://127.0.0.1:8080/x", allow_private=True)
    assert address_guard.destination("https://B\u00fccher.Example./x?sig=1") == "https://xn--bcher-kva.example:443"
    assert address_guard.destination("http://\uff11\uff12\uff17.0.0.1:9/") == "http://127.0.0.1:9"
    assert address_guard.destination("http://[::1]/") == "http://[::1]:80"


@pytest.mark.parametrize("url", [LOOK_ALIKES[0], LOOK_ALIKES[3], ROW_12[0]])
def test_the_configuration_file_uses_the_same_guard(tmp_path, url):
    path = tmp_path / "lagwatch.yaml"
    path.write_text(f"subscriptions:\n  - {{id: a, url: '{url}'}}\n", encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        from_config(load_config(path, env={}))
    assert err.value.key == "subscriptions[0].url"


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:{port}/hook",
        "http://\uff11\uff12\uff17.\uff10.\uff10.\uff11:{port}/hook",
        "http://localhost:{port}/hook",
    ],
)
async def test_the_client_checks_the_address_it_connects_to(url):
    """A request that got past every earlier check (a URL written before this guard, say) still cannot reach a
    private address: the connection itself is refused, for good, and the receiver sees nothing."""
    async with Receiver() as receiver:
        result = await send(url.format(port=receiver.port), allow_private=False)
        reached = await send(url.format(port=receiver.port), allow_private=True)
    assert not result.ok and not result.retryable and "target refused" in result.error and "private" in result.error
    assert reached.ok and len(receiver.requests) == 1  # the same URL where private targets are allowed


async def send(url, *, allow_private):
    sender = Sender(timeout_s=2, allow_private=allow_private)
    await sender.start()
    try:
        return await sender.send(Request("POST", url, {}, b"{}"))
    finally:
        await sender.stop()
