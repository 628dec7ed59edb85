import pytest

from unirender.platforms import PlatformRequest, parse_x_display


@pytest.mark.parametrize(
    "text, expected",
    [(":1", (1, None)), (":1.0", (1, 0)), ("1", (1, None)), ("12.3", (12, 3)), (" :0 ", (0, None))],
)
def test_x_display_forms(text, expected):
    assert parse_x_display(text) == expected


@pytest.mark.parametrize("text", ["", ":", "foo", ":1.", "localhost:10.0", ":a.0", "1.b", ":-1"])
def test_bad_x_display_is_a_clear_error(text):
    with pytest.raises(ValueError, match="invalid X display"):
        parse_x_display(text)


@pytest.mark.parametrize(
    "kwargs",
    [{"width": 0}, {"height": -5}, {"width": 3.5}, {"width": True}, {"x_display": "nope"}, {"gpu_device": -1},
     {"gpu_device": ""}, {"gpu_device": True}],
)  # fmt: skip
def test_request_rejects_bad_values(kwargs):
    with pytest.raises(ValueError):
        PlatformRequest(**kwargs)


def test_request_defaults():
    r = PlatformRequest(system="Linux")
    assert (r.width, r.height, r.x_display, r.gpu_device, r.allow_virtual_display, r.builtin) == (
        300, 300, None, None, True, False
    )  # fmt: skip
