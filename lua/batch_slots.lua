#!lua flags=allow-cross-slot-keys
-- batch_slots.lua: lua/batch.lua for a Redis Cluster master, whose batches
-- name keys of the several slots it serves (ARGV[2] 's', no key declared:
-- declared keys of two slots are CROSSSLOT even with this flag on 7.0).
-- The flag lets one script touch keys of several slots; Redis still checks
-- every command's keys against the slots this node serves now. Needs
-- Redis 7 (a shebang line): only Redis Cluster pools load it.
--@include batch
