package redteam

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"regexp"
	"runtime"
	"time"

	"github.com/space-platform/space/pkg/apiv1"
)

func bombAttack() ServerAttack {
	return ServerAttack{
		Name: "gzip-bomb template upload", Timeout: 6 * time.Minute,
		Checks: []Check{{Name: "gzip-bomb template upload",
			Expected: "the build fails at its disk limit (or the upload is refused)",
			Escape:   "a few MB upload making the server unpack gigabytes onto its disk"}},
		Run: func(ctx context.Context, t *tenant) []Verdict { return []Verdict{t.bomb(ctx)} },
	}
}

// boundMessage matches what a server says when a bound stopped a build
// or a request: its disk limit, a quota, a size.
var boundMessage = regexp.MustCompile(`(?i)disk|limit|quota|too large|larger than|exceed|space left|bound`)

// bomb uploads a docker-save archive whose one gzip layer unpacks to
// BombBytes (one file of zeros) from about a thousandth of that, as a
// from: upload recipe, and waits for the build.
func (t *tenant) bomb(ctx context.Context) Verdict {
	name := "redteam-bomb-" + randomHex(4)
	archive, err := bombArchive(t.cfg.BombBytes, name)
	if err != nil {
		return failed("make the bomb: %v", err)
	}
	size := int64(len(archive))
	if !t.spend(size) {
		return skipped("the bomb's archive is %s, more than the run's upload budget (--max-upload-mib) has left", mib(size))
	}
	t.logf("uploading a %s archive that unpacks to %s", mib(size), mib(t.cfg.BombBytes))
	_, err = t.api.CreateTemplateFromArchive(ctx, apiv1.CreateTemplateRequest{Name: name, Recipe: "from: upload\n"}, bytes.NewReader(archive), size)
	if err != nil {
		if status := statusOf(err); status >= 400 && status < 500 && boundMessage.MatchString(err.Error()) {
			return held("the upload of %s (unpacking to %s) was refused, %d: %s", mib(size), mib(t.cfg.BombBytes), status, err)
		}
		return failed("upload the bomb: %v", err)
	}
	t.madeTemplate(name)
	tpl, err := t.waitTemplate(ctx, name)
	if err != nil {
		return failed("%v", err)
	}
	switch {
	case tpl.State == apiv1.TemplateReady:
		return broke("a %s upload became a ready template of %s (its layer unpacks to %s)", mib(size), mib(tpl.SizeBytes), mib(t.cfg.BombBytes))
	case boundMessage.MatchString(tpl.Reason):
		return held("the build of a %s upload that unpacks to %s failed: %s", mib(size), mib(t.cfg.BombBytes), tail(tpl.Reason, 300))
	default:
		return failed("the build failed for another reason than a bound, so the bomb proves nothing: %s", tail(tpl.Reason, 300))
	}
}

// bombChunk is the run of zeros one gzip member holds: the layer is the
// same member many times over (a gzip stream may be members back to
// back), so that making it costs one compression of 1 MiB, and the
// ratio is deflate's best (about 1,000:1) all the same.
const bombChunk = 1 << 20

// bombArchive is a docker-save archive (manifest.json, config.json, one
// gzip layer) whose layer is a tar of one file named name of zeros:
// unpacked at least unpacked bytes, compressed about a thousandth.
func bombArchive(unpacked int64, name string) ([]byte, error) {
	// The tar: a header, the file's zeros, two zero blocks at the end;
	// the zeros after the header are whole chunks.
	chunks := max(1, (unpacked+1024+bombChunk-1)/bombChunk)
	var hdr bytes.Buffer
	tw := tar.NewWriter(&hdr)
	if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: chunks*bombChunk - 1024, ModTime: time.Unix(0, 0)}); err != nil {
		return nil, err
	}
	var layer bytes.Buffer
	if err := gzipMember(&layer, hdr.Bytes()); err != nil {
		return nil, err
	}
	var zeros bytes.Buffer
	if err := gzipMember(&zeros, make([]byte, bombChunk)); err != nil {
		return nil, err
	}
	for range chunks {
		layer.Write(zeros.Bytes())
	}
	config, err := json.Marshal(map[string]any{"architecture": runtime.GOARCH, "os": "linux", "config": map[string]any{}})
	if err != nil {
		return nil, err
	}
	manifest, err := json.Marshal([]map[string]any{{"Config": "config.json", "RepoTags": []string{}, "Layers": []string{"layer.tar.gz"}}})
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	aw := tar.NewWriter(&out)
	for _, f := range []struct {
		name string
		data []byte
	}{{"manifest.json", manifest}, {"config.json", config}, {"layer.tar.gz", layer.Bytes()}} {
		if err := aw.WriteHeader(&tar.Header{Name: f.name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(f.data)), ModTime: time.Unix(0, 0)}); err != nil {
			return nil, err
		}
		if _, err := aw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := aw.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

func gzipMember(w *bytes.Buffer, data []byte) error {
	gz, err := gzip.NewWriterLevel(w, gzip.BestCompression)
	if err != nil {
		return err
	}
	if _, err := gz.Write(data); err != nil {
		return err
	}
	return gz.Close()
}
