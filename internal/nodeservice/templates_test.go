package nodeservice

import (
	"context"
	"errors"
	"testing"

	"github.com/space-platform/space/internal/nodeapi"
)

// A delete names a template root volume by its id, a discard a staged
// archive by its handle: anything else (a build's or booted volume, a
// path) is refused before the node or its manager is touched.
func TestTemplateCallsRefuseOtherNames(t *testing.T) {
	ctx := context.Background()
	var h Node // no node and no manager: a refusal must not reach them
	for _, id := range []string{"", "build-0123", "../volumes", "0123456789abcdef0123456789ABCDEF", "0123456789abcdef0123456789abcdef0"} {
		if err := h.DeleteTemplate(ctx, id); !errors.Is(err, nodeapi.ErrInvalidName) {
			t.Errorf("delete template %q: %v, want ErrInvalidName", id, err)
		}
	}
	for _, handle := range []string{"", "archive-1/../../x", "/tmp/archive-1", "upload-1"} {
		if err := h.DiscardTemplateArchive(ctx, handle); !errors.Is(err, nodeapi.ErrInvalidName) {
			t.Errorf("discard archive %q: %v, want ErrInvalidName", handle, err)
		}
	}
	if !isTemplateID("0123456789abcdef0123456789abcdef") {
		t.Error("a 32-digit hex id is not taken as a template id")
	}
}
