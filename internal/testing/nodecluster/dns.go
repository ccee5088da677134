package nodecluster

import (
	"context"
	"errors"
	"net"
	"strings"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// serviceDNS stands in for the cluster's DNS (CoreDNS, which the node does
// not run): it answers A queries for <service>.<namespace>.svc.<domain>
// with the Service's ClusterIP, read from the apiserver, and NXDOMAIN for
// every other name, so a pod's resolver falls through its search list as
// it would in a real cluster. The kubelet's clusterDNS points pods at it.
type serviceDNS struct {
	conn   net.PacketConn
	client kubernetes.Interface
	done   chan struct{}
}

func startServiceDNS(client kubernetes.Interface) (*serviceDNS, error) {
	conn, err := net.ListenPacket("udp4", net.JoinHostPort(GatewayIP, "53"))
	if err != nil {
		return nil, err
	}
	d := &serviceDNS{conn: conn, client: client, done: make(chan struct{})}
	go d.serve()
	return d, nil
}

func (d *serviceDNS) close() {
	d.conn.Close()
	<-d.done
}

func (d *serviceDNS) serve() {
	defer close(d.done)
	buf := make([]byte, 1500)
	for {
		n, from, err := d.conn.ReadFrom(buf)
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			continue
		}
		if resp, ok := d.answer(buf[:n]); ok {
			d.conn.WriteTo(resp, from)
		}
	}
}

func (d *serviceDNS) answer(req []byte) ([]byte, bool) {
	var p dnsmessage.Parser
	h, err := p.Start(req)
	if err != nil {
		return nil, false
	}
	q, err := p.Question()
	if err != nil {
		return nil, false
	}
	rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired}
	ip := d.lookup(q.Name.String())
	if ip == nil {
		rh.RCode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, rh)
	b.EnableCompression()
	b.StartQuestions()
	b.Question(q)
	b.StartAnswers()
	if ip != nil && q.Type == dnsmessage.TypeA {
		var a dnsmessage.AResource
		copy(a.A[:], ip.To4())
		b.AResource(dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 5}, a)
	}
	resp, err := b.Finish()
	return resp, err == nil
}

// lookup returns the ClusterIP of the Service name names, or nil.
func (d *serviceDNS) lookup(name string) net.IP {
	rest, ok := strings.CutSuffix(strings.ToLower(name), ".svc."+ClusterDomain+".")
	if !ok {
		return nil
	}
	svc, ns, ok := strings.Cut(rest, ".")
	if !ok || strings.Contains(ns, ".") {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s, err := d.client.CoreV1().Services(ns).Get(ctx, svc, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	return net.ParseIP(s.Spec.ClusterIP).To4()
}
