package testcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/client-go/rest"
)

// CompactEtcd compacts etcd's history up to its current revision, so any
// watch that resumes from an older resourceVersion (and is not served from
// the apiserver's watch cache) fails with 410 Gone and the client relists.
func (c *Cluster) CompactEtcd(ctx context.Context) (revision int64, err error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{c.etcdURL}, DialTimeout: 5 * time.Second})
	if err != nil {
		return 0, fmt.Errorf("etcd client: %w", err)
	}
	defer cli.Close()
	resp, err := cli.Get(ctx, "kubewire-compaction-probe")
	if err != nil {
		return 0, fmt.Errorf("etcd get: %w", err)
	}
	rev := resp.Header.Revision
	if _, err := cli.Compact(ctx, rev, clientv3.WithCompactPhysical()); err != nil {
		return 0, fmt.Errorf("etcd compact to %d: %w", rev, err)
	}
	return rev, nil
}

// ForgetHistory restarts kube-apiserver after a compaction. With the watch
// cache on (the default), the cache serves a watch, and a LIST at an exact
// version, from its own window whatever etcd has compacted; a new cache
// starts at the current revision, so what etcd no longer holds is gone for
// every request.
func (c *Cluster) ForgetHistory(ctx context.Context) error { return c.RestartAPIServer(ctx) }

// CompactEtcdAt compacts etcd's history up to revision: versions before it
// are gone, it and later ones are still served.
func (c *Cluster) CompactEtcdAt(ctx context.Context, revision int64) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{c.etcdURL}, DialTimeout: 5 * time.Second})
	if err != nil {
		return fmt.Errorf("etcd client: %w", err)
	}
	defer cli.Close()
	if _, err := cli.Compact(ctx, revision, clientv3.WithCompactPhysical()); err != nil {
		return fmt.Errorf("etcd compact to %d: %w", revision, err)
	}
	return nil
}

// Proxy is a TCP proxy in front of the apiserver whose connections a test can
// cut, to break a client's watches without touching the server.
type Proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	cut   bool
	wg    sync.WaitGroup
}

// NewProxy starts a proxy to the cluster's apiserver on a free port.
func (c *Cluster) NewProxy() (*Proxy, error) {
	u, err := url.Parse(c.apiURL)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: u.Host, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// RESTConfig is c.RESTConfig(user) routed through the proxy. The serving
// certificate is for 127.0.0.1, which the proxy also listens on.
func (p *Proxy) RESTConfig(c *Cluster, user string) *rest.Config {
	rc := c.RESTConfig(user)
	rc.Host = "https://" + p.ln.Addr().String()
	return rc
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			in.Close()
			continue
		}
		out, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			p.mu.Unlock()
			in.Close()
			continue
		}
		p.conns[in], p.conns[out] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(in, out)
		go p.pipe(out, in)
	}
}

func (p *Proxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	_, _ = io.Copy(dst, src)
	dst.Close()
	src.Close()
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
}

// Cut closes every open connection and refuses new ones until Resume.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		c.Close()
	}
}

// Resume lets connections through again.
func (p *Proxy) Resume() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}

// Close stops the proxy and waits for its goroutines.
func (p *Proxy) Close() error {
	err := p.ln.Close()
	p.Cut()
	p.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}
