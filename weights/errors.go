package weights

import (
	"errors"
	"fmt"
)

// ErrMalformed is matched (with errors.Is) by every error that means the
// request body is not a valid request for its endpoint: broken JSON, a field
// of the wrong type, a negative token limit. An HTTP caller answers 400.
var ErrMalformed = errors.New("weights: malformed request body")

// ErrTooLarge is matched (with errors.Is) by a [*BodyTooLargeError]. An HTTP
// caller answers 413.
var ErrTooLarge = errors.New("weights: request body too large")

// ErrUnsupportedEndpoint is returned by [Estimator.Estimate] for a path that
// is not one of the endpoints listed at [Endpoint]. A caller usually prices
// such a request with an [OperationCosts] table instead.
var ErrUnsupportedEndpoint = errors.New("weights: unsupported endpoint")

// MalformedError describes a request body that cannot be estimated. It
// matches [ErrMalformed] and unwraps to the underlying decoding error, if
// any. Its message names only the client's own field, so it is safe to show
// to that client.
type MalformedError struct {
	// Endpoint is the endpoint whose body was parsed.
	Endpoint Endpoint
	// Field is the JSON path of the offending field ("messages[2].content"),
	// or empty when the body as a whole is not valid JSON.
	Field string
	// Err is the underlying problem.
	Err error
}

// Error implements error.
func (e *MalformedError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("weights: malformed %s body: %v", e.Endpoint, e.Err)
	}
	return fmt.Sprintf("weights: malformed %s body: %s: %v", e.Endpoint, e.Field, e.Err)
}

// Unwrap returns the underlying problem.
func (e *MalformedError) Unwrap() error { return e.Err }

// Is reports whether target is [ErrMalformed].
func (e *MalformedError) Is(target error) bool { return target == ErrMalformed }

// BodyTooLargeError reports a request body above the configured cap
// ([Config.MaxBodyBytes]). It matches [ErrTooLarge].
type BodyTooLargeError struct {
	// Limit is the cap in bytes.
	Limit int64
	// Size is the body's size in bytes, or -1 when reading stopped at the
	// cap and the full size is unknown.
	Size int64
}

// Error implements error.
func (e *BodyTooLargeError) Error() string {
	if e.Size < 0 {
		return fmt.Sprintf("weights: request body larger than the %d-byte limit", e.Limit)
	}
	return fmt.Sprintf("weights: request body of %d bytes exceeds the %d-byte limit", e.Size, e.Limit)
}

// Is reports whether target is [ErrTooLarge].
func (e *BodyTooLargeError) Is(target error) bool { return target == ErrTooLarge }

// malformed builds a *MalformedError.
func malformed(ep Endpoint, field string, err error) error {
	return &MalformedError{Endpoint: ep, Field: field, Err: err}
}
