package e2b

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/space-platform/space/internal/agent/gen/filesystempb"
	"github.com/space-platform/space/internal/auth"
	"github.com/space-platform/space/internal/controlplane"
	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/project"
	"github.com/space-platform/space/pkg/apiv1"
)

// E2B's volumes: /volumes manages them with the API key, /volumecontent
// reaches their files with the volume's own token (VolumeAndToken.token,
// sent as a bearer token) or the API key, on the API's host as the SDK's
// default volume API URL is. They map onto space's persistent volumes.

// VolumeControl is what the volume routes need of the control plane.
type VolumeControl interface {
	CreateVolume(ctx context.Context, scope project.Scope, req apiv1.CreateVolumeRequest) (controlplane.Volume, error)
	Volumes(scope project.Scope) ([]controlplane.Volume, error)
	ResolveVolume(scope project.Scope, ref string) (controlplane.Volume, error)
	VolumeByToken(id, token string) (controlplane.Volume, error)
	DeleteVolume(ctx context.Context, scope project.Scope, ref string) error
	VolumeStore(v controlplane.Volume) (controlplane.VolumeStore, error)
}

// maxVolumeFile bounds one upload through the volume content API.
const maxVolumeFile = 1 << 30

// E2B's Volume and VolumeAndToken.
type volumeJSON struct {
	VolumeID string `json:"volumeID"`
	Name     string `json:"name"`
}

type volumeAndToken struct {
	volumeJSON
	Token string `json:"token"`
}

// volumeEntry is E2B's VolumeEntryStat.
type volumeEntry struct {
	Name   string  `json:"name"`
	Path   string  `json:"path"`
	Type   string  `json:"type"`
	Size   int64   `json:"size"`
	Mode   uint32  `json:"mode"`
	UID    uint32  `json:"uid"`
	GID    uint32  `json:"gid"`
	Atime  string  `json:"atime"`
	Mtime  string  `json:"mtime"`
	Ctime  string  `json:"ctime"`
	Target *string `json:"target,omitempty"`
}

// sandboxVolumeMount is E2B's SandboxVolumeMount.
type sandboxVolumeMount struct {
	Name string `json:"name"`
	Path string `json:"path"`
}

// volumeMounts translates a create request's volumeMounts (E2B names the
// volume) into space's; the message of a 400 when they are malformed.
func volumeMounts(raw json.RawMessage) ([]apiv1.VolumeMount, string) {
	if emptyJSON(raw) {
		return nil, ""
	}
	var in []sandboxVolumeMount
	if err := json.Unmarshal(raw, &in); err != nil {
		return nil, "volumeMounts must be an array of {name, path}: " + err.Error()
	}
	out := make([]apiv1.VolumeMount, 0, len(in))
	for _, m := range in {
		if m.Name == "" || m.Path == "" {
			return nil, "every volume mount needs a name and a path"
		}
		out = append(out, apiv1.VolumeMount{Volume: m.Name, Path: m.Path})
	}
	return out, ""
}

// mountsView is a sandbox's volumeMounts as E2B shows them.
func mountsView(s controlplane.Sandbox) []sandboxVolumeMount {
	var out []sandboxVolumeMount
	for _, m := range s.Mounts {
		out = append(out, sandboxVolumeMount{Name: m.Name, Path: m.Path})
	}
	return out
}

func volumeView(v controlplane.Volume) volumeJSON {
	return volumeJSON{VolumeID: v.ID, Name: v.Name}
}

func (h *Handler) createVolume(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Name string `json:"name"`
	}
	present, ok := readJSON(w, r, &req)
	if !ok {
		return
	}
	if !present || req.Name == "" {
		writeError(w, http.StatusBadRequest, "name is required")
		return
	}
	v, err := h.cfg.ControlPlane.CreateVolume(r.Context(), scopeOf(r), apiv1.CreateVolumeRequest{Name: req.Name})
	if err != nil {
		h.failVolume(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, volumeAndToken{volumeJSON: volumeView(v), Token: v.Token})
}

func (h *Handler) listVolumes(w http.ResponseWriter, r *http.Request) {
	vols, err := h.cfg.ControlPlane.Volumes(scopeOf(r))
	if err != nil {
		h.failVolume(w, err)
		return
	}
	out := make([]volumeJSON, 0, len(vols))
	for _, v := range vols {
		out = append(out, volumeView(v))
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *Handler) getVolume(w http.ResponseWriter, r *http.Request) {
	v, err := h.cfg.ControlPlane.ResolveVolume(scopeOf(r), r.PathValue("volumeID"))
	if err != nil {
		h.failVolume(w, err)
		return
	}
	writeJSON(w, http.StatusOK, volumeAndToken{volumeJSON: volumeView(v), Token: v.Token})
}

func (h *Handler) deleteVolume(w http.ResponseWriter, r *http.Request) {
	if err := h.cfg.ControlPlane.DeleteVolume(r.Context(), scopeOf(r), r.PathValue("volumeID")); err != nil {
		h.failVolume(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// failVolume answers an error of the volume routes; a file or lookup
// error of the node keeps its status.
func (h *Handler) failVolume(w http.ResponseWriter, err error) {
	var ae *nodeapi.AgentError
	if errors.As(err, &ae) {
		writeError(w, ae.Status, ae.Message)
		return
	}
	h.fail(w, err)
}

// volumeContent authenticates a volume content request, by the volume's
// token or an API key that sees the volume, and hands the handler the
// volume and its node. A token that is neither the volume's nor an API key
// gets a 401 whether the volume exists or not; an API key of another
// project gets the 404 of a missing volume.
func (h *Handler) volumeContent(next func(http.ResponseWriter, *http.Request, controlplane.Volume, controlplane.VolumeStore)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("volumeID")
		secret := r.Header.Get("X-API-Key")
		bearer, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		bearer = strings.TrimSpace(bearer)
		if secret == "" && bearer == "" {
			writeError(w, http.StatusUnauthorized, "missing volume token: send Authorization: Bearer <the volume's token>")
			return
		}
		var v controlplane.Volume
		var err error
		if secret == "" {
			v, err = h.cfg.ControlPlane.VolumeByToken(id, bearer)
			if err != nil {
				// Not the volume's token: perhaps an API key as bearer.
				k, kerr := h.cfg.Keys.Check(bearer)
				if kerr != nil {
					writeError(w, http.StatusUnauthorized, "invalid volume token: send the token of this volume (Volume.getInfo returns it) or an API key of its project")
					return
				}
				v, err = h.cfg.ControlPlane.ResolveVolume(k.Scope(), id)
			}
		} else if k, kerr := h.cfg.Keys.Check(secret); kerr != nil {
			writeError(w, http.StatusUnauthorized, "invalid API key")
			return
		} else {
			v, err = h.cfg.ControlPlane.ResolveVolume(k.Scope(), id)
		}
		if err != nil || v.ID != id {
			writeError(w, http.StatusNotFound, fmt.Sprintf("volume %.70q not found", id))
			return
		}
		st, err := h.cfg.ControlPlane.VolumeStore(v)
		if err != nil {
			h.failVolume(w, err)
			return
		}
		next(w, r, v, st)
	}
}

// contentPath reads the path query parameter.
func contentPath(w http.ResponseWriter, r *http.Request) (string, bool) {
	p := r.URL.Query().Get("path")
	switch {
	case p == "":
		writeError(w, http.StatusBadRequest, "the path query parameter is required")
		return "", false
	case len(p) > 4096 || strings.ContainsRune(p, 0):
		writeError(w, http.StatusBadRequest, "path must be at most 4096 bytes without NUL")
		return "", false
	case !strings.HasPrefix(p, "/"):
		p = "/" + p // E2B's volume paths are relative to the volume's root
	}
	return p, true
}

// attrs reads uid, gid and mode (octal or decimal) from the query.
func attrs(w http.ResponseWriter, r *http.Request, e *nodeapi.VolumeEdit) bool {
	for _, f := range []struct {
		name string
		dst  **uint32
	}{{"uid", &e.UID}, {"gid", &e.GID}, {"mode", &e.Mode}} {
		s := r.URL.Query().Get(f.name)
		if s == "" {
			continue
		}
		n, err := strconv.ParseUint(s, 0, 32)
		if err != nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("%s must be a non-negative integer, got %.32q", f.name, s))
			return false
		}
		v := uint32(n)
		*f.dst = &v
	}
	e.Parents = r.URL.Query().Get("force") == "true"
	return true
}

func (h *Handler) listVolumeDir(w http.ResponseWriter, r *http.Request, v controlplane.Volume, st controlplane.VolumeStore) {
	p, ok := contentPath(w, r)
	if !ok {
		return
	}
	depth := 1
	if s := r.URL.Query().Get("depth"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 64 {
			writeError(w, http.StatusBadRequest, "depth must be an integer between 1 and 64")
			return
		}
		depth = n
	}
	name := nodeapi.VolumeName(v.ID)
	if e, err := st.EditVolume(r.Context(), nodeapi.VolumeEdit{Volume: name, Path: p, Op: nodeapi.VolumeStat}); err != nil {
		h.failVolume(w, err)
		return
	} else if e.GetType() != filesystempb.FileType_FILE_TYPE_DIRECTORY {
		writeError(w, http.StatusBadRequest, p+" is not a directory")
		return
	}
	out := []volumeEntry{}
	cursor := ""
	for {
		page, err := st.ListVolumeDir(r.Context(), name, p, nodeapi.ListOptions{Depth: depth, Cursor: cursor})
		if err != nil {
			h.failVolume(w, err)
			return
		}
		for {
			e, err := page.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				page.Close()
				h.failVolume(w, err)
				return
			}
			if len(out) >= maxListEntries {
				page.Close()
				writeError(w, http.StatusInsufficientStorage, fmt.Sprintf("the listing has more than %d entries; list a smaller directory or a lower depth", maxListEntries))
				return
			}
			out = append(out, entryJSON(e))
		}
		cursor = page.NextCursor()
		page.Close()
		if cursor == "" {
			break
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// maxListEntries bounds one answer of the volume content API's listing,
// which E2B returns in one array.
const maxListEntries = 50000

func (h *Handler) makeVolumeDir(w http.ResponseWriter, r *http.Request, v controlplane.Volume, st controlplane.VolumeStore) {
	p, ok := contentPath(w, r)
	if !ok {
		return
	}
	edit := nodeapi.VolumeEdit{Volume: nodeapi.VolumeName(v.ID), Path: p, Op: nodeapi.VolumeMkdir}
	if !attrs(w, r, &edit) {
		return
	}
	e, err := st.EditVolume(r.Context(), edit)
	if err != nil {
		h.failVolume(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, entryJSON(e))
}

func (h *Handler) statVolumePath(w http.ResponseWriter, r *http.Request, v controlplane.Volume, st controlplane.VolumeStore) {
	p, ok := contentPath(w, r)
	if !ok {
		return
	}
	e, err := st.EditVolume(r.Context(), nodeapi.VolumeEdit{Volume: nodeapi.VolumeName(v.ID), Path: p, Op: nodeapi.VolumeStat})
	if err != nil {
		h.failVolume(w, err)
		return
	}
	writeJSON(w, http.StatusOK, entryJSON(e))
}

func (h *Handler) updateVolumePath(w http.ResponseWriter, r *http.Request, v controlplane.Volume, st controlplane.VolumeStore) {
	p, ok := contentPath(w, r)
	if !ok {
		return
	}
	var body struct {
		UID  *uint32 `json:"uid"`
		GID  *uint32 `json:"gid"`
		Mode *uint32 `json:"mode"`
	}
	if _, ok := readJSON(w, r, &body); !ok {
		return
	}
	e, err := st.EditVolume(r.Context(), nodeapi.VolumeEdit{Volume: nodeapi.VolumeName(v.ID), Path: p, Op: nodeapi.VolumeChattr,
		UID: body.UID, GID: body.GID, Mode: body.Mode})
	if err != nil {
		h.failVolume(w, err)
		return
	}
	writeJSON(w, http.StatusOK, entryJSON(e))
}

func (h *Handler) removeVolumePath(w http.ResponseWriter, r *http.Request, v controlplane.Volume, st controlplane.VolumeStore) {
	p, ok := contentPath(w, r)
	if !ok {
		return
	}
	if _, err := st.EditVolume(r.Context(), nodeapi.VolumeEdit{Volume: nodeapi.VolumeName(v.ID), Path: p, Op: nodeapi.VolumeRemove}); err != nil {
		h.failVolume(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *Handler) readVolumeFile(w http.ResponseWriter, r *http.Request, v controlplane.Volume, st controlplane.VolumeStore) {
	p, ok := contentPath(w, r)
	if !ok {
		return
	}
	body, e, err := st.ReadVolumeFile(r.Context(), nodeapi.VolumeName(v.ID), p)
	if err != nil {
		h.failVolume(w, err)
		return
	}
	defer body.Close()
	if e.GetType() == filesystempb.FileType_FILE_TYPE_DIRECTORY {
		writeError(w, http.StatusBadRequest, p+" is a directory")
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(e.GetSize(), 10))
	w.WriteHeader(http.StatusOK)
	_, _ = io.Copy(w, body)
}

// writeVolumeFile writes a file from the request body; missing parent
// directories are made (as envd's file writes make them), durable before
// the answer.
func (h *Handler) writeVolumeFile(w http.ResponseWriter, r *http.Request, v controlplane.Volume, st controlplane.VolumeStore) {
	p, ok := contentPath(w, r)
	if !ok {
		return
	}
	edit := nodeapi.VolumeEdit{Volume: nodeapi.VolumeName(v.ID), Path: p}
	if !attrs(w, r, &edit) {
		return
	}
	edit.Parents = true
	if r.ContentLength > maxVolumeFile {
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("file larger than %d bytes", maxVolumeFile))
		return
	}
	key, _ := r.Context().Value(keyContext{}).(auth.Key)
	if !h.cfg.Uploads.Admit(w, key.ID) {
		return
	}
	defer h.cfg.Uploads.Leave(key.ID)
	e, err := st.WriteVolumeFile(r.Context(), edit, http.MaxBytesReader(w, r.Body, maxVolumeFile))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("file larger than %d bytes", maxVolumeFile))
			return
		}
		h.failVolume(w, err)
		return
	}
	// 201, as E2B's spec says: the Python SDK's generated client parses
	// the entry of no other status ("Body of the request is None").
	writeJSON(w, http.StatusCreated, entryJSON(e))
}

// entryJSON is a node's entry as E2B's VolumeEntryStat: the node reports
// one time (the modification), which stands for all three.
func entryJSON(e *filesystempb.EntryInfo) volumeEntry {
	kind := "file"
	switch e.GetType() {
	case filesystempb.FileType_FILE_TYPE_DIRECTORY:
		kind = "directory"
	case filesystempb.FileType_FILE_TYPE_SYMLINK:
		kind = "symlink"
	}
	mod := time.Unix(0, 0).UTC()
	if t := e.GetModifiedTime(); t != nil {
		mod = t.AsTime().UTC()
	}
	ts := mod.Format(time.RFC3339Nano)
	uid, _ := strconv.ParseUint(e.GetOwner(), 10, 32)
	gid, _ := strconv.ParseUint(e.GetGroup(), 10, 32)
	return volumeEntry{
		Name: e.GetName(), Path: e.GetPath(), Type: kind, Size: e.GetSize(), Mode: e.GetMode(),
		UID: uint32(uid), GID: uint32(gid), Atime: ts, Mtime: ts, Ctime: ts, Target: e.SymlinkTarget,
	}
}
