package outboxmigrate

import (
	"crypto/md5" //nolint:gosec // a stable hash for partitioning, not security
	"encoding/binary"
)

// EventPartitions is the fixed number of event partitions: events.partition is in
// [0, EventPartitions). Relay partitions cover contiguous ranges of them.
const EventPartitions = 4096

// PartitionOf returns the event partition of an aggregate, as the generated column
// events.partition computes it in SQL: the first two bytes of
// md5(aggregate_type || 0x1f || aggregate_id), big endian, mod 4096.
func PartitionOf(aggregateType, aggregateID string) int {
	sum := md5.Sum([]byte(aggregateType + "\x1f" + aggregateID)) //nolint:gosec // see import
	return int(binary.BigEndian.Uint16(sum[:2])) % EventPartitions
}
