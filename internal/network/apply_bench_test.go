package network

import (
	"fmt"
	"os"
	"testing"
	"time"
)

// BenchmarkApplyPolicy measures Egress.Apply on a slot with an uplink:
// "claim" alternates a held and a released copy of one policy (a warm
// pool's sandbox waiting for, and taken by, its owner), "change" two
// different policies (a reload of the gateway's table each time).
func BenchmarkApplyPolicy(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	open := Policy{AllowInternet: true}
	held := open
	held.Hold = true
	for _, c := range []struct {
		name string
		a, b Policy
	}{
		{"claim", held, open},
		{"change", Policy{}, open},
	} {
		b.Run(c.name, func(b *testing.B) {
			e, err := NewEgress(EgressConfig{UplinkPool: testPool, Limits: Limits{BandwidthMbit: 200, MaxConnections: 1024}})
			if err != nil {
				b.Fatal(err)
			}
			s, err := testSlots.Create(fmt.Sprintf("bench%d", time.Now().UnixNano()%100000))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Destroy()
			if err := e.Apply(s, c.a); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				p := c.b
				if i%2 == 1 {
					p = c.a
				}
				if err := e.Apply(s, p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
