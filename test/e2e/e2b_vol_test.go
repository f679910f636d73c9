package e2e

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// E2B's volume API as the Python SDK calls it (e2b 2.x, volume/): the
// management routes with the API key, the content routes with the
// volume's token as a bearer, and volumeMounts on create, to real
// sandboxes.

type e2bVolume struct {
	VolumeID string `json:"volumeID"`
	Name     string `json:"name"`
	Token    string `json:"token"`
}

type e2bVolumeEntry struct {
	Name  string `json:"name"`
	Path  string `json:"path"`
	Type  string `json:"type"`
	Size  int64  `json:"size"`
	Mode  uint32 `json:"mode"`
	UID   uint32 `json:"uid"`
	GID   uint32 `json:"gid"`
	Mtime string `json:"mtime"`
	Atime string `json:"atime"`
	Ctime string `json:"ctime"`
}

// volumeContent sends a volume content request with the volume's token.
func volumeContent(t *testing.T, method string, v e2bVolume, route string, query url.Values, body string) e2bResponse {
	t.Helper()
	h := http.Header{}
	h.Set("Authorization", "Bearer "+v.Token)
	h.Del("X-API-KEY")
	var b any
	if body != "" {
		b = body
	}
	req := "/volumecontent/" + v.VolumeID + route + "?" + query.Encode()
	resp := e2bRequestAs(t, method, req, b, h, "")
	return resp
}

// e2bRequestAs is e2bRequest with another API key ("" for none).
func e2bRequestAs(t *testing.T, method, path string, body any, header http.Header, key string) e2bResponse {
	t.Helper()
	if header == nil {
		header = http.Header{}
	}
	header.Set("X-API-KEY", key)
	if key == "" {
		header["X-Api-Key"] = nil
	}
	return e2bRequest(t, method, path, body, header)
}

func TestE2BVolumes(t *testing.T) {
	name := fmt.Sprintf("e2b-vol-%d", time.Now().UnixNano()%1e9)
	resp := e2bRequest(t, http.MethodPost, "/volumes", map[string]string{"name": name}, nil)
	if resp.status != http.StatusCreated {
		t.Fatalf("create volume: %d %s", resp.status, resp.body)
	}
	var vol e2bVolume
	resp.json(t, &vol)
	t.Cleanup(func() { e2bRequest(t, http.MethodDelete, "/volumes/"+vol.VolumeID, nil, nil) })
	if vol.Name != name || vol.Token == "" || !strings.HasPrefix(vol.VolumeID, "vol-") {
		t.Fatalf("created volume: %s", resp.body)
	}
	e2bRequest(t, http.MethodPost, "/volumes", map[string]string{"name": name}, nil).wantError(t, http.StatusConflict, "taken")
	e2bRequest(t, http.MethodPost, "/volumes", map[string]string{}, nil).wantError(t, http.StatusBadRequest, "name")
	e2bRequest(t, http.MethodPost, "/volumes", `{"name":"Bad/Name"}`, nil).wantError(t, http.StatusBadRequest, "volume name")

	var listed []e2bVolume
	e2bRequest(t, http.MethodGet, "/volumes", nil, nil).json(t, &listed)
	found := false
	for _, v := range listed {
		found = found || v.VolumeID == vol.VolumeID && v.Name == name && v.Token == ""
	}
	if !found {
		t.Fatalf("list misses the volume (or shows its token): %+v", listed)
	}
	var got e2bVolume
	e2bRequest(t, http.MethodGet, "/volumes/"+vol.VolumeID, nil, nil).json(t, &got)
	if got != vol {
		t.Fatalf("get volume: %+v, want %+v", got, vol)
	}
	e2bRequest(t, http.MethodGet, "/volumes/vol-missing", nil, nil).wantError(t, http.StatusNotFound, "not found")

	// Content with the token, as the SDK's Volume does.
	q := func(kv ...string) url.Values {
		v := url.Values{}
		for i := 0; i+1 < len(kv); i += 2 {
			v.Set(kv[i], kv[i+1])
		}
		return v
	}
	resp = volumeContent(t, http.MethodPut, vol, "/file", q("path", "/a/b/c.txt"), "payload")
	var e e2bVolumeEntry
	if resp.status != http.StatusCreated {
		t.Fatalf("write: %d %s", resp.status, resp.body)
	}
	resp.json(t, &e)
	if e.Type != "file" || e.Size != 7 || e.Path != "/a/b/c.txt" || e.Mtime == "" || e.Atime == "" || e.Ctime == "" {
		t.Fatalf("written entry: %s", resp.body)
	}
	if resp := volumeContent(t, http.MethodGet, vol, "/file", q("path", "/a/b/c.txt"), ""); resp.status != 200 || string(resp.body) != "payload" {
		t.Fatalf("read: %d %q", resp.status, resp.body)
	}
	volumeContent(t, http.MethodGet, vol, "/file", q("path", "/a/missing"), "").wantError(t, http.StatusNotFound, "/a/missing")
	volumeContent(t, http.MethodPost, vol, "/dir", q("path", "/x/y"), "").wantError(t, http.StatusNotFound, "/x")
	if resp := volumeContent(t, http.MethodPost, vol, "/dir", q("path", "/x/y", "force", "true", "mode", "0750"), ""); resp.status != http.StatusCreated {
		t.Fatalf("mkdir with force: %d %s", resp.status, resp.body)
	} else if resp.json(t, &e); e.Type != "directory" || e.Mode&0o777 != 0o750 {
		t.Fatalf("made directory: %s", resp.body)
	}
	volumeContent(t, http.MethodPost, vol, "/dir", q("path", "/x/y"), "").wantError(t, http.StatusConflict, "exists")
	var entries []e2bVolumeEntry
	volumeContent(t, http.MethodGet, vol, "/dir", q("path", "/", "depth", "3"), "").json(t, &entries)
	paths := map[string]string{}
	for _, e := range entries {
		paths[e.Path] = e.Type
	}
	if paths["/a/b/c.txt"] != "file" || paths["/x/y"] != "directory" || paths["/a"] != "directory" {
		t.Fatalf("listing: %+v", entries)
	}
	resp = volumeContent(t, http.MethodPatch, vol, "/path", q("path", "/a/b/c.txt"), `{"mode":384,"uid":1000,"gid":1000}`)
	if resp.status != http.StatusOK {
		t.Fatalf("update metadata: %d %s", resp.status, resp.body)
	}
	resp.json(t, &e)
	if e.Mode&0o777 != 0o600 || e.UID != 1000 || e.GID != 1000 {
		t.Fatalf("after update: %s", resp.body)
	}
	if resp := volumeContent(t, http.MethodGet, vol, "/path", q("path", "/a/b/c.txt"), ""); resp.status != 200 {
		t.Fatalf("stat: %d %s", resp.status, resp.body)
	}
	// A wrong token, no token, or the token of another volume: nothing,
	// and the same answer whether the volume exists or not.
	wrong := vol
	wrong.Token = "not-the-token"
	volumeContent(t, http.MethodGet, wrong, "/file", q("path", "/a/b/c.txt"), "").wantError(t, http.StatusUnauthorized, "invalid volume token")
	other := vol
	other.VolumeID = "vol-other"
	volumeContent(t, http.MethodGet, other, "/file", q("path", "/a/b/c.txt"), "").wantError(t, http.StatusUnauthorized, "invalid volume token")
	e2bRequestAs(t, http.MethodGet, "/volumecontent/"+vol.VolumeID+"/file?path=/a/b/c.txt", nil, nil, "").wantError(t, http.StatusUnauthorized, "token")
	volumeContent(t, http.MethodGet, vol, "/file", q("path", ""), "").wantError(t, http.StatusBadRequest, "path")

	// A sandbox mounts it (by name, as the SDK sends it) and sees the
	// files; its writes land in the volume.
	sb := e2bCreate(t, "minimal", map[string]any{"volumeMounts": []map[string]string{{"name": name, "path": "/mnt/vol"}}})
	var detail struct {
		VolumeMounts []struct{ Name, Path string } `json:"volumeMounts"`
	}
	e2bRequest(t, http.MethodGet, "/sandboxes/"+sb.SandboxID, nil, nil).json(t, &detail)
	if len(detail.VolumeMounts) != 1 || detail.VolumeMounts[0].Name != name || detail.VolumeMounts[0].Path != "/mnt/vol" {
		t.Fatalf("sandbox detail volumeMounts: %+v", detail.VolumeMounts)
	}
	if got := execOK(t, sb.SandboxID, "cat /mnt/vol/a/b/c.txt && echo from-sandbox > /mnt/vol/s.txt"); got != "payload" {
		t.Fatalf("sandbox reads %q", got)
	}
	if resp := volumeContent(t, http.MethodGet, vol, "/file", q("path", "/s.txt"), ""); string(resp.body) != "from-sandbox\n" {
		t.Fatalf("volume API reads %d %q", resp.status, resp.body)
	}
	e2bRequest(t, http.MethodDelete, "/volumes/"+vol.VolumeID, nil, nil).wantError(t, http.StatusConflict, sb.SandboxID)

	// Mounts E2B's SDK could send that space refuses, clearly.
	for _, c := range []struct {
		mounts any
		status int
		msg    string
	}{
		{[]map[string]string{{"name": name, "path": "/proc"}}, http.StatusBadRequest, "/proc"},
		{[]map[string]string{{"name": name, "path": "/.space/bin"}}, http.StatusBadRequest, "/.space"},
		{[]map[string]string{{"name": name, "path": "/home/../etc"}}, http.StatusBadRequest, "clean"},
		{[]map[string]string{{"name": name, "path": ""}}, http.StatusBadRequest, "path"},
		{[]map[string]string{{"name": "no-such-volume", "path": "/data"}}, http.StatusNotFound, "no-such-volume"},
		{map[string]string{"name": name}, http.StatusBadRequest, "volumeMounts"},
	} {
		body := map[string]any{"templateID": "minimal", "timeout": 60, "volumeMounts": c.mounts}
		e2bRequest(t, http.MethodPost, "/sandboxes", body, nil).wantError(t, c.status, c.msg)
	}

	// Once the sandbox is gone the volume can be deleted, once.
	e2bRequest(t, http.MethodDelete, "/sandboxes/"+sb.SandboxID, nil, nil)
	if resp := e2bRequest(t, http.MethodDelete, "/volumes/"+vol.VolumeID, nil, nil); resp.status != http.StatusNoContent {
		t.Fatalf("delete volume: %d %s", resp.status, resp.body)
	}
	e2bRequest(t, http.MethodDelete, "/volumes/"+vol.VolumeID, nil, nil).wantError(t, http.StatusNotFound, "not found")
	volumeContent(t, http.MethodGet, vol, "/file", q("path", "/s.txt"), "").wantError(t, http.StatusUnauthorized, "invalid volume token")
}
