{{- /*
Helpers of the monitoring objects (PodMonitors, PrometheusRule, dashboard): docs/monitoring.md.
The series names are the metric contract of DEVELOPERS.md; the labels are the PodMonitors'.
*/}}

{{- /* Labels of a monitoring object: the chart's, its component, monitoring.labels (a
Prometheus' selector, e.g. release: kube-prometheus-stack). Context: dict "root" $ "component" name. */}}
{{- define "multinode-llm.monitoringLabels" -}}
{{ include "multinode-llm.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- with .root.Values.monitoring.labels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- /* Label matchers of this release's head and worker series (the group PodMonitor's
relabelings add inferenceservice). Context: root. */}}
{{- define "multinode-llm.groupSeries" -}}
namespace="{{ .Release.Namespace }}",inferenceservice="{{ include "multinode-llm.fullname" . }}"
{{- end }}

{{- /* Label matchers of this release's cache series (the cache PodMonitor sets job). Context: root. */}}
{{- define "multinode-llm.cacheSeries" -}}
namespace="{{ .Release.Namespace }}",job="{{ include "multinode-llm.cacheName" . }}"
{{- end }}

{{- /* for: of MultinodeLLMEngineNotReady: monitoring.rules.engineNotReadyFor, else the head's
startup budget (by then kubelet has given up on one start of the head). Context: root. */}}
{{- define "multinode-llm.engineNotReadyFor" -}}
{{- default (printf "%ss" (include "multinode-llm.startupBudget" .Values.head.probes.startup)) .Values.monitoring.rules.engineNotReadyFor }}
{{- end }}

{{- /* runbook_url of an alert: its section of docs/monitoring.md. Context: dict "root" $ "alert" name. */}}
{{- define "multinode-llm.runbookUrl" -}}
{{- printf "%s#%s" .root.Values.monitoring.rules.runbookUrl (lower .alert) }}
{{- end }}

{{- /* Labels of every alert: severity plus monitoring.rules.alertLabels. Context: dict "root" $
"severity" critical|warning. */}}
{{- define "multinode-llm.alertLabels" -}}
severity: {{ .severity }}
{{- with .root.Values.monitoring.rules.alertLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- /* Relabelings of every group scrape endpoint, PodMonitor or ServiceMonitor: job (the
fullname, whatever the operator's default) and inferenceservice (the backend's group label, KServe's
InferenceService or LeaderWorkerSet's set name: the same value), the labels the alerts and the
dashboard select by. Prometheus names a pod label's meta label with every character outside
[a-zA-Z0-9_] as "_". Context: root. */}}
{{- define "multinode-llm.groupRelabelings" -}}
- targetLabel: job
  replacement: {{ include "multinode-llm.fullname" . }}
- sourceLabels:
    - __meta_kubernetes_pod_label_{{ regexReplaceAll "[^a-zA-Z0-9_]" (include "multinode-llm.groupLabel" .) "_" }}
  targetLabel: inferenceservice
{{- end }}

{{- /* Relabelings of the cache's scrape endpoint: job (the cache's name) and the node each pod
serves. Context: root. */}}
{{- define "multinode-llm.cacheRelabelings" -}}
- targetLabel: job
  replacement: {{ include "multinode-llm.cacheName" . }}
- sourceLabels:
    - __meta_kubernetes_pod_node_name
  targetLabel: node
{{- end }}

{{- /* Relabeling of a ServiceMonitor endpoint that drops the operator's `service` label, so its
series carry the PodMonitor's labels exactly (namespace, pod, container, endpoint, job plus the
relabelings'). Context: none. */}}
{{- define "multinode-llm.dropServiceLabel" -}}
- action: labeldrop
  regex: service
{{- end }}
