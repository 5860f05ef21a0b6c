package grpcadmit

import (
	"context"
	"errors"
	"io"
	"strconv"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
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
		attempts := maxAttempts(t)
		for attempt := 1; ; attempt++ {
			err := invoker(numbered(ctx, attempt), method, req, reply, cc, opts...)
			if err == nil || attempt >= attempts {
				return err
			}
			if err = waitHint(ctx, t, err); err != nil {
				return err
			}
		}
	}
}

// previousAttemptsKey numbers a call's retries, as gRPC's own retries
// do: a server that holds a place in its queue for a refused call's retry
// knows the retry by it.
const previousAttemptsKey = "grpc-previous-rpc-attempts"

// numbered returns ctx for the attempt'th sending of a call: a retry
// carries the number of attempts before it.
func numbered(ctx context.Context, attempt int) context.Context {
	if attempt == 1 {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, previousAttemptsKey, strconv.Itoa(attempt-1))
}

// isRetry reports whether md is a retry's (previousAttemptsKey, a count
// of 1 to 999).
func isRetry(md metadata.MD) bool {
	v := md.Get(previousAttemptsKey)
	if len(v) != 1 {
		return false
	}
	n, err := strconv.Atoi(v[0])
	return err == nil && len(v[0]) <= 3 && n > 0
}

// maxAttempts returns t's attempt budget.
func maxAttempts(t *httpretry.Transport) int {
	if t.MaxAttempts <= 0 {
		return httpretry.DefaultMaxAttempts
	}
	return t.MaxAttempts
}

// waitHint waits the hint of the refusal err with t, and returns nil
// when the call is to be sent again: err itself when it has no hint or
// the wait would end too late, the context's status when it ends while
// waiting.
func waitHint(ctx context.Context, t *httpretry.Transport, err error) error {
	hint, ok := RetryDelay(err)
	if !ok {
		return err
	}
	waited, werr := t.WaitHint(ctx, hint)
	switch {
	case werr != nil:
		return status.FromContextError(werr).Err()
	case !waited:
		return err
	}
	return nil
}

// StreamClientInterceptor returns a grpc.StreamClientInterceptor that
// retries a server-streaming call (one request, a stream of responses)
// refused with a retry hint, as UnaryClientInterceptor retries unary
// calls: the server refuses a stream when it opens, so the refusal is
// the error of the first receive, and the interceptor then waits the
// hint, opens the stream again with the same request and receives from
// it. Once a response has arrived, an error is returned as is. Other
// kinds of stream (the client sends several messages) pass through:
// their messages would have to be kept to be sent again. Header and
// Trailer are those of the last attempt; the stream's methods must not
// be called concurrently with its first RecvMsg.
func StreamClientInterceptor(t *httpretry.Transport) grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		cs, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil || desc.ClientStreams || !desc.ServerStreams {
			return cs, err
		}
		return &retryStream{ClientStream: cs, open: func(attempt int) (grpc.ClientStream, error) {
			return streamer(numbered(ctx, attempt), desc, cc, method, opts...)
		}, ctx: ctx, t: t}, nil
	}
}

// retryStream is a server-streaming call that is opened again while its
// first receive is a hinted refusal.
type retryStream struct {
	grpc.ClientStream
	open     func(attempt int) (grpc.ClientStream, error) // the attempt'th opening
	ctx      context.Context
	t        *httpretry.Transport
	req      any  // the one request, kept to be sent again
	received bool // a response arrived: no more retries
	attempt  int  // attempts made after the first
}

// SendMsg sends the stream's request, keeping it for another attempt.
func (s *retryStream) SendMsg(m any) error {
	s.req = m
	return s.ClientStream.SendMsg(m)
}

// RecvMsg receives a response, opening the stream again after a hinted
// refusal of its first receive.
func (s *retryStream) RecvMsg(m any) error {
	for {
		err := s.ClientStream.RecvMsg(m)
		if err == nil {
			s.received = true
			return nil
		}
		if s.received || s.req == nil || s.attempt+1 >= maxAttempts(s.t) {
			return err
		}
		if err = waitHint(s.ctx, s.t, err); err != nil {
			return err
		}
		cs, err := s.open(s.attempt + 2)
		if err != nil {
			return err
		}
		// A refused stream may end before the request is written
		// (io.EOF): its status comes with the next receive.
		if err := cs.SendMsg(s.req); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		if err := cs.CloseSend(); err != nil {
			return err
		}
		s.ClientStream = cs
		s.attempt++
	}
}
