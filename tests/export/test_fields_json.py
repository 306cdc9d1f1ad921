"""The fast JSON path for share fields says exactly what the general encoder says."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from flowcast.export.segments import _encode_fields

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
fields = st.dictionaries(st.text(min_size=1), scalars | st.lists(scalars, max_size=3), max_size=3)


@given(scalars)
def test_single_value_fields_round_trip(value) -> None:
    encoded = _encode_fields({"value": value})
    assert json.loads(encoded) == {"value": value}
    assert encoded == json.dumps({"value": value}, separators=(",", ":"))


@given(fields)
def test_any_fields_round_trip(data) -> None:
    assert json.loads(_encode_fields(data)) == data


def test_values_json_cannot_say_become_their_repr() -> None:
    assert json.loads(_encode_fields({"value": {1}})) == {"value": "{1}"}
