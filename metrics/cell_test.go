package metrics

import (
	"sync"
	"testing"
)

func TestPairDrains(t *testing.T) {
	var p pair
	const n = drainCount*2 + 17
	for range n {
		p.add(3)
	}
	p.add(bigCost) // takes the locked path
	p.add(-5)      // counts, adds no cost
	count, cost := p.load()
	if count != n+2 || cost != 3*n+bigCost {
		t.Errorf("load() = %d, %d; want %d, %d", count, cost, n+2, 3*n+bigCost)
	}
}

func TestPairConcurrent(t *testing.T) {
	var p pair
	var wg sync.WaitGroup
	const workers, each = 4, drainCount / 2
	for range workers {
		wg.Go(func() {
			for range each {
				p.add(1000)
			}
		})
	}
	wg.Wait()
	if count, cost := p.load(); count != workers*each || cost != 1000*workers*each {
		t.Errorf("load() = %d, %d; want %d, %d", count, cost, workers*each, 1000*workers*each)
	}
}
