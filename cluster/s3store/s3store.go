// Package s3store is a store.ObjectStore in a bucket of S3 or an
// S3-compatible service (MinIO, R2, Ceph, SeaweedFS), over the AWS SDK
// for Go v2.
//
//	objects, err := s3store.New(ctx, s3store.Config{Bucket: "agrun", Endpoint: "http://127.0.0.1:9000"})
//	modules := store.ModuleStore{Objects: objects}
package s3store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/agcore/agrun/cluster/store"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
)

// Config says where an Objects store keeps its objects and how it
// signs in. The zero value of each field is the SDK's default.
type Config struct {
	// Bucket is the bucket's name (required). It must exist.
	Bucket string
	// Prefix is put before every key in the bucket ("agrun/" keeps the
	// store in a folder of a shared bucket); a missing final "/" is
	// added. Empty: the keys are the bucket's top level.
	Prefix string
	// Endpoint is the base URL of an S3-compatible service (MinIO,
	// Cloudflare R2, Ceph, SeaweedFS, ...): "http://127.0.0.1:9000".
	// Empty: AWS S3 itself (or AWS_ENDPOINT_URL, as the SDK reads it).
	// With a custom endpoint the SDK's default request checksums
	// (CRC32 on every upload, validation on every download) are asked
	// for only where the API requires them: not every S3-compatible
	// service accepts them yet.
	Endpoint string
	// Region is the signing region. Empty: the SDK's (AWS_REGION, the
	// shared config file), else "us-east-1", which MinIO and most
	// S3-compatible services accept.
	Region string
	// UsePathStyle addresses the bucket in the path
	// (endpoint/bucket/key) instead of the host name
	// (bucket.endpoint/key): MinIO and most self-hosted services need it.
	UsePathStyle bool
	// AccessKeyEnv and SecretKeyEnv name the environment variables that
	// hold the access key id and the secret key (both or neither; never
	// the keys themselves, so that they stay out of config files).
	// Empty: the SDK's default chain (AWS_ACCESS_KEY_ID and
	// AWS_SECRET_ACCESS_KEY, the shared credentials file, SSO, the
	// instance or task role).
	AccessKeyEnv, SecretKeyEnv string
}

// Objects is a store.ObjectStore in a bucket of S3 or an S3-compatible
// service, through the AWS SDK for Go v2: the object under key is the
// bucket's object Prefix+key. An upload is atomic in S3 itself (a reader
// sees the whole object or the one before). It is safe for concurrent
// use by many goroutines and processes.
type Objects struct {
	client   *s3.Client
	bucket   string
	prefix   string
	pageSize int32 // ListObjectsV2 MaxKeys; 0: the service's (1000)
}

// New builds the client cfg describes and checks that the
// bucket is there and reachable with its credentials (HeadBucket), so
// that a wrong name, endpoint or key fails at start, not at the first
// upload. ctx bounds that check and the loading of the SDK's
// configuration; it is not kept.
func New(ctx context.Context, cfg Config) (*Objects, error) {
	if cfg.Bucket == "" {
		return nil, errors.New("s3 object store: no bucket")
	}
	prefix := cfg.Prefix
	if prefix != "" && !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	if !store.ValidPrefix(prefix) {
		return nil, fmt.Errorf("s3 object store: prefix %q: segments of [a-z0-9._-] joined by \"/\"", cfg.Prefix)
	}
	var opts []func(*config.LoadOptions) error
	if cfg.Region != "" {
		opts = append(opts, config.WithRegion(cfg.Region))
	}
	switch {
	case cfg.AccessKeyEnv != "" && cfg.SecretKeyEnv != "":
		id, secret := os.Getenv(cfg.AccessKeyEnv), os.Getenv(cfg.SecretKeyEnv)
		if id == "" || secret == "" {
			return nil, fmt.Errorf("s3 object store: $%s and $%s must both be set", cfg.AccessKeyEnv, cfg.SecretKeyEnv)
		}
		opts = append(opts, config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(id, secret, "")))
	case cfg.AccessKeyEnv != "" || cfg.SecretKeyEnv != "":
		return nil, errors.New("s3 object store: name both the access key and the secret key variables, or neither")
	}
	if cfg.Endpoint != "" {
		opts = append(opts,
			config.WithRequestChecksumCalculation(aws.RequestChecksumCalculationWhenRequired),
			config.WithResponseChecksumValidation(aws.ResponseChecksumValidationWhenRequired))
	}
	awsCfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("s3 object store: %w", err)
	}
	if awsCfg.Region == "" {
		awsCfg.Region = "us-east-1"
	}
	client := s3.NewFromConfig(awsCfg, func(o *s3.Options) {
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
		o.UsePathStyle = cfg.UsePathStyle
	})
	if _, err := client.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(cfg.Bucket)}); err != nil {
		if isS3NotFound(err) || isNoSuchBucket(err) {
			return nil, fmt.Errorf("s3 object store: bucket %q does not exist", cfg.Bucket)
		}
		return nil, fmt.Errorf("s3 object store: bucket %q: %w", cfg.Bucket, err)
	}
	return &Objects{client: client, bucket: cfg.Bucket, prefix: prefix}, nil
}

func (s *Objects) objectKey(key string) (string, error) {
	if !store.ValidKey(key) {
		return "", fmt.Errorf("%w: %q", store.ErrBadKey, key)
	}
	return s.prefix + key, nil
}

// Put uploads data under key (one PutObject), replacing what was there.
func (s *Objects) Put(ctx context.Context, key string, data []byte) error {
	k, err := s.objectKey(key)
	if err != nil {
		return err
	}
	_, err = s.client.PutObject(ctx, &s3.PutObjectInput{
		Bucket:        aws.String(s.bucket),
		Key:           aws.String(k),
		Body:          bytes.NewReader(data),
		ContentLength: aws.Int64(int64(len(data))),
		ContentType:   aws.String("application/octet-stream"),
	})
	if err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	return nil
}

// Get downloads the object under key: store.ErrNotFound if there is none,
// store.ErrTooLarge if it is over max bytes (max > 0), told by its
// Content-Length before the body is read and by a capped read after, so
// a service that lies about the length cannot make Get read more.
func (s *Objects) Get(ctx context.Context, key string, max int64) ([]byte, error) {
	k, err := s.objectKey(key)
	if err != nil {
		return nil, err
	}
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(k)})
	if err != nil {
		if isS3NotFound(err) {
			return nil, fmt.Errorf("%w: object %s", store.ErrNotFound, key)
		}
		return nil, fmt.Errorf("get %s: %w", key, err)
	}
	defer out.Body.Close()
	if max > 0 && out.ContentLength != nil && *out.ContentLength > max {
		return nil, fmt.Errorf("%w: object %s is %d bytes, over %d", store.ErrTooLarge, key, *out.ContentLength, max)
	}
	var r io.Reader = out.Body
	if max > 0 {
		r = io.LimitReader(out.Body, max+1)
	}
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", key, err)
	}
	if max > 0 && int64(len(data)) > max {
		return nil, fmt.Errorf("%w: object %s is over %d bytes", store.ErrTooLarge, key, max)
	}
	return data, nil
}

// List returns the keys under prefix, sorted, reading every page of
// ListObjectsV2. Objects under the store's Prefix whose names are not
// valid keys (put there by something else) are left out.
func (s *Objects) List(ctx context.Context, prefix string) ([]string, error) {
	if !store.ValidPrefix(prefix) {
		return nil, fmt.Errorf("%w: list prefix %q", store.ErrBadKey, prefix)
	}
	in := &s3.ListObjectsV2Input{Bucket: aws.String(s.bucket), Prefix: aws.String(s.prefix + prefix)}
	if s.pageSize > 0 {
		in.MaxKeys = aws.Int32(s.pageSize)
	}
	var keys []string
	for p := s3.NewListObjectsV2Paginator(s.client, in); p.HasMorePages(); {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("list %q: %w", prefix, err)
		}
		for _, o := range page.Contents {
			if k, ok := strings.CutPrefix(aws.ToString(o.Key), s.prefix); ok && store.ValidKey(k) {
				keys = append(keys, k)
			}
		}
	}
	slices.Sort(keys)
	return keys, nil
}

// Delete removes the object under key: store.ErrNotFound if there is none.
// S3's DeleteObject succeeds for a missing key too, so Delete asks
// HeadObject first: of two Deletes racing on one key, both may succeed.
func (s *Objects) Delete(ctx context.Context, key string) error {
	k, err := s.objectKey(key)
	if err != nil {
		return err
	}
	if _, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(k)}); err != nil {
		if isS3NotFound(err) {
			return fmt.Errorf("%w: object %s", store.ErrNotFound, key)
		}
		return fmt.Errorf("delete %s: %w", key, err)
	}
	if _, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(k)}); err != nil {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	return nil
}

// isS3NotFound reports whether err says the key does not exist:
// NoSuchKey, NotFound (a HEAD response has no body to name the error) or
// a bare 404 — but not NoSuchBucket: a bucket that went away is a broken
// store, not a missing object.
func isS3NotFound(err error) bool {
	var nsk *types.NoSuchKey
	var nf *types.NotFound
	if errors.As(err, &nsk) || errors.As(err, &nf) {
		return true
	}
	var api smithy.APIError
	if errors.As(err, &api) {
		switch api.ErrorCode() {
		case "NoSuchKey", "NotFound":
			return true
		case "NoSuchBucket":
			return false
		}
	}
	var re *awshttp.ResponseError
	return errors.As(err, &re) && re.HTTPStatusCode() == http.StatusNotFound
}

// isNoSuchBucket reports whether err is S3's NoSuchBucket.
func isNoSuchBucket(err error) bool {
	var nsb *types.NoSuchBucket
	var api smithy.APIError
	return errors.As(err, &nsb) || errors.As(err, &api) && api.ErrorCode() == "NoSuchBucket"
}

var _ store.ObjectStore = (*Objects)(nil)
