package benchdata

import (
	"fmt"
	"strconv"
	"strings"
)

// Pod returns a running Pod of about 10 KB as the apiserver serves it: a
// Deployment's replica with an init container, an application container and
// a sidecar, probes, env, projected volumes, full status, and the
// managedFields of kubectl (spec) and the kubelet (status).
func Pod(seed uint64, i int) map[string]any {
	g := newGen(seed, i)
	team := g.pick(teams...)
	app := g.pick("web", "api", "worker", "gateway", "indexer", "scheduler") + "-" + g.word(3)
	hash := g.hex(9)
	name := app + "-" + hash + "-" + g.word(5)
	ns := "team-" + team
	created := g.stamp()
	labels := map[string]any{
		"app": app, "pod-template-hash": hash, "team": team,
		"tier":                         g.pick("frontend", "backend", "data"),
		"app.kubernetes.io/version":    "1." + strconv.Itoa(g.r.IntN(60)) + ".0",
		"app.kubernetes.io/managed-by": "argocd",
	}
	annotations := map[string]any{
		"kubectl.kubernetes.io/restartedAt": created,
		"prometheus.io/port":                "9090",
		"prometheus.io/scrape":              "true",
		"checksum/config":                   g.hex(64),
	}
	image := func(repo string) string {
		return "registry.example.com/" + team + "/" + repo + ":" + strconv.Itoa(g.r.IntN(5)) + "." + strconv.Itoa(g.r.IntN(50)) + "." + strconv.Itoa(g.r.IntN(10))
	}
	env := func(n int) []any {
		out := []any{
			map[string]any{"name": "POD_NAME", "valueFrom": map[string]any{"fieldRef": map[string]any{"apiVersion": "v1", "fieldPath": "metadata.name"}}},
			map[string]any{"name": "POD_NAMESPACE", "valueFrom": map[string]any{"fieldRef": map[string]any{"apiVersion": "v1", "fieldPath": "metadata.namespace"}}},
		}
		for k := range n {
			out = append(out, map[string]any{"name": strings.ToUpper(g.word(6)) + "_" + strconv.Itoa(k), "value": g.word(6 + g.r.IntN(10))})
		}
		return out
	}
	probe := func(path string) map[string]any {
		return map[string]any{"failureThreshold": int64(3), "httpGet": map[string]any{"path": path, "port": int64(8080), "scheme": "HTTP"},
			"periodSeconds": int64(10), "successThreshold": int64(1), "timeoutSeconds": int64(1)}
	}
	resources := func(cpu, mem string) map[string]any {
		return map[string]any{"limits": map[string]any{"cpu": "1", "memory": "512Mi"}, "requests": map[string]any{"cpu": cpu, "memory": mem}}
	}
	token := "kube-api-access-" + g.word(5)
	mounts := []any{
		map[string]any{"mountPath": "/etc/" + app, "name": "config"},
		map[string]any{"mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "name": token, "readOnly": true},
	}
	container := func(cname, repo string, nenv int) map[string]any {
		return map[string]any{
			"name": cname, "image": image(repo), "imagePullPolicy": "IfNotPresent",
			"args":                   []any{"--port=8080", "--log-level=info", "--config=/etc/" + app + "/config.yaml"},
			"env":                    env(nenv),
			"ports":                  []any{map[string]any{"containerPort": int64(8080), "name": "http", "protocol": "TCP"}, map[string]any{"containerPort": int64(9090), "name": "metrics", "protocol": "TCP"}},
			"livenessProbe":          probe("/healthz"),
			"readinessProbe":         probe("/readyz"),
			"resources":              resources(strconv.Itoa(50+g.r.IntN(400))+"m", strconv.Itoa(64+g.r.IntN(448))+"Mi"),
			"terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
			"volumeMounts": mounts,
		}
	}
	// The sidecar is a plain proxy: no probes, one port.
	proxy := container("proxy", "proxy", 1)
	delete(proxy, "livenessProbe")
	delete(proxy, "readinessProbe")
	proxy["ports"] = proxy["ports"].([]any)[:1]
	spec := map[string]any{
		"initContainers": []any{map[string]any{
			"name": "migrate", "image": image("migrate"), "imagePullPolicy": "IfNotPresent", "command": []any{"/bin/migrate", "--wait"},
			"resources": resources("10m", "32Mi"), "terminationMessagePath": "/dev/termination-log",
			"terminationMessagePolicy": "File", "volumeMounts": mounts,
		}},
		"containers": []any{
			container(app, app, 3),
			proxy,
		},
		"dnsPolicy": "ClusterFirst", "enableServiceLinks": true, "nodeName": "node-" + g.word(6),
		"preemptionPolicy": "PreemptLowerPriority", "priority": int64(0), "restartPolicy": "Always",
		"schedulerName": "default-scheduler", "securityContext": map[string]any{"runAsNonRoot": true, "fsGroup": int64(2000)},
		"serviceAccount": app, "serviceAccountName": app, "terminationGracePeriodSeconds": int64(30),
		"tolerations": []any{
			map[string]any{"effect": "NoExecute", "key": "node.kubernetes.io/not-ready", "operator": "Exists", "tolerationSeconds": int64(300)},
			map[string]any{"effect": "NoExecute", "key": "node.kubernetes.io/unreachable", "operator": "Exists", "tolerationSeconds": int64(300)},
		},
		"volumes": []any{
			map[string]any{"name": "config", "configMap": map[string]any{"defaultMode": int64(420), "name": app + "-config"}},
			map[string]any{"name": token, "projected": map[string]any{"defaultMode": int64(420), "sources": []any{
				map[string]any{"serviceAccountToken": map[string]any{"expirationSeconds": int64(3607), "path": "token"}},
				map[string]any{"configMap": map[string]any{"items": []any{map[string]any{"key": "ca.crt", "path": "ca.crt"}}, "name": "kube-root-ca.crt"}},
				map[string]any{"downwardAPI": map[string]any{"items": []any{map[string]any{"fieldRef": map[string]any{"apiVersion": "v1", "fieldPath": "metadata.namespace"}, "path": "namespace"}}}},
			}}},
		},
	}
	podIP, hostIP := g.ip("10.244."), g.ip("10.20.")
	cond := func(t string) map[string]any {
		return map[string]any{"lastProbeTime": nil, "lastTransitionTime": g.stamp(), "status": "True", "type": t}
	}
	cstatus := func(cname, repo string) map[string]any {
		img := image(repo)
		return map[string]any{
			"containerID": "containerd://" + g.hex(64), "image": img,
			"imageID": strings.Split(img, ":")[0] + "@sha256:" + g.hex(64), "lastState": map[string]any{},
			"name": cname, "ready": true, "restartCount": int64(g.r.IntN(3)), "started": true,
			"state": map[string]any{"running": map[string]any{"startedAt": g.stamp()}},
		}
	}
	status := map[string]any{
		"conditions":        []any{cond("PodReadyToStartContainers"), cond("Initialized"), cond("Ready"), cond("ContainersReady"), cond("PodScheduled")},
		"containerStatuses": []any{cstatus(app, app), cstatus("proxy", "proxy")},
		"initContainerStatuses": []any{map[string]any{
			"containerID": "containerd://" + g.hex(64), "image": image("migrate"), "imageID": "registry.example.com/migrate@sha256:" + g.hex(64),
			"lastState": map[string]any{}, "name": "migrate", "ready": true, "restartCount": int64(0), "started": false,
			"state": map[string]any{"terminated": map[string]any{"containerID": "containerd://" + g.hex(64), "exitCode": int64(0),
				"finishedAt": g.stamp(), "reason": "Completed", "startedAt": g.stamp()}},
		}},
		"hostIP": hostIP, "hostIPs": []any{map[string]any{"ip": hostIP}}, "phase": "Running",
		"podIP": podIP, "podIPs": []any{map[string]any{"ip": podIP}}, "qosClass": "Burstable", "startTime": created,
	}
	meta := map[string]any{
		"name": name, "namespace": ns, "uid": g.uid(), "creationTimestamp": created, "generateName": app + "-" + hash + "-",
		"labels": labels, "annotations": annotations,
		"ownerReferences": []any{map[string]any{"apiVersion": "apps/v1", "blockOwnerDeletion": true, "controller": true,
			"kind": "ReplicaSet", "name": app + "-" + hash, "uid": g.uid()}},
	}
	meta["managedFields"] = []any{
		managed("kube-controller-manager", "Update", "", "v1", created, fieldsV1(map[string]any{
			"metadata": map[string]any{"generateName": "", "labels": labels, "ownerReferences": meta["ownerReferences"]}, "spec": spec})),
		// The kubelet owns the container statuses as atomic lists, so its
		// field set stops there, as a real kubelet's does.
		managed("kubelet", "Update", "status", "v1", g.stamp(), fieldsV1(map[string]any{"status": map[string]any{
			"conditions": status["conditions"], "containerStatuses": "", "initContainerStatuses": "", "hostIP": "", "hostIPs": "",
			"phase": "", "podIP": "", "podIPs": status["podIPs"], "startTime": ""}})),
	}
	o := obj("v1", "Pod", meta)
	o["spec"], o["status"] = spec, status
	return o
}

// ConfigMap returns a ConfigMap of about 2 KB: a few configuration files
// applied with kubectl, with their managedFields.
func ConfigMap(seed uint64, i int) map[string]any {
	g := newGen(seed, i)
	app := g.pick("web", "api", "worker", "gateway", "indexer") + "-" + g.word(3)
	data := map[string]any{}
	for k := range 2 + g.r.IntN(3) {
		var b strings.Builder
		for range 8 + g.r.IntN(16) {
			fmt.Fprintf(&b, "%s: %s\n", g.word(4+g.r.IntN(8)), g.word(6+g.r.IntN(20)))
		}
		data[fmt.Sprintf("%s-%d.yaml", g.pick("app", "logging", "features", "limits"), k)] = b.String()
	}
	labels := map[string]any{"app": app, "team": g.pick(teams...)}
	created := g.stamp()
	meta := map[string]any{
		"name": fmt.Sprintf("%s-config-%d", app, i), "namespace": g.namespace(), "uid": g.uid(),
		"creationTimestamp": created, "labels": labels,
		"annotations": map[string]any{"kubectl.kubernetes.io/last-applied-configuration": "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"" + app + "\"}}\n"},
	}
	meta["managedFields"] = []any{managed("kubectl-client-side-apply", "Update", "", "v1", created,
		fieldsV1(map[string]any{"data": data, "metadata": map[string]any{"labels": labels, "annotations": meta["annotations"]}}))}
	o := obj("v1", "ConfigMap", meta)
	o["data"] = data
	return o
}

// Widget returns a custom resource of about 100 KB, the size of a large
// routing table or policy object: several hundred rules in its spec, a status
// per rule, and managedFields for both.
func Widget(seed uint64, i int) map[string]any {
	g := newGen(seed, i)
	rules := list(150, func(k int) map[string]any {
		return map[string]any{
			"name":     fmt.Sprintf("rule-%03d-%s", k, g.word(6)),
			"match":    map[string]any{"pathPrefix": "/" + g.word(6) + "/" + g.word(8), "methods": []any{"GET", g.pick("POST", "PUT", "DELETE")}, "headers": map[string]any{"x-tenant": g.word(10)}},
			"backend":  map[string]any{"service": g.word(8) + "." + g.namespace() + ".svc", "port": int64(8080 + g.r.IntN(20))},
			"weight":   int64(g.r.IntN(100)),
			"timeout":  strconv.Itoa(1+g.r.IntN(30)) + "s",
			"priority": int64(k),
		}
	})
	ruleStatus := list(len(rules), func(k int) map[string]any {
		return map[string]any{"name": rules[k].(map[string]any)["name"], "ready": true, "observedGeneration": int64(3), "lastUpdated": g.stamp()}
	})
	created := g.stamp()
	spec := map[string]any{"rules": rules, "defaultBackend": map[string]any{"service": "fallback", "port": int64(80)}}
	status := map[string]any{
		"observedGeneration": int64(3),
		"conditions":         []any{map[string]any{"type": "Ready", "status": "True", "reason": "Reconciled", "lastTransitionTime": g.stamp()}},
		"rules":              ruleStatus,
	}
	meta := map[string]any{
		"name": fmt.Sprintf("routes-%d", i), "namespace": g.namespace(), "uid": g.uid(), "generation": int64(3),
		"creationTimestamp": created, "labels": map[string]any{"app.kubernetes.io/part-of": "edge"},
	}
	meta["managedFields"] = []any{
		managed("kubectl", "Apply", "", "bench.kubewire.io/v1", created, fieldsV1(map[string]any{"spec": spec})),
		managed("widget-controller", "Update", "status", "bench.kubewire.io/v1", g.stamp(), fieldsV1(map[string]any{"status": status})),
	}
	o := obj("bench.kubewire.io/v1", "Widget", meta)
	o["spec"], o["status"] = spec, status
	return o
}
