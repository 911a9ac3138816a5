package gcsjson

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"gocloud.dev/blob"
	"gocloud.dev/blob/driver"
	"gocloud.dev/gcerrors"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/option"
	storage "google.golang.org/api/storage/v1"
)

// Scheme is the URL scheme this package registers with gocloud.dev/blob.
const Scheme = "gs"

// EmulatorEnv names the variable that points the client at a Cloud
// Storage emulator (host:port or a URL), as Google's own clients read it.
const EmulatorEnv = "STORAGE_EMULATOR_HOST"

func init() {
	blob.DefaultURLMux().RegisterBucket(Scheme, URLOpener{})
}

// URLOpener opens gs://BUCKET URLs. The query may hold prefix=, which
// gocloud.dev/blob applies; no other parameter is accepted.
type URLOpener struct {
	// ClientOptions are passed to the Cloud Storage client after the ones
	// derived from the environment.
	ClientOptions []option.ClientOption
}

// OpenBucketURL opens the bucket u names.
func (o URLOpener) OpenBucketURL(ctx context.Context, u *url.URL) (*blob.Bucket, error) {
	for k := range u.Query() {
		return nil, fmt.Errorf("open bucket %v: query parameter %q is not supported; allowed: prefix", u, k)
	}
	return OpenBucket(ctx, u.Host, o.ClientOptions...)
}

// OpenBucket opens a bucket by name. Credentials are application default
// credentials unless STORAGE_EMULATOR_HOST names an emulator, which is
// then used without authentication.
func OpenBucket(ctx context.Context, name string, opts ...option.ClientOption) (*blob.Bucket, error) {
	if name == "" {
		return nil, errors.New("gs:// URL names no bucket; want gs://BUCKET or gs://BUCKET?prefix=PATH/")
	}
	var base []option.ClientOption
	if host := os.Getenv(EmulatorEnv); host != "" {
		if !strings.Contains(host, "://") {
			host = "http://" + host
		}
		base = []option.ClientOption{option.WithoutAuthentication(), option.WithEndpoint(strings.TrimSuffix(host, "/") + "/storage/v1/")}
	} else {
		base = []option.ClientOption{option.WithScopes(storage.DevstorageReadWriteScope)}
	}
	svc, err := storage.NewService(ctx, append(base, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("cloud storage client: %w", err)
	}
	return blob.NewBucket(&bucket{svc: svc, name: name}), nil
}

// bucket is the gocloud.dev/blob driver over the JSON API client.
type bucket struct {
	svc  *storage.Service
	name string
}

var (
	errNotImplemented = errors.New("gcsjson: not implemented")
	errEmptyKey       = errors.New("gcsjson: an object key must not be empty")
)

func (b *bucket) ErrorCode(err error) gcerrors.ErrorCode {
	switch {
	case errors.Is(err, errNotImplemented):
		return gcerrors.Unimplemented
	case errors.Is(err, errEmptyKey):
		return gcerrors.InvalidArgument
	}
	var ge *googleapi.Error
	if !errors.As(err, &ge) {
		return gcerrors.Unknown
	}
	switch ge.Code {
	case http.StatusNotFound:
		return gcerrors.NotFound
	case http.StatusPreconditionFailed:
		return gcerrors.FailedPrecondition
	case http.StatusConflict:
		return gcerrors.AlreadyExists
	case http.StatusBadRequest, http.StatusRequestedRangeNotSatisfiable:
		return gcerrors.InvalidArgument
	case http.StatusUnauthorized, http.StatusForbidden:
		return gcerrors.PermissionDenied
	case http.StatusTooManyRequests:
		return gcerrors.ResourceExhausted
	case http.StatusNotImplemented:
		return gcerrors.Unimplemented
	}
	if ge.Code >= 500 {
		return gcerrors.Internal
	}
	return gcerrors.Unknown
}

// asFunc returns the As function that exposes v to a caller passing a *T.
func asFunc[T any](v T) func(any) bool {
	return func(i any) bool {
		p, ok := i.(*T)
		if ok {
			*p = v
		}
		return ok
	}
}

// As exposes the *storage.Service.
func (b *bucket) As(i any) bool { return asFunc(b.svc)(i) }

// ErrorAs exposes *googleapi.Error.
func (b *bucket) ErrorAs(err error, i any) bool {
	p, ok := i.(**googleapi.Error)
	if !ok {
		return false
	}
	return errors.As(err, p)
}

// quoteETag makes an ETag what HTTP and gocloud.dev/blob expect, a
// quoted string; the JSON API gives it bare.
func quoteETag(etag string) string {
	if etag == "" || strings.HasPrefix(etag, `W/"`) || strings.HasPrefix(etag, `"`) {
		return etag
	}
	return strconv.Quote(etag)
}

func parseTime(s string) time.Time {
	t, _ := time.Parse(time.RFC3339Nano, s)
	return t
}

func decodeMD5(s string) []byte {
	b, _ := base64.StdEncoding.DecodeString(s)
	return b
}

func (b *bucket) Attributes(ctx context.Context, key string) (*driver.Attributes, error) {
	if key == "" {
		return nil, errEmptyKey // the JSON API would read the bucket's path instead
	}
	obj, err := b.svc.Objects.Get(b.name, key).Context(ctx).Do()
	if err != nil {
		return nil, err
	}
	return &driver.Attributes{
		CacheControl: obj.CacheControl, ContentDisposition: obj.ContentDisposition, ContentEncoding: obj.ContentEncoding,
		ContentLanguage: obj.ContentLanguage, ContentType: obj.ContentType, Metadata: obj.Metadata,
		CreateTime: parseTime(obj.TimeCreated), ModTime: parseTime(obj.Updated), Size: int64(obj.Size),
		MD5: decodeMD5(obj.Md5Hash), ETag: quoteETag(obj.Etag),
		AsFunc: asFunc(obj),
	}, nil
}

// afterToken starts the page tokens this driver makes itself: Cloud
// Storage counts prefixes and objects together against maxResults, but
// an emulator may return all the prefixes beside maxResults objects; the
// driver then cuts the page and resumes after its last key (startOffset).
const afterToken = "gcsjson-after:"

// ListPaged lists one page, objects and prefixes merged in key order, as
// gocloud.dev/blob requires.
func (b *bucket) ListPaged(ctx context.Context, opts *driver.ListOptions) (*driver.ListPage, error) {
	call := b.svc.Objects.List(b.name).Context(ctx).Prefix(opts.Prefix)
	if opts.Delimiter != "" {
		call = call.Delimiter(opts.Delimiter)
	}
	if opts.PageSize > 0 {
		call = call.MaxResults(int64(opts.PageSize))
	}
	after, resumed := strings.CutPrefix(string(opts.PageToken), afterToken)
	switch {
	case resumed:
		call = call.StartOffset(after)
	case len(opts.PageToken) > 0:
		call = call.PageToken(string(opts.PageToken))
	}
	if opts.BeforeList != nil {
		if err := opts.BeforeList(asFunc(call)); err != nil {
			return nil, err
		}
	}
	res, err := call.Do()
	if err != nil {
		return nil, err
	}
	var objs []*driver.ListObject
	for _, obj := range res.Items {
		objs = append(objs, &driver.ListObject{
			Key: obj.Name, ModTime: parseTime(obj.Updated), Size: int64(obj.Size), MD5: decodeMD5(obj.Md5Hash),
		})
	}
	for _, p := range res.Prefixes {
		objs = append(objs, &driver.ListObject{Key: p, IsDir: true})
	}
	if resumed {
		objs = slices.DeleteFunc(objs, func(o *driver.ListObject) bool { return o.Key <= after })
	}
	slices.SortFunc(objs, func(a, b *driver.ListObject) int { return strings.Compare(a.Key, b.Key) })
	page := &driver.ListPage{Objects: objs, NextPageToken: []byte(res.NextPageToken)}
	if opts.PageSize > 0 && len(objs) > opts.PageSize {
		page.Objects = objs[:opts.PageSize]
		page.NextPageToken = []byte(afterToken + objs[opts.PageSize-1].Key)
	}
	return page, nil
}

// reader is one ranged download.
type reader struct {
	body  io.ReadCloser
	attrs driver.ReaderAttributes
	resp  *http.Response
}

func (r *reader) Read(p []byte) (int, error)           { return r.body.Read(p) }
func (r *reader) Close() error                         { return r.body.Close() }
func (r *reader) Attributes() *driver.ReaderAttributes { return &r.attrs }
func (r *reader) As(i any) bool                        { return asFunc(r.resp)(i) }

func (b *bucket) NewRangeReader(ctx context.Context, key string, offset, length int64, _ *driver.ReaderOptions) (driver.Reader, error) {
	if key == "" {
		return nil, errEmptyKey
	}
	if length == 0 {
		// Nothing to read; the attributes still have to be right.
		attrs, err := b.Attributes(ctx, key)
		if err != nil {
			return nil, err
		}
		return &reader{body: http.NoBody, attrs: driver.ReaderAttributes{ContentType: attrs.ContentType, ModTime: attrs.ModTime, Size: attrs.Size}}, nil
	}
	call := b.svc.Objects.Get(b.name, key).Context(ctx)
	switch {
	case length > 0:
		call.Header().Set("Range", fmt.Sprintf("bytes=%d-%d", offset, offset+length-1))
	case offset > 0:
		call.Header().Set("Range", fmt.Sprintf("bytes=%d-", offset))
	}
	resp, err := call.Download()
	if err != nil {
		return nil, err
	}
	size := resp.ContentLength
	if cr := resp.Header.Get("Content-Range"); cr != "" {
		if _, total, ok := strings.Cut(cr, "/"); ok {
			if n, err := strconv.ParseInt(total, 10, 64); err == nil {
				size = n
			}
		}
	}
	modTime, _ := http.ParseTime(resp.Header.Get("Last-Modified"))
	return &reader{body: resp.Body, resp: resp,
		attrs: driver.ReaderAttributes{ContentType: resp.Header.Get("Content-Type"), ModTime: modTime, Size: size}}, nil
}

// writer streams an upload: what is written goes through a pipe into one
// insert call, which Close waits for.
type writer struct {
	pw   *io.PipeWriter
	done chan error
}

func (w *writer) Write(p []byte) (int, error) { return w.pw.Write(p) }

func (w *writer) Close() error {
	w.pw.Close()
	return <-w.done
}

func (b *bucket) NewTypedWriter(ctx context.Context, key, contentType string, opts *driver.WriterOptions) (driver.Writer, error) {
	if key == "" {
		return nil, errEmptyKey // Cloud Storage refuses it too; an emulator may not
	}
	obj := &storage.Object{
		Name: key, ContentType: contentType, Metadata: opts.Metadata, CacheControl: opts.CacheControl,
		ContentDisposition: opts.ContentDisposition, ContentEncoding: opts.ContentEncoding, ContentLanguage: opts.ContentLanguage,
	}
	if len(opts.ContentMD5) > 0 {
		obj.Md5Hash = base64.StdEncoding.EncodeToString(opts.ContentMD5)
	}
	pr, pw := io.Pipe()
	media := []googleapi.MediaOption{googleapi.ContentType(contentType)}
	if opts.BufferSize > 0 {
		media = append(media, googleapi.ChunkSize(opts.BufferSize))
	}
	call := b.svc.Objects.Insert(b.name, obj).Context(ctx)
	if opts.IfNotExist {
		call = call.IfGenerationMatch(0)
	}
	if opts.BeforeWrite != nil {
		if err := opts.BeforeWrite(asFunc(call)); err != nil {
			return nil, err
		}
	}
	w := &writer{pw: pw, done: make(chan error, 1)}
	go func() {
		// Media reads the first chunk at once, so it runs here, where
		// the writes it waits for can come.
		_, err := call.Media(pr, media...).Do()
		// Unblock a writer still writing when the call failed.
		pr.CloseWithError(err)
		w.done <- err
	}()
	return w, nil
}

func (b *bucket) Copy(ctx context.Context, dstKey, srcKey string, _ *driver.CopyOptions) error {
	_, err := b.svc.Objects.Copy(b.name, srcKey, b.name, dstKey, &storage.Object{}).Context(ctx).Do()
	return err
}

func (b *bucket) Delete(ctx context.Context, key string) error {
	return b.svc.Objects.Delete(b.name, key).Context(ctx).Do()
}

func (b *bucket) SignedURL(context.Context, string, *driver.SignedURLOptions) (string, error) {
	return "", fmt.Errorf("signed URLs: %w", errNotImplemented)
}

func (b *bucket) Close() error { return nil }
