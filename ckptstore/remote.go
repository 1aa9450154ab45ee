package ckptstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/adclick/adclick/ckptstore/ckpt"
	"github.com/adclick/adclick/sink/fence/awsfence"
)

// API is the part of the S3 client a Remote uses; *s3.Client implements
// it, and tests supply a fake.
type API interface {
	PutObject(ctx context.Context, in *s3.PutObjectInput, optFns ...func(*s3.Options)) (*s3.PutObjectOutput, error)
	GetObject(ctx context.Context, in *s3.GetObjectInput, optFns ...func(*s3.Options)) (*s3.GetObjectOutput, error)
	HeadObject(ctx context.Context, in *s3.HeadObjectInput, optFns ...func(*s3.Options)) (*s3.HeadObjectOutput, error)
	ListObjectsV2(ctx context.Context, in *s3.ListObjectsV2Input, optFns ...func(*s3.Options)) (*s3.ListObjectsV2Output, error)
	DeleteObject(ctx context.Context, in *s3.DeleteObjectInput, optFns ...func(*s3.Options)) (*s3.DeleteObjectOutput, error)
	DeleteObjects(ctx context.Context, in *s3.DeleteObjectsInput, optFns ...func(*s3.Options)) (*s3.DeleteObjectsOutput, error)
}

var _ API = (*s3.Client)(nil)

// NewS3Client returns an S3 client for a Remote: path-style addressing (as
// S3-compatible servers such as a local stand-in need; AWS accepts it too),
// and no log line per download whose response carries no checksum (a
// Remote checks every file's SHA-256 itself). The endpoint comes from cfg
// as usual (AWS_ENDPOINT_URL_S3 or cfg.BaseEndpoint). optFns are applied
// last.
func NewS3Client(cfg aws.Config, optFns ...func(*s3.Options)) *s3.Client {
	fns := append([]func(*s3.Options){func(o *s3.Options) {
		o.UsePathStyle = true
		o.DisableLogOutputChecksumValidationSkipped = true
		// A write run under a lease (fence.Run) is checked again right
		// before each request is sent.
		o.APIOptions = append(o.APIOptions, awsfence.CheckBeforeSend)
	}}, optFns...)
	return s3.NewFromConfig(cfg, fns...)
}

// ParseURL splits s3://BUCKET/PREFIX into the bucket and the prefix
// (without leading or trailing slashes; empty for the bucket's root).
func ParseURL(s string) (bucket, prefix string, err error) {
	u, err := url.Parse(s)
	if err != nil {
		return "", "", fmt.Errorf("ckptstore: %q: %w", s, err)
	}
	if u.Scheme != "s3" || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return "", "", fmt.Errorf("ckptstore: %q: want s3://BUCKET/PREFIX", s)
	}
	prefix = strings.Trim(u.Path, "/")
	if strings.Contains(prefix, "//") {
		return "", "", fmt.Errorf("ckptstore: %q: empty path segment in the prefix", s)
	}
	return u.Host, prefix, nil
}

// Remote is a Store in an S3 bucket under a prefix; the package
// documentation describes its layout and how Prune and Upload stay out of
// each other's way. Remote is safe for concurrent use; a prefix must have
// one writer (one running job) at a time.
type Remote struct {
	api    API
	bucket string
	prefix string // "" or ending in "/"
	o      Options
	m      *metrics
	sums   hashCache

	// mu is held by Prune throughout, and by Upload while it decides which
	// shared files to reuse and registers them as in flight.
	mu     sync.Mutex
	seeded bool // present holds the newest complete checkpoint's shared files

	pmu      sync.Mutex
	present  map[string]int64 // shared keys known to be stored, with sizes
	inflight map[*pending]struct{}

	cmu       sync.Mutex
	manifests map[string]*manifest // by key; manifests never change
}

// pending is an upload that is running.
type pending struct {
	kind   ckpt.Kind
	id     int64
	shared []string
}

var _ ckpt.Store = (*Remote)(nil)

// NewRemote returns a Remote over bucket and prefix (as from ParseURL).
func NewRemote(api API, bucket, prefix string, o Options) (*Remote, error) {
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if api == nil || bucket == "" {
		return nil, fmt.Errorf("ckptstore: remote needs a client and a bucket")
	}
	m, err := newMetrics(o.Registerer, "s3")
	if err != nil {
		return nil, err
	}
	if prefix = strings.Trim(prefix, "/"); prefix != "" {
		prefix += "/"
	}
	return &Remote{api: api, bucket: bucket, prefix: prefix, o: o, m: m,
		present: map[string]int64{}, inflight: map[*pending]struct{}{}, manifests: map[string]*manifest{}}, nil
}

// OpenURL returns a Remote for s3://BUCKET/PREFIX with a client from cfg
// (see NewS3Client).
func OpenURL(cfg aws.Config, s3url string, o Options) (*Remote, error) {
	bucket, prefix, err := ParseURL(s3url)
	if err != nil {
		return nil, err
	}
	return NewRemote(NewS3Client(cfg), bucket, prefix, o)
}

const (
	sharedDir = "shared/"
	highKey   = "epoch-high"
	// startPinFile holds PinStart's time (Local: a file of that name).
	startPinFile = "start-pin"
)

func kindDirKey(kind ckpt.Kind) string {
	if kind == ckpt.Savepoint {
		return "savepoints/"
	}
	return "checkpoints/"
}

// dirKey is the prefix of id's own objects, relative to the store's prefix.
func dirKey(kind ckpt.Kind, id int64) string { return kindDirKey(kind) + kind.Name(id) + "/" }

func manifestKey(kind ckpt.Kind, id int64) string { return "manifests/" + kind.Name(id) + ".json" }

// ParseSavepointLocation splits a savepoint's Location
// (s3://BUCKET/PREFIX/manifests/sp-<id>.json, as `adclick savepoint` prints
// it) into the URL of its store (s3://BUCKET/PREFIX) and its id; ok is
// false for anything else.
func ParseSavepointLocation(loc string) (storeURL string, id int64, ok bool) {
	if !strings.HasPrefix(loc, "s3://") {
		return "", 0, false
	}
	root, name, found := strings.Cut(loc, "/manifests/"+ckpt.Savepoint.Prefix())
	if !found || strings.Contains(name, "/") {
		return "", 0, false
	}
	digits, found := strings.CutSuffix(name, ".json")
	if !found || len(digits) == 0 {
		return "", 0, false
	}
	id, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || id < 0 {
		return "", 0, false
	}
	return root, id, true
}

// Location implements Store: s3://BUCKET/PREFIX/manifests/<name>.json.
func (r *Remote) Location(id int64, kind ckpt.Kind) string {
	return "s3://" + r.bucket + "/" + r.prefix + manifestKey(kind, id)
}

func (r *Remote) full(key string) *string { return aws.String(r.prefix + key) }

// Upload implements Store. Table files go to shared/ under their SHA-256
// unless a checkpoint already stored them; the rest under the
// checkpoint's own prefix; the manifest last.
func (r *Remote) Upload(ctx context.Context, localDir string, id int64, kind ckpt.Kind) (ckpt.UploadStats, error) {
	st, err := r.upload(ctx, localDir, id, kind)
	if err != nil {
		return ckpt.UploadStats{}, r.m.fail("upload", err)
	}
	r.m.uploadDone(kind, st)
	return st, nil
}

type putJob struct {
	file   localFile
	key    string
	shared bool
}

func (r *Remote) upload(ctx context.Context, localDir string, id int64, kind ckpt.Kind) (ckpt.UploadStats, error) {
	began := r.o.Now()
	if err := checkID(id, kind); err != nil {
		return ckpt.UploadStats{}, err
	}
	dirs, files, err := scanTree(localDir)
	if err != nil {
		return ckpt.UploadStats{}, err
	}
	if err := r.sums.fill(ctx, files, r.o.Parallelism); err != nil {
		return ckpt.UploadStats{}, err
	}
	if ok, err := r.exists(ctx, manifestKey(kind, id)); err != nil {
		return ckpt.UploadStats{}, fmt.Errorf("ckptstore: upload %s %d: %w", kind, id, err)
	} else if ok {
		return ckpt.UploadStats{}, fmt.Errorf("ckptstore: upload %s %d: %w", kind, id, ckpt.ErrExists)
	}
	base := dirKey(kind, id)
	m := manifest{Version: manifestVersion, Kind: kind.String(), ID: id, CreatedMs: began.UnixMilli(), Dirs: dirs}
	st := ckpt.UploadStats{Files: len(files)}
	var jobs []putJob
	p := &pending{kind: kind, id: id}

	// Decide what to reuse and register the upload, excluded from Prune.
	r.mu.Lock()
	if err := r.seed(ctx); err != nil {
		r.mu.Unlock()
		return ckpt.UploadStats{}, err
	}
	r.pmu.Lock()
	queued := map[string]bool{}
	for _, f := range files {
		e := fileEntry{Path: f.rel, Size: f.size, SHA256: f.sum, Key: base + "files/" + f.rel}
		if isTable(f.rel) {
			e.Key = sharedDir + f.sum + ".sst"
			p.shared = append(p.shared, e.Key)
			if _, ok := r.present[e.Key]; ok || queued[e.Key] {
				st.FilesReused++
				st.BytesReused += f.size
				m.Files = append(m.Files, e)
				continue
			}
			queued[e.Key] = true
		}
		jobs = append(jobs, putJob{file: f, key: e.Key, shared: isTable(f.rel)})
		st.FilesUploaded++
		st.BytesUploaded += f.size
		m.Files = append(m.Files, e)
	}
	slices.Sort(p.shared)
	p.shared = slices.Compact(p.shared)
	r.inflight[p] = struct{}{}
	r.pmu.Unlock()
	r.mu.Unlock()
	defer func() {
		r.pmu.Lock()
		delete(r.inflight, p)
		r.pmu.Unlock()
	}()

	// The intent first: a prune in another process sees what this upload
	// references before any of it is stored.
	intent, err := json.Marshal(intentDoc{Shared: p.shared})
	if err != nil {
		return ckpt.UploadStats{}, fmt.Errorf("ckptstore: encode intent: %w", err)
	}
	if err := r.putBytes(ctx, base+"intent.json", intent); err != nil {
		return ckpt.UploadStats{}, fmt.Errorf("ckptstore: upload %s %d: %w", kind, id, err)
	}
	err = parallel(ctx, len(jobs), r.o.Parallelism, func(ctx context.Context, i int) error {
		j := jobs[i]
		if err := r.putFile(ctx, j.key, j.file); err != nil {
			return err
		}
		if j.shared {
			r.pmu.Lock()
			r.present[j.key] = j.file.size
			r.pmu.Unlock()
		}
		return nil
	})
	if err != nil {
		return ckpt.UploadStats{}, fmt.Errorf("ckptstore: upload %s %d: %w", kind, id, err)
	}
	b, err := json.MarshalIndent(m, "", " ")
	if err != nil {
		return ckpt.UploadStats{}, fmt.Errorf("ckptstore: encode manifest: %w", err)
	}
	if err := r.putBytes(ctx, manifestKey(kind, id), b); err != nil {
		return ckpt.UploadStats{}, fmt.Errorf("ckptstore: upload %s %d: manifest: %w", kind, id, err)
	}
	r.cacheManifest(manifestKey(kind, id), &m)
	st.Duration = r.o.Now().Sub(began)
	return st, nil
}

// intentDoc is an upload's intent.json.
type intentDoc struct {
	Shared []string `json:"shared"`
}

// seed fills present, once, with the shared files of the newest complete
// checkpoint. Called with mu held.
func (r *Remote) seed(ctx context.Context) error {
	if r.seeded {
		return nil
	}
	ids, err := r.listIDs(ctx, ckpt.Checkpoint)
	if err != nil {
		return err
	}
	if len(ids) > 0 {
		m, err := r.manifest(ctx, ckpt.Checkpoint, ids[len(ids)-1])
		if err != nil {
			return err
		}
		r.addPresent(m)
	}
	r.seeded = true
	return nil
}

func (r *Remote) addPresent(m *manifest) {
	r.pmu.Lock()
	defer r.pmu.Unlock()
	for _, f := range m.Files {
		if strings.HasPrefix(f.Key, sharedDir) {
			r.present[f.Key] = f.Size
		}
	}
}

func (r *Remote) putFile(ctx context.Context, key string, f localFile) error {
	fh, err := os.Open(f.abs)
	if err != nil {
		return err
	}
	defer fh.Close()
	_, err = r.api.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(r.bucket), Key: r.full(key), Body: fh,
		ContentLength: aws.Int64(f.size)})
	if err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	return nil
}

func (r *Remote) putBytes(ctx context.Context, key string, b []byte) error {
	_, err := r.api.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(r.bucket), Key: r.full(key),
		Body: bytes.NewReader(b), ContentLength: aws.Int64(int64(len(b)))})
	if err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	return nil
}

// errNoKey is returned by getBytes for a missing object.
var errNoKey = errors.New("ckptstore: no such key")

func isMissing(err error) bool {
	var nsk *types.NoSuchKey
	var nf *types.NotFound
	return errors.As(err, &nsk) || errors.As(err, &nf)
}

func (r *Remote) getBytes(ctx context.Context, key string) ([]byte, error) {
	out, err := r.api.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(r.bucket), Key: r.full(key)})
	if isMissing(err) {
		return nil, errNoKey
	}
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", key, err)
	}
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", key, err)
	}
	return b, nil
}

func (r *Remote) exists(ctx context.Context, key string) (bool, error) {
	_, err := r.api.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(r.bucket), Key: r.full(key)})
	if isMissing(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("head %s: %w", key, err)
	}
	return true, nil
}

// object is one listed object, its key relative to the store's prefix.
type object struct {
	key  string
	size int64
	mod  time.Time
}

func (r *Remote) list(ctx context.Context, prefix string) ([]object, error) {
	var objs []object
	pg := s3.NewListObjectsV2Paginator(r.api, &s3.ListObjectsV2Input{Bucket: aws.String(r.bucket), Prefix: r.full(prefix)})
	for pg.HasMorePages() {
		out, err := pg.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", prefix, err)
		}
		for _, o := range out.Contents {
			k, ok := strings.CutPrefix(aws.ToString(o.Key), r.prefix)
			if !ok {
				continue
			}
			objs = append(objs, object{key: k, size: aws.ToInt64(o.Size), mod: aws.ToTime(o.LastModified)})
		}
	}
	return objs, nil
}

// deleteKeys deletes objects, manifests (if any are given) first.
func (r *Remote) deleteKeys(ctx context.Context, keys []string) error {
	for len(keys) > 0 {
		n := min(len(keys), 1000)
		ids := make([]types.ObjectIdentifier, n)
		for i, k := range keys[:n] {
			ids[i] = types.ObjectIdentifier{Key: r.full(k)}
		}
		out, err := r.api.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: aws.String(r.bucket),
			Delete: &types.Delete{Objects: ids, Quiet: aws.Bool(true)}})
		if err != nil {
			return fmt.Errorf("delete objects: %w", err)
		}
		if len(out.Errors) > 0 {
			e := out.Errors[0]
			return fmt.Errorf("delete %s: %s: %s (%d of %d failed)", aws.ToString(e.Key), aws.ToString(e.Code),
				aws.ToString(e.Message), len(out.Errors), n)
		}
		keys = keys[n:]
	}
	return nil
}

func (r *Remote) deleteKey(ctx context.Context, key string) error {
	_, err := r.api.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(r.bucket), Key: r.full(key)})
	if err != nil && !isMissing(err) {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	return nil
}

// listIDs returns the ids of kind that have a manifest, ascending.
func (r *Remote) listIDs(ctx context.Context, kind ckpt.Kind) ([]int64, error) {
	pfx := "manifests/" + kind.Prefix()
	objs, err := r.list(ctx, pfx)
	if err != nil {
		return nil, err
	}
	var ids []int64
	for _, o := range objs {
		s, ok := strings.CutSuffix(strings.TrimPrefix(o.key, pfx), ".json")
		if !ok {
			continue
		}
		if id, err := strconv.ParseInt(s, 10, 64); err == nil && id >= 0 {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return slices.Compact(ids), nil
}

func (r *Remote) cacheManifest(key string, m *manifest) {
	r.cmu.Lock()
	r.manifests[key] = m
	r.cmu.Unlock()
}

// manifest reads (or recalls) the manifest of a complete id.
func (r *Remote) manifest(ctx context.Context, kind ckpt.Kind, id int64) (*manifest, error) {
	key := manifestKey(kind, id)
	r.cmu.Lock()
	m := r.manifests[key]
	r.cmu.Unlock()
	if m != nil {
		return m, nil
	}
	b, err := r.getBytes(ctx, key)
	if errors.Is(err, errNoKey) {
		return nil, fmt.Errorf("ckptstore: %s %d: %w", kind, id, ckpt.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("ckptstore: %s %d: %w", kind, id, err)
	}
	if m, err = decodeManifest(b, id, kind); err != nil {
		return nil, err
	}
	r.cacheManifest(key, m)
	return m, nil
}

func (r *Remote) forgetManifest(kind ckpt.Kind, id int64) {
	r.cmu.Lock()
	delete(r.manifests, manifestKey(kind, id))
	r.cmu.Unlock()
}

// List implements Store.
func (r *Remote) List(ctx context.Context, kind ckpt.Kind) ([]int64, error) {
	if err := kind.Valid(); err != nil {
		return nil, err
	}
	ids, err := r.listIDs(ctx, kind)
	if err != nil {
		return nil, r.m.fail("list", fmt.Errorf("ckptstore: %w", err))
	}
	return ids, nil
}

// Latest implements Store.
func (r *Remote) Latest(ctx context.Context, kind ckpt.Kind) (int64, bool, error) {
	return latest(r.List(ctx, kind))
}

// Download implements Store.
func (r *Remote) Download(ctx context.Context, id int64, kind ckpt.Kind, localDir string) error {
	return r.m.fail("download", r.download(ctx, id, kind, localDir))
}

// ReadFile implements Store.
func (r *Remote) ReadFile(ctx context.Context, id int64, kind ckpt.Kind, path string) ([]byte, error) {
	b, err := r.readFile(ctx, id, kind, path)
	return b, r.m.fail("read", err)
}

func (r *Remote) readFile(ctx context.Context, id int64, kind ckpt.Kind, path string) ([]byte, error) {
	if err := checkID(id, kind); err != nil {
		return nil, err
	}
	m, err := r.manifest(ctx, kind, id)
	if err != nil {
		return nil, fmt.Errorf("ckptstore: read: %w", err)
	}
	return readEntry(m, kind, id, path, func(f fileEntry) ([]byte, error) {
		data, err := r.getBytes(ctx, f.Key)
		if errors.Is(err, errNoKey) {
			return nil, fmt.Errorf("%s: object %s is missing: %w", f.Path, f.Key, ckpt.ErrCorrupt)
		}
		return data, err
	})
}

func (r *Remote) download(ctx context.Context, id int64, kind ckpt.Kind, localDir string) error {
	if err := checkID(id, kind); err != nil {
		return err
	}
	m, err := r.manifest(ctx, kind, id)
	if err != nil {
		return fmt.Errorf("ckptstore: download: %w", err)
	}
	tmp, err := prepareTarget(localDir)
	if err != nil {
		return err
	}
	ok := false
	defer func() {
		if !ok {
			os.RemoveAll(tmp)
		}
	}()
	if err := makeDirs(tmp, m.Dirs); err != nil {
		return err
	}
	err = parallel(ctx, len(m.Files), r.o.Parallelism, func(ctx context.Context, i int) error {
		return r.getFile(ctx, m.Files[i], filepath.Join(tmp, filepath.FromSlash(m.Files[i].Path)))
	})
	if err != nil {
		return fmt.Errorf("ckptstore: download %s %d: %w", kind, id, err)
	}
	if err := finishTarget(tmp, localDir); err != nil {
		return err
	}
	ok = true
	var n int64
	for _, f := range m.Files {
		n += f.Size
	}
	r.m.downloaded.Add(float64(n))
	// Uploads after a restore reuse what it brought back.
	r.addPresent(m)
	return nil
}

func (r *Remote) getFile(ctx context.Context, f fileEntry, dst string) error {
	out, err := r.api.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(r.bucket), Key: r.full(f.Key)})
	if err != nil {
		if isMissing(err) {
			return fmt.Errorf("%s: object %s is missing: %w", f.Path, f.Key, ckpt.ErrCorrupt)
		}
		return fmt.Errorf("get %s: %w", f.Key, err)
	}
	defer out.Body.Close()
	fh, err := os.Create(dst)
	if err != nil {
		return err
	}
	hw := newHashingWriter(fh)
	if _, err := io.Copy(hw, out.Body); err != nil {
		fh.Close()
		return fmt.Errorf("get %s: %w", f.Key, err)
	}
	if err := fh.Sync(); err != nil {
		fh.Close()
		return err
	}
	if err := fh.Close(); err != nil {
		return err
	}
	if hw.n != f.Size {
		return fmt.Errorf("%s: got %d bytes, manifest says %d: %w", f.Path, hw.n, f.Size, ckpt.ErrCorrupt)
	}
	if s := hw.sum(); s != f.SHA256 {
		return fmt.Errorf("%s: checksum %s, manifest says %s: %w", f.Path, s, f.SHA256, ckpt.ErrCorrupt)
	}
	return nil
}

// Delete implements Store: the manifest first, then the id's own objects.
func (r *Remote) Delete(ctx context.Context, id int64, kind ckpt.Kind) error {
	if err := checkID(id, kind); err != nil {
		return err
	}
	found, err := r.deleteID(ctx, kind, id)
	if err == nil && !found {
		err = fmt.Errorf("ckptstore: delete %s %d: %w", kind, id, ckpt.ErrNotFound)
	}
	return r.m.fail("delete", err)
}

func (r *Remote) deleteID(ctx context.Context, kind ckpt.Kind, id int64) (bool, error) {
	had, err := r.exists(ctx, manifestKey(kind, id))
	if err != nil {
		return false, fmt.Errorf("ckptstore: delete %s %d: %w", kind, id, err)
	}
	if had {
		if err := r.deleteKey(ctx, manifestKey(kind, id)); err != nil {
			return false, fmt.Errorf("ckptstore: delete %s %d: %w", kind, id, err)
		}
		r.forgetManifest(kind, id)
	}
	objs, err := r.list(ctx, dirKey(kind, id))
	if err != nil {
		return false, fmt.Errorf("ckptstore: delete %s %d: %w", kind, id, err)
	}
	keys := make([]string, len(objs))
	for i, o := range objs {
		keys[i] = o.key
	}
	if err := r.deleteKeys(ctx, keys); err != nil {
		return false, fmt.Errorf("ckptstore: delete %s %d: %w", kind, id, err)
	}
	return had || len(objs) > 0, nil
}

// Prune implements Store. In order: drop the oldest checkpoints beyond
// keep (each manifest first); list what checkpoint and savepoint objects
// exist, then the manifests, so that every upload is seen either complete
// or partial; collect the shared files of every complete manifest, of every
// upload running in this process (captured at the start: none can start
// while Prune runs) and of every partial upload that may still be running
// (else remove it); finally delete the shared files nothing collected
// references, and forget them as present.
func (r *Remote) Prune(ctx context.Context, keep int) (ckpt.PruneStats, error) {
	st, err := r.prune(ctx, keep)
	if err != nil {
		return st, r.m.fail("prune", fmt.Errorf("ckptstore: prune: %w", err))
	}
	return st, nil
}

func (r *Remote) prune(ctx context.Context, keep int) (ckpt.PruneStats, error) {
	var st ckpt.PruneStats
	if keep < 1 {
		return st, fmt.Errorf("keep %d: want at least 1", keep)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	refs := map[string]bool{}
	running := map[ckpt.Kind]map[int64]bool{ckpt.Checkpoint: {}, ckpt.Savepoint: {}}
	r.pmu.Lock()
	for p := range r.inflight {
		running[p.kind][p.id] = true
		for _, k := range p.shared {
			refs[k] = true
		}
	}
	r.pmu.Unlock()

	ids, err := r.listIDs(ctx, ckpt.Checkpoint)
	if err != nil {
		return st, err
	}
	for len(ids) > keep {
		if _, err := r.deleteID(ctx, ckpt.Checkpoint, ids[0]); err != nil {
			return st, err
		}
		st.Checkpoints++
		ids = ids[1:]
	}
	now := r.o.Now()
	for _, kind := range []ckpt.Kind{ckpt.Checkpoint, ckpt.Savepoint} {
		objs, err := r.list(ctx, kindDirKey(kind))
		if err != nil {
			return st, err
		}
		complete, err := r.listIDs(ctx, kind)
		if err != nil {
			return st, err
		}
		newest := int64(-1)
		for _, id := range complete {
			m, err := r.manifest(ctx, kind, id)
			if err != nil {
				return st, err
			}
			for _, f := range m.Files {
				if strings.HasPrefix(f.Key, sharedDir) {
					refs[f.Key] = true
				}
			}
			newest = max(newest, id)
		}
		partial := map[int64][]object{}
		for _, o := range objs {
			name, _, _ := strings.Cut(strings.TrimPrefix(o.key, kindDirKey(kind)), "/")
			id, err := strconv.ParseInt(strings.TrimPrefix(name, kind.Prefix()), 10, 64)
			if err != nil || !strings.HasPrefix(name, kind.Prefix()) || slices.Contains(complete, id) {
				continue
			}
			partial[id] = append(partial[id], o)
		}
		for id, objs := range partial {
			young := false
			for _, o := range objs {
				young = young || now.Sub(o.mod) < r.o.PendingGrace
			}
			if running[kind][id] || id > newest || young {
				b, err := r.getBytes(ctx, dirKey(kind, id)+"intent.json")
				if errors.Is(err, errNoKey) {
					continue
				}
				if err != nil {
					return st, err
				}
				var in intentDoc
				if err := json.Unmarshal(b, &in); err != nil {
					// An unreadable intent protects nothing; keep its files
					// until they age out.
					continue
				}
				for _, k := range in.Shared {
					refs[k] = true
				}
				continue
			}
			if _, err := r.deleteID(ctx, kind, id); err != nil {
				return st, err
			}
			st.Partial++
		}
	}
	shared, err := r.list(ctx, sharedDir)
	if err != nil {
		return st, err
	}
	var dead []string
	for _, o := range shared {
		if !refs[o.key] {
			dead = append(dead, o.key)
			st.SharedBytes += o.size
		}
	}
	if err := r.deleteKeys(ctx, dead); err != nil {
		return st, err
	}
	st.Shared = len(dead)
	r.m.pruned.Add(float64(len(dead)))
	r.pmu.Lock()
	for _, k := range dead {
		delete(r.present, k)
	}
	r.pmu.Unlock()
	return st, nil
}

// High implements Store.
func (r *Remote) High(ctx context.Context) (int64, bool, error) {
	b, err := r.getBytes(ctx, highKey)
	if errors.Is(err, errNoKey) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, r.m.fail("high", fmt.Errorf("ckptstore: read epoch high-water mark: %w", err))
	}
	v, err := parseHigh(b)
	if err != nil {
		return 0, false, r.m.fail("high", err)
	}
	return v, true, nil
}

// PinStart implements Store: a GetObject, and a PutObject when nothing is
// pinned yet. Two first starts racing (one of them a paused holder) can
// each pin their own time; the later pin wins, which loses nothing the
// earlier holder read: its writes are fenced and discarded at the restore.
func (r *Remote) PinStart(ctx context.Context, startMs int64) (int64, error) {
	b, err := r.getBytes(ctx, startPinFile)
	if err == nil {
		v, err := parseHigh(b)
		return v, r.m.fail("pin_start", err)
	}
	if !errors.Is(err, errNoKey) {
		return 0, r.m.fail("pin_start", fmt.Errorf("ckptstore: read the pinned start: %w", err))
	}
	if err := r.putBytes(ctx, startPinFile, formatHigh(startMs)); err != nil {
		return 0, r.m.fail("pin_start", fmt.Errorf("ckptstore: pin the start: %w", err))
	}
	return startMs, nil
}

// SetHigh implements Store: one PutObject, which S3 makes durable and
// visible to every later read before it returns.
func (r *Remote) SetHigh(ctx context.Context, e int64) error {
	if err := r.putBytes(ctx, highKey, formatHigh(e)); err != nil {
		return r.m.fail("set_high", fmt.Errorf("ckptstore: record epoch high-water mark: %w", err))
	}
	return nil
}
