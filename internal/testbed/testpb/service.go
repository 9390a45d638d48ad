package testpb

import (
	"context"
	"errors"
	"io"

	"google.golang.org/grpc"
)

// Service is a TestServiceServer whose handlers are funcs a test sets.
// A nil func gives the default behaviour: echo the payload (Unary, Bidi),
// send Count responses (ServerStream), count the messages (ClientStream).
type Service struct {
	UnimplementedTestServiceServer

	UnaryFunc        func(context.Context, *UnaryRequest) (*UnaryResponse, error)
	ServerStreamFunc func(*ServerStreamRequest, grpc.ServerStreamingServer[ServerStreamResponse]) error
	ClientStreamFunc func(grpc.ClientStreamingServer[ClientStreamRequest, ClientStreamResponse]) error
	BidiFunc         func(grpc.BidiStreamingServer[BidiRequest, BidiResponse]) error
}

// Unary implements TestServiceServer.
func (s *Service) Unary(ctx context.Context, req *UnaryRequest) (*UnaryResponse, error) {
	if s.UnaryFunc != nil {
		return s.UnaryFunc(ctx, req)
	}
	return &UnaryResponse{Payload: req.GetPayload()}, nil
}

// ServerStream implements TestServiceServer.
func (s *Service) ServerStream(req *ServerStreamRequest, stream grpc.ServerStreamingServer[ServerStreamResponse]) error {
	if s.ServerStreamFunc != nil {
		return s.ServerStreamFunc(req, stream)
	}
	for i := range req.GetCount() {
		if err := stream.Send(&ServerStreamResponse{Payload: req.GetPayload(), Index: i}); err != nil {
			return err
		}
	}
	return nil
}

// ClientStream implements TestServiceServer.
func (s *Service) ClientStream(stream grpc.ClientStreamingServer[ClientStreamRequest, ClientStreamResponse]) error {
	if s.ClientStreamFunc != nil {
		return s.ClientStreamFunc(stream)
	}
	var n int32
	for {
		_, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return stream.SendAndClose(&ClientStreamResponse{Count: n})
		}
		if err != nil {
			return err
		}
		n++
	}
}

// Bidi implements TestServiceServer.
func (s *Service) Bidi(stream grpc.BidiStreamingServer[BidiRequest, BidiResponse]) error {
	if s.BidiFunc != nil {
		return s.BidiFunc(stream)
	}
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := stream.Send(&BidiResponse{Payload: req.GetPayload()}); err != nil {
			return err
		}
	}
}
