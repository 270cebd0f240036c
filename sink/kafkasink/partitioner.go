package kafkasink

import (
	"log/slog"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
)

// partitioner hashes each record's key (the aggregate id) to a partition as the Java
// client does (murmur2), and warns when a topic's partition count changes: the
// aggregates that then hash elsewhere may have records on two partitions, and a
// consumer may read them out of order around the change.
type partitioner struct {
	logger *slog.Logger
	mu     sync.Mutex
	counts map[string]int // topic → partitions last seen
}

func (p *partitioner) ForTopic(topic string) kgo.TopicPartitioner {
	return &topicPartitioner{p: p, topic: topic, hash: kgo.StickyKeyPartitioner(nil).ForTopic(topic)}
}

type topicPartitioner struct {
	p     *partitioner
	topic string
	hash  kgo.TopicPartitioner
	last  int // the count this topic's partitioner last saw; calls are serialised per topic
}

// RequiresConsistency: a record always goes to its key's partition, even while that
// partition cannot be written to.
func (*topicPartitioner) RequiresConsistency(*kgo.Record) bool { return true }

func (tp *topicPartitioner) Partition(r *kgo.Record, n int) int {
	if n != tp.last {
		tp.p.seen(tp.topic, n)
		tp.last = n
	}
	return tp.hash.Partition(r, n)
}

// seen records that topic has n partitions, warning when that changed.
func (p *partitioner) seen(topic string, n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.counts == nil {
		p.counts = make(map[string]int)
	}
	before, known := p.counts[topic]
	p.counts[topic] = n
	if known && before != n {
		p.logger.Warn("kafkasink: the partition count of a topic changed; aggregates now hashed to another partition may be read out of order around the change",
			slog.String("topic", topic), slog.Int("partitions_before", before), slog.Int("partitions", n))
	}
}
