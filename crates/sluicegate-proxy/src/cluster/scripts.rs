//! The Lua scripts the plane runs in Redis, each atomic and each on one
//! key (so any of them fits a Redis Cluster slot), with Redis's own clock
//! (`TIME`): the instances' clocks do not matter to a rate.

use redis::Script;

/// A token bucket of `burst` tokens refilled one per `interval` (in
/// microseconds, fractional): takes up to `want` whole tokens and returns
/// how many it took; a negative `want` puts tokens back (up to `burst`).
/// The key expires once the bucket would be full again.
const TAKE: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local want = tonumber(ARGV[3])
local v = redis.call('HMGET', KEYS[1], 'tok', 'ts')
local tok = tonumber(v[1])
local ts = tonumber(v[2])
if tok == nil or ts == nil then
  tok = burst
elseif now > ts then
  tok = math.min(burst, tok + (now - ts) / interval)
end
local got = 0
if want < 0 then
  tok = math.min(burst, tok - want)
else
  got = math.max(0, math.min(want, math.floor(tok)))
  tok = tok - got
end
redis.call('HSET', KEYS[1], 'tok', tostring(tok), 'ts', string.format('%.0f', now))
redis.call('PEXPIRE', KEYS[1], math.ceil(interval * burst / 1000) + 1000)
return got
"#;

/// A quota counter for one window: takes up to `want` units of what is
/// left of `limit` and returns `{taken, used}`; a negative `want` gives
/// units back. The key expires at `expire_at` (Unix seconds), after the
/// window's end.
const QUOTA: &str = r#"
local limit = tonumber(ARGV[1])
local want = tonumber(ARGV[2])
local used = tonumber(redis.call('GET', KEYS[1]) or '0')
if want < 0 then
  local back = math.min(-want, used)
  if back > 0 then used = redis.call('DECRBY', KEYS[1], back) end
  return {0, used}
end
local got = math.max(0, math.min(want, limit - used))
if got > 0 then
  used = redis.call('INCRBY', KEYS[1], got)
  redis.call('EXPIREAT', KEYS[1], ARGV[3])
end
return {got, used}
"#;

/// This instance's heartbeat in a sorted set scored by Redis's time;
/// members silent for `ttl_ms` are dropped; returns how many are alive.
const HEARTBEAT: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[2]))
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]) * 2)
return redis.call('ZCARD', KEYS[1])
"#;

/// This instance leaving (a graceful stop): its heartbeat is taken out;
/// returns how many are left.
const LEAVE: &str = r#"
redis.call('ZREM', KEYS[1], ARGV[1])
return redis.call('ZCARD', KEYS[1])
"#;

/// The scripts, hashed once (`EVALSHA`, loaded on first use).
pub(super) struct Scripts {
    pub take: Script,
    pub quota: Script,
    pub heartbeat: Script,
    pub leave: Script,
}

impl Scripts {
    pub(super) fn new() -> Scripts {
        Scripts {
            take: Script::new(TAKE),
            quota: Script::new(QUOTA),
            heartbeat: Script::new(HEARTBEAT),
            leave: Script::new(LEAVE),
        }
    }
}
