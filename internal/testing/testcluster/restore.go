package testcluster

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// SaveEtcd writes a snapshot of etcd to path, as an operator's backup
// does, and returns the revision it holds.
func (c *Cluster) SaveEtcd(ctx context.Context, path string) (revision int64, err error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{c.etcdURL}, DialTimeout: 5 * time.Second})
	if err != nil {
		return 0, fmt.Errorf("etcd client: %w", err)
	}
	defer cli.Close()
	st, err := cli.Status(ctx, c.etcdURL)
	if err != nil {
		return 0, fmt.Errorf("etcd status: %w", err)
	}
	rc, err := cli.Snapshot(ctx)
	if err != nil {
		return 0, fmt.Errorf("etcd snapshot: %w", err)
	}
	defer rc.Close()
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	if _, err := io.Copy(f, rc); err != nil {
		f.Close()
		return 0, fmt.Errorf("etcd snapshot: %w", err)
	}
	return st.Header.Revision, f.Close()
}

// Restore says how RestoreEtcd restores.
type Restore struct {
	// BumpRevision, when above 0, restores the way upstream recommends
	// (etcdutl's --bump-revision with --mark-compacted): revisions go on
	// from the snapshot's plus this, and every older one reads as
	// compacted. 0 is a plain restore: revisions go back to the
	// snapshot's.
	BumpRevision int64
}

// RestoreEtcd stops kube-apiserver and etcd, restores the snapshot at path
// into a new data directory with etcdutl (built once into the cache), and
// starts both again on it, on the same addresses.
func (c *Cluster) RestoreEtcd(ctx context.Context, path string, r Restore) error {
	dir, err := CacheDir()
	if err != nil {
		return err
	}
	unlock, err := lockDir(ctx, dir, c.progress)
	if err != nil {
		return err
	}
	etcdutl, err := ensureBinary(ctx, dir, etcdutlSpec(), c.progress)
	unlock()
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.stopAPIServerLocked(); err != nil {
		return err
	}
	if c.etcd != nil {
		if err := c.etcd.stop(); err != nil {
			fmt.Fprintln(c.progress, "stopping etcd:", err)
		}
		c.etcd = nil
	}
	data := filepath.Join(c.dir, "etcd-restored-"+strconv.FormatInt(time.Now().UnixNano(), 36))
	args := []string{"snapshot", "restore", path, "--data-dir=" + data, "--name=testcluster",
		"--initial-cluster=testcluster=" + c.peerURL(), "--initial-advertise-peer-urls=" + c.peerURL()}
	if r.BumpRevision > 0 {
		args = append(args, "--bump-revision="+strconv.FormatInt(r.BumpRevision, 10), "--mark-compacted")
	}
	if out, err := exec.CommandContext(ctx, etcdutl, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("etcdutl %v: %w\n%s", args, err, out)
	}
	c.etcdData = data
	c.mu.Unlock()
	err = c.startEtcd(ctx)
	c.mu.Lock()
	if err != nil {
		return err
	}
	return c.startAPIServerLocked(ctx)
}
