package client

import (
	"context"
	"errors"
	"net/http"
	"testing"
)

func TestNodeCalls(t *testing.T) {
	node := `{"id":"n1","address":"http://n1:7071","state":"cordoned","vcpus":4}`
	c, rec := newRecordingServer(t, map[string]cannedResponse{
		"GET /v1/nodes":              {http.StatusOK, "", `{"nodes":[` + node + `]}`},
		"GET /v1/nodes/n1":           {http.StatusOK, "", node},
		"POST /v1/nodes/n1/cordon":   {http.StatusOK, "", node},
		"POST /v1/nodes/n1/uncordon": {http.StatusOK, "", node},
		"POST /v1/nodes/n1/drain":    {http.StatusAccepted, "", node},
		"DELETE /v1/nodes/n1":        {http.StatusOK, "", `{"id":"n1","state":"lost","reason":"removed with force"}`},
		"DELETE /v1/nodes/n2":        {http.StatusNoContent, "", ""},
		"POST /v1/nodes/n3/drain":    {http.StatusConflict, "", `{"code":409,"message":"node n3 is lost and cannot be drained"}`},
	})
	ctx := context.Background()
	list, err := c.ListNodes(ctx)
	if err != nil || len(list) != 1 || list[0].ID != "n1" || list[0].VCPUs != 4 {
		t.Fatalf("ListNodes = %+v, %v", list, err)
	}
	if n, err := c.GetNode(ctx, "n1"); err != nil || n.Address != "http://n1:7071" {
		t.Fatalf("GetNode = %+v, %v", n, err)
	}
	for name, call := range map[string]func(context.Context, string) (any, error){
		"cordon":   func(ctx context.Context, id string) (any, error) { return c.CordonNode(ctx, id) },
		"uncordon": func(ctx context.Context, id string) (any, error) { return c.UncordonNode(ctx, id) },
		"drain":    func(ctx context.Context, id string) (any, error) { return c.DrainNode(ctx, id) },
	} {
		if _, err := call(ctx, "n1"); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if r := rec.last(t); r.method != http.MethodPost || r.path != "/v1/nodes/n1/"+name {
			t.Fatalf("%s sent %s %s", name, r.method, r.path)
		}
	}
	n, err := c.RemoveNode(ctx, "n1", true)
	if err != nil || n == nil || n.State != "lost" {
		t.Fatalf("forced RemoveNode = %+v, %v", n, err)
	}
	if r := rec.last(t); r.rawQuery != "force=true" {
		t.Fatalf("forced remove sent query %q", r.rawQuery)
	}
	n, err = c.RemoveNode(ctx, "n2", false)
	if err != nil || n != nil {
		t.Fatalf("RemoveNode of a deleted node = %+v, %v, want nil, nil", n, err)
	}
	if r := rec.last(t); r.rawQuery != "" {
		t.Fatalf("remove without force sent query %q", r.rawQuery)
	}
	var apiErr *APIError
	if _, err := c.DrainNode(ctx, "n3"); !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusConflict {
		t.Fatalf("drain refused: %v", err)
	}
}
