"""Unity WWWForm bodies: byte-exact against a hand-written body (protocol.md 2.3), tolerant parsing, round trips."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from unirender.protocol import MetadataError, MultipartError
from unirender.protocol.multipart import (
    build_wwwform,
    parse_form,
    parse_options_header,
    payload_parts_from_form,
    random_boundary,
    unity_url_encode,
)

B = "Ab3dEfGh1jKlMn0pQrStUvWxYz0123456789AbCd"  # 40 chars from [0-9A-Za-z]

# Written by hand from protocol.md 2.3: leading CRLF, Content-Type before Content-disposition (lower-case d),
# quoted charset, binary parts with filename "<name>.dat", no CRLF between bytes and the next delimiter.
HAND_BODY = (
    b"\r\n--" + B.encode() + b"\r\n"
    b'Content-Type: text/plain; charset="utf-8"\r\n'
    b'Content-disposition: form-data; name="metadata"\r\n'
    b"\r\n"
    b'{"agents": []}'
    b"\r\n--" + B.encode() + b"\r\n"
    b"Content-Type: application/octet-stream\r\n"
    b'Content-disposition: form-data; name="image"; filename="image.dat"\r\n'
    b"\r\n"
    b"\x00\x01\r\n\x02"
    b"\r\n--" + B.encode() + b"\r\n"
    b'Content-Type: text/plain; charset="utf-8"\r\n'
    b'Content-disposition: form-data; name="token"\r\n'
    b"\r\n"
    b"tok-1"
    b"\r\n--" + B.encode() + b"--\r\n"
)
HAND_CONTENT_TYPE = f'multipart/form-data; boundary="{B}"'


def test_builder_is_byte_exact():
    fields = [("metadata", '{"agents": []}'), ("image", b"\x00\x01\r\n\x02"), ("token", "tok-1")]
    assert build_wwwform(fields, boundary=B) == (HAND_CONTENT_TYPE, HAND_BODY)


def test_random_boundary_shape():
    boundary = random_boundary()
    assert len(boundary) == 40 and boundary.isalnum() and boundary.isascii()
    content_type, _ = build_wwwform([("image", b"x")])
    assert content_type.startswith('multipart/form-data; boundary="') and content_type.endswith('"')


def test_parser_reads_the_hand_written_body_zero_copy():
    fields, files = parse_form(HAND_CONTENT_TYPE, HAND_BODY)
    assert fields == {"metadata": ['{"agents": []}'], "token": ["tok-1"]}
    (image,) = files["image"]
    assert bytes(image) == b"\x00\x01\r\n\x02" and image.readonly and image.obj is HAND_BODY


def test_parser_accepts_standard_clients_too():
    # RFC 7578 style: no leading CRLF, Content-Disposition capitalised, bare boundary, no Content-Type on text
    body = (
        b"--xyz\r\n"
        b'Content-Disposition: form-data; name="metadata"\r\n\r\n'
        b"{}\r\n"
        b"--xyz\r\n"
        b'content-disposition: form-data; name="image"; filename="a.bin"\r\n'
        b"content-type: application/octet-stream\r\n\r\n"
        b"abc\r\n"
        b"--xyz\r\n"
        b'Content-Disposition: form-data; name="image"; filename="b.bin"\r\n\r\n'
        b"de\r\n"
        b"--xyz--\r\n"
    )
    fields, files = parse_form("multipart/form-data; boundary=xyz", body)
    assert fields == {"metadata": ["{}"]}
    assert [bytes(v) for v in files["image"]] == [b"abc", b"de"]  # repeated names collected in order


def test_text_part_charset_is_honoured():
    body = (
        b"\r\n--B\r\nContent-Type: text/plain; charset=latin-1\r\n"
        b'Content-disposition: form-data; name="t"\r\n\r\n\xe9\r\n--B--\r\n'
    )
    assert parse_form("multipart/form-data; boundary=B", body)[0] == {"t": ["é"]}


def test_urlencoded_branch_is_byte_exact():
    # Unity escaping: lower-case hex, space %20, the set of protocol.md 2.3, bytes > 126 as UTF-8 escapes
    content_type, body = build_wwwform([("metadata", '{"a": "x y+é"}'), ("token", "")])
    assert content_type == "application/x-www-form-urlencoded"
    assert body == b"metadata=%7b%22a%22%3a%20%22x%20y%2b%c3%a9%22%7d&token="
    assert unity_url_encode(b"@&;:<>=?\"'/\\!#%+$,{}|^[]`") == (
        b"%40%26%3b%3a%3c%3e%3d%3f%22%27%2f%5c%21%23%25%2b%24%2c%7b%7d%7c%5e%5b%5d%60"
    )
    assert unity_url_encode(b"az_.-~\x1f\x7f") == b"az_.-~%1f%7f"
    assert parse_form(content_type, body) == ({"metadata": ['{"a": "x y+é"}'], "token": [""]}, {})


names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_-", min_size=1, max_size=12)
values = st.one_of(st.text(max_size=40), st.binary(max_size=200))


@settings(max_examples=60, deadline=None)
@given(fields=st.lists(st.tuples(names, values), min_size=1, max_size=6))
def test_round_trip(fields):
    content_type, body = build_wwwform(fields)
    parsed_fields, parsed_files = parse_form(content_type, body)
    expected_fields: dict = {}
    expected_files: dict = {}
    binary = any(isinstance(v, bytes) for _, v in fields)
    for name, value in fields:
        if isinstance(value, bytes):
            expected_files.setdefault(name, []).append(value)
        else:
            # in a multipart body a text part's line breaks are kept byte for byte
            expected_fields.setdefault(name, []).append(value)
    assert parsed_fields == expected_fields
    assert {k: [bytes(v) for v in vs] for k, vs in parsed_files.items()} == expected_files
    assert binary or parsed_files == {}


@settings(max_examples=60, deadline=None)
@given(forms=st.lists(st.lists(st.tuples(names, values), min_size=1, max_size=6), min_size=1, max_size=4))
def test_remembered_part_sizes_never_change_the_result(forms):
    # the same names with sizes that may change from form to form: a wrong size falls back to the scan
    sizes: dict[str, int] = {}
    for fields in forms:
        content_type, body = build_wwwform(fields)
        plain_fields, plain_files = parse_form(content_type, body)
        fields_, files_ = parse_form(content_type, body, part_sizes=sizes)
        assert fields_ == plain_fields
        assert {k: [bytes(v) for v in vs] for k, vs in files_.items()} == {
            k: [bytes(v) for v in vs] for k, vs in plain_files.items()
        }


def test_remembered_part_sizes_skip_the_scan_and_follow_changes():
    frame = b"\x00" * 1000
    sizes: dict[str, int] = {}
    content_type, body = build_wwwform([("metadata", "{}"), ("image", frame), ("token", "t")])
    parse_form(content_type, body, part_sizes=sizes)
    assert sizes["image"] == 1000 and sizes["metadata"] == 2
    content_type, body = build_wwwform([("metadata", "{}"), ("image", frame[:10]), ("token", "t")])
    _fields, files = parse_form(content_type, bytearray(body), part_sizes=sizes)  # smaller: scanned again
    assert bytes(files["image"][0]) == frame[:10] and sizes["image"] == 10
    with pytest.raises(MultipartError, match="no closing boundary"):  # a truncated body is still an error
        parse_form(content_type, body[: body.rindex(b"\r\n--")], part_sizes={"token": 1, "image": 10**6})


def test_payload_parts_and_legacy_action_returns():
    fields = {
        "metadata": ['{"agents": [{"actionReturn": "kept"}, {}], "sequenceId": 3}'],
        "actionReturns": ['["ignored", [1, 2]]'],
        "token": ["t"],
    }
    metadata, files, token = payload_parts_from_form(fields, {"image": []})
    assert metadata["agents"] == [{"actionReturn": "kept"}, {"actionReturn": [1, 2]}]
    assert token == "t" and files == {"image": []}
    assert payload_parts_from_form({"metadata": ["{}"]}, {})[2] is None


@pytest.mark.parametrize(
    ("content_type", "body", "match"),
    [
        (None, b"", "no Content-Type"),
        ("multipart/form-data", HAND_BODY, "no boundary parameter"),
        ('multipart/form-data; boundary="other"', HAND_BODY, "does not contain the boundary 'other'"),
        (HAND_CONTENT_TYPE, HAND_BODY[:-10], "no closing boundary"),
        (HAND_CONTENT_TYPE, HAND_BODY.replace(b"--\r\n", b"XX"), "no closing boundary|not followed by CRLF"),
        (
            "multipart/form-data; boundary=B",
            b"--B\r\nno colon here\r\n\r\nx\r\n--B--",
            "header line without ':'",
        ),
        (
            "multipart/form-data; boundary=B",
            b"--B\r\nContent-Type: x\r\n\r\nx\r\n--B--",
            "Content-Disposition",
        ),
        ("multipart/form-data; boundary=B", b"--B\r\nContent-Type: x\r\nx", "not terminated"),
        ("multipart/form-data; boundary=B", b"--Bjunk", "not followed by CRLF"),
        (
            "multipart/form-data; boundary=B",
            b"--B\r\nContent-Type: text/plain; charset=nope\r\nContent-Disposition: form-data; name=a\r\n\r\nx\r\n--B--",
            "cannot decode as nope",
        ),
        ("application/x-www-form-urlencoded", b"a=1&b", "urlencoded form body is malformed"),
        ("application/x-www-form-urlencoded", b"a=%ff", "urlencoded form body is malformed"),
    ],
)
def test_malformed_forms(content_type, body, match):
    with pytest.raises(MultipartError, match=match):
        parse_form(content_type, body)


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({}, "no 'metadata' field"),
        ({"metadata": ["{not json"]}, "'metadata' is not JSON"),
        ({"metadata": ["[1]"]}, "must be a JSON object, got list"),
        ({"metadata": ["{}"], "actionReturns": ["{bad"]}, "'actionReturns' is not JSON"),
    ],
)
def test_malformed_metadata(fields, match):
    with pytest.raises(MetadataError, match=match):
        payload_parts_from_form(fields, {})


@settings(max_examples=3000, deadline=None)
@given(st.text(st.sampled_from(list("aZ09 \t;=/-._+\"*'\\()%,:\r\n\x0b\x1c\x85\xa0é\0")), max_size=30))
def test_options_headers_split_directly_read_as_the_email_package_reads_them(value):
    """The direct split of plain values gives what the standard library's MIME parser gives, for any value."""
    from unirender.protocol.multipart import _parse_options_email

    try:
        expected = _parse_options_email(value)
    except Exception as exc:  # noqa: BLE001 - whatever it raises, the same must be raised
        with pytest.raises(type(exc)):
            parse_options_header(value)
        return
    assert parse_options_header(value) == expected


def test_plain_content_types_skip_the_email_package(monkeypatch):
    import unirender.protocol.multipart as multipart

    monkeypatch.setattr(multipart, "_parse_options_email", None)  # would fail if called
    assert parse_options_header("multipart/form-data; boundary=0aZ-_.9") == (
        "multipart/form-data", {"boundary": "0aZ-_.9"})
    assert parse_options_header("Application/JSON") == ("application/json", {})
    assert parse_options_header(None) == ("", {})
