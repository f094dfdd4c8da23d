"""safejson: any bytes give a value or `msgspec.DecodeError`, and the value survives
the store's MessagePack encoder (bridge/codecs/safejson.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.codecs import safejson


@pytest.fixture(autouse=True)
def _default_depth() -> Iterator[None]:
    yield
    safejson.configure(max_depth=safejson.DEFAULT_MAX_DEPTH)


class Prompt(msgspec.Struct):
    text: str
    meta: msgspec.Raw = msgspec.Raw(b"null")


@pytest.mark.parametrize(
    "data",
    [
        b'"\xff"',
        b'{"text":"caf\xc3"}',
        b'{"text":"x","unknown":"\xff"}',  # a field msgspec skips without reading it
        b'{"text":"x","meta":{"a":"\xed\xa0\x80"}}',  # kept raw: it would travel on
        b"\xef\xbb\xbf\xff",
    ],
)
def test_invalid_utf8_anywhere_is_a_decode_error(data: bytes) -> None:
    with pytest.raises(msgspec.DecodeError):
        safejson.decode(data)
    with pytest.raises(msgspec.DecodeError):
        safejson.Decoder(Prompt).decode(data)


@pytest.mark.parametrize("value", [2**64 - 1, -(2**63), 0, 10**18, -1])
def test_integers_inside_64_bits_are_kept_exactly(value: int) -> None:
    data = b'{"n":' + str(value).encode() + b"}"
    assert safejson.decode(data) == {"n": value}
    msgspec.msgpack.encode(safejson.decode(data))


@pytest.mark.parametrize(
    "token", [b"18446744073709551616", b"-9223372036854775809", b"-18446744073709551616", b"9" * 5000, b"-" + b"1" * 4301]
)
def test_integers_beyond_64_bits_are_refused(token: bytes) -> None:
    """msgspec decodes them exactly; MessagePack then raised OverflowError at the flush,
    and int() raised ValueError past 4300 digits."""
    with pytest.raises(msgspec.DecodeError, match="64-bit"):
        safejson.decode(b'{"_meta":{"n":' + token + b"}}")


@pytest.mark.parametrize("data", [b'"12345678901234567890123"', b"1234567890123456789012.5", b"1e30", b"12345678901234567890123e-3"])
def test_long_digits_that_are_not_integers_are_fine(data: bytes) -> None:
    msgspec.msgpack.encode(safejson.decode(data))


def test_depth_is_bounded_and_configurable() -> None:
    assert safejson.decode(b"[" * 64 + b"]" * 64) is not None
    with pytest.raises(msgspec.DecodeError, match="nested"):
        safejson.decode(b"[" * 65 + b"]" * 65)
    with pytest.raises(msgspec.DecodeError):
        safejson.decode(b"[" * 100_000 + b"]" * 100_000)
    assert safejson.decode(b'"' + b"[" * 1000 + b'"') == "[" * 1000  # brackets in a string
    safejson.configure(max_depth=8)
    with pytest.raises(msgspec.DecodeError):
        safejson.decode(b"[" * 9 + b"]" * 9)


@pytest.mark.parametrize("n", [20_000, 200_000])
def test_an_unterminated_string_of_escaped_quotes_is_scanned_once(n: int) -> None:
    """Each quote used to restart a scan to the end: 40 KB held the event loop for
    seconds, 400 KB for minutes. Now one pass: a parse error at once."""
    for tail in (b"[" * 70, b"1" * 25):
        with pytest.raises(msgspec.DecodeError):
            safejson.decode(b'"' + b'\\"' * n + tail)


def test_raw_and_text_inputs() -> None:
    assert safejson.decode(msgspec.Raw(b'{"a":1}')) == {"a": 1}
    assert safejson.decode('{"a":"é"}') == {"a": "é"}
    with pytest.raises(msgspec.DecodeError):
        safejson.decode('"\ud800"')  # a lone surrogate cannot be UTF-8


def test_validation_errors_keep_their_path() -> None:
    with pytest.raises(msgspec.ValidationError, match=r"\$\.text"):
        safejson.Decoder(Prompt).decode(b'{"text":5}')


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=6), kids, max_size=4),
    max_leaves=20,
)


@settings(deadline=None, database=None)
@given(st.binary(max_size=200) | _json.map(lambda v: msgspec.json.encode(v)))
def test_any_bytes_give_a_value_that_encodes_or_a_decode_error(data: bytes) -> None:
    try:
        value: Any = safejson.decode(data)
    except msgspec.DecodeError:
        return
    msgspec.msgpack.encode(value)
    msgspec.json.encode(value)
