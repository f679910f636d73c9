package client

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/space-platform/space/pkg/apiv1"
)

// APIError is a non-2xx response from the server.
type APIError struct {
	StatusCode int
	// Message is the server's explanation, a plain sentence such as
	// "sandbox abc not found".
	Message string
}

func (e *APIError) Error() string {
	if e.Message != "" {
		return e.Message
	}
	return "server answered " + http.StatusText(e.StatusCode)
}

// IsNotFound reports whether err is a 404 from the server.
func IsNotFound(err error) bool { return hasStatus(err, http.StatusNotFound) }

// IsConflict reports whether err is a 409 from the server (for example a
// wait that ended in another state, or deleting a template in use).
func IsConflict(err error) bool { return hasStatus(err, http.StatusConflict) }

// IsTimeout reports whether err is a 408 from the server (a wait that timed out).
func IsTimeout(err error) bool { return hasStatus(err, http.StatusRequestTimeout) }

func hasStatus(err error, status int) bool {
	var apiErr *APIError
	return errors.As(err, &apiErr) && apiErr.StatusCode == status
}

// maxErrorBody bounds how much of an error body is read: proxies can answer
// with whole HTML pages.
const maxErrorBody = 64 << 10

// decodeAPIError reads the {"code","message"} body of a failed response. A
// body that is not the server's JSON (a proxy's page, say) becomes the
// message as text so the caller still sees something meaningful.
func decodeAPIError(resp *http.Response) *APIError {
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	apiErr := &APIError{StatusCode: resp.StatusCode}
	var body apiv1.Error
	if err := json.Unmarshal(raw, &body); err == nil && body.Message != "" {
		apiErr.Message = body.Message
		return apiErr
	}
	apiErr.Message = strings.TrimSpace(string(raw))
	if apiErr.Message == "" || len(apiErr.Message) > 500 {
		apiErr.Message = "server answered " + resp.Status
	}
	return apiErr
}
