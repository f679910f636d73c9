package agent

import (
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

type uploadFile struct {
	name string // Content-Disposition filename: the full destination path
	data io.Reader
}

// multipartBody streams a multipart body through a pipe, so the request is
// sent chunked without Content-Length, like the JS SDK does.
func multipartBody(files []uploadFile) (io.Reader, string) {
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		for _, f := range files {
			h := textproto.MIMEHeader{}
			h.Set("Content-Disposition", fmt.Sprintf(`form-data; name="file"; filename=%q`, f.name))
			h.Set("Content-Type", "application/octet-stream")
			part, err := mw.CreatePart(h)
			if err == nil {
				_, err = io.Copy(part, f.data)
			}
			if err != nil {
				pw.CloseWithError(err)
				return
			}
		}
		pw.CloseWithError(mw.Close())
	}()
	return pr, mw.FormDataContentType()
}

func (e *testEnv) filesURL(query url.Values) string {
	return e.baseURL + "/files?" + query.Encode()
}

func doRequest(t *testing.T, c *http.Client, req *http.Request) (*http.Response, []byte) {
	t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

func decodeWriteInfos(t *testing.T, body []byte) []map[string]any {
	t.Helper()
	var infos []map[string]any
	if err := json.Unmarshal(body, &infos); err != nil {
		t.Fatalf("response %q: %v", body, err)
	}
	for _, info := range infos {
		if len(info) != 3 || info["name"] == nil || info["type"] != "file" || info["path"] == nil {
			t.Errorf("write info must be exactly {name,type,path}: %v", info)
		}
	}
	return infos
}

func TestUploadMultipartMultipleNestedFiles(t *testing.T) {
	env := newTestEnv(t)
	a := filepath.Join(env.dir, "up", "deep", "nested", "a.txt")
	b := filepath.Join(env.dir, "up", "b.bin")
	mustMkdir(t, filepath.Dir(b))
	writeFile(t, b, "old content that is longer than the new one")
	// Writes happen with the tester's permissions: give it the tree.
	for _, p := range []string{filepath.Dir(b), b} {
		if err := os.Chown(p, testUID, testUID); err != nil {
			t.Fatal(err)
		}
	}
	body, ctype := multipartBody([]uploadFile{
		{a, bytes.NewReader([]byte("alpha"))},
		{b, bytes.NewReader([]byte("beta"))},
		{"relative/c.txt", bytes.NewReader([]byte("gamma"))},
	})
	req, _ := http.NewRequest(http.MethodPost, env.filesURL(url.Values{"username": {"tester"}}), body)
	req.Header.Set("Content-Type", ctype)
	req.Header.Set(accessTokenHeader, testToken)
	resp, respBody := doRequest(t, env.h1Client, req)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("upload: %d %s", resp.StatusCode, respBody)
	}
	infos := decodeWriteInfos(t, respBody)
	c := filepath.Join(env.userHome, "relative", "c.txt")
	if len(infos) != 3 || infos[0]["path"] != a || infos[0]["name"] != "a.txt" || infos[1]["path"] != b || infos[2]["path"] != c {
		t.Fatalf("infos %v", infos)
	}
	for path, want := range map[string]string{a: "alpha", b: "beta", c: "gamma"} {
		if got, err := os.ReadFile(path); err != nil || string(got) != want {
			t.Errorf("%s = %q, %v", path, got, err)
		}
		assertOwner(t, path, testUID)
	}
	assertOwner(t, filepath.Join(env.dir, "up", "deep"), testUID)
}

func TestUploadSingleFileUsesPathQuery(t *testing.T) {
	env := newTestEnv(t)
	body, ctype := multipartBody([]uploadFile{{"ignored-name.txt", bytes.NewReader([]byte("hello world"))}})
	req, _ := http.NewRequest(http.MethodPost, env.filesURL(url.Values{"path": {"~/hello.txt"}}), body)
	req.Header.Set("Content-Type", ctype)
	req.Header.Set(accessTokenHeader, testToken)
	resp, respBody := doRequest(t, env.h2cClient, req)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("upload: %d %s", resp.StatusCode, respBody)
	}
	want := filepath.Join(env.rootHome, "hello.txt")
	if infos := decodeWriteInfos(t, respBody); len(infos) != 1 || infos[0]["path"] != want {
		t.Errorf("infos %v", infos)
	}
	// Download it back with the SDK's query shape.
	req, _ = http.NewRequest(http.MethodGet, env.filesURL(url.Values{"path": {want}}), nil)
	req.Header.Set(accessTokenHeader, testToken)
	resp, got := doRequest(t, env.h1Client, req)
	if resp.StatusCode != http.StatusOK || string(got) != "hello world" || resp.Header.Get("Content-Type") != "application/octet-stream" {
		t.Errorf("download %d %q %v", resp.StatusCode, got, resp.Header)
	}
}

func TestTwentyMiBBinaryRoundTrip(t *testing.T) {
	env := newTestEnv(t)
	data := make([]byte, 20<<20+123)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(env.dir, "big", "blob.bin")

	// Multipart upload over h2c.
	body, ctype := multipartBody([]uploadFile{{dst, bytes.NewReader(data)}})
	req, _ := http.NewRequest(http.MethodPost, env.filesURL(nil), body)
	req.Header.Set("Content-Type", ctype)
	req.Header.Set(accessTokenHeader, testToken)
	if resp, b := doRequest(t, env.h2cClient, req); resp.StatusCode != http.StatusOK {
		t.Fatalf("multipart upload: %d %s", resp.StatusCode, b)
	}

	// Plain download: Content-Length set, bytes identical. (Go's transport
	// would otherwise ask for gzip and decode it transparently.)
	req, _ = http.NewRequest(http.MethodGet, env.filesURL(url.Values{"path": {dst}}), nil)
	req.Header.Set(accessTokenHeader, testToken)
	req.Header.Set("Accept-Encoding", "identity")
	resp, got := doRequest(t, env.h2cClient, req)
	if resp.StatusCode != http.StatusOK || !bytes.Equal(got, data) || resp.ContentLength != int64(len(data)) {
		t.Fatalf("download: %d len %d content-length %d", resp.StatusCode, len(got), resp.ContentLength)
	}

	// Gzip download when asked for.
	req, _ = http.NewRequest(http.MethodGet, env.filesURL(url.Values{"path": {dst}}), nil)
	req.Header.Set(accessTokenHeader, testToken)
	req.Header.Set("Accept-Encoding", "gzip")
	resp, compressed := doRequest(t, env.h1Client, req)
	if resp.Header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("no gzip: %v", resp.Header)
	}
	zr, err := gzip.NewReader(bytes.NewReader(compressed))
	if err != nil {
		t.Fatal(err)
	}
	if unzipped, err := io.ReadAll(zr); err != nil || !bytes.Equal(unzipped, data) {
		t.Fatalf("gzip download differs: %v", err)
	}

	// Octet-stream upload with gzip Content-Encoding, overwriting.
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write(data[:5<<20])
	_ = zw.Close()
	req, _ = http.NewRequest(http.MethodPost, env.filesURL(url.Values{"path": {dst}}), &gz)
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("Content-Encoding", "gzip")
	req.Header.Set(accessTokenHeader, testToken)
	resp, b := doRequest(t, env.h1Client, req)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("octet-stream upload: %d %s", resp.StatusCode, b)
	}
	decodeWriteInfos(t, b)
	if onDisk, _ := os.ReadFile(dst); !bytes.Equal(onDisk, data[:5<<20]) {
		t.Errorf("octet-stream content differs (len %d)", len(onDisk))
	}
}

func TestFilesAuthAndErrors(t *testing.T) {
	env := newTestEnv(t)
	path := filepath.Join(env.dir, "signed.txt")
	writeFile(t, path, "signed content")

	getFile := func(q url.Values, token string) (*http.Response, []byte) {
		req, _ := http.NewRequest(http.MethodGet, env.filesURL(q), nil)
		if token != "" {
			req.Header.Set(accessTokenHeader, token)
		}
		return doRequest(t, env.h1Client, req)
	}

	resp, b := getFile(url.Values{"path": {path}}, "")
	assertJSONError(t, resp, b, http.StatusUnauthorized)
	resp, b = getFile(url.Values{"path": {path}}, "wrong")
	assertJSONError(t, resp, b, http.StatusUnauthorized)

	// v1 signature without and with expiration.
	sig := fileSignature(path, signOpRead, "", testToken, "")
	if resp, b := getFile(url.Values{"path": {path}, "signature": {sig}}, ""); resp.StatusCode != http.StatusOK || string(b) != "signed content" {
		t.Errorf("signed read: %d %s", resp.StatusCode, b)
	}
	exp := strconv.FormatInt(time.Now().Add(time.Minute).Unix(), 10)
	sig = fileSignature(path, signOpRead, "tester", testToken, exp)
	if resp, b := getFile(url.Values{"path": {path}, "username": {"tester"}, "signature": {sig}, "signature_expiration": {exp}}, ""); resp.StatusCode != http.StatusOK {
		t.Errorf("signed read with expiration: %d %s", resp.StatusCode, b)
	}
	past := strconv.FormatInt(time.Now().Add(-time.Minute).Unix(), 10)
	sig = fileSignature(path, signOpRead, "", testToken, past)
	resp, b = getFile(url.Values{"path": {path}, "signature": {sig}, "signature_expiration": {past}}, "")
	assertJSONError(t, resp, b, http.StatusUnauthorized)
	// A write signature does not allow reads.
	sig = fileSignature(path, signOpWrite, "", testToken, "")
	resp, b = getFile(url.Values{"path": {path}, "signature": {sig}}, "")
	assertJSONError(t, resp, b, http.StatusUnauthorized)

	// Signed write.
	dst := filepath.Join(env.dir, "signed-upload.txt")
	sig = fileSignature(dst, signOpWrite, "", testToken, "")
	req, _ := http.NewRequest(http.MethodPost, env.filesURL(url.Values{"path": {dst}, "signature": {sig}}), bytes.NewReader([]byte("via signature")))
	req.Header.Set("Content-Type", "application/octet-stream")
	if resp, b := doRequest(t, env.h1Client, req); resp.StatusCode != http.StatusOK {
		t.Errorf("signed write: %d %s", resp.StatusCode, b)
	}

	// Errors: missing file, directory, unknown user, bad content type.
	resp, b = getFile(url.Values{"path": {filepath.Join(env.dir, "missing")}}, testToken)
	assertJSONError(t, resp, b, http.StatusNotFound)
	resp, b = getFile(url.Values{"path": {env.dir}}, testToken)
	assertJSONError(t, resp, b, http.StatusBadRequest)
	resp, b = getFile(url.Values{"path": {path}, "username": {"nobody-here"}}, testToken)
	assertJSONError(t, resp, b, http.StatusUnauthorized)
	req, _ = http.NewRequest(http.MethodPost, env.filesURL(url.Values{"path": {dst}}), bytes.NewReader([]byte("x")))
	req.Header.Set("Content-Type", "text/plain")
	req.Header.Set(accessTokenHeader, testToken)
	resp, b = doRequest(t, env.h1Client, req)
	assertJSONError(t, resp, b, http.StatusBadRequest)
}

// A write as a user honours that user's permissions: a root-owned 0755
// directory refuses it (403) and nothing is created, while root may.
func TestUploadHonoursTheUsersPermissions(t *testing.T) {
	env := newTestEnv(t)
	locked := filepath.Join(env.dir, "locked")
	mustMkdir(t, locked)
	for _, target := range []string{filepath.Join(locked, "f.txt"), filepath.Join(locked, "sub", "f.txt")} {
		req, _ := http.NewRequest(http.MethodPost, env.filesURL(url.Values{"username": {"tester"}, "path": {target}}), strings.NewReader("x"))
		req.Header.Set("Content-Type", "application/octet-stream")
		req.Header.Set(accessTokenHeader, testToken)
		resp, body := doRequest(t, env.h1Client, req)
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("write of %s as tester: %d %s, want 403", target, resp.StatusCode, body)
		}
	}
	if ents, _ := os.ReadDir(locked); len(ents) != 0 {
		t.Errorf("refused writes left %v", ents)
	}
	req, _ := http.NewRequest(http.MethodPost, env.filesURL(url.Values{"username": {"root"}, "path": {filepath.Join(locked, "f.txt")}}), strings.NewReader("x"))
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set(accessTokenHeader, testToken)
	if resp, body := doRequest(t, env.h1Client, req); resp.StatusCode != http.StatusOK {
		t.Errorf("write as root: %d %s", resp.StatusCode, body)
	}
	// The agent's own threads kept root: a later root write still works.
	if err := os.WriteFile(filepath.Join(locked, "g"), nil, 0o644); err != nil {
		t.Errorf("agent process lost root: %v", err)
	}
}
