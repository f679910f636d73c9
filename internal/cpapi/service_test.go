package cpapi_test

import (
	"testing"

	"github.com/space-platform/space/internal/cpapi"
	"github.com/space-platform/space/internal/cpapi/cpapitest"
)

// The control plane's own implementation, called in process.
func TestServiceConformance(t *testing.T) {
	cpapitest.Run(t, func(t *testing.T, svc *cpapi.Service) cpapi.ControlPlane { return svc })
}
