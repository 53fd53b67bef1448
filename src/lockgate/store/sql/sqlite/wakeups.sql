-- Wake-ups between processes sharing the file: what migration 0024's triggers counted, per channel.

-- name: wakeup_counts
SELECT channel, seq FROM lockgate_wakeups;
