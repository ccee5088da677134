package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	authorizationclient "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/base/version"
	"github.com/kubewire/kubewire/internal/wiring/app"
)

// onlineTimeout bounds validate's online checks as a whole; one request
// gets a third of it.
const onlineTimeout = 30 * time.Second

func newValidate(stdout, stderr io.Writer) *cobra.Command {
	var path, kubeconfig, kubecontext string
	var strict, brokers bool
	cmd := &cobra.Command{
		Use:   "validate --config FILE [--kubeconfig FILE [--context NAME] [--check-brokers=false]] [--strict]",
		Short: "Check a config file offline or, with --kubeconfig, against a cluster; exit 2 listing every error",
		Long: `Check a config file and exit 2 listing every error, each with its field path.

Without --kubeconfig nothing is contacted. With --kubeconfig, validate also
checks against that cluster (never the in-cluster service account) that:
  - each resource is served, with list and watch, and with the scope its
    namespaces list implies;
  - the kubeconfig's user may list and watch each resource, in each
    configured namespace or cluster-wide (SelfSubjectAccessReview);
  - every file the config names (TLS, passwords, tokens, NATS credentials)
    exists and can be opened here, so run it where kubewire runs.
  - each kafka and nats sink's brokers take a connection with the sink's TLS
    settings and credentials; every Kafka topic the sink writes exists or,
    with createTopics, can be created (the brokers validate the creation
    without doing it); a JetStream sink's stream exists, or jetstream.stream
    is set for kubewire to create it. An existing Kafka topic weaker than
    docs/sinks/kafka.md asks (replication factor below 3,
    min.insync.replicas below 2, unclean leader election on) is a warning.
    Each http sink's receiver answers the sink's connect probe (an OPTIONS
    request with its TLS settings and headers; any HTTP status will do).
    --check-brokers=false leaves the brokers and receivers out.

Warnings (risky settings, optional resources the cluster does not serve)
are printed and exit 0 unless --strict is given.`,
		Example: `  # check a file offline
  kubewire validate --config kubewire.yaml

  # also check the cluster, the permissions and the referenced files
  kubewire validate --config kubewire.yaml --kubeconfig ~/.kube/config --context prod

  # in CI: fail on warnings too
  kubewire validate --config kubewire.yaml --strict`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if path == "" {
				return usageError{errors.New("--config is required")}
			}
			if kubecontext != "" && kubeconfig == "" {
				return usageError{errors.New("--context needs --kubeconfig: without it validate checks the file offline")}
			}
			cfg, err := loadConfig(path)
			if err != nil {
				return err
			}
			warnings := cfg.Warnings()
			var failures []string
			checked := ""
			if kubeconfig != "" {
				rc, contextName, err := explicitRESTConfig(kubeconfig, kubecontext)
				if err != nil {
					return err
				}
				ctx, cancel := context.WithTimeout(cmd.Context(), onlineTimeout)
				defer cancel()
				res, err := checkOnline(ctx, cfg, rc)
				if err != nil {
					return fmt.Errorf("checking against the cluster at %s (context %q): %w", apiserverHost(rc.Host), contextName, err)
				}
				warnings = append(warnings, res.warnings...)
				failures = append(failures, res.failures...)
				fileFailures, badFields := checkFiles(cfg)
				failures = append(failures, fileFailures...)
				checked = fmt.Sprintf("; checked against %s (context %q)", apiserverHost(rc.Host), contextName)
				if brokers {
					bctx, cancel := context.WithTimeout(cmd.Context(), onlineTimeout)
					defer cancel()
					b, n := checkBrokers(bctx, cfg, badFields)
					warnings = append(warnings, b.warnings...)
					failures = append(failures, b.failures...)
					if n > 0 {
						checked += fmt.Sprintf(" and the brokers of %d sink(s)", n)
					}
				}
			}
			for _, w := range warnings {
				fmt.Fprintf(stdout, "%s: warning: %s\n", path, w)
			}
			for _, f := range failures {
				fmt.Fprintf(stderr, "%s: %s\n", path, f)
			}
			switch {
			case len(failures) > 0:
				return usageError{fmt.Errorf("%d check(s) failed%s", len(failures), checked)}
			case strict && len(warnings) > 0:
				return usageError{fmt.Errorf("--strict: %d warning(s)", len(warnings))}
			}
			fmt.Fprintf(stdout, "%s: valid (%d resources, %d sinks)%s\n", path, len(cfg.Resources), len(cfg.Sinks), checked)
			return nil
		},
	}
	cmd.Flags().StringVar(&path, "config", "", "path to the config file (required)")
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "check against the cluster of this kubeconfig too (default: offline only)")
	cmd.Flags().StringVar(&kubecontext, "context", "", "kubeconfig context to use instead of the current one")
	cmd.Flags().BoolVar(&strict, "strict", false, "exit 2 on warnings too")
	cmd.Flags().BoolVar(&brokers, "check-brokers", true, "with --kubeconfig, also connect to the kafka and nats sinks' brokers and check their topics and streams, and to the http sinks' receivers")
	return cmd
}

// explicitRESTConfig loads exactly the kubeconfig named: unlike restConfig
// it never falls back to $KUBECONFIG or the in-cluster service account, so
// validate checks the cluster the user named or none. It returns the name
// of the context used.
func explicitRESTConfig(kubeconfig, kubecontext string) (*rest.Config, string, error) {
	rules := &clientcmd.ClientConfigLoadingRules{ExplicitPath: kubeconfig}
	raw, err := rules.Load()
	if err != nil {
		return nil, "", usageError{fmt.Errorf("--kubeconfig %s: %w", kubeconfig, err)}
	}
	name := kubecontext
	if name == "" {
		name = raw.CurrentContext
	}
	rc, err := clientcmd.NewNonInteractiveClientConfig(*raw, name, &clientcmd.ConfigOverrides{}, rules).ClientConfig()
	if err != nil {
		return nil, "", usageError{fmt.Errorf("--kubeconfig %s, context %q: %w", kubeconfig, name, err)}
	}
	return rc, name, nil
}

// onlineResult is what checkOnline found: failures fail validate, warnings
// only with --strict. Each line starts with the field path it concerns.
type onlineResult struct {
	failures, warnings []string
}

// fail and warn add a failure or a warning, formatted as fmt.Sprintf does.
func (r *onlineResult) fail(format string, args ...any) {
	r.failures = append(r.failures, fmt.Sprintf(format, args...))
}

func (r *onlineResult) warn(format string, args ...any) {
	r.warnings = append(r.warnings, fmt.Sprintf(format, args...))
}

// checkOnline checks each resource against the cluster: that it is served
// with list and watch and the scope its namespaces imply, and that the
// kubeconfig's user may list and watch it where kubewire will. An error
// means the cluster could not be asked at all.
func checkOnline(ctx context.Context, cfg *config.Config, base *rest.Config) (onlineResult, error) {
	var res onlineResult
	rc := rest.CopyConfig(base)
	rc.QPS, rc.Burst = cfg.Client.QPS, cfg.Client.Burst
	rc.Timeout = onlineTimeout / 3
	rc.UserAgent = "kubewire-validate/" + version.Version
	disc, err := discovery.NewDiscoveryClientForConfig(rc)
	if err != nil {
		return res, err
	}
	authz, err := authorizationclient.NewForConfig(rc)
	if err != nil {
		return res, err
	}
	if _, err := disc.ServerVersion(); err != nil {
		return res, err
	}
	served := map[string]*metav1.APIResourceList{}
	for i, r := range cfg.Resources {
		rp := fmt.Sprintf("resources[%d]", i)
		if r.IsDiscover() {
			continue // checkDiscovered
		}
		gvr := r.GVR()
		name := gvr.GroupResource().String() + "/" + gvr.Version
		gv := gvr.GroupVersion().String()
		list, ok := served[gv]
		if !ok {
			list, err = disc.ServerResourcesForGroupVersion(gv)
			switch {
			case apierrors.IsNotFound(err):
				list = &metav1.APIResourceList{}
			case err != nil:
				res.fail("%s: %s: discovery of %s failed: %v", rp, name, gv, err)
				continue
			}
			served[gv] = list
		}
		at := slices.IndexFunc(list.APIResources, func(a metav1.APIResource) bool { return a.Name == r.Resource })
		namespaced := true // unknown scope: check where the config says
		switch {
		case at < 0 && r.Optional:
			res.warn("%s: %s is not served by the cluster (is its CRD installed?); it is optional, so kubewire reports it and streams it once it appears", rp, name)
		case at < 0:
			res.fail("%s: %s is not served by the cluster (is its CRD installed? if it may be missing, set optional: true)", rp, name)
			continue
		default:
			a := list.APIResources[at]
			namespaced = a.Namespaced
			if missing := missingVerbs(a.Verbs, "list", "watch"); len(missing) > 0 {
				res.fail("%s: %s is served without %s, which kubewire needs", rp, name, strings.Join(missing, " and "))
				continue
			}
			if !namespaced && len(r.Namespaces) > 0 {
				res.warn("%s.namespaces: %s is cluster-scoped, so kubewire ignores its namespaces list and watches every object", rp, name)
			}
		}
		for _, ns := range accessScopes(r, namespaced) {
			denied, err := deniedVerbs(ctx, authz.SelfSubjectAccessReviews(), r, ns)
			switch {
			case err != nil:
				res.fail("%s: %s: cannot check permissions in %s: %v", rp, name, scopeName(ns), err)
			case len(denied) > 0:
				res.fail("%s: %s: permission denied: the kubeconfig's user cannot %s it in %s", rp, name, strings.Join(denied, " or "), scopeName(ns))
			}
		}
	}
	checkDiscovered(ctx, cfg, disc, authz.SelfSubjectAccessReviews(), &res)
	return res, nil
}

// checkDiscovered lists, as warnings, the groups discovery cannot read and
// each resource a discover entry selects that the user may not list or
// watch: kubewire streams the others and keeps retrying those, so none is
// a failure.
func checkDiscovered(ctx context.Context, cfg *config.Config, disc discovery.DiscoveryInterface, reviews authorizationclient.SelfSubjectAccessReviewInterface, res *onlineResult) {
	if !cfg.DiscoverEntries() {
		return
	}
	gvrs, failed, err := app.ServedResources(disc, slog.New(slog.DiscardHandler))
	if err != nil {
		res.fail("resources: discovery failed: %v", err)
		return
	}
	for _, gv := range failed {
		res.warn("resources: discovery of %s failed (an aggregated API whose Service is missing?); its resources are not streamed while it fails", gv)
	}
	for _, r := range cfg.Expand(gvrs) {
		if !r.Discovered {
			continue
		}
		i := slices.IndexFunc(cfg.Resources, func(e config.Resource) bool {
			return e.IsDiscover() && e.Discover.Selects(r.GVR().GroupResource())
		})
		name := r.GVR().GroupResource().String() + "/" + r.Version
		for _, ns := range accessScopes(r, true) {
			denied, err := deniedVerbs(ctx, reviews, r, ns)
			switch {
			case err != nil:
				res.fail("resources[%d]: %s (discovered): cannot check permissions in %s: %v", i, name, scopeName(ns), err)
			case len(denied) > 0:
				res.warn("resources[%d]: %s (discovered): permission denied: the kubeconfig's user cannot %s it in %s; kubewire streams the other resources and retries this one", i, name, strings.Join(denied, " or "), scopeName(ns))
			}
		}
	}
}

// accessScopes lists the namespaces whose list and watch permission a
// resource needs, "" standing for cluster-wide: each configured namespace
// when run watches them one by one (config.Resource.PerNamespaceWatch),
// else the whole cluster, as run's one cluster-wide watch needs.
func accessScopes(r config.Resource, namespaced bool) []string {
	if !namespaced || !r.PerNamespaceWatch() {
		return []string{metav1.NamespaceAll}
	}
	return r.Namespaces
}

func missingVerbs(have metav1.Verbs, want ...string) []string {
	var missing []string
	for _, v := range want {
		if !slices.Contains(have, v) {
			missing = append(missing, v)
		}
	}
	return missing
}

// deniedVerbs returns which of list and watch the user may not do on r in
// namespace ns ("" for cluster-wide).
func deniedVerbs(ctx context.Context, reviews authorizationclient.SelfSubjectAccessReviewInterface, r config.Resource, ns string) ([]string, error) {
	var denied []string
	for _, verb := range []string{"list", "watch"} {
		review, err := reviews.Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: ns, Verb: verb, Group: r.Group, Version: r.Version, Resource: r.Resource,
			}},
		}, metav1.CreateOptions{})
		if err != nil {
			return nil, err
		}
		if !review.Status.Allowed {
			denied = append(denied, verb)
		}
	}
	return denied, nil
}

func scopeName(ns string) string {
	if ns == "" {
		return "all namespaces"
	}
	return "namespace " + strconv.Quote(ns)
}

// checkFiles reports each file the config names that cannot be opened for
// reading, or is a directory, and the fields that name them.
func checkFiles(cfg *config.Config) (failures, fields []string) {
	for _, f := range cfg.Files() {
		if err := readable(f.Path); err != nil {
			failures = append(failures, fmt.Sprintf("%s: %v", f.Field, err))
			fields = append(fields, f.Field.String())
		}
	}
	return failures, fields
}

func readable(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return fmt.Errorf("%s is a directory, not a file", path)
	}
	return nil
}
