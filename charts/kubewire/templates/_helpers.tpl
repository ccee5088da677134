{{/*
The chart name, cut to 63 characters because some Kubernetes name fields
(and label values) are limited to that by the DNS-1123 label rules.
*/}}
{{- define "kubewire.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The release's full name. A release already called "kubewire..." is not
repeated ("kubewire-kubewire") so that names stay readable.
*/}}
{{- define "kubewire.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "kubewire.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "kubewire.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kubewire.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "kubewire.labels" -}}
helm.sh/chart: {{ include "kubewire.chart" . }}
{{ include "kubewire.selectorLabels" . }}
app.kubernetes.io/version: {{ include "kubewire.imageTag" . | trunc 63 | quote }}
app.kubernetes.io/component: streamer
app.kubernetes.io/part-of: kubewire
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
The `helm test` Pod's labels. Its name label differs from kubewire's, so
that the metrics Service, the PodDisruptionBudget and the NetworkPolicy,
which select kubewire's pods by name and instance, never pick it up.
*/}}
{{- define "kubewire.testSelectorLabels" -}}
app.kubernetes.io/name: {{ include "kubewire.name" . | trunc 58 | trimSuffix "-" }}-test
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "kubewire.testLabels" -}}
helm.sh/chart: {{ include "kubewire.chart" . }}
{{ include "kubewire.testSelectorLabels" . }}
app.kubernetes.io/version: {{ include "kubewire.imageTag" . | trunc 63 | quote }}
app.kubernetes.io/component: test
app.kubernetes.io/part-of: kubewire
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "kubewire.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "kubewire.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "kubewire.imageTag" -}}
{{- default .Chart.AppVersion .Values.image.tag }}
{{- end }}

{{- define "kubewire.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (include "kubewire.imageTag" .) }}
{{- end }}
{{- end }}

{{/*
Whether leader election runs: asked for, or implied by more than one replica,
because two replicas publishing at once would send every event twice.
Returns "true" or "".
*/}}
{{- define "kubewire.leaderElect" -}}
{{- if or .Values.leaderElection.enabled (gt (int .Values.replicaCount) 1) }}true{{ end }}
{{- end }}

{{- define "kubewire.leaderElectionID" -}}
{{- default (include "kubewire.fullname" .) .Values.leaderElection.id }}
{{- end }}

{{/*
The Lease in the release namespace where the leader keeps, per watched
resource, the resourceVersion up to which every change was delivered
(--checkpoint). "<leaderElection.id>-checkpoint", the name kubewire picks
itself with --leader-elect, so <fullname>-checkpoint unless
leaderElection.id is set: two releases in one namespace never resume from
each other's checkpoint.
*/}}
{{- define "kubewire.checkpointName" -}}
{{- include "kubewire.leaderElectionID" . }}-checkpoint
{{- end }}

{{/*
The name of the ClusterRole and its binding. Cluster-scoped names are shared
by every namespace, so the release namespace is part of it: the same release
name installed in two namespaces must not overwrite one grant with the other.
*/}}
{{- define "kubewire.clusterRoleName" -}}
{{- printf "%s-%s" .Release.Namespace (include "kubewire.fullname" .) }}
{{- end }}

{{/*
How kubewire reads each configured resource decides which grant it needs
(docs/configuration.md, "Namespaces and LIST calls"):
  - no namespaces (or an empty list): one cluster-wide LIST/WATCH;
  - exactly one namespace: a LIST/WATCH in that namespace, so a Role there
    suffices;
  - several namespaces with watchPerNamespace: one LIST/WATCH in each of
    them, so a Role in each suffices. watchPerNamespace defaults to true
    for core secrets, where a cluster-wide grant would let kubewire read
    every Secret of the cluster, and to false otherwise;
  - several namespaces without it: one cluster-wide LIST/WATCH filtered
    before the cache, which needs cluster-wide permission even though only
    the listed namespaces are kept.
This returns that split as YAML:
  cluster: [{group, resource}...]
  namespaces: {ns: [{group, resource}...]}
*/}}
{{- define "kubewire.rbacPlan" -}}
{{- $cluster := list }}
{{- $byNamespace := dict }}
{{- range $i, $r := .Values.config.resources }}
{{- if hasKey $r "discover" }}
{{- $cluster = concat $cluster (include "kubewire.discoverRules" (dict "r" $r "rbac" $.Values.rbac) | fromYamlArray) }}
{{- continue }}
{{- end }}
{{- $group := default "" $r.group }}
{{- $rule := dict "group" $group "resource" $r.resource }}
{{- $nss := default (list) $r.namespaces }}
{{- $perNamespace := and (eq $group "") (eq $r.resource "secrets") }}
{{- if hasKey $r "watchPerNamespace" }}
{{- if not (kindIs "invalid" $r.watchPerNamespace) }}
{{- $perNamespace = $r.watchPerNamespace }}
{{- end }}
{{- end }}
{{- if or (eq (len $nss) 1) (and $perNamespace (gt (len $nss) 1)) }}
{{- range $ns := $nss }}
{{- $_ := set $byNamespace $ns (append (get $byNamespace $ns | default (list)) $rule) }}
{{- end }}
{{- else }}
{{- $cluster = append $cluster $rule }}
{{- end }}
{{- end }}
{{- dict "cluster" (uniq $cluster) "namespaces" $byNamespace | toYaml }}
{{- end }}

{{/*
The cluster-wide reads of one discover entry (docs/configuration.md,
"Discovered resources"). Kubernetes has no deny rules, so a wildcard would
include every Secret of the cluster: it is granted only with
rbac.discover.wildcard. Otherwise:
  - the CRDs, which kubewire watches to follow resources as they come and go;
  - each core resource of rbac.discover.coreResources the entry's patterns
    match, one by one (never secrets);
  - "*" in each group of rbac.discover.groups the patterns match, and in
    each group the entry names without a glob.
Input: dict "r" (the entry) "rbac" (.Values.rbac). Output: a YAML list of
{group, resource}.
*/}}
{{- define "kubewire.discoverRules" -}}
{{- $d := .r.discover | default dict }}
{{- $rbac := .rbac.discover | default dict }}
{{- $rules := list (dict "group" "apiextensions.k8s.io" "resource" "customresourcedefinitions") }}
{{- if $rbac.wildcard }}
{{- $rules = append $rules (dict "group" "*" "resource" "*") }}
{{- else }}
{{- $groups := $d.groups | default (list "*") }}
{{- $resources := $d.resources | default (list "*") }}
{{- if include "kubewire.globsMatch" (dict "patterns" $groups "s" "") }}
{{- range $res := $rbac.coreResources | default list }}
{{- if and (ne $res "secrets") (include "kubewire.globsMatch" (dict "patterns" $resources "s" $res)) }}
{{- $rules = append $rules (dict "group" "" "resource" $res) }}
{{- end }}
{{- end }}
{{- end }}
{{- $named := list }}
{{- range $g := $groups }}
{{- if and (ne $g "") (not (regexMatch "[*?\\[]" $g)) }}
{{- $named = append $named $g }}
{{- end }}
{{- end }}
{{- range $g := $rbac.groups | default list }}
{{- if include "kubewire.globsMatch" (dict "patterns" $groups "s" $g) }}
{{- $named = append $named $g }}
{{- end }}
{{- end }}
{{- range $g := $named | uniq | sortAlpha }}
{{- $rules = append $rules (dict "group" $g "resource" "*") }}
{{- end }}
{{- end }}
{{- $rules | toYaml }}
{{- end }}

{{/*
"true" if s matches one of the globs in patterns ("*", "?" and literal
characters, as path.Match reads them), else "".
*/}}
{{- define "kubewire.globsMatch" -}}
{{- $s := .s }}
{{- $hit := false }}
{{- range $p := .patterns }}
{{- $re := printf "^%s$" ($p | replace "." "\\." | replace "*" "[^/]*" | replace "?" "[^/]") }}
{{- if regexMatch $re $s }}{{ $hit = true }}{{ end }}
{{- end }}
{{- if $hit }}true{{ end }}
{{- end }}

{{/*
One read-only rule per configured resource. get is included with list and
watch so that the grant reads as "may read this resource", the usual shape
for a watcher; kubewire never writes to what it watches.
*/}}
{{- define "kubewire.readRules" -}}
{{- range . }}
- apiGroups: [{{ .group | quote }}]
  resources: [{{ .resource | quote }}]
  verbs: ["get", "list", "watch"]
{{- end }}
{{- end }}

{{/*
Where the spool volume is mounted; the rendered config's dispatch.spoolDir.
kubewire keeps one sub-directory per sink there.
*/}}
{{- define "kubewire.spoolDir" -}}
/var/lib/kubewire/spool
{{- end }}

{{/*
The bytes of disk the sinks' spools may use together: the sum of
spool.maxBytes (default 1 GiB, as kubewire's DefaultSpoolMaxBytes) over the
sinks whose overflow is spool (the default). A sink with overflow: conflate
never writes to disk.
*/}}
{{- define "kubewire.spoolBytes" -}}
{{- $total := 0 }}
{{- range .Values.config.sinks }}
{{- if eq (default "spool" .overflow) "spool" }}
{{- $max := 1073741824 }}
{{- with .spool }}{{ with .maxBytes }}{{ $max = . }}{{ end }}{{ end }}
{{- $total = add $total (int64 $max) }}
{{- end }}
{{- end }}
{{- $total }}
{{- end }}

{{/*
A quantity as values.schema.json allows it for spool sizes (a whole number
with an optional Ki, Mi, Gi, Ti, k, M, G or T suffix), in bytes.
*/}}
{{- define "kubewire.quantityBytes" -}}
{{- $q := toString . }}
{{- $units := dict "" 1 "k" 1000 "M" 1000000 "G" 1000000000 "T" 1000000000000 "Ki" 1024 "Mi" 1048576 "Gi" 1073741824 "Ti" 1099511627776 }}
{{- $num := regexFind "^[0-9]+" $q }}
{{- $unit := trimPrefix $num $q }}
{{- if not (hasKey $units $unit) }}
{{- fail (printf "%q: not a size such as 2Gi or 1500M" $q) }}
{{- end }}
{{- mul (int64 $num) (get $units $unit) }}
{{- end }}

{{/*
The emptyDir's sizeLimit: spool.sizeLimit when given, else the sinks' spools
together plus a quarter for the spool's own files and whatever it writes
past maxBytes before it counts itself full, rounded up to a MiB, and at
least 64Mi. The kubelet evicts a pod whose emptyDir outgrows its sizeLimit,
and the spool goes with the pod, so a given sizeLimit below what the spools
may use is refused.
*/}}
{{- define "kubewire.spoolSizeLimit" -}}
{{- $need := include "kubewire.spoolBytes" . | int64 }}
{{- if .Values.spool.sizeLimit }}
{{- $have := include "kubewire.quantityBytes" .Values.spool.sizeLimit | int64 }}
{{- if lt $have $need }}
{{- fail (printf "spool.sizeLimit %s (%d bytes) is smaller than the %d bytes the sinks' spools may use together (the sum of config.sinks[].spool.maxBytes, default 1 GiB each, over the sinks with overflow: spool); the kubelet would evict the pod, and its spool with it. Raise it, leave it empty to size it from the sinks, or lower the sinks' spool.maxBytes" (toString .Values.spool.sizeLimit) $have $need) }}
{{- end }}
{{- .Values.spool.sizeLimit }}
{{- else }}
{{- $mi := div (add (div (mul $need 5) 4) 1048575) 1048576 }}
{{- printf "%dMi" (max $mi 64) }}
{{- end }}
{{- end }}

{{- define "kubewire.spoolClaimName" -}}
{{- default (printf "%s-spool" (include "kubewire.fullname" .)) .Values.spool.persistence.existingClaim }}
{{- end }}

{{/*
Checks across fields of config that values.schema.json cannot express. Each
failure names the field path, the value and what was expected, as kubewire's
own config errors do, so that a mistake fails `helm install` rather than
leaving a pod in CrashLoopBackOff. kubewire checks the config in full when it
starts; these checks never refuse a config kubewire accepts.
*/}}
{{- define "kubewire.checkConfig" -}}
{{- $cfg := .Values.config }}
{{- $sinkNames := list }}
{{- $firstSink := dict }}
{{- range $i, $s := $cfg.sinks }}
{{- if hasKey $firstSink $s.name }}
{{- fail (printf "config.sinks[%d].name %q: already the name of config.sinks[%v]; every sink needs a name of its own, which resources use to refer to it" $i $s.name (get $firstSink $s.name)) }}
{{- end }}
{{- $_ := set $firstSink $s.name $i }}
{{- $sinkNames = append $sinkNames $s.name }}
{{- end }}
{{- $firstResource := dict }}
{{- range $i, $r := $cfg.resources }}
{{- $gr := printf "%s/%s" (default "" $r.group) $r.resource }}
{{- if hasKey $firstResource $gr }}
{{- fail (printf "config.resources[%d]: group %q resource %q is already watched by config.resources[%v]; kubewire runs one informer per resource, so merge the two entries" $i (default "" $r.group) $r.resource (get $firstResource $gr)) }}
{{- end }}
{{- $_ := set $firstResource $gr $i }}
{{- range $j, $name := $r.sinks }}
{{- if not (has $name $sinkNames) }}
{{- $defined := list }}
{{- range $sinkNames }}{{ $defined = append $defined (printf "%q" .) }}{{ end }}
{{- fail (printf "config.resources[%d].sinks[%d] %q: no sink of that name in config.sinks (defined: %s); add it to config.sinks or fix the name" $i $j $name (join ", " $defined)) }}
{{- end }}
{{- end }}
{{- with $r.labelSelector }}
{{- include "kubewire.checkLabelSelector" (dict "path" (printf "config.resources[%d].labelSelector" $i) "value" .) }}
{{- end }}
{{- with $r.fieldSelector }}
{{- include "kubewire.checkFieldSelector" (dict "path" (printf "config.resources[%d].fieldSelector" $i) "value" .) }}
{{- end }}
{{- end }}
{{- $drain := 30.0 }}
{{- with $cfg.dispatch }}{{ if hasKey . "drainTimeout" }}{{ $drain = include "kubewire.durationSeconds" .drainTimeout | float64 }}{{ end }}{{ end }}
{{- if ge $drain (float64 .Values.terminationGracePeriodSeconds) }}
{{- fail (printf "terminationGracePeriodSeconds %v: must be above config.dispatch.drainTimeout (%vs), or the kubelet kills kubewire while it drains queued events on shutdown; raise it or lower the drain timeout" .Values.terminationGracePeriodSeconds $drain) }}
{{- end }}
{{- if include "kubewire.leaderElect" . }}
{{- $le := .Values.leaderElection }}
{{- $lease := include "kubewire.durationSeconds" $le.leaseDuration | float64 }}
{{- $renew := include "kubewire.durationSeconds" $le.renewDeadline | float64 }}
{{- $retry := include "kubewire.durationSeconds" $le.retryPeriod | float64 }}
{{- if not (and (gt $lease $renew) (gt $renew (mulf $retry 1.2)) (gt $retry 0.0)) }}
{{- fail (printf "leaderElection: leaseDuration %v, renewDeadline %v and retryPeriod %v must satisfy leaseDuration > renewDeadline > 1.2 x retryPeriod > 0 (client-go's leader election refuses anything else)" $le.leaseDuration $le.renewDeadline $le.retryPeriod) }}
{{- end }}
{{- end }}
{{- end }}

{{/*
A Go duration as values.schema.json allows it ("1m30s", "500ms", or 0), in
seconds.
*/}}
{{- define "kubewire.durationSeconds" -}}
{{- $d := toString . }}
{{- $units := dict "ns" 0.000000001 "us" 0.000001 "µs" 0.000001 "ms" 0.001 "s" 1.0 "m" 60.0 "h" 3600.0 }}
{{- $total := 0.0 }}
{{- range regexFindAll "[0-9]+(\\.[0-9]*)?(ns|us|µs|ms|s|m|h)" $d -1 }}
{{- $num := regexFind "^[0-9]+(\\.[0-9]*)?" . }}
{{- $unit := trimPrefix $num . }}
{{- $total = addf $total (mulf (float64 $num) (get $units $unit)) }}
{{- end }}
{{- $total }}
{{- end }}

{{/*
The label selector mistakes a template can see: an empty requirement (a
comma with nothing before or after it) and a requirement with no key
("=x"). Commas inside "in (a, b)" are not separators.
*/}}
{{- define "kubewire.checkLabelSelector" -}}
{{- $v := toString .value }}
{{- if trim $v }}
{{- $flat := regexReplaceAll "\\([^)]*\\)" $v "()" }}
{{- range $term := splitList "," $flat }}
{{- $t := trim $term }}
{{- if not $t }}
{{- fail (printf "%s %q: has an empty requirement (a comma with nothing before or after it); expected requirements separated by single commas, such as \"app=web,tier!=cache\"" $.path $v) }}
{{- end }}
{{- if regexMatch "^(==|!=|=)" $t }}
{{- fail (printf "%s %q: the requirement %q has no label key; expected key=value, key!=value, key in (a,b), key or !key, such as \"app=web,tier!=cache\"" $.path $v $t) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The field selector mistakes a template can see: only blanks, a requirement
without an operator ("metadata.name"), and one without a field name ("=x",
which the API server would refuse at watch time). A selector with
backslash escapes is left to kubewire.
*/}}
{{- define "kubewire.checkFieldSelector" -}}
{{- $v := toString .value }}
{{- if not (contains "\\" $v) }}
{{- if not (trim $v) }}
{{- fail (printf "%s %q: only blanks; leave it out to select every object, or write requirements such as \"metadata.name!=x\"" $.path $v) }}
{{- end }}
{{- range $term := splitList "," $v }}
{{- if $term }}
{{- if not (contains "=" $term) }}
{{- fail (printf "%s %q: the requirement %q has no operator; expected field=value, field==value or field!=value, such as \"metadata.name!=x\"" $.path $v $term) }}
{{- end }}
{{- if regexMatch "^(==|!=|=)" $term }}
{{- fail (printf "%s %q: the requirement %q has no field name; expected field=value, field==value or field!=value, such as \"metadata.name!=x\"" $.path $v $term) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/*
A Kubernetes quantity in bytes, as a whole number: a decimal number with an
optional binary (Ki..Ei) or decimal (k..E) suffix, or an exponent ("1e9").
Returns "" for anything else (such as millibytes), so that callers can fall
back rather than guess.
*/}}
{{- define "kubewire.quantityToBytes" -}}
{{- $q := trim (toString .) }}
{{- if or (kindIs "float64" .) (kindIs "int" .) (kindIs "int64" .) }}
{{- /* A bare number in YAML reaches the template as a float64. */}}
{{- $q = printf "%.0f" (float64 .) }}
{{- end }}
{{- $m := regexFindAll "^([0-9]+(\\.[0-9]+)?|\\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E|[eE]\\+?[0-9]+)?$" $q -1 }}
{{- if $m }}
{{- $num := regexFind "^([0-9]+(\\.[0-9]+)?|\\.[0-9]+)" $q }}
{{- $suffix := trimPrefix $num $q }}
{{- $units := dict "" 1.0 "k" 1e3 "M" 1e6 "G" 1e9 "T" 1e12 "P" 1e15 "E" 1e18 "Ki" 1024.0 "Mi" 1048576.0 "Gi" 1073741824.0 "Ti" 1099511627776.0 "Pi" 1125899906842624.0 "Ei" 1152921504606846976.0 }}
{{- $mult := 1.0 }}
{{- if hasKey $units $suffix }}
{{- $mult = get $units $suffix }}
{{- else }}
{{- $exp := int (trimPrefix "+" (substr 1 -1 $suffix)) }}
{{- range until $exp }}{{ $mult = mulf $mult 10.0 }}{{ end }}
{{- end }}
{{- printf "%.0f" (floor (mulf (float64 $num) $mult)) }}
{{- end }}
{{- end }}

{{/*
GOMEMLIMIT for the container: 90% of resources.limits.memory, in bytes, so
that the Go garbage collector works harder as the heap nears the limit and
leaves a tenth for what its limit does not cover (the binary's mapped
pages, the kernel's page cache charged to the cgroup). Empty without a memory limit (no soft limit, as Go
defaults), or when the limit is written in a form the template cannot read,
or when env already sets GOMEMLIMIT (the user's value wins).
*/}}
{{- define "kubewire.goMemLimit" -}}
{{- $userSet := false }}
{{- range .Values.env }}{{ if eq .name "GOMEMLIMIT" }}{{ $userSet = true }}{{ end }}{{ end }}
{{- if not $userSet }}
{{- with .Values.resources }}{{ with .limits }}{{ with .memory }}
{{- $bytes := include "kubewire.quantityToBytes" . }}
{{- if $bytes }}
{{- printf "%.0f" (floor (mulf (float64 $bytes) 0.9)) }}
{{- end }}
{{- end }}{{ end }}{{ end }}
{{- end }}
{{- end }}
