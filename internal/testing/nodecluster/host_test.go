package nodecluster

import (
	"strings"
	"testing"
)

func TestIptablesUndoDeletesOnlyTheRulesAndChainsAddedSince(t *testing.T) {
	before := `*filter
:INPUT ACCEPT [0:0]
:FORWARD DROP [0:0]
:OTHER - [0:0]
-A INPUT -j OTHER
-A OTHER -s 192.0.2.9/32 -j DROP
COMMIT
`
	after := `*filter
:INPUT ACCEPT [0:0]
:FORWARD DROP [0:0]
:OTHER - [0:0]
:KUBE-FIREWALL - [0:0]
:KUBE-SERVICES - [0:0]
-A INPUT -j OTHER
-A INPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A OTHER -s 192.0.2.9/32 -j DROP
-A KUBE-SERVICES -j KUBE-FIREWALL
-A KUBE-FIREWALL -j DROP
COMMIT
*nat
:PREROUTING ACCEPT [0:0]
:KUBE-POSTROUTING - [0:0]
-A PREROUTING -j KUBE-POSTROUTING
COMMIT
`
	want := `*filter
-D INPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-F KUBE-FIREWALL
-F KUBE-SERVICES
-X KUBE-FIREWALL
-X KUBE-SERVICES
COMMIT
*nat
-D PREROUTING -j KUBE-POSTROUTING
-F KUBE-POSTROUTING
-X KUBE-POSTROUTING
COMMIT
`
	if got := iptablesUndo(before, after); got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
	if got := iptablesUndo(before, before); got != "" {
		t.Errorf("nothing added, but got:\n%s", got)
	}
	left := strings.Join(newIptablesLines(before, after), "\n")
	for _, w := range []string{"table nat: chain KUBE-POSTROUTING", "table filter: rule -A KUBE-FIREWALL -j DROP"} {
		if !strings.Contains(left, w) {
			t.Errorf("newIptablesLines misses %q:\n%s", w, left)
		}
	}
	if strings.Contains(left, "PREROUTING ACCEPT") || strings.Contains(left, "chain PREROUTING") {
		t.Errorf("a built-in chain of a new table counts as added:\n%s", left)
	}
}

func TestUnescapeMountDecodesMountinfosOctalEscapes(t *testing.T) {
	if got := unescapeMount(`/tmp/a\040b/c`); got != "/tmp/a b/c" {
		t.Errorf("got %q", got)
	}
}
