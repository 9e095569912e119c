"""One acting scaler at a time: a Redis lock with a TTL and a fencing token.

What leadership gates (and what it does not)
--------------------------------------------
Every scaler instance observes the backlog, keeps the stabilisation history warm
and exports gauges. Only the leader *decides*: it records the decision and applies
it to its backend.

* ``kubernetes`` / ``dry-run``: there is one shared thing to scale (the renderer
  Deployment), so standbys do nothing at all. Two leaders would fight over
  ``spec.replicas``; the lock prevents that.
* ``local``: each scaler supervises the renderer processes of its own host, and
  supervision is *not* gated: every instance keeps its host's ``RENDERERS_MIN``
  renderers running and restarts crashed ones, leader or not (a host without
  renderers is wasted, and a Redis outage must not stop rendering). Only the
  leader's host scales *above* min, so hosts never race each other into
  overshoot. A standby (or a leader that loses the lock) goes back to min; when
  the leader's host dies, a standby takes the lock within ``LEADER_TTL_S`` and
  scales its own host. Standby floors drain backlog too, so a multi-host drain is
  faster than the target: the safe side.

Lock and fence (keys in ``ticketry.streams``)
---------------------------------------------
``SCALER_LEADER`` holds ``"<instance>|<token>"`` with a PX TTL of ``LEADER_TTL_S``;
acquiring it INCRs ``SCALER_FENCE`` for a new, strictly larger token (one Lua
script, so the two cannot come apart). The holder renews every tick (at most a
third of the TTL apart). Decisions are written by a script that XADDs only while
the lock still holds *this* token, so a paused ex-leader can never record a
decision after being superseded, and every recorded decision carries its token.
The Kubernetes API cannot check our token, so a stale leader could still PATCH
once between its last check and the takeover; that window is bounded by the
HTTP timeout (well under the TTL) and the PATCH is absolute (``replicas: n``), so
the new leader overwrites it on its next tick.
"""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis
from ticketry import streams
from ticketry.replies import as_text

# KEYS: leader, fence. ARGV: instance, ttl_ms. Returns the token held (or nil).
_ACQUIRE = """
local cur = redis.call('GET', KEYS[1])
if cur then
  local holder, token = string.match(cur, '^(.*)|(%d+)$')
  if holder == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return tonumber(token)
  end
  return false
end
local token = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1] .. '|' .. token, 'PX', ARGV[2])
return token
"""

# KEYS: leader. ARGV: expected value, ttl_ms. 1 if renewed.
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""

# KEYS: leader. ARGV: expected value. 1 if released.
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""

# KEYS: leader, stream. ARGV: expected value, maxlen, field1, value1, ... → id or nil.
_FENCED_XADD = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return false
end
local args = {'XADD', KEYS[2], 'MAXLEN', '~', ARGV[2], '*'}
for i = 3, #ARGV do args[#args + 1] = ARGV[i] end
return redis.call(unpack(args))
"""


class Leader:
    """Leadership of one scaler instance. ``tick()`` once per scaler interval."""

    def __init__(
        self,
        redis: Redis,
        instance: str,
        *,
        ttl_s: float = streams.LEADER_TTL_S,
        key: str = streams.SCALER_LEADER,
        fence_key: str = streams.SCALER_FENCE,
    ) -> None:
        if "|" in instance:
            raise ValueError("instance name must not contain '|'")
        self._redis = redis
        self.instance = instance
        self._ttl_ms = int(ttl_s * 1000)
        self._key = key
        self._fence_key = fence_key
        self.token: int | None = None
        self._acquire = redis.register_script(_ACQUIRE)
        self._renew = redis.register_script(_RENEW)
        self._release = redis.register_script(_RELEASE)
        self._xadd = redis.register_script(_FENCED_XADD)

    @property
    def is_leader(self) -> bool:
        return self.token is not None

    def _value(self) -> str:
        return f"{self.instance}|{self.token}"

    async def tick(self) -> bool:
        """Acquire or renew; returns whether this instance leads now.

        Redis errors propagate: the caller holds its state rather than acting on a
        leadership it cannot confirm.
        """
        if self.token is not None:
            renewed = await self._renew(keys=[self._key], args=[self._value(), self._ttl_ms])
            if int(renewed) == 1:
                return True
            self.token = None
        token = await self._acquire(keys=[self._key, self._fence_key], args=[self.instance, self._ttl_ms])
        self.token = None if token is None else int(token)
        return self.token is not None

    async def release(self) -> None:
        """Give the lock up (clean shutdown) so a standby takes over at once."""
        if self.token is not None:
            await self._release(keys=[self._key], args=[self._value()])
            self.token = None

    async def record(self, stream: str, fields: dict[str, Any], *, maxlen: int) -> str | None:
        """XADD ``fields`` (+ ``token``) to ``stream`` only while still the leader."""
        if self.token is None:
            return None
        flat: list[str] = []
        for k, v in {**fields, "token": self.token}.items():
            flat += [k, str(v)]
        entry_id = await self._xadd(keys=[self._key, stream], args=[self._value(), maxlen, *flat])
        if entry_id is None:
            self.token = None  # superseded
            return None
        return as_text(entry_id)
