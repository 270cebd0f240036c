package cli

import (
	"context"
	"fmt"
	"net/http"
	"net/url"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/sink/sinkformat"
	"github.com/outboxkit/outbox/sink/sqssink"
)

// sqsSink returns the SQS sink over a client of the standard AWS configuration chain
// (the process's AWS_* variables, the shared config and credentials files, the
// instance or task role), with sink.sqs.region, sink.sqs.endpoint and the static keys
// of sink.sqs.* overriding it. sqssink calls nothing until the first Publish.
func (a *app) sqsSink(ctx context.Context) (outbox.Sink, func() error, error) {
	c := a.cfg.Sink.SQS
	if c.Queue == "" {
		return nil, nil, usagef("sink.sqs.queue is required with sink.type sqs")
	}
	if (c.AccessKeyID == "") != (c.SecretAccessKey == "") {
		return nil, nil, usagef("sink.sqs.access_key_id and sink.sqs.secret_access_key go together")
	}
	if c.SessionToken != "" && c.AccessKeyID == "" {
		return nil, nil, usagef("sink.sqs.session_token needs sink.sqs.access_key_id and sink.sqs.secret_access_key")
	}
	var opts []func(*awsconfig.LoadOptions) error
	if c.Region != "" {
		opts = append(opts, awsconfig.WithRegion(c.Region))
	}
	if c.AccessKeyID != "" {
		opts = append(opts, awsconfig.WithCredentialsProvider(
			credentials.NewStaticCredentialsProvider(c.AccessKeyID, c.SecretAccessKey, c.SessionToken)))
	}
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		// The chain's errors name files and profiles, never the keys.
		return nil, nil, usagef("sink.sqs: load the AWS configuration: %w", err)
	}
	if awsCfg.Region == "" {
		return nil, nil, usagef("sink.sqs.region is required when the AWS configuration (AWS_REGION, the shared config file) sets none")
	}
	// A transport of its own (the chain's settings, AWS_CA_BUNDLE's roots among them),
	// so closing the sink closes its idle connections.
	transport := http.DefaultTransport.(*http.Transport).Clone()
	if bc, ok := awsCfg.HTTPClient.(*awshttp.BuildableClient); ok {
		transport = bc.GetTransport()
	}
	awsCfg.HTTPClient = &http.Client{Transport: transport}
	client := sqs.NewFromConfig(awsCfg, func(o *sqs.Options) {
		if c.Endpoint != "" {
			o.BaseEndpoint = aws.String(c.Endpoint)
		}
	})
	s, err := sqssink.New(client, &sqssink.Config{
		Queue: c.Queue, MaxMessageBytes: c.MaxMessageBytes, RequestTimeout: c.RequestTimeout,
		Unbatched: c.Unbatched, Logger: a.log,
	})
	if err != nil {
		transport.CloseIdleConnections()
		return nil, nil, fmt.Errorf("sink.sqs: %w", err)
	}
	return s, func() error { transport.CloseIdleConnections(); return nil }, nil
}

// validEndpoint checks sink.sqs.endpoint: an absolute http or https URL.
func validEndpoint(v string) error {
	if v == "" {
		return nil
	}
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("must be an http:// or https:// URL such as http://127.0.0.1:4566, got %q", v)
	}
	return nil
}

// validQueue checks sink.sqs.queue as sqssink will: a template over the event.
func validQueue(v string) error {
	if v == "" {
		return nil
	}
	if _, err := sinkformat.NewRouter(v, sinkformat.SQSQueue); err != nil {
		return fmt.Errorf("must be a queue name or URL template over the event: %w", err)
	}
	return nil
}
