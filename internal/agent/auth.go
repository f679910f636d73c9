package agent

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
)

const accessTokenHeader = "X-Access-Token"

var errBadToken = errors.New("unauthorized access, please provide a valid access token or method signing if supported")

// tokenMatches reports whether presented equals the current token. With no
// token configured the sandbox is open (E2B "secure: false").
func (s *settings) tokenMatches(presented string) bool {
	want := s.token()
	if want == "" {
		return true
	}
	return subtle.ConstantTimeCompare([]byte(want), []byte(presented)) == 1
}

// requireToken guards plain HTTP routes with X-Access-Token.
func (a *Agent) requireToken(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !a.settings.tokenMatches(r.Header.Get(accessTokenHeader)) {
			writeJSONError(w, http.StatusUnauthorized, errBadToken)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// authInterceptor rejects Connect RPCs without the current token. Doing it
// as an interceptor (not HTTP middleware) lets connect-go encode the
// unauthenticated error correctly for every protocol and codec.
type authInterceptor struct{ settings *settings }

func (i *authInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if !i.settings.tokenMatches(req.Header().Get(accessTokenHeader)) {
			return nil, connect.NewError(connect.CodeUnauthenticated, errBadToken)
		}
		return next(ctx, req)
	}
}

func (i *authInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (i *authInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		if !i.settings.tokenMatches(conn.RequestHeader().Get(accessTokenHeader)) {
			return connect.NewError(connect.CodeUnauthenticated, errBadToken)
		}
		return next(ctx, conn)
	}
}

// Signing operations of /files URL signatures.
const (
	signOpRead  = "read"
	signOpWrite = "write"
)

// fileSignature computes envd's v1 URL signature:
// "v1_" + unpadded std base64(sha256("<path>:<op>:<user>:<token>[:<exp>]")).
func fileSignature(path, operation, username, token, expiration string) string {
	parts := []string{path, operation, username, token}
	if expiration != "" {
		parts = append(parts, expiration)
	}
	sum := sha256.Sum256([]byte(strings.Join(parts, ":")))
	return "v1_" + base64.RawStdEncoding.EncodeToString(sum[:])
}

// authorizeFileRequest implements /files auth: the X-Access-Token header if
// present, else a v1 signature in the query. A header that is present but
// wrong fails even if a valid signature is also given, as in envd.
func (a *Agent) authorizeFileRequest(r *http.Request, operation string) error {
	token := a.settings.token()
	if token == "" {
		return nil
	}
	if presented := r.Header.Get(accessTokenHeader); presented != "" {
		if !a.settings.tokenMatches(presented) {
			return errors.New("access token present in header but does not match")
		}
		return nil
	}
	q := r.URL.Query()
	sig := q.Get("signature")
	if sig == "" {
		return errors.New("missing access token or signature")
	}
	exp := q.Get("signature_expiration")
	want := fileSignature(q.Get("path"), operation, q.Get("username"), token, exp)
	if subtle.ConstantTimeCompare([]byte(want), []byte(sig)) != 1 {
		return errors.New("invalid signature")
	}
	if exp != "" {
		unix, err := strconv.ParseInt(exp, 10, 64)
		if err != nil {
			return errors.New("invalid signature expiration")
		}
		if unix < time.Now().Unix() {
			return errors.New("signature is already expired")
		}
	}
	return nil
}

// basicAuthUser extracts the user from "Authorization: Basic base64(user:)",
// which is how the SDKs select the user for RPCs. ok is false without the
// header, meaning "use the default user".
func basicAuthUser(h http.Header) (user string, ok bool) {
	r := http.Request{Header: h}
	user, _, ok = r.BasicAuth()
	if !ok || user == "" {
		return "", false
	}
	return user, true
}

// userForRPC resolves the user an RPC acts as, selected by
// "Authorization: Basic" or defaulted.
func (a *Agent) userForRPC(h http.Header) (*userAccount, error) {
	name, explicit := basicAuthUser(h)
	u, err := a.resolveUser(name, explicit)
	if err != nil {
		return nil, connect.NewError(connect.CodeUnauthenticated, fmt.Errorf("select user: %w", err))
	}
	return u, nil
}
