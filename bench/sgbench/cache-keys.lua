-- wrk script of the cache-miss-coalesced scenario: each request asks for
-- one of KEYS keys in turn (/cache/slow/0 .. /cache/slow/3), so many
-- clients share few objects.
local KEYS = 4
local i = 0
request = function()
  i = i + 1
  return wrk.format("GET", "/cache/slow/" .. (i % KEYS))
end
