package outboxmigrate

// EventPartitions is the fixed number of event partitions: events.partition is in
// [0, EventPartitions), generated in SQL from a hash of the aggregate key (ask
// PostgreSQL: SELECT outbox.partition_of(aggregate_type, aggregate_id)). Relay
// partitions cover contiguous ranges of them.
const EventPartitions = 4096
