"""The delayed-delivery arguments of a send (ipc.put_fields.delay_properties): one of
delay_level, deliver_at, delay_ms becomes the DELAY, TIMER_DELIVER_MS or TIMER_DELAY_MS
property; anything else is refused before anything is sent, naming the argument."""
import datetime

import pytest

from ipc.put_fields import delay_properties


def test_each_argument_becomes_its_property():
    assert delay_properties(None) is None
    assert delay_properties({"a": "b"}, delay_level=3) == {"a": "b", "DELAY": "3"}
    assert delay_properties(None, delay_ms=1500) == {"TIMER_DELAY_MS": "1500"}
    assert delay_properties({}, deliver_at=1_800_000_000_000) == {"TIMER_DELIVER_MS": "1800000000000"}
    at = datetime.datetime(2030, 1, 2, 3, 4, 5, 678000, tzinfo=datetime.timezone.utc)
    assert delay_properties(None, deliver_at=at) == {"TIMER_DELIVER_MS": str(int(at.timestamp() * 1000))}
    props = {"x": "1"}
    delay_properties(props, delay_level=1)
    assert props == {"x": "1"}                       # the caller's map is left alone


@pytest.mark.parametrize("kwargs, error, words", [
    ({"delay_level": 1, "delay_ms": 5}, ValueError, "not delay_level and delay_ms"),
    ({"delay_level": 0}, ValueError, "delay_level must be at least 1"),
    ({"delay_ms": -1}, ValueError, "delay_ms must be at least 0"),
    ({"delay_level": "3"}, TypeError, "delay_level must be an int"),
    ({"deliver_at": 1.5}, TypeError, "deliver_at must be an int or a datetime"),
])
def test_bad_arguments_are_refused(kwargs, error, words):
    with pytest.raises(error) as e:
        delay_properties(None, **kwargs)
    assert words in str(e.value)
