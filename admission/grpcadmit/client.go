package grpcadmit

import (
	"context"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/admission/httpretry"
)

// RetryDelay returns the wait a gRPC error asks for: the RetryInfo
// detail of a ResourceExhausted or Unavailable status. It reports false
// for any other error, and for a status without a valid, non-negative
// RetryInfo (waiting cannot help).
func RetryDelay(err error) (time.Duration, bool) {
	st, ok := status.FromError(err)
	if !ok || (st.Code() != codes.ResourceExhausted && st.Code() != codes.Unavailable) {
		return 0, false
	}
	for _, d := range st.Details() {
		ri, ok := d.(*errdetails.RetryInfo)
		if !ok || ri.GetRetryDelay() == nil || ri.GetRetryDelay().CheckValid() != nil {
			continue
		}
		if w := ri.GetRetryDelay().AsDuration(); w >= 0 {
			return w, true
		}
	}
	return 0, false
}

// UnaryClientInterceptor returns a grpc.UnaryClientInterceptor that
// retries a call refused with a retry hint (RetryDelay), as t retries
// HTTP requests: at most t.MaxAttempts attempts (the first included;
// 0 means httpretry.DefaultMaxAttempts), each hint waited with t's
// jitter, never past t.MaxWait nor the call's deadline, on t's clock
// (Now, Sleep, Rand). When the wait would end past the deadline the
// refusal is returned at once; when the context ends during the wait,
// its status. t's Base, IdempotencyHeaders and MaxRetriesPerHost play no
// part; t must not be changed while the interceptor is in use.
//
// Only hinted refusals are retried: the admission interceptor refuses a
// call before its handler runs, so sending it again is safe whatever the
// method does.
func UnaryClientInterceptor(t *httpretry.Transport) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		attempts := t.MaxAttempts
		if attempts <= 0 {
			attempts = httpretry.DefaultMaxAttempts
		}
		for attempt := 1; ; attempt++ {
			err := invoker(ctx, method, req, reply, cc, opts...)
			if err == nil || attempt >= attempts {
				return err
			}
			hint, ok := RetryDelay(err)
			if !ok {
				return err
			}
			waited, werr := t.WaitHint(ctx, hint)
			if werr != nil {
				return status.FromContextError(werr).Err()
			}
			if !waited {
				return err
			}
		}
	}
}
