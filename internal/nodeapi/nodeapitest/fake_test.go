package nodeapitest

import "testing"

func TestFakeConformance(t *testing.T) {
	Run(t, func(t *testing.T) Harness {
		f := NewFake("fake")
		return FakeHarness(f, f)
	})
}
