"""An event's times (``schemas.EventIn``): each must have a UTC form and a
form in the venue's zone, so out-of-range dates are refused by validation
(a 422), never left to fail where the event is stored or shown. Plain data."""

from __future__ import annotations

from datetime import UTC
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from pydantic import ValidationError
from ticketry_api.http.schemas import EventIn

BASE: dict[str, Any] = {
    "name": "Show", "venue": "Hall", "starts_at": "2027-06-01T20:00:00+02:00",
    "capacity": 10, "price": "1.00", "currency": "EUR",
}  # fmt: skip
FIELDS = ["starts_at", "doors_at", "on_sale_at"]
# The furthest-off zones: +14 and -11 hours.
ZONES = ["UTC", "Asia/Tokyo", "Pacific/Kiritimati", "Pacific/Pago_Pago"]


def event(field: str, value: str, timezone: str) -> dict[str, Any]:
    body = {**BASE, "timezone": timezone, field: value}
    if field == "doors_at":
        body["starts_at"] = value  # doors may not open after the start
    return body


@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize(
    "value",
    [
        "9999-12-31T23:00:00-05:00",  # no UTC form
        "0001-01-01T00:00:00+05:00",  # no UTC form
        "9999-12-31T23:00:00Z",  # no form in a zone east of UTC
        "0001-01-01T00:00:00Z",
        "9000-01-01T00:00:00Z",
        "8999-12-31T23:00:00-01:00",  # 9000 in UTC
        "1969-12-31T23:59:59Z",
        "1970-01-01T00:30:00+01:00",  # 1969 in UTC
    ],
)
@pytest.mark.parametrize("timezone", ["UTC", "Asia/Tokyo"])
def test_times_out_of_range_are_refused(field: str, value: str, timezone: str) -> None:
    with pytest.raises(ValidationError, match="1970-01-01") as refused:
        EventIn.model_validate(event(field, value, timezone))
    assert (field,) in [e["loc"] for e in refused.value.errors()]


@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize("value", ["1970-01-01T00:00:00Z", "8999-12-31T23:59:59Z", "8999-12-31T23:59:59+14:00"])
@pytest.mark.parametrize("timezone", ZONES)
def test_times_in_range_have_a_utc_and_a_venue_form(field: str, value: str, timezone: str) -> None:
    body = EventIn.model_validate(event(field, value, timezone))
    at = getattr(body, field)
    # What the api stores (UTC) and shows (the venue's zone)
    assert at.astimezone(UTC).astimezone(ZoneInfo(timezone)) == at
