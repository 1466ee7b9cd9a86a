-- Wake a sleeping leader when an entry becomes due before the wake-up it planned.
-- The leader writes its planned wake-up time (ms) to the shard's wake key before sleeping;
-- deleting the key makes sure a burst of early schedules publishes once, not once each.
local function wake_if_earlier(wake_key, channel, shard, score)
  local planned = redis.call('GET', wake_key)
  if planned and score < tonumber(planned) then
    redis.call('DEL', wake_key)
    redis.call('PUBLISH', channel, shard)
  end
end
