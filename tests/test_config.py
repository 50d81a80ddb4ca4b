"""Broker URLs: parsing, the ambiguity rule, and that no error ever shows a passcode.

The parsing tests are plain functions; the connect tests run on asyncio,
asyncio+uvloop and trio (the ``anyio_backend`` fixture). The CLI's error line is
checked in tests/test_cli.py.
"""

from __future__ import annotations

import socket
from urllib.parse import quote

import pytest

from stompfast import AsyncClient, ConfigurationError, ConnectError
from stompfast._config import parse_url, parse_urls, redact_url
from stompfast.testing import Broker

pytestmark = pytest.mark.timeout(30)

#: the two halves of every test passcode: neither may appear in any message
LEFT, RIGHT = "9137", "8642"
SPECIALS = ["/", "#", "?", ",", "@", "[", "]", " ", ")", ":", "%"]
#: the characters that end a URL's authority: a passcode holding one is ambiguous
CUTS = ["/", "#", "?"]


def passcode(char: str) -> str:
    return f"{LEFT}{char}{RIGHT}"


def assert_hidden(text: str) -> None:
    assert LEFT not in text and RIGHT not in text, text


# -- parsing --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url, host, port",
    [
        ("stomp://localhost:61613/", "localhost", 61613),
        ("stomp://127.0.0.1:61613/", "127.0.0.1", 61613),
        ("stomp://[::1]:61613/", "::1", 61613),
        ("stomp://guest:guest@127.0.0.1:61613/", "127.0.0.1", 61613),
        ("stomp://guest:1234/", "guest", 1234),  # no '@' anywhere: host and port, nothing to misread
    ],
)
def test_plain_urls_still_parse(url, host, port):
    ep = parse_url(url)
    assert (ep.host, ep.port) == (host, port)


@pytest.mark.parametrize("char", SPECIALS)
def test_a_percent_encoded_passcode_holds_any_character(char):
    url = f"stomp://gu%2Fest:{quote(passcode(char), safe='')}@127.0.0.1:61613/v%40h"
    ep = parse_url(url)
    assert (ep.host, ep.port, ep.login, ep.passcode, ep.virtual_host) == (
        "127.0.0.1", 61613, "gu/est", passcode(char), "v@h"
    )
    assert_hidden(repr(ep) + ep.url + ep.masked_url())


@pytest.mark.parametrize("char", CUTS)
def test_a_passcode_that_cuts_the_authority_is_ambiguous_and_not_shown(char):
    with pytest.raises(ConfigurationError) as info:
        parse_url(f"stomp://guest:{passcode(char)}@broker.example:61613/")
    message = str(info.value)
    assert "ambiguous" in message and "percent-encode" in message
    assert all(code in message for code in ("%2F", "%23", "%3F", "%2C", "%40"))
    assert "'stomp://***@broker.example:61613/'" in message
    assert_hidden(message)


def test_an_all_digit_passcode_with_a_slash_is_not_read_as_a_port():
    # read naively: host "guest", port 9137, path "/8642@host:61613/"
    with pytest.raises(ConfigurationError, match="ambiguous") as info:
        parse_url(f"stomp://guest:{LEFT}/{RIGHT}@127.0.0.1:61613/")
    assert_hidden(str(info.value))


@pytest.mark.parametrize("char", [",", "@", " ", ")", ":"])  # "%" starts an escape
def test_other_special_characters_parse_as_written_in_a_single_url(char):
    ep = parse_url(f"stomp://guest:{passcode(char)}@127.0.0.1:61613/")
    assert (ep.host, ep.login, ep.passcode) == ("127.0.0.1", "guest", passcode(char))


@pytest.mark.parametrize("char", ["[", "]"])
def test_a_bracket_in_a_passcode_is_a_configuration_error_not_a_value_error_from_urllib(char):
    with pytest.raises(ConfigurationError, match="%5B") as info:
        parse_url(f"stomp://guest:{passcode(char)}@127.0.0.1:61613/")
    assert_hidden(str(info.value))


@pytest.mark.parametrize("char", SPECIALS)
@pytest.mark.parametrize(
    "template",
    [
        "http://guest:{}@127.0.0.1/",  # a wrong scheme
        "stomp://guest:{}@127.0.0.1:port/",  # a bad port
        "stomp://guest:{}@127.0.0.1:99999/",  # a port out of range
        "stomp://guest:{}@:61613/",  # no host
        "guest:{}@127.0.0.1:61613",  # no scheme
        "stomp:guest:{}@127.0.0.1",  # no //
        "stomp//guest:{}@127.0.0.1",  # no :
    ],
)
def test_no_parse_error_shows_the_passcode(template, char):
    with pytest.raises(ConfigurationError) as info:
        parse_url(template.format(passcode(char)))
    assert_hidden(str(info.value))


@pytest.mark.parametrize("char", SPECIALS)
def test_no_failover_error_shows_the_passcode(char):
    secret = passcode(char)
    bad = [
        f"failover:(stomp://guest:{secret}@a:61613,stomp://b:61613)?randomize=maybe",
        f"failover:(stomp://guest:{secret}@a:61613,stomp://b:61613)?bogus=1",
        f"failover:(stomp://guest:{secret}@a:61613,stomp://b:61613",
        f"failover:(stomp://guest:{secret}@a:port,stomp://b:61613)",
        f"failover:(stomp://b:61613,http://guest:{secret}@a:61613)",
    ]
    for url in bad:
        with pytest.raises(ConfigurationError) as info:
            parse_urls(url)
        assert_hidden(str(info.value))


def test_a_comma_in_a_passcode_in_a_failover_list_is_ambiguous():
    # "stomp://guest:9137" and "8642@a:61613" would be two URLs
    with pytest.raises(ConfigurationError, match="ambiguous.*%2C") as info:
        parse_urls(f"failover:(stomp://guest:{LEFT},{RIGHT}@a:61613,stomp://b:61613)")
    assert_hidden(str(info.value))
    endpoints, _ = parse_urls(f"failover:(stomp://guest:{LEFT}%2C{RIGHT}@a:61613,stomp://b:61613)")
    assert [(e.host, e.passcode) for e in endpoints] == [("a", f"{LEFT},{RIGHT}"), ("b", None)]


def test_a_comma_in_a_passcode_in_a_list_split_at_commas_is_ambiguous():
    # the Spark options split "url" at commas: "stomp://guest:9137" would be a bad port
    items = f"stomp://guest:{LEFT},{RIGHT}@a:61613,stomp://b:61613".split(",")
    with pytest.raises(ConfigurationError, match="ambiguous.*%2C") as info:
        parse_urls(items)
    assert_hidden(str(info.value))


def test_a_closing_parenthesis_in_a_passcode_in_a_failover_list():
    endpoints, options = parse_urls(f"failover:(stomp://guest:{LEFT}){RIGHT}@a:61613,stomp://b:61613)?randomize=false")
    assert [(e.host, e.passcode) for e in endpoints] == [("a", f"{LEFT}){RIGHT}"), ("b", None)]
    assert options == {"randomize": False}


@pytest.mark.parametrize(
    "text, shown",
    [
        ("stomp://guest:12/34@host:61613/", "stomp://***@host:61613/"),
        ("stomp://guest:p@ss@host/", "stomp://***@host/"),  # the LAST '@'
        ("stomp://host:61613/", "stomp://host:61613/"),
        ("stomp://guest:***@host:61613/", "stomp://guest:***@host:61613/"),  # already masked: kept
        ("'guest:pw@host'", "'***@host'"),
        ("stomp://a:x,y@h1,stomp://b:z@h2", "stomp://***@h1,stomp://***@h2"),
        ("failover:(stomp://a:x@h1,tcp://h2)?randomize=false", "failover:(stomp://***@h1,tcp://h2)?randomize=false"),
    ],
)
def test_redact_url(text, shown):
    assert redact_url(text) == shown
    assert redact_url(shown) == shown


# -- connecting -----------------------------------------------------------------------------


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.anyio
@pytest.mark.parametrize("char", SPECIALS)
async def test_no_connect_error_or_event_shows_the_passcode(char):
    port = _closed_port()
    raw = f"stomp://guest:{passcode(char)}@127.0.0.1:{port}/"
    encoded = f"stomp://guest:{quote(passcode(char), safe='')}@127.0.0.1:{port}/"
    for url in (raw, encoded):
        events: list = []
        try:
            client = AsyncClient(url, reconnect=False, heart_beat=(0, 0), connect_timeout=5, on_event=events.append)
        except ConfigurationError as exc:  # refused before any I/O
            assert url == raw and char in CUTS + ["[", "]"]
            assert_hidden(str(exc).replace(str(port), "PORT"))
            continue
        with pytest.raises(ConnectError) as info:
            async with client:
                pass
        assert_hidden(str(info.value).replace(str(port), "PORT"))
        assert events and all(e.url == f"stomp://guest@127.0.0.1:{port}/" for e in events)
        assert_hidden(" ".join(repr(e) for e in events).replace(str(port), "PORT"))


@pytest.mark.anyio
@pytest.mark.parametrize("char", SPECIALS)
async def test_a_percent_encoded_passcode_logs_in(char):
    async with Broker(users={"gu@st": passcode(char)}) as broker:
        url = f"stomp://gu%40st:{quote(passcode(char), safe='')}@127.0.0.1:{broker.port}/"
        async with AsyncClient(url, reconnect=False, heart_beat=(0, 0)) as client:
            assert client.is_connected


@pytest.mark.parametrize("name, hint", [("heartbeat", "heart_beat"), ("heart_beat_tolerance", "heartbeat_tolerance"),
                                        ("conect_timeout", "connect_timeout")])
def test_a_misspelt_option_is_refused_with_the_name_it_was_probably_meant_to_be(name, hint):
    from stompfast import AsyncClient, Client

    for cls in (AsyncClient, Client):
        with pytest.raises(TypeError, match=f"unexpected keyword argument '{name}' \\(did you mean '{hint}'\\?\\)"):
            cls(**{name: 1})
